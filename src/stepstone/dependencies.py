"""What a step read, recorded with it, so that a change re-runs only what depends on it.

A confirmed step records its inputs, each with the value it saw:

    decision:KEY     the value `stepstone.decided(KEY)` returned (traced as it ran)
    unknown:ID       the answer of an open question it rests on (`--uses U1`), None
                     while the question is open
    file:PATH        the sha256 of a file it reads: declared (`--in file:PATH`), or a
                     file an earlier step's `file:` check names and its cell mentions
    step:NAME        the fingerprint of what step NAME produced (its strong evidence
                     and saved outputs), for the kernel names its cell uses that NAME's
                     cell defined

A notebook cell's step records its inputs (none, when its code reads nothing an
earlier step made): it is stale only when its own evidence fails, its source
changed or one of its inputs changed, and the steps after it that do not read it
stay verified. A step without recorded inputs (a `run.step` function, whose
closures cannot be seen; a cell that is not plain Python; a run recorded before
inputs were) keeps the conservative rule: any earlier step redone or stale makes
it stale. Its decisions are still recorded and checked.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .models import StepRecord

DECISION = "decision:"
FILE = "file:"
STEP = "step:"
UNKNOWN = "unknown:"
_WEAK = ("note", "completed")


def cell_names(source: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(the names a cell's code reads before it binds them itself, the names it binds),
    or None when it is not plain Python (IPython syntax: `!ls`, `%time`), so nothing
    can be said of it. `with open(p) as f: f.write(...)` does not read an earlier `f`;
    `x = x + 1` does read an earlier `x`. A module it imports is not among the names
    it binds: running the cell again does not change the module."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    local = _scoped_names(tree)
    after: dict[int, tuple[int, int]] = {}  # an assignment's targets bind after its value
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
            for target in targets:
                for part in ast.walk(target):
                    after[id(part)] = end
    events: list[tuple[tuple[int, int], int, str]] = []  # (where, 0 read / 1 bind, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in local:
            where = (node.lineno, node.col_offset)
            if isinstance(node.ctx, ast.Load):
                events.append((where, 0, node.id))
            else:
                events.append((after.get(id(node), where), 1, node.id))
                if id(node) in after and isinstance(_parent_aug(tree, node), ast.AugAssign):
                    events.append((where, 0, node.id))  # `x += 1` reads x first
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            events.append(((node.lineno, node.col_offset), 1, node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0]
                events.append(((node.lineno, node.col_offset), 2, bound))
    reads: set[str] = set()
    bound_here: set[str] = set()
    defines: set[str] = set()
    for _, kind, name in sorted(events):
        if kind == 0 and name not in bound_here:
            reads.add(name)
        elif kind:
            bound_here.add(name)
            if kind == 1:
                defines.add(name)
    return frozenset(reads), frozenset(defines)


def _parent_aug(tree: ast.AST, name: ast.Name) -> ast.AST | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and node.target is name:
            return node
    return None


def _scoped_names(tree: ast.AST) -> set[int]:
    """The Name nodes that are local to a comprehension, a lambda or a function body
    (their own variables, not the cell's)."""
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            scope: list[ast.AST] = [node]
            bound = {
                n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            scope = list(node.body) if isinstance(node.body, list) else [node.body]
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            bound = {a.arg for a in every if a is not None}
            bound |= {
                n.id
                for part in scope
                for n in ast.walk(part)
                if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
            }
        else:
            continue
        for part in scope:
            local.update(id(n) for n in ast.walk(part) if isinstance(n, ast.Name) and n.id in bound)
    return local


def fingerprint(record: StepRecord) -> str:
    """What a step produced, as one digest: its strong evidence and its saved outputs.
    A step that re-ran and produced the same is the same; one with nothing to compare
    (no checks, no outputs) is new each time it runs."""
    produced = [[e.check, e.kind, e.value] for e in record.evidence if e.kind not in _WEAK]
    produced += [[var, art.sha256] for var, art in sorted(record.outputs.items())]
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


def recorded_inputs(
    *,
    source: str | None,
    declared: Iterable[str],
    decisions: Mapping[str, str | None],
    answers: Mapping[str, str | None],
    earlier: Iterable[StepRecord],
    workdir: Path,
) -> tuple[dict[str, str | None] | None, tuple[str, ...]]:
    """(the inputs to record for a step, the names its cell defines). Inputs are None
    for a step that follows the conservative rule: one with no source to read (a
    `run.step` function reads what Python closures give it, which cannot be seen) or
    whose cell is not plain Python. `answers` are the unknowns' answers now (None:
    open); `earlier` the records of the steps before it, in plan order."""
    found: dict[str, str | None] = {f"{DECISION}{k}": v for k, v in sorted(decisions.items())}
    for item in declared:
        if item.startswith(UNKNOWN):
            found[item] = answers.get(item[len(UNKNOWN) :])
    if source is None:
        return (found or None), ()
    names = cell_names(source)
    if names is None:
        return None, ()
    uses, defines = names
    paths = [d[len(FILE) :] for d in declared if d.startswith(FILE)]
    used_names = {d for d in declared if d.isidentifier()} | uses
    definer: dict[str, StepRecord] = {}
    for record in earlier:
        for check in record.checks:
            if check.startswith(FILE) and check[len(FILE) :] in source:
                paths.append(check[len(FILE) :])
                found[f"{STEP}{record.name}"] = fingerprint(record)  # the file's maker
        for name in record.defines:
            definer[name] = record
    for path in sorted(set(paths)):
        found[f"{FILE}{path}"] = file_digest(workdir / path)
    for name in sorted(used_names):  # `x = x + 1` uses the x an earlier step made
        upstream = definer.get(name)
        if upstream is not None:
            found[f"{STEP}{upstream.name}"] = fingerprint(upstream)
    return found, tuple(sorted(defines))


def changed_input(
    inputs: Mapping[str, str | None],
    *,
    decision: Callable[[str], str | None],
    answer: Callable[[str], str | None],
    workdir: Path,
    upstream: Callable[[str], tuple[str, StepRecord | None]],
) -> str | None:
    """Why a step's recorded inputs no longer hold, or None. `decision(key)` is a
    decision's value now; `upstream(name)` a step's state now and its record."""
    for key, seen in inputs.items():
        if key.startswith(DECISION):
            name = key[len(DECISION) :]
            now = decision(name)
            if now != seen:
                return f"decision {name} changed {seen} → {now} since it was read"
        elif key.startswith(UNKNOWN):
            name = key[len(UNKNOWN) :]
            now = answer(name)
            if now != seen:
                return f"unknown {name}, which it rests on, was answered since it ran: {now}"
        elif key.startswith(FILE):
            path = key[len(FILE) :]
            if file_digest(workdir / path) != seen:
                return f"its input {path} changed since it ran"
        elif key.startswith(STEP):
            name = key[len(STEP) :]
            state, record = upstream(name)
            if state != "verified" or record is None:
                return f"it uses what step {name} made, and step {name} is {state}"
            if fingerprint(record) != seen:
                return f"step {name}, whose results it uses, ran again with other results"
    return None


def readers(records: Iterable[StepRecord], key: str) -> list[str]:
    """The steps whose recorded inputs include `key` (`decision:threshold`)."""
    return [r.name for r in records if r.inputs and key in r.inputs]


def rests_on(inputs: Mapping[str, str | None] | None) -> tuple[str, ...]:
    """The unknowns a step's result rests on (declared with `--uses`)."""
    return tuple(sorted(k[len(UNKNOWN) :] for k in inputs or {} if k.startswith(UNKNOWN)))
