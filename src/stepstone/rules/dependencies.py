"""What a step read, recorded with it, so that a change re-runs only what depends on it.

A confirmed step records its inputs, each with the value it saw:

    decision:KEY     the value `stepstone.decided(KEY)` returned (traced as it ran)
    unknown:ID       the answer of an open question it rests on (`--uses U1`), None
                     while the question is open
    file:PATH        the sha256 of a file it reads: declared (`--in file:PATH`), or a
                     file an earlier step's `file:` check names and its cell mentions
    step:NAME        the fingerprint of what step NAME produced (its strong evidence
                     and saved outputs), for a file NAME's `file:` check names

Every step keeps the conservative rule (any earlier step redone or stale makes
it stale) unless the settings let cells follow their inputs (`follow_inputs`,
`git config stepstone.followInputs true`: experimental). Then a notebook cell's
step **follows its inputs** when its code reads nothing from the kernel and no
later step may read a name it binds (other than its saved `--out` values): cells
that pass results only through files, decisions and saved values.
Such a step is stale only when its own evidence, its code or one of its inputs
changed, and it stays verified when an earlier step it does not read is redone.
Every other step keeps the conservative rule: a cell that reads a kernel name (a
variable an earlier cell made may have been changed in place by any cell since), a
cell that is not plain Python, a `run.step` function (its closures cannot be seen). Their decisions,
files and unknowns are still recorded and checked: a revised decision they read
makes them stale.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import posixpath
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from ..model.models import StepRecord

DECISION = "decision:"
FILE = "file:"
READ = "read:"  # a file its code opened for reading (traced), made by no step before it
WROTE = "wrote:"  # a file its code wrote (traced), its evidence in `--cells` mode
LISTED = "listed:"  # a folder its code listed (`glob`, `os.listdir`): the names in it
STEP = "step:"
UNKNOWN = "unknown:"
_WEAK = ("note", "completed")


DYNAMIC = "<dynamic>"  # among a cell's reads: it reaches names the code does not show
_REACHING = {"globals", "locals", "vars", "eval", "exec", "__import__", "get_ipython"}
_BUILTINS = frozenset(dir(builtins))
_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
    ast.ClassDef,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def cell_names(source: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(the names a cell's code may read from the kernel, the names it may bind), or
    None when it is not plain Python (IPython syntax: `!ls`, `%time`). A name counts
    as the cell's own only when an unconditional top-level statement binds it before it
    is read (`with open(p) as f: f.write(...)`); `x = x + 1` reads the kernel's x, and
    so does a read of a name bound only under `if`, `try` or a loop, or a global read
    inside a function. A cell that can reach names its code does not show (`global`,
    `globals()`, `eval`...) reads `DYNAMIC`."""
    tree = parsed(source)
    return None if tree is None else tree_names(tree)


_last_parsed: tuple[str, ast.Module | None] = ("", None)


def parsed(code: str) -> ast.Module | None:
    """A cell's code parsed (read, not to be changed), or None when it is not Python.
    A step reads its cell twice (what it may read and bind, and what it leaves in the
    kernel): the last one parsed is kept for the second read."""
    global _last_parsed
    key = code if code.endswith("\n") else code + "\n"  # IPython's cells end with one
    last_key, last_tree = _last_parsed  # one read: another thread may replace it
    if last_key == key and last_tree is not None:
        return last_tree
    try:
        tree = ast.parse(key)
    except (SyntaxError, ValueError):
        return None
    _last_parsed = (key, tree)
    return tree


def tree_names(tree: ast.Module) -> tuple[frozenset[str], frozenset[str]]:
    """`cell_names` of a cell's parsed code."""
    return tree_reads(tree), frozenset(may_bind(tree))


def tree_reads(tree: ast.Module) -> frozenset[str]:
    """The names a cell's parsed code may read from the kernel (see `cell_names`)."""
    reads: set[str] = set()
    _statements(tree.body, reads, set())
    return frozenset(reads)


def may_bind(tree: ast.Module) -> dict[str, None]:
    """Every name the cell may bind in the kernel, in the order first met (an ordered
    set): under `if`, `try`, a loop, `with`, `except` as well, imports included (a
    later cell may read any of them); not the names of its functions', classes' and
    comprehensions' own scopes."""
    found: dict[str, None] = {}
    # breadth first, as ast.walk does; the insides of a scope are not the cell's
    todo: deque[ast.AST] = deque([tree])
    while todo:
        node = todo.popleft()
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                found[node.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(dict.fromkeys((a.asname or a.name).split(".")[0] for a in node.names))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
            isinstance(node, ast.ExceptHandler) and node.name
        ):
            found[node.name] = None  # type: ignore[index]
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _statements(body: list[ast.stmt], reads: set[str], bound: set[str]) -> None:
    """Walk top-level statements in order: what each reads before the cell bound it,
    then what it binds for sure (`bound`)."""
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                _reads_of(item.context_expr, reads, bound)
                if item.optional_vars is not None:
                    bound |= _targets(item.optional_vars)
            _statements(stmt.body, reads, bound)
            continue
        _reads_of(stmt, reads, bound)
        if isinstance(stmt, ast.Assign):
            bound.update(n for t in stmt.targets for n in _targets(t))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and (
            not isinstance(stmt, ast.AnnAssign) or stmt.value is not None
        ):
            bound |= _targets(stmt.target)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    reads.add(DYNAMIC)
                bound.add((alias.asname or alias.name).split(".")[0])


def _targets(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _reads_of(node: ast.AST, reads: set[str], bound: set[str]) -> None:
    """The names `node` reads that the cell has not bound for sure: every Name it loads
    outside the scopes of its own functions, lambdas, classes and comprehensions, and
    the free names inside them; names its nested statements bind do not count as
    bound. `x += 1` reads x."""
    nodes = list(ast.walk(node))
    local = _scoped_names(nodes)
    for n in nodes:
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            reads.add(DYNAMIC)
        elif isinstance(n, ast.AugAssign):
            reads.update(name for name in _targets(n.target) if name not in bound)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in local:
            if n.id in _REACHING:
                reads.add(DYNAMIC)
            if n.id not in bound:
                reads.add(n.id)


def _scoped_names(nodes: list[ast.AST]) -> set[int]:
    """Of a tree's `nodes` (all of them, as `ast.walk` gives them), the Name nodes that
    are local to a comprehension, a lambda, a function or a class body, and the loads
    of a loop's, a `with`'s or an `except`'s variable inside its block (their own
    variables, not the cell's)."""
    local: set[int] = set()
    for node in nodes:
        scope: list[ast.AST]
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            scope = [node]
            own = {n for g in node.generators for n in _targets(g.target)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            scope = list(node.body) if isinstance(node.body, list) else [node.body]
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            own = {a.arg for a in every if a is not None} | _stored(scope)
        elif isinstance(node, ast.ClassDef):
            scope = list(node.body)
            own = _stored(scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            scope = list(node.body)  # the loop's variable, while the loop runs
            own = _targets(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            scope = list(node.body)
            own = {n for i in node.items if i.optional_vars for n in _targets(i.optional_vars)}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope = list(node.body)
            own = {node.name}
        else:
            continue
        for part in scope:
            local.update(id(n) for n in ast.walk(part) if isinstance(n, ast.Name) and n.id in own)
    return local


def _stored(scope: list[ast.AST]) -> set[str]:
    return {
        n.id
        for part in scope
        for n in ast.walk(part)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }


def following(steps: Iterable[tuple[str | None, StepRecord | None]]) -> set[str]:
    """The steps that follow their recorded inputs rather than the conservative rule,
    from the plan in order: (each step's planned source hash, its record). A cell
    follows when its code reads nothing from the kernel (every name it reads is its
    own, an import or a builtin no step rebinds) and no later step may read a name it
    binds other than its saved `--out` values: a later step whose reads are not known
    (not run yet, failed, edited since, not plain Python, a `run.step` function) may
    read anything. Such a cell can only pass results through files, decisions and
    saved values, which its inputs record."""
    plan = list(steps)
    every_bound = {n for _, r in plan if r is not None for n in r.binds}
    read_later: set[str] = set()
    unknown_later = False
    found: set[str] = set()
    for source, record in reversed(plan):
        known = (
            record is not None
            and record.status == "confirmed"
            and record.inputs is not None
            and record.source_hash is not None
            and record.source_hash == source
            and DYNAMIC not in record.reads
        )
        if known and record is not None:
            kernel = {n for n in record.reads if n not in _BUILTINS or n in every_bound}
            unsaved = set(record.binds) - set(record.outputs)
            if not kernel and not (unsaved and (unknown_later or unsaved & read_later)):
                found.add(record.name)
            read_later |= set(record.reads)
        else:
            unknown_later = True
    return found


def fingerprint(record: StepRecord) -> str:
    """What a step produced, as one digest: its strong evidence and its saved outputs.
    A step that re-ran and produced the same is the same; one with nothing to compare
    (no checks, no outputs) is new each time it runs."""
    produced = [[e.check, e.kind, e.value] for e in record.evidence if e.kind not in _WEAK]
    produced += [[var, art.sha256] for var, art in sorted(record.outputs.items())]
    produced += [[k, v] for k, v in sorted((record.inputs or {}).items()) if k.startswith(WROTE)]
    if not produced:
        return f"seq {record.seq}"
    text = json.dumps(produced, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: Path) -> str | None:
    """A file's sha256 (a folder's: every file in it), or None when it is not there."""
    from .checks import sha256_file, sha256_folder

    if path.is_dir():
        return sha256_folder(path)[0]
    if path.is_file():
        return sha256_file(path)
    return None


def written_digest(path: Path) -> str | None:
    """What a step that wrote `path` records of it: its sha256 and, for a file, its size
    (`"SHA256 SIZE"`), so that rows a later attempt appended can be cut back."""
    digest = file_digest(path)
    if digest is None or not path.is_file():
        return digest
    return f"{digest} {path.stat().st_size}"


def grown_from(path: Path, seen: str, size: int) -> bool:
    """Whether the file at `path` is longer than `size` and its first `size` bytes have
    the sha256 `seen`: only added to since."""
    try:
        if not path.is_file() or path.stat().st_size <= size:
            return False
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            left = size
            while left:
                chunk = handle.read(min(left, 1 << 20))
                if not chunk:
                    return False
                digest.update(chunk)
                left -= len(chunk)
    except OSError:
        return False
    return digest.hexdigest() == seen


def listing_digest(folder: Path, made: Collection[str], where: str) -> str | None:
    """The digest of the names in `folder` (at `where`, "." for the run's own folder),
    or None when it is not there: not hidden ones, nor notebooks, nor the files a step
    of the run wrote (`made`, paths from the run's folder). A file a later step writes
    there does not make the step that listed it stale; one put there from outside does."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    prefix = "" if where == "." else where.rstrip("/") + "/"
    kept = [
        n
        for n in names
        if not n.startswith(".")
        and n != "__pycache__"
        and not n.endswith(".ipynb")
        and prefix + n not in made
    ]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


def recorded_inputs(
    *,
    source: str | None,
    declared: Iterable[str],
    decisions: Mapping[str, str | None],
    answers: Mapping[str, str | None],
    earlier: Iterable[StepRecord],
    workdir: Path,
    read: Collection[str] = (),
    plain: Collection[str] = (),
) -> tuple[dict[str, str | None] | None, tuple[str, ...], tuple[str, ...]]:
    """(the inputs to record for a step, the kernel names its cell reads, the names it
    binds). Inputs are None for a step that cannot be read: a `run.step` function (its
    closures cannot be seen; the decisions and unknowns it read are still recorded);
    a cell that is not plain Python reads `DYNAMIC` (any name), and its inputs are
    what it read otherwise (decisions, files). `answers` are the unknowns' answers now (None:
    open); `earlier` the records of the steps before it, in plan order; `read` the files
    its code opened for reading (traced); `plain` the names it reads that plain cells
    before it make anew from nothing a step made (not kernel reads: their cells are
    part of its source hash)."""
    found: dict[str, str | None] = {f"{DECISION}{k}": v for k, v in sorted(decisions.items())}
    for item in declared:
        if item.startswith(UNKNOWN):
            found[item] = answers.get(item[len(UNKNOWN) :])
        elif item.startswith(FILE):
            found[item] = file_digest(workdir / item[len(FILE) :])
    if source is None:
        return (found or None), (), ()
    names = cell_names(source)
    if names is None:  # it may read any name (`lines = !cat {path}`): the files it read too
        return found, (DYNAMIC,), ()
    reads, binds = names
    reads = (reads - frozenset(plain)) | {d for d in declared if d.isidentifier()}  # `--in VAR`
    for record in earlier:
        for check in record.checks:
            path = checked_file(check)
            if path and (path in source or path in read):
                found[f"{FILE}{path}"] = file_digest(workdir / path)
                found[f"{STEP}{record.name}"] = fingerprint(record)  # the file's maker
    return found, tuple(sorted(reads)), tuple(sorted(binds))


def traced_inputs(
    read: Iterable[str],
    *,
    step: str,
    checked: Collection[str],
    writers: Mapping[str, set[str]],
    number_of: Callable[[str], int | None],
    record_of: Callable[[str], StepRecord | None],
    workdir: Path,
) -> dict[str, str | None]:
    """The inputs of the files a step's code opened for reading (`read`, traced as it
    ran), other than those an earlier step's `file:` check names (`recorded_inputs`
    reads those as it reads a path in the cell's code): a file another step's code wrote
    is an input through the newest step before this one that wrote it (`step:NAME`, as
    a checked file's maker); any other file by its sha256 (`read:PATH`), so that a
    change to it makes the step stale unless a step after this one writes it."""
    found: dict[str, str | None] = {}
    me = number_of(step)
    for path in read:
        if path in checked:
            continue
        made_by = [
            (n, name)
            for name in writers.get(path, set()) - {step}
            if (n := number_of(name)) is not None and me is not None and n < me
        ]
        if made_by:
            maker = record_of(max(made_by)[1])
            if maker is not None:
                found[f"{STEP}{maker.name}"] = fingerprint(maker)
        else:
            found[f"{READ}{path}"] = file_digest(workdir / path)
    return found


def checked_file(check: str) -> str:
    """The path a `file:` (or `keep:`) check names, normalised; "" for other checks."""
    for prefix in (FILE, "keep:"):
        if check.startswith(prefix):
            return posixpath.normpath(check[len(prefix) :])
    return ""


def changed_input(
    inputs: Mapping[str, str | None],
    *,
    decision: Callable[[str], str | None],
    answer: Callable[[str], str | None],
    workdir: Path,
    upstream: Callable[[str, str | None], tuple[str, StepRecord | None]],
    kept: Callable[[str, str | None], bool] = lambda path, seen: False,
    written: Callable[[str], bool] = lambda path: False,
    made: Callable[[], Collection[str]] = lambda: (),
    cut_back: Callable[[str, str, int], bool] = lambda path, seen, size: False,
) -> str | None:
    """Why a step's recorded inputs no longer hold (every input that changed, in the
    order recorded, `; `-separated; a file once), or None. `decision(key)` is a
    decision's value now; `upstream(name, seen)` the state now and the record of the
    step once named `name` that made `seen`; `kept(path, seen)` whether a missing file
    is kept in the store as it was seen; `written(path)` whether the code of a step
    after it writes a file it read (traced): a change to it is that step's; `made()` the
    files the run's steps wrote (left out of a listed folder's names); `cut_back(path,
    seen, size)` whether a file it wrote, added to since by a step that did not finish
    (its first `size` bytes are still the `seen` ones), is cut back to what it left."""
    causes: list[str] = []
    named: set[str] = set()  # the files a cause names already (declared, then traced)
    for key, seen in inputs.items():
        if key.startswith(DECISION):
            name = key[len(DECISION) :]
            now = decision(name)
            if now != seen:
                causes.append(f"decision {name} changed {seen} → {now} since it was read")
        elif key.startswith(UNKNOWN):
            name = key[len(UNKNOWN) :]
            now = answer(name)
            if now != seen:
                causes.append(
                    f"unknown {name}, which it rests on, was answered since it ran: {now}"
                )
        elif key.startswith(FILE):
            path = key[len(FILE) :]
            now = file_digest(workdir / path)
            if now != seen and not (now is None and kept(path, seen)) and path not in named:
                gone = "is gone" if now is None else "changed"
                causes.append(f"its input {path} {gone} since it ran")
                named.add(path)
        elif key.startswith((READ, WROTE)):
            path = key.partition(":")[2]
            seen, _, size = (seen or "").partition(" ")
            now = file_digest(workdir / path)
            if now != (seen or None) and not written(path) and path not in named:
                if key.startswith(WROTE) and size and cut_back(path, seen, int(size)):
                    continue
                named.add(path)
                gone = "is gone" if now is None else "changed"
                verb = "read" if key.startswith(READ) else "wrote"
                causes.append(f"the file {path} it {verb} {gone} since it ran")
        elif key.startswith(LISTED):
            where = key[len(LISTED) :]
            if listing_digest(workdir / where, made(), where) != seen:
                shown = "the notebook's folder" if where == "." else f"the folder {where}"
                causes.append(f"{shown}, which it listed, holds other files since it ran")
        elif key.startswith(STEP):
            name = key[len(STEP) :]
            state, record = upstream(name, seen)
            if state != "verified" or record is None:
                causes.append(f"it uses what step {name} made, and step {name} is {state}")
            elif fingerprint(record) != seen:
                causes.append(f"step {name}, whose results it uses, ran again with other results")
    return "; ".join(causes) or None


def readers(records: Iterable[StepRecord], key: str) -> list[str]:
    """The steps whose recorded inputs include `key` (`decision:threshold`)."""
    return [r.name for r in records if r.inputs and key in r.inputs]


def rests_on(inputs: Mapping[str, str | None] | None) -> tuple[str, ...]:
    """The unknowns a step's result rests on (declared with `--uses`)."""
    return tuple(sorted(k[len(UNKNOWN) :] for k in inputs or {} if k.startswith(UNKNOWN)))
