"""The file-system operations of a real process, read from `strace`.

`record(command, root)` runs `command` under `strace -f` and returns, in the order
they completed, the operations on files under `root` that a power cut can lose:
data written to a file (with its bytes), files created, renamed, linked and
removed, folders made and removed, and the flushes (`fsync`, `fdatasync`,
`syncfs`, `sync`) that make some of them durable. A flush is placed where it
*began*: it makes durable only what completed before it started.

The traced program marks moments for the checker with a `stat` of a path under
`/stepstone-mark/` (see `mark`): strace logs the attempt in order with the rest.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARKS = "/stepstone-mark/"
SYSCALLS = (
    "open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,ftruncate,truncate,"
    "fallocate,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,rmdir,link,"
    "linkat,symlink,symlinkat,fsync,fdatasync,syncfs,sync,sync_file_range,newfstatat,"
    "stat,chdir,copy_file_range,sendfile,msync,lseek,execve"
)
# a program must not write through these where the checker cannot see the bytes
UNSUPPORTED = {"copy_file_range", "sendfile", "msync", "pwritev", "pwritev2", "symlinkat"}


def mark(label: str) -> None:
    """Note a moment in the trace (for the traced program): a `stat` strace logs."""
    with contextlib.suppress(OSError):
        os.stat(MARKS + label)


@dataclass(frozen=True)
class Op:
    """One operation, with absolute paths. `kind` is one of: open (path, label: its
    flags, when they may create or truncate), write (path, offset, data), truncate and
    extend (path, size), mkdir, rmdir, unlink (path), rename and link (path -> to),
    symlink (path, data: its target), fsync (path: a file's data, or a folder's
    entries), sync (everything), mark (label)."""

    kind: str
    path: str = ""
    to: str = ""
    offset: int = 0
    data: bytes = b""
    size: int = 0
    label: str = ""


class TraceError(Exception):
    """The trace holds something the checker cannot model."""


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+|\?|0x[0-9a-f]+)(?:<(.*?)>)?(?:\s.*)?$", re.S)
_UNFINISHED = re.compile(r"^(\w+)\((.*) <unfinished \.\.\.>$", re.S)
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)\)\s+=\s+(-?\d+|\?)(?:<(.*?)>)?(?:\s.*)?$", re.S)
_HEX = re.compile(r"\\x([0-9a-f]{2})")


def _unhex(text: str) -> bytes:
    return bytes(int(h, 16) for h in _HEX.findall(text))


def _args(text: str) -> list[str]:
    """Split an argument list at its top-level commas."""
    found, depth, quoted, start = [], 0, False, 0
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "<{[":
            depth += 1
        elif c in ">}]":
            depth -= 1
        elif c == "," and depth == 0:
            found.append(text[start:i].strip())
            start = i + 1
        i += 1
    if text[start:].strip():
        found.append(text[start:].strip())
    return found


def _string(arg: str) -> bytes:
    """A quoted string argument's bytes."""
    if not arg.startswith('"'):
        raise TraceError(f"not a string: {arg[:80]}")
    return _unhex(arg[1 : arg.rindex('"')])


def _fd_number(arg: str) -> int:
    return int(arg.split("<", 1)[0])


def _fd_path(arg: str) -> str | None:
    """The path strace's -y gives an fd (`3</a/b>`), or None."""
    at = arg.find("<")
    if at < 0:
        return None
    return os.fsdecode(_unhex(arg[at + 1 : arg.rindex(">")]))


class _Reader:
    def __init__(self, root: str, cwd: str) -> None:
        self.root = root.rstrip("/") + "/"
        self.cwd = cwd
        self.ops: list[Op] = []
        self.pending: dict[str, tuple[str, str, int | None]] = {}  # pid -> call, args, index
        self.position: dict[int, int | None] = {}  # fd -> where its next write goes
        self.programs = 0

    def under(self, path: str) -> bool:
        return (path + "/").startswith(self.root)

    def at(self, dirfd: str, arg: str) -> str:
        name = os.fsdecode(_string(arg))
        if name.startswith("/"):
            return os.path.normpath(name)
        base = self.cwd if dirfd.startswith("AT_FDCWD") else _fd_path(dirfd)
        if base is None:
            raise TraceError(f"a path relative to an unknown folder: {dirfd}")
        return os.path.normpath(os.path.join(base, name))

    def line(self, raw: str) -> None:
        matched = _LINE.match(raw.rstrip("\n"))
        if not matched:
            return
        pid, rest = matched.groups()
        if rest.startswith("+++") or rest.startswith("---"):
            return
        unfinished = _UNFINISHED.match(rest)
        if unfinished:
            call, args = unfinished.groups()
            # a flush counts from where it began: keep its place now
            flush = call in ("fsync", "fdatasync", "syncfs", "sync")
            self.pending[pid] = (call, args, len(self.ops) if flush else None)
            if flush:
                self.ops.append(Op("placeholder"))
            return
        resumed = _RESUMED.match(rest)
        if resumed:
            call, tail, result, returned = resumed.groups()
            started, args, index = self.pending.pop(pid)
            assert started == call, (started, call)
            self.call(call, args + tail, result, returned, index)
            return
        whole = _CALL.match(rest)
        if whole:
            call, args, result, returned = whole.groups()
            self.call(call, args, result, returned, None)

    def put(self, op: Op, index: int | None) -> None:
        if index is not None and self.ops[index].kind == "placeholder":
            self.ops[index] = op
        else:
            self.ops.append(op)

    def call(self, call: str, args: str, result: str, returned: str | None, index: int | None):
        ok = result not in ("?",) and not result.startswith("-")
        parts = _args(args)
        if index is not None and self.ops[index].kind == "placeholder" and not ok:
            self.ops[index] = Op("skip")
        if call == "execve" and ok:
            self.programs += 1
            if self.programs > 1:
                raise TraceError("the traced program ran another: fd positions would mix")
            return
        if call == "lseek" and ok:
            self.position[_fd_number(parts[0])] = int(result)
            return
        if call == "chdir" and ok:
            self.cwd = self.at("AT_FDCWD", parts[0])
            return
        if call in ("newfstatat", "stat"):
            path = os.fsdecode(_string(parts[1] if call == "newfstatat" else parts[0]))
            if path.startswith(MARKS):
                self.ops.append(Op("mark", label=path[len(MARKS) :]))
            return
        if not ok:
            return
        if call in UNSUPPORTED:
            path = _fd_path(parts[0]) or ""
            if self.under(path) or call == "symlinkat":
                raise TraceError(f"{call} under the traced folder: the checker cannot model it")
            return
        if call == "symlink":
            path = self.at("AT_FDCWD", parts[1])
            if self.under(path):
                self.ops.append(Op("symlink", path=path, data=_string(parts[0])))
            return
        if call in ("open", "openat", "creat"):
            path = (
                self.at(parts[0], parts[1]) if call == "openat" else self.at("AT_FDCWD", parts[0])
            )
            flags = parts[2] if call == "openat" else parts[1] if call == "open" else "O_CREAT"
            self.position[int(result)] = None if "O_APPEND" in flags else 0
            if self.under(path) and ("O_CREAT" in flags or "O_TRUNC" in flags):
                self.ops.append(Op("open", path=path, label=flags))
            return
        if call in ("write", "pwrite64", "writev"):
            path = _fd_path(parts[0])
            if path is None or not self.under(path):
                return
            if path.endswith(" (deleted)"):
                return
            if call == "writev":
                data = b"".join(_unhex(s) for s in re.findall(r'iov_base="(.*?)"', parts[1]))
            else:
                data = _string(parts[1])
            done = int(result)
            data = data[:done]
            fd = _fd_number(parts[0])
            if call == "pwrite64":
                offset = int(parts[3])
            else:
                if fd not in self.position:
                    raise TraceError(f"a write to {path} through an fd opened before the trace")
                at = self.position[fd]
                offset = -1 if at is None else at  # -1: at the file's end (O_APPEND)
                if at is not None:
                    self.position[fd] = at + done
            self.ops.append(Op("write", path=path, offset=offset, data=data))
            return
        if call in ("ftruncate", "truncate", "fallocate"):
            path = _fd_path(parts[0]) if call != "truncate" else self.at("AT_FDCWD", parts[0])
            if path and self.under(path):
                if call == "fallocate":
                    if parts[1] not in ("0",):
                        raise TraceError(f"fallocate mode {parts[1]} under the traced folder")
                    self.ops.append(Op("extend", path=path, size=int(parts[2]) + int(parts[3])))
                else:
                    self.ops.append(Op("truncate", path=path, size=int(parts[1])))
            return
        if call in ("rename", "renameat", "renameat2", "link", "linkat"):
            if call in ("rename", "link"):
                source, target = self.at("AT_FDCWD", parts[0]), self.at("AT_FDCWD", parts[1])
            else:
                source, target = self.at(parts[0], parts[1]), self.at(parts[2], parts[3])
            if call == "renameat2" and parts[4] not in ("0",):
                raise TraceError(f"renameat2 with flags {parts[4]}")
            if self.under(source) or self.under(target):
                kind = "rename" if call.startswith("rename") else "link"
                self.ops.append(Op(kind, path=source, to=target))
            return
        if call in ("unlink", "unlinkat", "rmdir"):
            if call == "unlinkat":
                path = self.at(parts[0], parts[1])
                kind = "rmdir" if "AT_REMOVEDIR" in parts[2] else "unlink"
            else:
                path, kind = self.at("AT_FDCWD", parts[0]), call
            if self.under(path):
                self.ops.append(Op(kind, path=path))
            return
        if call in ("mkdir", "mkdirat"):
            path = (
                self.at(parts[0], parts[1]) if call == "mkdirat" else self.at("AT_FDCWD", parts[0])
            )
            if self.under(path):
                self.ops.append(Op("mkdir", path=path))
            return
        if call in ("fsync", "fdatasync", "sync_file_range"):
            path = _fd_path(parts[0])
            if call == "sync_file_range":  # starts writeback only: no durability
                return
            op = Op("fsync", path=path) if path and self.under(path) else Op("skip")
            self.put(op, index)
            return
        if call in ("syncfs", "sync"):
            self.put(Op("sync"), index)


def parse(text: str, root: Path, cwd: Path) -> list[Op]:
    """The operations under `root` in strace's output `text` (see `record`)."""
    reader = _Reader(str(root), str(cwd))
    for raw in text.splitlines():
        reader.line(raw)
    if reader.pending:
        raise TraceError(f"calls that never returned: {reader.pending}")
    return [op for op in reader.ops if op.kind not in ("skip", "placeholder")]


def record(
    command: Sequence[str], root: Path, cwd: Path, env: dict[str, str], log: Path
) -> list[Op]:
    """Run `command` in `cwd` under strace; the operations on files under `root`."""
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-y",
            "-xx",
            "-s",
            "100000000",
            "-e",
            f"trace={SYSCALLS}",
            "-o",
            str(log),
            *command,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the traced command failed:\n{done.stdout}\n{done.stderr}")
    return parse(log.read_text(), root, cwd)
