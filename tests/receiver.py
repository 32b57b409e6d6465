"""A loopback HTTP receiver with its own SQLite database, for effect tests.

    POST /keyed          honours the Idempotency-Key header: a repeated key returns the
                         first response and applies nothing, for `key_retention` seconds
                         (`advance` moves the receiver's clock on, as a day going by)
    POST /lookup         applies every request; GET /lookup/<ref> finds one by the
                         client-supplied reference
    POST /blind          applies every request; no keys, no lookup
    POST /fenced         as /lookup, but refuses (409) a request whose `X-Fence` token
                         (RUN:EPOCH, from `stepstone.fence_token()`) is lower than one
                         it has seen for that run; GET /fenced/<ref> finds one
    GET  /applied/<kind> how many times each key or reference was applied

Request headers `X-Delay-Before` and `X-Delay-After` (seconds) hold the request
before or after the receiver commits, so a test can kill the client there.
"""

from __future__ import annotations

import json
import select
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@contextmanager
def _connect(db: Path) -> Iterator[sqlite3.Connection]:
    con = sqlite3.connect(db)
    try:
        with con:
            yield con
    finally:
        con.close()


def _hold(conn: socket.socket, seconds: float) -> bool:
    """Wait up to `seconds`; False as soon as the client has gone away."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable and conn.recv(1, socket.MSG_PEEK) == b"":
            return False
    return True


class Receiver:
    """Start with `with Receiver(db_path) as r:`; `r.url` is its base address."""

    def __init__(self, db: Path, *, key_retention: float | None = None) -> None:
        self.db = db
        self.key_retention = key_retention  # None: keys are kept for ever
        self.skew = 0.0  # seconds `advance` moved this receiver's clock on
        self.in_flight = threading.Event()
        self.committed = threading.Event()
        with _connect(db) as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS applied (kind TEXT, ref TEXT, body TEXT, "
                "n INTEGER PRIMARY KEY AUTOINCREMENT)"
            )
            con.execute(
                "CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY, response TEXT, at REAL)"
            )
            con.execute("CREATE TABLE IF NOT EXISTS fences (run TEXT PRIMARY KEY, epoch INTEGER)")
        self._lock = threading.Lock()
        self.refused = 0  # fenced requests refused for a stale token
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                with _connect(receiver.db) as con:
                    if parts[0] in ("lookup", "fenced") and len(parts) == 2:
                        row = con.execute(
                            "SELECT n FROM applied WHERE kind=? AND ref=?", (parts[0], parts[1])
                        ).fetchone()
                        self._send(200, {"id": row[0]}) if row else self._send(404, {})
                    elif parts[0] == "applied":
                        rows = con.execute(
                            "SELECT ref, COUNT(*) FROM applied WHERE kind=? GROUP BY ref",
                            (parts[1],),
                        ).fetchall()
                        self._send(200, dict(rows))
                    else:
                        self._send(404, {})

            def do_POST(self) -> None:
                kind = self.path.strip("/")
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                ref = self.headers.get("Idempotency-Key") or json.loads(body or "{}").get("ref")
                receiver.in_flight.set()
                if not _hold(self.connection, float(self.headers.get("X-Delay-Before", 0))):
                    return  # the client died with the request in flight: nothing applied
                with receiver._lock, _connect(receiver.db) as con:
                    if kind == "fenced" and not receiver.admits(con, self.headers.get("X-Fence")):
                        receiver.refused += 1
                        self._send(409, {"error": "a newer lease holds this run"})
                        return
                    if kind == "keyed":
                        receiver.forget_old_keys(con)
                        row = con.execute(
                            "SELECT response FROM keys WHERE key=?", (ref,)
                        ).fetchone()
                        if row:
                            self._send(200, json.loads(row[0]))
                            return
                    cur = con.execute(
                        "INSERT INTO applied (kind, ref, body) VALUES (?, ?, ?)", (kind, ref, body)
                    )
                    response = {"id": cur.lastrowid}
                    if kind == "keyed":
                        con.execute(
                            "INSERT INTO keys VALUES (?, ?, ?)",
                            (ref, json.dumps(response), receiver.clock()),
                        )
                receiver.committed.set()
                if not _hold(self.connection, float(self.headers.get("X-Delay-After", 0))):
                    return
                self._send(201, response)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client killed mid-request is what these tests do on purpose

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def clock(self) -> float:
        """This receiver's time: the real time, moved on by `advance`."""
        return time.time() + self.skew

    def advance(self, seconds: float) -> None:
        """Move this receiver's clock on by `seconds` (keys older than its retention go)."""
        self.skew += seconds

    def admits(self, con: sqlite3.Connection, token: str | None) -> bool:
        """Whether a fencing token (RUN:EPOCH) is at least the highest seen for its run
        (it becomes the highest); a request without one is refused."""
        if not token or ":" not in token:
            return False
        run, _, epoch = token.rpartition(":")
        row = con.execute("SELECT epoch FROM fences WHERE run=?", (run,)).fetchone()
        if row is not None and int(epoch) < row[0]:
            return False
        con.execute("INSERT OR REPLACE INTO fences VALUES (?, ?)", (run, int(epoch)))
        return True

    def forget_old_keys(self, con: sqlite3.Connection) -> None:
        """Drop the idempotency keys older than the retention, as a real receiver does."""
        if self.key_retention is not None:
            con.execute("DELETE FROM keys WHERE at < ?", (self.clock() - self.key_retention,))

    def applied(self, kind: str) -> dict[str, int]:
        """How many times each reference was applied, by endpoint."""
        with _connect(self.db) as con:
            rows = con.execute(
                "SELECT ref, COUNT(*) FROM applied WHERE kind=? GROUP BY ref", (kind,)
            ).fetchall()
        return dict(rows)

    def bodies(self) -> list[tuple[str, Any]]:
        """Every request applied, as (endpoint, its JSON body), in the order applied."""
        with _connect(self.db) as con:
            rows = con.execute("SELECT kind, body FROM applied ORDER BY n").fetchall()
        return [(kind, json.loads(body)) for kind, body in rows]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


# -- a client, for the drivers and notebooks that send to a receiver ----------------


def send(url: str, kind: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
    """POST `body` as JSON to the receiver at `url`, endpoint `kind`; its JSON answer."""
    request = urllib.request.Request(
        f"{url}/{kind}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def find(url: str, kind: str, ref: str) -> Any:
    """What the receiver at `url` applied under reference `ref` at endpoint `kind`
    (`lookup`, `fenced`), or None when it has nothing (404)."""
    try:
        with urllib.request.urlopen(f"{url}/{kind}/{ref}", timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
