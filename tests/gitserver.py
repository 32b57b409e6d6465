"""A real Git server on loopback, as teams run one: `git http-backend` behind lighttpd
(Debian's package), with basic auth, and a TCP proxy in front of it that can drop a
connection partway through a push.

    with GitServer(folder) as server:
        server.url("store.git")     # http://127.0.0.1:PORT/git/store.git (through the proxy)
        server.bare("store.git")    # make an empty repository there
        server.drop_after(bytes)    # the next push's connection is cut after that much

The credentials live only in a credential helper's file (`git credential-store`), named
by a Git config of the test's own (`GIT_CONFIG_GLOBAL`): never in a URL or a store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

LIGHTTPD = shutil.which("lighttpd") or "/usr/sbin/lighttpd"
BACKEND = Path("/usr/lib/git-core/git-http-backend")
USER, PASSWORD = "agent", "s3cret-Pa55word-9f2c"

CONFIG = """\
server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{root}/lighttpd.pid"
server.errorlog = "{root}/error.log"
server.modules = ("mod_alias", "mod_setenv", "mod_auth", "mod_authn_file", "mod_cgi")
alias.url += ("/git" => "{backend}")
$HTTP["url"] =~ "^/git" {{
    cgi.assign = ("" => "")
    setenv.add-environment = ("GIT_PROJECT_ROOT" => "{repos}", "GIT_HTTP_EXPORT_ALL" => "")
}}
auth.backend = "plain"
auth.backend.plain.userfile = "{users}"
auth.require = ("/git" => ("method" => "basic", "realm" => "git", "require" => "valid-user"))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Proxy:
    """Forwards loopback TCP to the server; `drop_after(n)` cuts the next connection
    that sends a push's pack once n bytes of it went through."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.drop_at: int | None = None
        self.dropped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pair, args=(client,), daemon=True).start()

    def _pair(self, client: socket.socket) -> None:
        server = socket.create_connection(("127.0.0.1", self.upstream))
        cut = threading.Event()

        def pump(source: socket.socket, sink: socket.socket, watch: bool) -> None:
            sent = 0
            pushing = False
            try:
                while not cut.is_set():
                    data = source.recv(65536)
                    if not data:
                        break
                    if watch and b"git-receive-pack" in data and b"POST" in data:
                        pushing = True
                    if pushing and self.drop_at is not None and sent + len(data) > self.drop_at:
                        sink.sendall(data[: max(0, self.drop_at - sent)])
                        self.drop_at = None
                        self.dropped.set()
                        cut.set()
                        break
                    sent += len(data)
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for s in (client, server):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        there = threading.Thread(target=pump, args=(client, server, True), daemon=True)
        back = threading.Thread(target=pump, args=(server, client, False), daemon=True)
        there.start()
        back.start()
        there.join()
        back.join()
        client.close()
        server.close()

    def close(self) -> None:
        self.listener.close()


class GitServer:
    """lighttpd serving `git http-backend` with basic auth, for one test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.repos = folder / "repos"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.proxy: _Proxy | None = None
        # the client side: a git config of its own, naming a credential helper
        self.gitconfig = folder / "gitconfig"
        self.credentials = folder / "git-credentials"

    def __enter__(self) -> GitServer:
        self.repos.mkdir(parents=True)
        users = self.folder / "users"
        users.write_text(f"{USER}:{PASSWORD}\n")
        config = self.folder / "lighttpd.conf"
        config.write_text(
            CONFIG.format(
                root=self.folder, port=self.port, backend=BACKEND, repos=self.repos, users=users
            )
        )
        self.process = subprocess.Popen([LIGHTTPD, "-D", "-f", str(config)])
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.process.poll() is None, (self.folder / "error.log").read_text()
                assert time.monotonic() < deadline, "lighttpd did not start"
                time.sleep(0.05)
        self.proxy = _Proxy(self.port)
        self.login(PASSWORD)
        return self

    def login(self, password: str) -> None:
        """What the credential helper answers for this server (a wrong one: a 401)."""
        host = f"127.0.0.1:{self.proxy.port if self.proxy else self.port}"
        self.credentials.write_text(f"http://{USER}:{password}@{host}\n")
        self.gitconfig.write_text(
            "[user]\n\tname = stepstone test\n\temail = test@localhost\n"
            f"[credential]\n\thelper = store --file={self.credentials}\n"
        )

    def env(self) -> dict[str, str]:
        """Environment variables that make git use this server's credential helper."""
        return {"GIT_CONFIG_GLOBAL": str(self.gitconfig), "GIT_TERMINAL_PROMPT": "0"}

    def url(self, name: str) -> str:
        assert self.proxy is not None
        return f"http://127.0.0.1:{self.proxy.port}/git/{name}"

    def bare(self, name: str) -> Path:
        path = self.repos / name
        subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
        subprocess.run(["git", "-C", str(path), "config", "http.receivepack", "true"], check=True)
        return path

    def drop_after(self, size: int) -> None:
        assert self.proxy is not None
        self.proxy.dropped.clear()
        self.proxy.drop_at = size

    def __exit__(self, *exc: object) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @staticmethod
    def available() -> bool:
        return os.access(LIGHTTPD, os.X_OK) and BACKEND.exists()
