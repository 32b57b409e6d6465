"""Copies of a store on one machine take turns driving a run.

A store copied (`cp -r`, a tarball, a `git clone` of a store on this machine) holds
the run as it was at the copy. If both copies are driven later, one after the other,
each would do again, and send again, what the other did since. So the copies of a
store know each other (`<git dir>/stepstone/locks/<run>.copies`: the lock files of
the others, and the tip each had when last seen), and a driver

- holds the lock of every copy it knows, and of the copies they know: none of them
  drives meanwhile (`RunLocked` names the one that does);
- takes in the newest history among them before it reads the run;
- refuses (`Diverged`) when two of them went apart, or when a copy it never saw is
  gone (the store it was copied from while that one was driven, say): what that one
  did since is unknown. `--diverge` drives it anyway, as a new lineage, and says
  which steps' effects are sent anew.

A copy pushed and pulled through a remote (`stepstone clone`) takes turns by the
remote's lease instead (docs/handoff.md).

The runs of one notebook share a lineage: a run with parameters (`stepstone run NB -p
...`, run `NB-1a2b3c4d`) and the notebook's run without them (`NB`) are the same job on
other inputs, so an effect either performed, with the same name and payload, is never
sent again by the other (docs/effects.md). A run with an id of its own (`--run NAME`)
starts a lineage of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import Diverged, InvalidInput, StepstoneError
from ..model import message
from ..model.models import RunInfo
from ..remote.git import REMOTE_KEY, git
from ..store import GitStore, holder_identity
from ..store.durable import write_atomic
from ..store.lock import RunLock, copied_from
from ..store.refs import KIN_REFS
from .ledger import Ledger
from .state import RunState, head_info, lineage_of

COPY_REFS = "refs/stepstone/copies/"  # here: the history of a copy, fetched to compare


def run_lock(store: GitStore, run: str, holder: str) -> RunLock:
    """The lock that lets one process at a time drive `run` in `store`."""
    return RunLock(_lock_path(store.git_dir, run), run, holder)


def _lock_path(git_dir: Path, run: str) -> Path:
    return git_dir / "stepstone" / "locks" / f"{run}.lock"


def _store_of(lock: Path) -> Path:
    """The store a run lock belongs to (`<git dir>/stepstone/locks/<run>.lock`)."""
    return lock.parent.parent.parent


def _known_path(lock: Path) -> Path:
    return lock.with_suffix(".copies")


def _read_known(lock: Path) -> dict[str, object]:
    try:
        data = json.loads(_known_path(lock).read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _known(lock: Path) -> dict[str, str | None]:
    """The copies a store knows of: their lock files, and the tip each had when seen."""
    try:
        copies = _read_known(lock)["copies"]
        return {str(k): v for k, v in copies.items()}  # type: ignore[attr-defined]
    except (KeyError, TypeError, AttributeError):
        return {}


def _left(lock: Path) -> set[str]:
    """The copies a store diverged from (`--diverge`): never taken for copies again."""
    left = _read_known(lock).get("left")
    return {str(path) for path in left} if isinstance(left, list) else set()


def _idle(lock: Path) -> set[str]:
    """The copies a store was copied from while nobody drove the run there: when one is
    gone before this store met it again, this store takes the run over."""
    idle = _read_known(lock).get("idle")
    return {str(path) for path in idle} if isinstance(idle, list) else set()


def _save_known(
    lock: Path,
    known: dict[str, str | None],
    left: set[str] | None = None,
    idle: set[str] | None = None,
) -> None:
    kept = _left(lock) if left is None else left
    idle = _idle(lock) if idle is None else idle
    body: dict[str, object] = {"copies": dict(sorted(known.items()))}
    if kept:
        body["left"] = sorted(kept)
    if idle & set(known):
        body["idle"] = sorted(idle & set(known))
    data = json.dumps(body, indent=1).encode()
    with contextlib.suppress(OSError):  # a read-only copy learns of us when it is driven
        write_atomic(_known_path(lock), data)


def _cloned_from(store: GitStore, run: str) -> Path | None:
    """The lock of the store on this machine that a `git clone` of it came from (its
    `origin` is a folder holding the run), unless the store travels by a remote: one
    set up for its runs, or the `origin` of a plain clone of a run shared through it
    (that copy takes turns by the remote's lease, not as a copy)."""
    if store.config.get(REMOTE_KEY):
        return None
    origin = _origin_store(store)
    if origin is None:
        return None
    info = head_info(store, run)
    if info is not None and info.shared and not _driven_in(origin, run):
        return None  # the shared remote itself
    return _lock_path(origin.git_dir.resolve(), run)


def _driven_in(origin: GitStore, run: str) -> bool:
    """Whether a driver ever held `run` in `origin` (a store, not a bare remote pushed to)."""
    return _lock_path(origin.git_dir.resolve(), run).exists()


def _origin_store(store: GitStore) -> GitStore | None:
    """The store on this machine that `store`'s `origin` names, if any (not itself)."""
    url = store.config.remote_url("origin") or ""
    folder = Path(url.removeprefix("file://"))
    if not url or not folder.is_absolute() or not folder.is_dir():
        return None
    try:
        origin = GitStore(folder, create=False)
    except StepstoneError:
        return None
    return None if origin.git_dir.resolve() == store.git_dir.resolve() else origin


def remote_of_clone(store: GitStore, run: str) -> str | None:
    """The remote a plain `git clone` of a run shared through one sends it through: its
    `origin`, when that is the remote; the origin's own remote, when the clone was made
    of a store that drives the run (then the two are copies that take turns)."""
    origin = _origin_store(store)
    if origin is None or not _driven_in(origin, run):
        return store.config.remote_url("origin")
    return remote_of_copies(store, run)


@dataclass
class _Copy:
    lock: Path
    store: GitStore
    tip: str | None  # None: it holds no run yet (copied from before its first commit)
    first: bool  # never seen by this store: fetched whatever its tip (a copy taken while
    # driven may name a commit whose objects it lacks)

    @property
    def seen(self) -> str:
        """What the copies it knows keep of it: its tip, or "" while it holds no run."""
        return self.tip or ""


def _copies_of(store: GitStore, run: str, lock: RunLock) -> dict[str, str | None]:
    """The copies of the store this one knows, and the one it was just found to be a copy
    of (`cp -r`, a tarball, a `git clone`), never seen yet."""
    known = _known(lock.path)
    found = [f for f in (lock.copied_from, _cloned_from(store, run)) if f is not None]
    if not found and not known:
        found = _made_in_the_original_too(store, run, lock)
    left = _left(lock.path)
    new = [str(f) for f in found if str(f) not in (str(lock.path), *known, *left)]
    if new:  # kept at once: the lock file names the original only until this acquire
        known.update(dict.fromkeys(new))
        idle = _idle(lock.path)
        if lock.copied_from is not None and lock.copied_idle:
            idle.add(str(lock.copied_from))
        _save_known(lock.path, known, idle=idle)
    return known


def _made_in_the_original_too(store: GitStore, run: str, lock: RunLock) -> list[Path]:
    """For a run new in this store: the run's lock in each store this one is a copy of
    (as its other runs' locks say), where the run was made after the copy was taken.
    The two are copies of one run all the same: they take turns, and the one driven
    second takes in what the other did (a notebook's run made in both copies of a
    project sends its effects once)."""
    if store.refs.tip(run) is not None:
        return []
    origins: set[Path] = set()
    for other in lock.path.parent.glob("*.lock"):
        if other == lock.path:
            continue
        named = _named_in(other)
        if named is not None and named.resolve() != other.resolve():
            origins.add(named.parent)
        origins.update(Path(path).parent for path in _known(other))
    found = []
    for folder in sorted(origins):
        candidate = folder / f"{run}.lock"
        if candidate.resolve() == lock.path.resolve():
            continue
        try:
            there = GitStore(_store_of(candidate), create=False)
            if there.refs.tip(run) is not None:
                found.append(candidate)
        except StepstoneError:
            continue
    return found


def _named_in(lock: Path) -> Path | None:
    """The lock file a lock file's content names (where it was last written)."""
    try:
        return Path(json.loads(lock.read_bytes()[:4096])["lock"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fetch_kin(store: GitStore, lineage: str, me: str) -> None:
    """Before run `me` of `lineage` records a new intent: bring in, from the copies of
    this store on this machine (the store it was copied or cloned from, the copies it
    knows), their history of the other runs of the lineage (the notebook's run beside a
    parameter set), so that an effect one of them sent there since the copy is found
    here; kept under `refs/stepstone/kin/`, which `recorded_elsewhere` searches. And tell
    each such store of `me` here (in its `locks/<me>.copies`, as copies tell each other),
    so that its runs of the lineage find what `me` sends here."""
    locks = store.git_dir / "stepstone" / "locks"
    runs = set(store.refs.runs()) | {p.stem for p in locks.glob("*.copies")}
    mine = str(_lock_path(store.git_dir, me))
    told: set[Path] = set()
    for run in sorted(runs - {me}):
        lock = _lock_path(store.git_dir, run)
        others = set(_known(lock))
        named, _ = copied_from(lock)
        if named is not None:
            others.add(str(named))
        cloned = _cloned_from(store, run)
        if cloned is not None:
            others.add(str(cloned))
        here = store.refs.tip(run)
        for path in sorted(others):
            folder = _store_of(Path(path))
            try:
                there = GitStore(folder, create=False) if folder.is_dir() else None
                tip = there.refs.tip(run) if there is not None else None
                info = head_info(there, run) if there is not None and tip else None
            except StepstoneError:
                continue
            if there is None or info is None or lineage_of(info) != lineage:
                continue
            if there.git_dir not in told:
                told.add(there.git_dir)
                theirs = _lock_path(there.git_dir, me)
                known = _known(theirs)
                if mine not in known and mine not in _left(theirs):
                    _save_known(theirs, {**known, mine: ""})
            if tip == here:
                continue
            kin = f"{KIN_REFS}{hashlib.sha256(path.encode()).hexdigest()[:16]}/{run}"
            with contextlib.suppress(StepstoneError, OSError):
                git(store, "fetch", "--quiet", "--no-tags", str(there.git_dir),
                    f"+{there.refs.ref(run)}:{kin}")  # fmt: skip


def gone_original(store: GitStore, run: str) -> str | None:
    """For a reader: when this store is a copy of a store that is gone and was driven
    when the copy was taken (a command that changes the run is refused, `Diverged`, until
    the copy is driven as a new lineage), a note saying so; else None."""
    lock = _lock_path(store.git_dir, run)
    candidates = [path for path, seen in _known(lock).items() if seen is None]
    named, idle_then = copied_from(lock)
    if named is not None and not idle_then:
        candidates.append(str(named))
    idle = _idle(lock) | _left(lock)
    for path in dict.fromkeys(candidates):
        folder = _store_of(Path(path))
        if path not in idle and not folder.exists():
            return (
                f"this store is a copy of {folder}, which is gone (moved, archived or on "
                f"another machine) and was not seen since the copy: a command that changes "
                f"the run is refused until that store is back where it was (the copies then "
                f"take turns), or until this copy is driven as a new lineage, with "
                f"--diverge (MCP: diverge=true), when what that store did after the copy, "
                f"effects included, is known not to matter: it is not here"
            )
    return None


def take_turns(store: GitStore, run: str, lock: RunLock) -> list[str]:
    """Before `run` is read by the driver holding `lock`: hold the locks of the store's
    copies on this machine and take in the newest history among them. Notes for the
    driver; `Diverged` when the copies went apart or one never seen is gone."""
    mine = lock.path
    known = _copies_of(store, run, lock)
    if not known:
        return []
    notes: list[str] = []
    copies = _reach(store, run, lock, known, notes)
    here = store.refs.tip(run)
    newest = _newest(store, run, here, copies)
    if newest is not None and newest.tip is not None and newest.tip != here:
        store.move_run(run, newest.tip, here)
        notes.append(
            f"took in run {run!r} as the copy of this store at {_store_of(newest.lock)} left "
            f"it (driven there since this store last was): nothing it did is done again"
        )
    tip = store.refs.tip(run)
    seen: dict[str, str | None] = {str(c.lock): c.seen for c in copies}
    _save_known(mine, seen)
    for copy in copies:  # each learns of this one (and of the others), as seen now
        theirs = _known(copy.lock)
        theirs.update({k: v for k, v in seen.items() if k != str(copy.lock)})
        theirs[str(mine)] = tip or ""
        _save_known(copy.lock, theirs)
    return notes


def _reach(
    store: GitStore, run: str, lock: RunLock, known: dict[str, str | None], notes: list[str]
) -> list[_Copy]:
    """Every copy reachable from `known` (the copies the copies know, too), each locked.
    A copy that holds no run yet (this store was copied from it before its first commit,
    or it from this one) is one all the same: whichever drives first, the other takes in
    its history."""
    copies: list[_Copy] = []
    queue = list(known)
    visited = {str(lock.path)}
    idle = _idle(lock.path)
    while queue:
        path = queue.pop(0)
        if path in visited:
            continue
        visited.add(path)
        other = Path(path)
        folder = _store_of(other)
        try:
            there = GitStore(folder, create=False) if folder.is_dir() else None
            tip = there.refs.tip(run) if there is not None else None
        except StepstoneError:
            there, tip = None, None
        if there is None or (tip is None and known.get(path)):
            gone = not folder.exists()  # not merely unreadable now
            if path in known and known[path] is None and gone and path in idle:
                notes.append(
                    f"this store is a copy of {folder}, which is gone (moved, archived, or "
                    f"on another machine); nobody drove the run there when the copy was "
                    f"taken, so this store takes the run over"
                )
                continue
            if path in known and known[path] is None:
                raise Diverged(
                    run,
                    f"this store ({store.path}) is a copy of {folder}, which "
                    f"{'is gone' if there is None else 'no longer holds the run'} and was not "
                    f"seen since the copy: what it did after the copy, effects included, is "
                    f"not here. {_WAY_ON}",
                )
            if path in known:
                notes.append(f"the copy of this store at {folder} is gone: forgotten")
            continue
        lock.hold_also(other, f"the copy of this store at {folder}")
        copies.append(_Copy(other, there, tip, known.get(path) is None))
        queue.extend(_known(other))
    return copies


def _newest(store: GitStore, run: str, here: str | None, copies: list[_Copy]) -> _Copy | None:
    """The copy whose history holds every other's and this store's, fetched here; None
    when this store's does; `Diverged` when none does."""
    newest: _Copy | None = None
    newest_tip = here
    for copy in copies:
        if copy.tip is None or (copy.tip == newest_tip and not copy.first):
            continue
        fetched = f"{COPY_REFS}{hashlib.sha256(str(copy.lock).encode()).hexdigest()[:16]}"
        git(
            store,
            "fetch",
            "--quiet",
            "--no-tags",
            str(copy.store.git_dir),
            f"+{copy.store.refs.ref(run)}:{fetched}",
        )
        if copy.tip == newest_tip:
            continue
        if newest_tip is None or store.descends(copy.tip, newest_tip):
            newest, newest_tip = copy, copy.tip
        elif not store.descends(newest_tip, copy.tip):
            where = _store_of(newest.lock) if newest is not None else store.path
            raise Diverged(
                run,
                f"the copies of this store at {where} and {_store_of(copy.lock)} went apart: "
                f"both were driven since they were copied (compare them: git --git-dir "
                f"{shlex.quote(str(store.git_dir))} log --graph --all). {_WAY_ON}",
            )
    return newest


_WAY_ON = (
    "Drive the copy that holds the newest history, or drive this one as a new lineage on "
    "purpose with --diverge (on the command that changes the run: `stepstone run NOTEBOOK "
    "--diverge`, `stepstone resolve KEY ... --diverge`, `%resume --diverge`, "
    "open_run(..., diverge=True)): what this copy records as done or sent is never done "
    "again, but what the others did after the copy is not here and may be done again"
)


def refuse_needless_diverge(store: GitStore, run: str, lock: RunLock) -> None:
    """Refuse `--diverge` for a store whose copies can still take turns (none of them was
    driven apart from it): driven as a new lineage, it would send again what they sent.
    Nothing is taken in; the copies' histories are only fetched to compare."""
    known = _copies_of(store, run, lock)
    if not known:
        return
    try:
        copies = _reach(store, run, lock, known, [])
        _newest(store, run, store.refs.tip(run), copies)
    except Diverged:
        return  # they went apart: --diverge is the way on
    where = ", ".join(str(_store_of(c.lock)) for c in copies) or "its copies"
    raise InvalidInput(
        f"run {run!r} in {store.path} has not diverged from its copies ({where}): they "
        f"take turns, and the newest history among them is taken in before the run goes "
        f"on, so nothing is done or sent again. Run without --diverge; to try another way "
        f"on from a step, fork the run (`stepstone fork {run} --at STEP --as NEW`)"
    )


def remote_of_copies(store: GitStore, run: str) -> str | None:
    """The URL of the remote a copy of this store on this machine sends the run through
    (a copy taken before the run was shared travels as its original does), or None."""
    from ..remote.git import remote_name

    for path in _known(_lock_path(store.git_dir, run)):
        folder = _store_of(Path(path))
        try:
            other = GitStore(folder, create=False) if folder.is_dir() else None
        except StepstoneError:
            continue
        name = remote_name(other) if other is not None else None
        url = other.config.remote_url(name) if other is not None and name else None
        if url:
            return url
    return None


def settle_now(store: GitStore, run: str) -> list[str]:
    """Take turns with the store's copies (see `take_turns`), holding the run for the time
    it takes: before a kernel opens it, so that a refusal is the command's, not a cell's."""
    lock = run_lock(store, run, holder_identity(store.settings))
    lock.acquire()
    try:  # first what a killed writer left here (a ref's lock file), as a driver does
        return store.clear_leftovers(run) + take_turns(store, run, lock)
    finally:
        lock.release()


def diverge(state: RunState, ledger: Ledger, lock: RunLock) -> list[str]:
    """Drive this store as a new lineage (`--diverge`): it stops taking turns with its
    copies (and they with it); its steps confirmed here, or whose effects it records,
    keep their effects' keys; every other effect is keyed anew, so what the copies may
    have sent for those steps is sent again. Notes saying so."""
    mine = lock.path
    known = _copies_of(state.store, state.id, lock)
    if not known:
        return ["--diverge: this store knows no copy of itself; nothing to diverge from"]
    sent = set(state.effect_book.steps())  # steps whose effects this copy records
    done = [
        name
        for name in state.steps.names
        if ((r := state.records.get(name)) and r.status == "confirmed")
        or state.identity_of(name) in sent
    ]
    left = [name for name in state.steps.names if name not in done]
    kept = state.lineages_of({*sent, *(state.identity_of(name) for name in done)})
    uid = secrets.token_hex(8)
    state.note_info(uid=uid, inherited=kept, lineage=f"{state.id}:{uid}")
    ledger.commit(
        {},
        f"run {state.id}: a new lineage, diverged from its copies",
        [(message.STATUS, "diverged")],
        info_changed=True,
    )
    # the copies are told once the new lineage is committed: a refused commit (a finished
    # run, a lost lease) leaves them taking turns as before
    for path in known:
        theirs = _known(Path(path))
        if theirs.pop(str(mine), "absent") != "absent":
            _save_known(Path(path), theirs, _left(Path(path)) | {str(mine)})
    found = [f for f in (lock.copied_from, _cloned_from(state.store, state.id)) if f]
    _save_known(mine, {}, _left(mine) | set(known) | {str(f) for f in found})
    grows = state.info.plan_mode == "incremental"
    again = [*left, "any step its plan does not have yet"] if grows else left
    return [
        f"--diverge: this store drives run {state.id!r} as a new lineage; the steps it has "
        f"no record of ({', '.join(again) or 'none'}) run here anew, and an effect one of "
        f"them asks for is sent anew, even where a copy of it sent it"
    ]


def notebook_run(run: str, stem: str) -> bool:
    """Whether `run` is an id `stepstone run` gives a notebook called `stem`: `stem`, or
    `stem-` and the 8 hex digits of a parameter set."""
    return run == stem or re.fullmatch(re.escape(stem) + r"-[0-9a-f]{8}", run) is not None


def join_siblings(state: RunState, ledger: Ledger, notebook: Path, stem: str) -> str | None:
    """Put a new run of `notebook` (one that recorded nothing yet, named as `stepstone
    run` names the notebook's runs) in the lineage of the notebook's other runs in its
    store; a note saying so, or None. Done in the store's turn for effects, so that two
    parameter sets started at once end in one lineage."""
    store = state.store
    if (
        state.info.lineage
        or state.effect_book.records
        or len(state.records)
        or not (notebook_run(state.id, stem))
    ):
        return None
    with ledger.guard, store.turn("effects"):
        siblings = [
            info
            for run in store.refs.runs()
            if run != state.id
            and notebook_run(run, stem)
            and (info := head_info(store, run)) is not None
            and _notebook_of(store, info) == notebook.resolve()
        ]
        if not siblings:
            return None
        chosen = sorted(siblings, key=lambda info: (info.created, info.run))[0]
        lineage = lineage_of(chosen)
        if lineage == state.lineage:
            return None
        state.note_info(lineage=lineage)
        ledger.commit(
            {},
            f"run {state.id}: in the lineage of run {chosen.run} (the same notebook)",
            [(message.STATUS, "lineage")],
            info_changed=True,
        )
    return (
        f"run {state.id} is {notebook.name} with other parameters than run {chosen.run}: "
        f"an effect that run performed, with the same name and payload, is not sent again"
    )


def _notebook_of(store: GitStore, info: RunInfo) -> Path | None:
    """The notebook a run's head file records, as an absolute path (None: none)."""
    if not info.notebook:
        return None
    return (store.path.parent / info.workdir / info.notebook).resolve()
