"""What a `%%step` cell leaves in the kernel, and how a skipped cell gives it back.

A confirmed cell offers every name it binds to be saved (`offered`); what cannot be
saved is named in its record. When the cell is skipped, its saved values come back
and its top-level imports, `def`s and `class`es run again (`remake`): they are cheap,
and a function defined there sees the restored values as globals, as it did.
"""

from __future__ import annotations

import ast
import hashlib
import pickle
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from ..errors import StepstoneError
from ..rules.dependencies import DYNAMIC, may_bind, parsed, tree_reads
from ..values import bigvalues

_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_THROWAWAY = frozenset({"_", "__", "___"})
UNTRUSTED = "a pickle from a store you do not trust"  # why a saved value was withheld
_TEXT_EVAL = frozenset({"query", "eval"})
_DEFINED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


@dataclass(frozen=True)
class Cell:
    """A cell's code as Python: what it may bind, and its top-level definitions."""

    binds: tuple[str, ...]  # every name it may bind, in the order first met
    definitions: ast.Module  # its top-level imports, defs and classes
    defined: frozenset[str]  # the names those bind
    others: frozenset[str]  # the names its other statements bind
    reads: frozenset[str] | None  # the kernel names it may read; None: any
    deferred: frozenset[str]  # the names its functions read when called, later


def read_cell(code: str) -> Cell | None:
    """Read a cell's code (IPython syntax already turned into Python), or None when it
    does not parse."""
    tree = parsed(code)
    if tree is None:
        return None
    definitions = ast.Module(
        body=[s for s in tree.body if isinstance(s, _DEFINITIONS)], type_ignores=[]
    )
    rest = ast.Module(
        body=[s for s in tree.body if not isinstance(s, _DEFINITIONS)], type_ignores=[]
    )
    nodes = list(ast.walk(tree))
    found = tree_reads(tree)
    reads = None if DYNAMIC in found or _evaluates_text(nodes) else found
    if reads is not None:  # `del x` needs x
        reads = reads | _names_in(nodes, ast.Del)
    return Cell(
        reads=reads,
        deferred=frozenset(_read_in_functions(nodes)),
        binds=tuple(may_bind(tree)),
        definitions=definitions,
        defined=frozenset(may_bind(definitions)),
        others=frozenset(may_bind(rest)),
    )


def _evaluates_text(nodes: list[ast.AST]) -> bool:
    """Whether the code evaluates names in text (`df.query("v > @cutoff")`, `df.eval`)."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _TEXT_EVAL
        for n in nodes
    )


def _names(tree: ast.AST, context: type[ast.expr_context]) -> set[str]:
    """The names `tree` uses in `context` (`ast.Load`: reads, `ast.Del`: `del x`)."""
    return _names_in(ast.walk(tree), context)


def _names_in(nodes: Iterable[ast.AST], context: type[ast.expr_context]) -> set[str]:
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, context)}


def offered(cell: Cell, namespace: Mapping[str, Any], asked: Iterable[str] = ()) -> dict[str, Any]:
    """The values to save of the names `cell` bound, whether or not a cell reads them now
    (a cell added later may): not the ones its definitions make again on skip, nor the
    ones `asked` for by name (`--out`)."""
    skip = set(asked) | _THROWAWAY | (cell.defined - cell.others)
    return {n: namespace[n] for n in cell.binds if n not in skip and n in namespace}


def touched(
    cell: Cell,
    namespace: Mapping[str, Any],
    kept: Collection[str],
    *,
    bound: bool = False,
) -> dict[str, Any]:
    """The values earlier steps saved (`kept`) that `cell` may have changed in place
    (`rows.append(x)`, or a function of the notebook it called): saved again when they
    differ from what was saved. `bound`: those it binds
    and reads too (`prices *= 2`, `df = df.dropna()`), as a failed attempt may have
    left them."""
    reads = cell.reads
    if reads is None or any(calls_notebook_code(namespace.get(n)) for n in reads):
        names: Iterable[str] = kept
    else:
        names = [n for n in reads if n in kept]
    return {
        n: namespace[n]
        for n in names
        if n in namespace
        and (n not in cell.binds or (bound and (reads is None or n in reads)))
        and (not isinstance(namespace[n], _DEFINED) or _holds_state(namespace[n]))
    }


def _holds_state(value: Any) -> bool:
    """A function with a closure (`counter = make()`): calling it may change what its
    closure holds (`nonlocal n; n += 1`), as a method changes its object."""
    return isinstance(value, types.FunctionType) and bool(value.__closure__)


def calls_notebook_code(value: Any) -> bool:
    """A function, method or class the notebook defined: calling it may change any
    value it reaches."""
    value = getattr(value, "__func__", value)
    return isinstance(value, (types.FunctionType, type)) and value.__module__ == "__main__"


def _read_in_functions(nodes: list[ast.AST]) -> set[str]:
    """The names read inside the functions (and lambdas) among a tree's `nodes`: globals
    they read when called."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    scopes = [node for node in nodes if isinstance(node, functions)]
    return set().union(*(_names(scope, ast.Load) for scope in scopes))


_OURS = frozenset({"load_ext", "resume", "decide", "unknown", "finish"})


def without_our_magics(source: str) -> str:
    """A cell without stepstone's own line magics: they read no kernel name (IPython
    syntax left in makes the cell one that may read any)."""
    return "\n".join(
        "" if line.startswith("%") and line[1:].split(" ", 1)[0] in _OURS else line
        for line in source.splitlines()
    )


Compiler = Callable[[ast.Module, str], CodeType]  # as the kernel compiles a cell


def remake(cell: Cell, namespace: dict[str, Any], step: str, compiler: Compiler) -> list[str]:
    """Run `cell`'s top-level imports, defs and classes again in `namespace` (compiled
    by `compiler`, as the cell itself is); the names they bound. Raises
    `StepstoneError` saying how to go on when one fails."""
    if not cell.definitions.body:
        return []
    try:
        exec(compiler(cell.definitions, f"<step {step}: definitions>"), namespace)
    except Exception as exc:
        raise StepstoneError(
            f"step {step!r} is verified and was skipped, but its imports, functions and "
            f"classes could not be made again ({type(exc).__name__}: {exc}). Fix what they "
            f"need (a module to install, a name an earlier cell defines), or run the step "
            f"again: `stepstone rerun {step} --why REASON` (or %%step {step} --rerun 'REASON')"
        ) from exc
    return sorted(cell.defined)


def define_first(cell: Cell, namespace: dict[str, Any], compiler: Compiler) -> bool:
    """Run `cell`'s definitions before its saved values load: a pickled value may name
    a function or class the cell defines (`ops = {"add": add}`, an instance). Whether
    they ran; a failure is left to `remake`, after the values are back."""
    try:
        exec(compiler(cell.definitions, "<definitions>"), namespace)
    except Exception:
        return False
    return True


def living_globals(values: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    """`values` with each function the notebook made by a call (a closure, a lambda,
    saved by value) reading the notebook's globals again, as it did when it was made:
    saved by value, it kept a copy of the globals it read."""
    home = namespace.get("__name__", "__main__")
    given = {}
    for name, value in values.items():
        if (
            isinstance(value, types.FunctionType)
            and value.__module__ == home
            and value.__globals__ is not namespace
        ):
            living = types.FunctionType(
                value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
            )
            living.__kwdefaults__ = value.__kwdefaults__
            living.__qualname__, living.__doc__ = value.__qualname__, value.__doc__
            living.__dict__.update(value.__dict__)
            value = living
        given[name] = value
    return given


class Unrestored:
    """The names skipped steps could not give back (`unsaved` in their records), until
    a cell that runs binds them again."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}  # name -> (step, type)

    def skipped(self, step: str, unsaved: Mapping[str, str], unread: Iterable[str] = ()) -> None:
        """Step `step` was skipped; `unsaved` (name -> type) did not come back, nor did
        `unread`, names it bound that no later cell read when it ran."""
        self.names.update({name: (step, "") for name in unread})
        self.names.update({name: (step, kind) for name, kind in unsaved.items()})

    def bound(self, names: Iterable[str]) -> None:
        """A cell that ran bound `names` again."""
        for name in names:
            self.names.pop(name, None)

    def hint(self, name: str) -> str | None:
        """Why `name` is not defined, when a skipped step made it; else None."""
        if name not in self.names:
            return None
        step, kind = self.names[name]
        if kind == UNTRUSTED:
            return (
                f"{name!r} was made by step {step!r}, which was skipped on resume; its saved "
                f"value is a pickle written by someone else, and loading a pickle runs its "
                f"code. If you trust who wrote this store, run `stepstone trust` (once) and "
                f"run the notebook again"
            )
        why = (
            f"its value ({kind}) cannot be saved. Re-create it in the step that uses it (or "
            f"in a plain cell before it, which always runs)"
            if kind
            else "it was not saved, as no later cell read it when the step ran. Make it "
            "again in a plain cell"
        )
        return (
            f"{name!r} was made by step {step!r}, which was skipped on resume, and {why}; "
            f"or run {step!r} again: `stepstone rerun {step} --why REASON` (or %%step "
            f"{step} --rerun 'REASON' in its cell), which repeats what it does outside "
            f"stepstone.effect"
        )


def fingerprint(value: Any) -> str | None:
    """A fast hash of a NumPy array's or a pandas object's content, to tell whether a
    step changed it in place without saving it again; None for other values (they are
    encoded to tell) and for frames pandas cannot hash."""
    cls = type(value)
    module = cls.__module__.split(".")[0]
    try:
        if module == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
            return bigvalues.npy_sha256(value)  # the sha256 of the array saved as `.npy`
        if module == "pandas" and cls.__name__ in ("DataFrame", "Series"):
            import pandas as pd

            index = value.index
            shape = (
                getattr(value, "columns", None),
                getattr(value, "name", None),
                list(value.dtypes) if cls.__name__ == "DataFrame" else value.dtype,
                value.attrs,
                value.flags.allows_duplicate_labels,
                type(index),
                index.names,
                getattr(index, "freq", None),
            )
            digest = hashlib.sha256(pickle.dumps(shape))
            if type(index) is pd.RangeIndex:
                digest.update(repr((index.start, index.stop, index.step)).encode())
            else:
                _hash_into(digest, index)
            columns = [value] if cls.__name__ == "Series" else [c for _, c in value.items()]
            for column in columns:
                _hash_into(digest, column)
            return digest.hexdigest()
    except (TypeError, ValueError, pickle.PicklingError):
        return None
    return None


def _hash_into(digest: Any, values: Any) -> None:
    """Add a column's or an index's content to `digest`: its memory as it is, without a
    copy, where its array keeps it in buffers (NumPy, Arrow, masked, categorical);
    else pandas' own hash of its values."""
    import pandas as pd

    if isinstance(values, pd.MultiIndex):
        for level in values.levels:
            _hash_into(digest, level)
        for codes in values.codes:
            _hash_into(digest, codes)
        return
    parts = _buffers(getattr(values, "array", values))
    if parts is None:
        digest.update(pd.util.hash_pandas_object(values, index=False).to_numpy().tobytes())
        return
    for part in parts:
        digest.update(part)


def _buffers(array: Any) -> list[Any] | None:
    """The memory that holds `array`'s values, in pieces; None when it has no such."""
    import numpy as np

    if isinstance(array, np.ndarray):
        if array.dtype.hasobject:
            return None
        flat = np.ascontiguousarray(array).reshape(-1)
        return [repr((array.dtype.str, array.shape)).encode(), flat.view(np.uint8).data]
    inner = getattr(array, "_pa_array", None)  # an Arrow-backed column
    if inner is not None:
        parts: list[Any] = []
        for chunk in inner.chunks:
            parts.append(repr((chunk.offset, len(chunk), str(chunk.type))).encode())
            arrays = [chunk, chunk.dictionary] if hasattr(chunk, "dictionary") else [chunk]
            for each in arrays:
                parts += [memoryview(b) for b in each.buffers() if b is not None]
        return parts
    if hasattr(array, "_data") and hasattr(array, "_mask"):  # nullable numbers and bools
        return (_buffers(array._data) or []) + (_buffers(array._mask) or [])
    if hasattr(array, "codes") and hasattr(array, "categories"):  # a categorical
        codes = _buffers(np.asarray(array.codes))
        categories = _buffers(array.categories.array)
        return None if codes is None or categories is None else codes + categories
    ndarray = getattr(array, "_ndarray", None)  # datetimes (with a time zone), timedeltas
    if isinstance(ndarray, np.ndarray):
        return _buffers(ndarray)
    return None


class Seen:
    """The fingerprints of the large values the kernel holds as last saved or
    restored, by name: a step that read one and left it as it was saves nothing."""

    def __init__(self) -> None:
        self.prints: dict[str, str] = {}
        self._taken: dict[str, tuple[int, str | None]] = {}  # this step's, by id

    def saw(self, values: Mapping[str, Any], known: Mapping[str, str] | None = None) -> None:
        """`values` are as saved (or restored) now; `known` holds the fingerprints of
        those saved or restored as `.npy` (their sha256: no need to hash them again)."""
        for name, value in values.items():
            taken = self._taken.get(name)
            if known and name in known:
                found: str | None = known[name]
            elif taken and taken[0] == id(value):
                found = taken[1]
            else:
                found = fingerprint(value)
            if found is None:
                self.prints.pop(name, None)
            else:
                self.prints[name] = found
        self._taken = {}

    def maybe_changed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Those of `values` that may differ from when they were seen."""
        changed = {}
        for name, value in values.items():
            seen = self.prints.get(name)
            if seen is None:
                changed[name] = value
                continue
            now = fingerprint(value)
            self._taken[name] = (id(value), now)
            if now != seen:
                changed[name] = value
        return changed
