"""What a kernel's user names hold, as JSON, to compare two runs of one notebook.

Imported inside the kernel by the last cell of a notebook that
`benchmarks/kernel_corpus.py` runs: `_describe.write(globals(), "final.json")`. Each
name becomes its type and a description of its content (values, shape, dtypes, index
names, attributes), and the pairs of names that share a mutable object are listed, so
that a resumed run whose names are equal but no longer shared is told apart.
"""

from __future__ import annotations

import hashlib
import json
import re
import types
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SKIP = {"In", "Out", "get_ipython", "exit", "quit", "open"}
_EMPTY = object()
_LIMIT = 2000  # items of a container described one by one; past it, hashed


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _type(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(value: Any, depth: int = 0) -> Any:
    """A JSON description of `value` that two equal values share."""
    if depth > 6:
        return ["deep", _type(value)]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, complex)):
        return [_type(value), repr(value)]
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if isinstance(value, type):
        return ["class", value.__module__, value.__qualname__]
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return _function(value, depth)
    if isinstance(value, (types.GeneratorType, types.CoroutineType)):
        return ["generator", value.__qualname__]
    module = type(value).__module__.split(".")[0]
    if module == "numpy":
        return _numpy(value, depth)
    if module == "pandas":
        return _pandas(value, depth)
    if module == "matplotlib":
        return ["matplotlib", _type(value)]
    if isinstance(value, dict):
        items = [[describe(k, depth + 1), describe(v, depth + 1)] for k, v in value.items()]
        extra = getattr(value, "default_factory", None)
        return [_type(value), _limited(items), describe(extra, depth + 1)]
    if isinstance(value, (list, tuple)):
        return [_type(value), _limited([describe(v, depth + 1) for v in value])]
    if isinstance(value, (set, frozenset)):
        return [_type(value), _limited(sorted(json.dumps(describe(v, depth + 1)) for v in value))]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        state = {k: describe(v, depth + 1) for k, v in sorted(vars(value).items())}
        return [_type(value), state]
    try:
        text = repr(value)
    except Exception:
        text = ""
    return [_type(value), _ADDRESS.sub("", text)]


def _limited(items: list[Any]) -> Any:
    if len(items) <= _LIMIT:
        return items
    return ["hashed", len(items), _digest(json.dumps(items, default=str))]


def _function(value: Any, depth: int) -> Any:
    func = getattr(value, "__func__", value)
    code = func.__code__
    cells = [c.cell_contents for c in (func.__closure__ or ()) if _filled(c)]
    return [
        "function",
        func.__qualname__,
        _digest(code.co_code.hex() + repr(code.co_consts)),
        describe(func.__defaults__, depth + 1),
        [describe(c, depth + 1) for c in cells],
    ]


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not _EMPTY
    except ValueError:
        return False


def _numpy(value: Any, depth: int) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            content = describe(value.tolist(), depth + 1)
        else:
            content = _digest(np.ascontiguousarray(value).tobytes().hex())
        order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
        return ["ndarray", str(value.dtype), list(value.shape), order, content]
    if isinstance(value, np.generic):
        return [_type(value), repr(value)]
    state = getattr(getattr(value, "bit_generator", None), "state", None)
    if state is not None:
        return [_type(value), _digest(repr(state))]
    if isinstance(value, np.random.RandomState):
        return [_type(value), _digest(repr(value.get_state()))]
    return [_type(value), _ADDRESS.sub("", repr(value))]


def _pandas(value: Any, depth: int) -> Any:
    import pandas as pd

    if isinstance(value, (pd.DataFrame, pd.Series, pd.Index)):
        kind = _type(value)
        index = value if isinstance(value, pd.Index) else value.index
        shape = [
            kind,
            list(value.shape),
            [str(d) for d in value.dtypes] if isinstance(value, pd.DataFrame) else str(value.dtype),
            [str(n) for n in index.names],
            _type(index),
            str(getattr(index, "freq", None)),
            describe(getattr(value, "name", None), depth + 1),
            describe(getattr(value, "attrs", {}), depth + 1),
        ]
        if isinstance(value, pd.DataFrame):
            shape.append(describe(list(value.columns), depth + 1))
            shape.append([str(n) for n in value.columns.names])
        try:
            with pd.option_context("display.max_rows", 10**6, "display.max_columns", 10**4):
                whole = isinstance(value, pd.Index)
                text = repr(value.tolist()) if whole else value.to_string()
        except Exception:
            text = repr(value)
        shape.append(_digest(text))
        return shape
    return [_type(value), _ADDRESS.sub("", repr(value))]


def _reach(value: Any, depth: int = 0, found: set[int] | None = None) -> set[int]:
    """The ids of the mutable objects `value` holds, a few levels down: shared ones make
    two names one value."""
    found = set() if found is None else found
    if (
        depth > 3
        or value is None
        or isinstance(
            value, (bool, int, float, str, bytes, type, types.ModuleType, types.FunctionType)
        )
    ):
        return found
    module = type(value).__module__.split(".")[0]
    if module == "numpy" and type(value).__name__ == "ndarray":
        found.add(id(_memory(value)))
        return found
    if id(value) in found:
        return found
    if not isinstance(value, (tuple, frozenset)):  # an immutable holder's identity is not
        found.add(id(value))  # observable but by `is`: what it holds may be
    if module == "pandas":
        for part in ("index", "columns"):
            inner = getattr(value, part, None)
            if inner is not None and inner is not value:
                found.add(id(inner))
        return found
    if isinstance(value, dict):
        for v in list(value.values())[:_LIMIT]:
            _reach(v, depth + 1, found)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in list(value)[:_LIMIT]:
            _reach(v, depth + 1, found)
    elif hasattr(value, "__dict__"):
        for v in list(vars(value).values())[:_LIMIT]:
            _reach(v, depth + 1, found)
    return found


def _memory(array: Any) -> Any:
    """The object that owns an array's memory."""
    for _ in range(100):
        if type(array).__name__ in ("ndarray", "DummyArray"):
            nxt = getattr(array, "base", None)
        elif isinstance(array, memoryview):
            nxt = array.obj
        else:
            nxt = None
        if nxt is None:
            break
        array = nxt
    return array


def names(namespace: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_") and k not in _SKIP and not isinstance(v, types.ModuleType)
    }


def write(namespace: dict[str, Any], path: str) -> None:
    """Describe the user names of `namespace` into the JSON file `path`."""
    user = names(namespace)
    described = {}
    for name, value in sorted(user.items()):
        try:
            described[name] = json.dumps(describe(value), default=str)
        except Exception as exc:  # a value that cannot be described is said to be so
            described[name] = json.dumps(["undescribable", _type(value), type(exc).__name__])
    reached = {name: _reach(value) for name, value in user.items()}
    shared = sorted([a, b] for a in reached for b in reached if a < b and reached[a] & reached[b])
    with open(path, "w") as file:
        json.dump({"names": described, "shared": shared}, file, indent=1, sort_keys=True)
