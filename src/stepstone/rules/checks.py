"""Completion checks: each produces evidence that a later `verify` re-checks.

A check is written `KIND:ARGUMENT`:

    file:PATH            the file exists and parses by its type; evidence is its sha256
                         (a folder: every file in it, by path and sha256, hidden ones aside)
    sha256:PATH=HEX      the file's sha256 equals HEX
    cmd:COMMAND          the command exits 0 (run by the shell in the run's folder)
    expr:EXPRESSION      a Python expression over the given values is truthy
    call:NAME            a callable registered with `stepstone.check` returns a truthy
                         value or an identifier
    note                 the step wrote a note (`stepstone.note(text)`, or the string
                         `run.step`'s function returns): weak evidence, kept, never
                         re-checked, for steps whose product is understanding

In the Python API a plain callable can stand in for a spec.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import csv
import hashlib
import json
import os
import posixpath
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import InvalidInput, UnknownCheck
from ..model.models import Evidence
from ..settings import CHECK_TIMEOUT_ENV, Settings
from .deadline import call_within

KINDS = ["file", "sha256", "keep", "cmd", "expr", "call", "note"]
COMMANDS = ("cmd", "call")  # checks that run code: read-only commands do not re-run them
WEAK = ("note", "completed")  # evidence nothing in the world can re-check
NOTE = "note"  # the check a step whose evidence is a written note has


def strength(kinds: Iterable[str]) -> str | None:
    """`strong` when some evidence can be re-checked against the world, `weak` when it
    is only a note or the fact that the code completed, None without evidence."""
    found = list(kinds)
    if not found:
        return None
    return "weak" if all(kind in WEAK for kind in found) else "strong"


def _seconds(timeout: float | None) -> float:
    """Seconds a `cmd:` or `call:` check may take: `timeout` (a driver passes its
    settings'), else the default of `Settings.check_timeout`; settings are resolved where
    a command or a run starts, not here."""
    return timeout if timeout is not None else Settings.check_timeout


CheckFn: TypeAlias = Callable[[], Any]
CheckLike: TypeAlias = "str | CheckFn"

_registry: dict[str, CheckFn] = {}


def check(name: str | CheckFn) -> Any:
    """Register a callable as a named check, usable as `call:NAME`.

    Use as `@stepstone.check` (the function's name) or `@stepstone.check("name")`.
    """

    def register(fn: CheckFn, key: str) -> CheckFn:
        _registry[key] = fn
        return fn

    if callable(name):
        return register(name, name.__name__)
    return lambda fn: register(fn, name)


@dataclass(frozen=True)
class CheckSpec:
    """A parsed check: its kind, its argument and the text it was written as."""

    kind: str
    arg: str
    text: str


@dataclass(frozen=True)
class Verdict:
    """The outcome of re-checking one piece of evidence."""

    ok: bool
    reason: str = ""
    checkable: bool = True


def inside_workdir(path: str) -> str:
    """`path` (a `keep:` check's) as a clean relative path inside the work folder, or
    `InvalidInput` saying what to write instead."""
    clean = posixpath.normpath(path.replace(os.sep, "/"))
    if posixpath.isabs(clean) or clean in ("..", ".") or clean.startswith("../"):
        raise InvalidInput(
            f"keep:{path} is outside the work folder: keep a path relative to it, "
            f"without .. (a kept file is restored there, on any machine)"
        )
    return clean


def parse(spec: CheckLike) -> CheckSpec:
    """Parse a check spec (or register a callable); raise on unknown kinds at plan time."""
    if callable(spec):
        key = f"{getattr(spec, '__module__', '')}.{getattr(spec, '__qualname__', repr(spec))}"
        _registry[key] = spec
        return CheckSpec("call", key, f"call:{key}")
    if not isinstance(spec, str):
        raise InvalidInput(f"a check must be a string like file:PATH or a callable, not {spec!r}")
    if spec.strip() in (NOTE, NOTE + ":"):
        return CheckSpec(NOTE, "", NOTE)
    kind, sep, arg = spec.partition(":")
    if not sep or kind not in KINDS:
        raise UnknownCheck(spec, KINDS)
    if kind == NOTE:
        raise InvalidInput(f"check {spec!r}: a note takes no argument; write note (or --note)")
    arg = arg.strip()
    if not arg:
        raise InvalidInput(f"check {spec!r} has no argument: write {kind}:ARGUMENT")
    if kind == "keep":
        inside_workdir(arg)
    if kind == "sha256":
        path, eq, digest = arg.rpartition("=")
        if not eq or not path or len(digest) != 64 or not _is_hex(digest):
            raise InvalidInput(f"check {spec!r}: write sha256:PATH=<64 hex digits>")
    if kind == "expr":
        try:
            compile(arg, "<check>", "eval")
        except SyntaxError as exc:
            raise InvalidInput(f"check {spec!r}: not a Python expression ({exc.msg})") from exc
    return CheckSpec(kind, arg, f"{kind}:{arg}")


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text.lower())


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_folder(path: Path) -> tuple[str, int, int]:
    """(the sha256 of a folder's files: each one's relative path and sha256, in order;
    how many files; their total size). Symbolic links are followed; hidden files and
    folders (`.ipynb_checkpoints`, `.DS_Store`) do not count."""
    files = folder_files(path)
    size = sum((path / relative).stat().st_size for relative in files)
    return folder_digest(files), len(files), size


def folder_files(path: Path) -> dict[str, str]:
    """The files of a folder that `sha256_folder` counts, by relative path, with their
    sha256."""
    found: dict[str, str] = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = file.relative_to(path).as_posix()
        if not any(part.startswith(".") for part in relative.split("/")):
            found[relative] = sha256_file(file)
    return found


def folder_digest(files: Mapping[str, str]) -> str:
    """`sha256_folder`'s digest of `files` (relative path -> sha256)."""
    digest = hashlib.sha256()
    for relative in sorted(files, key=lambda name: tuple(name.split("/"))):
        digest.update(f"{relative}\0{files[relative]}\n".encode())
    return digest.hexdigest()


class CheckNotPassed(Exception):
    """Internal: a check ran and did not pass; the reason is the message."""


def _parse_file(path: Path) -> str:
    """Parse `path` by its type; return a short description or raise CheckNotPassed."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            with path.open("rb") as handle:
                json.load(handle)
            return "json"
        if suffix in (".yaml", ".yml"):
            import yaml

            with path.open("rb") as handle:
                yaml.safe_load(handle)
            return "yaml"
        if suffix in (".csv", ".tsv"):
            with path.open(newline="", encoding="utf-8") as handle:
                rows = sum(
                    1 for _ in csv.reader(handle, delimiter="\t" if suffix == ".tsv" else ",")
                )
            if rows == 0:
                raise CheckNotPassed(f"{path} is empty")
            return f"csv, {rows} rows"
        if suffix == ".ipynb":
            import nbformat

            nbformat.validate(nbformat.read(str(path), as_version=4))  # type: ignore[no-untyped-call]
            return "notebook"
        if suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                return "parquet (not parsed: pyarrow is not installed)"
            pq.read_metadata(str(path))
            return "parquet"
        if suffix in (".txt", ".md", ".log", ".py", ".html", ".xml", ".sql", ".toml", ".ini"):
            path.read_text(encoding="utf-8")
            return "text"
        return "bytes"
    except CheckNotPassed:
        raise
    except Exception as exc:
        raise CheckNotPassed(f"{path} does not parse as {suffix or 'text'}: {exc}") from exc


def _eval(expr: str, namespace: Mapping[str, Any] | None) -> Any:
    scope = dict(namespace or {})
    scope.setdefault("__builtins__", builtins)
    try:
        return eval(expr, scope)
    except NameError as exc:
        raise CheckNotPassed(f"{exc} (expression {expr!r})") from exc
    except Exception as exc:
        raise CheckNotPassed(f"{expr!r} raised {type(exc).__name__}: {exc}") from exc


def _identifier(value: Any) -> str | int | bool:
    if isinstance(value, (bool, int, str)):
        return value
    return True


_SEEN: dict[tuple[str, str], tuple[tuple[int, ...], Evidence]] = {}
_SEEN_MOST = 100_000
_SETTLED_NS = 2_000_000_000  # a file changed this close to its hashing is hashed again


def _stat_stamp(path: str) -> tuple[int, ...] | None:
    """A regular file's identity and version (device, inode, size, modification and
    change times), following links; None for anything else."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def run(
    spec: CheckSpec,
    *,
    workdir: Path,
    namespace: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Evidence:
    """Run a check now; return its evidence or raise CheckNotPassed with the reason.
    `cmd:` and `call:` checks may take `timeout` seconds (a driver passes its settings').

    A file's evidence is kept in this process with the file's stat, and given again
    while the stat is unchanged, as Git's index does: a long-lived reader (the MCP
    server, a kernel's `%resume`) does not hash a thousand unchanged files again. A
    file changed within two seconds of its hashing is hashed again at every check,
    so that a write in the same clock tick as the hashing is never missed."""
    if spec.kind in ("file", "sha256", "keep"):
        where = os.path.join(workdir, file_named(spec))
        stamp = _stat_stamp(where)
        kept = _SEEN.get((spec.text, where)) if stamp is not None else None
        if kept is not None and kept[0] == stamp:
            return kept[1]
        hashed_at = time.time_ns()
        found = _run(spec, workdir=workdir, namespace=namespace, timeout=timeout)
        if (
            stamp is not None
            and max(stamp[3], stamp[4]) < hashed_at - _SETTLED_NS
            and stamp == _stat_stamp(where)
        ):
            if len(_SEEN) >= _SEEN_MOST:
                _SEEN.clear()
            _SEEN[(spec.text, where)] = (stamp, found)
        return found
    return _run(spec, workdir=workdir, namespace=namespace, timeout=timeout)


def file_named(spec: CheckSpec) -> str:
    """The path a `file:`, `keep:` or `sha256:PATH=DIGEST` check names, as written."""
    return spec.arg.rpartition("=")[0] if spec.kind == "sha256" else spec.arg


def _run(
    spec: CheckSpec,
    *,
    workdir: Path,
    namespace: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Evidence:
    if spec.kind in ("file", "sha256", "keep"):  # keep: a file: check whose file is kept
        raw_path = file_named(spec)
        path = (
            (workdir / raw_path).resolve() if not Path(raw_path).is_absolute() else Path(raw_path)
        )
        if spec.kind != "sha256" and path.is_dir():
            digest, files, size = sha256_folder(path)
            if not files:
                raise CheckNotPassed(f"{raw_path} is an empty folder")
            return Evidence(
                check=spec.text,
                kind="file",
                value=digest,
                detail=f"folder, {files} files, {size} bytes",
            )
        if path.is_dir():
            raise CheckNotPassed(f"{raw_path} is a folder; sha256: checks name a file")
        if not path.is_file():
            raise CheckNotPassed(f"{raw_path} does not exist")
        digest = sha256_file(path)
        if spec.kind == "sha256":
            expected = spec.arg.rpartition("=")[2].lower()
            if digest != expected:
                raise CheckNotPassed(
                    f"{raw_path} has sha256 {digest[:12]}…, expected {expected[:12]}…"
                )
            return Evidence(check=spec.text, kind="sha256", value=digest)
        kind = _parse_file(path)
        return Evidence(
            check=spec.text,
            kind="file",
            value=digest,
            detail=f"{kind}, {path.stat().st_size} bytes",
        )
    if spec.kind == "cmd":
        code, output = _command(spec.arg, workdir, _seconds(timeout))
        if code != 0:
            tail = output.strip().splitlines()[-1:] or [""]
            raise CheckNotPassed(f"{spec.arg!r} exited {code} {tail[0]}".rstrip())
        return Evidence(check=spec.text, kind="cmd", value=0, detail="exit status 0")
    if spec.kind == "expr":
        result = _eval(spec.arg, namespace)
        if not result:
            raise CheckNotPassed(f"{spec.arg!r} is {result!r}")
        return Evidence(check=spec.text, kind="expr", value=_identifier(result))
    if spec.kind == NOTE:
        raise CheckNotPassed("a note is written by the step itself: call stepstone.note(text)")
    fn = _registry.get(spec.arg)
    if fn is None:
        raise CheckNotPassed(
            f"no check registered as {spec.arg!r}; register it with @stepstone.check before use"
        )
    seconds = _seconds(timeout)
    try:
        finished, result = call_within(seconds, fn)
    except Exception as exc:
        raise CheckNotPassed(f"{spec.arg} raised {type(exc).__name__}: {exc}") from exc
    if not finished:
        raise CheckNotPassed(
            f"{spec.arg}() did not return within {seconds:g} s ({CHECK_TIMEOUT_ENV})"
        )
    if not result:
        raise CheckNotPassed(f"{spec.arg}() returned {result!r}")
    return Evidence(check=spec.text, kind="call", value=_identifier(result))


def _command(command: str, workdir: Path, seconds: float) -> tuple[int, str]:
    """Run a shell command in its own process group, bounded by `seconds`: (exit status,
    its output). Output goes to a temporary file, so a background child that keeps it
    open cannot hold the check; on timeout the whole group is killed."""
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(
                command,
                shell=True,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise CheckNotPassed(f"cannot run {command!r}: {exc}") from exc
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise CheckNotPassed(
                f"{command!r} did not finish within {seconds:g} s ({CHECK_TIMEOUT_ENV})"
            ) from None
        except BaseException:
            _kill_group(process)
            raise
        output.seek(0)
        return process.returncode, output.read().decode(errors="replace")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def verify(
    evidence: Evidence,
    *,
    workdir: Path,
    namespace: Mapping[str, Any] | None = None,
    run_commands: bool = True,
    timeout: float | None = None,
) -> Verdict:
    """Re-check recorded evidence against the real state now; with `run_commands` False,
    `cmd:` and `call:` evidence is not re-run (a verdict that is not `checkable`)."""
    if evidence.kind == "completed":
        return Verdict(True, "the cell completed")
    if evidence.kind == NOTE:
        return Verdict(True, "a note cannot be re-checked")
    if evidence.kind in COMMANDS and not run_commands:
        return Verdict(True, f"{evidence.check} was not re-run", checkable=False)
    try:
        spec = parse(evidence.check)
    except InvalidInput as exc:
        return Verdict(False, str(exc))
    if spec.kind == "call" and spec.arg not in _registry:
        return Verdict(True, f"{spec.arg} is not registered in this process", checkable=False)
    try:
        fresh = run(spec, workdir=workdir, namespace=namespace, timeout=timeout)
    except CheckNotPassed as exc:
        return Verdict(False, str(exc))
    if spec.kind == "keep" and fresh.value != evidence.value:
        return Verdict(
            False,
            f"{spec.arg} changed since it was kept (sha256 differs): running the step again "
            f"rewrites it (the kept copy stays in the store's history)",
        )
    if spec.kind in ("file", "sha256") and fresh.value != evidence.value:
        return Verdict(False, f"{spec.arg} changed since it was recorded (sha256 differs)")
    if (
        spec.kind in ("call", "expr")
        and not isinstance(evidence.value, bool)
        and fresh.value != evidence.value
    ):
        return Verdict(False, f"{spec.arg} now gives {fresh.value!r}, was {evidence.value!r}")
    return Verdict(True)


def names_read(check_texts: Iterable[str]) -> set[str] | None:
    """The names the `expr:` checks among `check_texts` read; None when one does not
    parse (it may read any)."""
    names: set[str] = set()
    for text in check_texts:
        if text.startswith("expr:"):
            try:
                tree = ast.parse(text[len("expr:") :].strip(), mode="eval")
            except SyntaxError:
                return None
            names.update(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    return names
