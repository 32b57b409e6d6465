"""Files that travel: the files a `keep:PATH` check names are kept in the store with the
step's record, and put back into the work folder when the step is skipped and a file
is missing, so that a clone of the store resumes without running the step again.

A kept file is content-addressed like a saved value (`artifacts/<sha256>.file`; big
ones streamed into a pack of their own). Paths stay inside the work folder: a kept
path that is absolute, climbs out with `..` or passes through a symbolic link is
refused when kept and when restored (a crafted record cannot write elsewhere). A
local file that differs from its kept copy is never overwritten: the check's
evidence then says it changed, and the step runs again as after any changed file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..errors import InvalidInput, StepstoneError
from ..model.models import Artifact, StepRecord
from ..rules import checks, dependencies
from ..store import StoredBlob
from ..store.durable import write_atomic
from ..values import artifacts, bigvalues
from .state import RunState

KEEP = "keep:"
FORMAT = "file"
_CHUNK = 1 << 20


def kept_paths(specs: Iterable[str]) -> list[str]:
    """The paths the `keep:` checks among `specs` name."""
    return [spec[len(KEEP) :].strip() for spec in specs if spec.startswith(KEEP)]


safe_relative = checks.inside_workdir


def _no_link_on_the_way(workdir: Path, relative: str) -> Path:
    """`workdir / relative`, refused if a symbolic link is on the way (or is it)."""
    here = workdir
    for part in relative.split("/"):
        here = here / part
        if here.is_symlink():
            raise InvalidInput(
                f"{relative}: {here.relative_to(workdir)} is a symbolic link; a kept file "
                f"is read and restored only through real folders inside the work folder"
            )
    return here


def _files(workdir: Path, relative: str) -> Iterator[str]:
    """The regular files `relative` names: itself, or those in it (not hidden ones, as
    `file:` checks of folders count them)."""
    target = _no_link_on_the_way(workdir, relative)
    if target.is_file():
        yield relative
        return
    for file in sorted(p for p in target.rglob("*") if p.is_file() and not p.is_symlink()):
        inside = file.relative_to(workdir).as_posix()
        if not any(part.startswith(".") for part in inside[len(relative) + 1 :].split("/")):
            yield inside


def keep(
    specs: Iterable[str], workdir: Path, state: RunState
) -> tuple[dict[str, bytes | StoredBlob], dict[str, Artifact]]:
    """(the blobs to commit, the record's `kept` table: path -> content) for the files
    the `keep:` checks among `specs` name, as they are now."""
    writes: dict[str, bytes | StoredBlob] = {}
    kept: dict[str, Artifact] = {}
    for path in kept_paths(specs):
        for relative in _files(workdir, safe_relative(path)):
            art, blob = _keep_file(workdir / relative, state)
            writes[artifacts.path_for(art.sha256, FORMAT)] = blob
            kept[relative] = art
    return writes, kept


def _keep_file(file: Path, state: RunState) -> tuple[Artifact, bytes | StoredBlob]:
    size = file.stat().st_size
    with file.open("rb") as handle:
        if size < bigvalues.THRESHOLD:
            data = handle.read()
            return Artifact(sha256=artifacts.sha256(data), format=FORMAT, size=len(data)), data
        sink = state.store.big_blobs.sink(size)
        try:
            while chunk := handle.read(bigvalues.CHUNK):
                sink.write(chunk)
        except BaseException:
            sink.abort()
            raise
        try:
            blob = sink.close()
        except ValueError as exc:  # it changed size while it was read
            raise InvalidInput(f"{file.name} changed while it was kept ({exc}); run again") from exc
    return Artifact(sha256=blob.sha256, format=FORMAT, size=blob.size), blob


def restore_missing(
    state: RunState, workdir: Path, notes: list[str], record: StepRecord | None = None
) -> None:
    """Put back the missing files `record` kept (every record's, when None: found
    through the table's few distinct check lists, before a driver's status, so that a
    later step's inputs are there), and say which in `notes`."""
    if record is None:
        for found in _records_that_keep(state):
            if found.name not in state.numbers:
                continue
            try:
                restore_missing(state, workdir, notes, found)
            except (StepstoneError, OSError) as exc:  # its own step says so if it runs
                notes.append(f"step {found.name}: kept files not restored ({exc})")
        return
    if record.kept:
        restored = restore(record, workdir, state)
        if restored:
            notes.append(f"step {record.name}: restored kept {', '.join(restored)}")


def restore(record: StepRecord, workdir: Path, state: RunState) -> list[str]:
    """Put back each file `record` kept that is missing from the work folder; what was
    restored. A file that is there is left as it is, whatever it holds. Only paths
    under the record's own `keep:` checks are restored, never a hidden one."""
    restored = []
    for relative, art in sorted(_own_kept(record).items()):
        target = _no_link_on_the_way(workdir, relative)
        if target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        _no_link_on_the_way(workdir, relative)  # no link was made on the way meanwhile
        _write_from_store(target, art, state)
        restored.append(relative)
    return restored


def _own_kept(record: StepRecord, under: str | None = None) -> dict[str, Artifact]:
    """The files `record` kept under its own `keep:` paths (or under `under`), by clean
    path; anything else a record lists (a crafted one) is refused."""
    roots = [under] if under is not None else [safe_relative(p) for p in kept_paths(record.checks)]
    mine: dict[str, Artifact] = {}
    for path, art in record.kept.items():
        clean = safe_relative(path)
        inside = [r for r in roots if clean == r or clean.startswith(r + "/")]
        if not inside or any(p.startswith(".") for p in clean[len(inside[0]) :].split("/")):
            if under is None:
                raise InvalidInput(
                    f"step {record.name!r} lists a kept file {path!r} that none of its "
                    f"keep: checks names; the record is not restored (stepstone repair)"
                )
            continue
        mine[clean] = art
    return mine


def restorable(record: StepRecord, path: str, workdir: Path, recorded: object) -> bool:
    """Whether the `keep:` check of `path`, whose evidence was `recorded`, fails only
    because files it kept are missing: once they are put back, the file (or folder) is
    what the evidence says. A reader then counts the step as standing."""
    try:
        prefix = safe_relative(path)
        mine = _own_kept(record, prefix)
        target = workdir / prefix
        if not mine or target.is_symlink():
            return False
        if prefix in mine:  # one file
            return not target.exists() and mine[prefix].sha256 == recorded
        if target.exists() and not target.is_dir():
            return False
        after = checks.folder_files(target) if target.is_dir() else {}
        missing = {k[len(prefix) + 1 :]: a.sha256 for k, a in mine.items()}
        missing = {k: v for k, v in missing.items() if k not in after}
        if not missing:
            return False
        after.update(missing)
    except (InvalidInput, OSError):
        return False
    return checks.folder_digest(after) == recorded


def kept_as_seen(state: RunState, path: str, workdir: Path, seen: str | None) -> bool:
    """Whether some step keeps `path` (a file, or a folder) as it was when a later step
    read it (`seen`, its sha256): a missing input a resume puts back."""
    return any(restorable(record, path, workdir, seen) for record in _records_that_keep(state))


def _records_that_keep(state: RunState) -> Iterator[StepRecord]:
    """The records whose checks keep files, found through the table's few distinct
    check lists (only those records are read)."""
    table = state.records.table
    keeps = {i for i, shape in enumerate(table.shapes) if kept_paths(shape[1])}
    if not keeps:
        return
    for name, kind in zip(table.names, table.kinds, strict=True):
        if kind in keeps and name is not None and (record := state.records.get(name)):
            yield record


def _write_from_store(target: Path, art: Artifact, state: RunState) -> None:
    path = artifacts.path_for(art.sha256, FORMAT)
    tmp = target.with_name(f".{target.name}.stepstone-tmp")
    tmp.unlink(missing_ok=True)  # left by a killed restore
    digest = hashlib.sha256()
    reader = state.store.open_blob(state.snap.tree, path) if state.snap.tree else None
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with open(fd, "wb", closefd=True) as out:
            if reader is not None:
                with reader:
                    if reader.size != art.size:
                        raise StepstoneError(f"the kept copy of {target.name} is not its size")
                    buffer = bytearray(_CHUNK)
                    while got := reader.readinto(buffer):
                        digest.update(buffer[:got])
                        out.write(buffer[:got])
            else:
                data = state.blob(path)
                if data is None:
                    raise StepstoneError(f"the kept copy of {target.name} is not in the store")
                digest.update(data)
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != art.sha256:
            raise StepstoneError(f"the kept copy of {target.name} does not match its sha256")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def cut_back(target: Path, seen: str, size: int) -> bool:
    """Cut the file at `target` back to its first `size` bytes (atomically), if they
    are still the ones with sha256 `seen` and more came after them; whether it was."""
    if not dependencies.grown_from(target, seen, size):
        return False
    with open(target, "rb") as handle:
        write_atomic(target, handle.read(size))
    return True


def cut_back_before(
    state: RunState,
    workdir: Path,
    notes: list[str],
    number: int,
    verified: Callable[[str], bool],
) -> None:
    """Before step `number` runs (again): each file more than one step wrote that no
    verified step from this one on answers for, and that is the content the last
    writer before this step left with more after it (rows a later step appended, or
    this one last time), is cut back to that content, so that nothing is appended
    twice. A verified later writer whose rows go with it is stale by its own check."""
    table = state.records.table
    shared = table.shared_writes()
    if not shared:
        return
    names, numbers = state.steps.names, state.numbers
    for path in sorted(shared):
        writers = table.writers().get(path, set())
        after = [w for w in writers if (numbers.get(w) or 0) >= number]
        if not after or any(verified(w) for w in after):
            continue
        earlier = max(
            (w for w in writers if 0 < (numbers.get(w) or 0) < number),
            key=lambda w: numbers.get(w) or 0,
            default=None,
        )
        record = state.records.get(earlier) if earlier is not None else None
        said = (record.inputs or {}).get(f"{dependencies.WROTE}{path}") if record else None
        digest, _, size = (said or "").partition(" ")
        if size and cut_back(workdir / path, digest, int(size)):
            notes.append(
                f"{path}: cut back to what step {earlier} left, before step "
                f"{names[number - 1]} runs (a step after it had added to it)"
            )
