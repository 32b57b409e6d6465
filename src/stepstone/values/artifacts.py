"""Saved values, exact: safe formats by type, pickle only as a documented fallback.

JSON for plain values (exact `dict`, `list`, `str`, `int`, `float`, `bool`, `None`:
they come back with the same types and key order), `.npy` (pickling disabled) for
NumPy arrays, tagged JSON for Python's own containers (tuples, sets, `OrderedDict`,
`defaultdict`, `Counter`, dicts with other keys, bytes: see `tagged`), Parquet for
pandas DataFrames that come back equal from it, a module's name for a module, and
pickle for anything else. Every format but JSON and `.npy` is
checked at save time: the value must come back of the same type and equal, else the
next format is tried and then the value is refused (`Unsaveable`). A pickle (or an
import) runs code when loaded: it is loaded only from a store the user trusts (one
this user's driver wrote, or a store this user trusts: see `trust`).
"""

from __future__ import annotations

import copyreg
import hashlib
import importlib
import io
import json
import pickle
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InvalidInput
from . import closedfiles, tagged

_PLAIN = (type(None), bool, int, float, str)
RUNS_CODE = frozenset({"pickle", "module"})  # formats whose loading runs code: trust first


class Unsaveable(InvalidInput):
    """A value that no format brings back exact (an open file, a lock, a generator)."""

    def __init__(self, name: str, value: Any, why: str) -> None:
        self.name = name
        self.kind = kind_of(value)
        self.why = why
        super().__init__(f"{name!r} ({self.kind}) cannot be saved: {why}")


def kind_of(value: Any) -> str:
    """A value's type as people write it: `sqlite3.Connection`, `dict`."""
    cls = type(value)
    module, name = cls.__module__, cls.__qualname__
    return name if module in ("builtins", "__main__") else f"{module}.{name}"


def _is_plain(value: Any) -> bool:
    kind = type(value)
    if kind in _PLAIN:
        return not (kind is float and value != value)  # NaN != NaN: keep it exact via pickle
    if kind is list:
        return all(_is_plain(item) for item in value)
    if kind is dict:
        return all(type(k) is str and _is_plain(v) for k, v in value.items())
    return False


def encode(name: str, value: Any) -> tuple[str, bytes]:
    """Serialise `value` in the safest format that brings it back exact: (format,
    bytes). Raises `Unsaveable` when none does."""
    why = "no format brings it back of the same type and equal"
    for fmt, write in _candidates(value):
        try:
            data = write(value)
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            continue
        if fmt in ("json", "npy", closedfiles.FORMAT) or _comes_back(fmt, data, value, write):
            return fmt, data
        why = f"it does not come back equal from {fmt}"
    raise Unsaveable(name, value, why)


def encoded_as(fmt: str, value: Any) -> bytes | None:
    """`value` in format `fmt`, without the round-trip check (None when it does not
    go): to tell cheaply whether a value is still the one saved in that format."""
    for candidate, write in _candidates(value):
        if candidate == fmt:
            try:
                return write(value)
            except Exception:
                return None
    return None


def _candidates(value: Any) -> Iterator[tuple[str, Callable[[Any], bytes]]]:
    try:
        plain = _is_plain(value)
    except RecursionError:  # a cycle, or nesting deeper than JSON goes
        plain = False
    if plain:  # (pickle after it: an int too long for JSON, a lone surrogate)
        yield "json", lambda v: json.dumps(v).encode()
        yield "pickle", lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
        return
    if closedfiles.describe(value) is not None:
        yield closedfiles.FORMAT, closedfiles.dumps
        return
    if tagged.encodable(value):
        yield tagged.FORMAT, tagged.dumps
    cls = type(value)
    if isinstance(value, types.ModuleType):
        yield "module", lambda v: v.__name__.encode()
        return
    module = cls.__module__.split(".")[0]
    if module == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
        yield "npy", _npy
        return
    if module == "pandas" and cls.__name__ == "DataFrame":
        yield "parquet", _parquet
    yield "pickle", _by_name
    yield "pickle", _by_value


def _without_caches(obj: Any) -> Any:
    """How to pickle a value that keeps a cache pickle cannot take (NumPy's `vectorize`
    keeps the ufunc it made at its first call): without the cache, which it makes
    again; `NotImplemented` for every other value."""
    cls = type(obj)
    if cls.__name__ == "vectorize" and cls.__module__.split(".")[0] == "numpy":
        state = dict(obj.__dict__)
        state["_ufunc"] = {} if isinstance(state.get("_ufunc"), dict) else None
        return (copyreg.__newobj__, (cls,), state)  # type: ignore[attr-defined]
    return NotImplemented


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        return _without_caches(obj)


def _by_name(value: Any) -> bytes:
    """A plain pickle (functions and classes by name), caches left out."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _by_value(value: Any) -> bytes:
    """A pickle of what plain pickle refers to by name and cannot find again: closures,
    lambdas, functions and classes made by a call (cloudpickle; plain `pickle.loads`
    reads it, with cloudpickle importable)."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        def reducer_override(self, obj: Any) -> Any:
            found = _without_caches(obj)
            return super().reducer_override(obj) if found is NotImplemented else found

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def _npy(value: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def _parquet(value: Any) -> bytes:
    buffer = io.BytesIO()
    value.to_parquet(buffer)
    return buffer.getvalue()


def _comes_back(fmt: str, data: bytes, value: Any, write: Callable[[Any], bytes]) -> bool:
    """Whether `data` decodes to a value of `value`'s type that equals it (for a type
    with no `==` of its own, that `write` makes the same bytes of it again)."""
    try:
        back = decode(fmt, data)
    except Exception:
        return False
    if type(back) is not type(value):
        return False
    if fmt == "module":
        return back is value
    if fmt == "pickle" and _own_iterator(value):
        return True  # Python's own iterators pickle their position by design (zip, map...)
    try:
        if _equal(back, value):
            return True
    except Exception:  # RecursionError (a cycle), an `==` that cannot say (attrs of arrays)
        pass
    if fmt != "pickle":  # bytes made again say nothing of what a format dropped (freq)
        return False
    try:  # no __eq__ of its own, or one that cannot say: the same pickle again
        again = write(back)
        if again == data:
            return True
        plain = _unshared(value)
        if plain is not None:
            return plain == _unshared(back)
        # cyclic (a figure and its axes): what comes back pickles as its own copy does
        return write(decode(fmt, again)) == again
    except Exception:
        return False


def _unshared(value: Any) -> bytes | None:
    """A pickle that writes an object as often as it is met (no memo), or None for a
    value with cycles or one plain pickle cannot take. Two such pickles are equal
    whichever strings the unpickler interned: `b.fields = ["size"]` beside `b.size`
    shares one string in the kernel and not in what comes back."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    try:
        pickler.dump(value)
    except Exception:  # a cycle (ValueError, RecursionError), a lambda
        return None
    return buffer.getvalue()


def _equal(back: Any, value: Any) -> bool:
    """`back == value`, of the same types all the way down, for containers, arrays and
    frames too (whose `==` is not a truth value)."""
    if type(back) is not type(value):
        return False
    if type(value) is float and value != value:  # NaN
        return bool(back != back)
    if isinstance(value, dict):
        if getattr(value, "default_factory", None) != getattr(back, "default_factory", None):
            return False
        return list(back) == list(value) and all(_equal(back[k], value[k]) for k in value)
    if isinstance(value, (list, tuple)):
        return len(back) == len(value) and all(map(_equal, back, value))
    if tagged.spent(value):  # both yield nothing
        return tagged.spent(back) and back.__qualname__ == value.__qualname__
    cls = type(value)
    module = cls.__module__.split(".")[0]
    if module == "pandas" and cls.__name__ == "DataFrame":
        return _same_frame(back, value)
    if module == "pandas" and cls.__name__ == "Series":
        return (
            back.equals(value)
            and back.name == value.name
            and back.dtype == value.dtype
            and _equal(back.attrs, value.attrs)
            and _same_axis(back.index, value.index)
        )
    if module == "pandas" and cls.__name__.endswith("Index"):  # DatetimeIndex, MultiIndex...
        return _same_axis(back, value)  # (their `==` is elementwise; their pickle caches)
    if module == "pandas" and cls.__name__.endswith("GroupBy"):
        return _same_groupby(back, value)
    if module == "numpy" and cls.__name__ == "ndarray":
        import numpy as np

        return back.dtype == value.dtype and bool(np.array_equal(back, value))
    try:
        result = back == value
        return result is True or (type(result).__name__ == "bool_" and bool(result))
    except Exception:
        return False


same_value = _equal


def _same_axis(a: Any, b: Any) -> bool:
    return (
        type(a) is type(b)
        and a.equals(b)
        and a.names == b.names
        and a.dtype == b.dtype
        and getattr(a, "freq", None) == getattr(b, "freq", None)
    )


def _own_iterator(value: Any) -> bool:
    cls = type(value)
    return hasattr(value, "__next__") and cls.__module__ in ("builtins", "itertools")


_GROUPING = ("as_index", "sort", "group_keys", "observed", "dropna", "_selection", "level")


def _same_groupby(back: Any, value: Any) -> bool:
    """Two pandas groupings of equal data by the same keys, into the same groups."""
    return (
        _equal(back.obj, value.obj)
        and all(getattr(back, a, None) == getattr(value, a, None) for a in _GROUPING)
        and repr(back.keys) == repr(value.keys)
        and _equal(back.ngroup(), value.ngroup())
    )


def _same_frame(back: Any, value: Any) -> bool:
    return (
        back.equals(value)
        and _same_axis(back.index, value.index)
        and _same_axis(back.columns, value.columns)
        and back.dtypes.equals(value.dtypes)
        and back.flags.allows_duplicate_labels == value.flags.allows_duplicate_labels
        and _equal(back.attrs, value.attrs)
    )


def decode(fmt: str, data: bytes) -> Any:
    """Load a value saved by `encode` (the caller has verified the hash)."""
    if fmt == "json":
        return json.loads(data)
    if fmt == "npy":
        import numpy as np

        return np.load(io.BytesIO(data), allow_pickle=False)
    if fmt == "parquet":
        import pandas as pd

        return pd.read_parquet(io.BytesIO(data))
    if fmt == tagged.FORMAT:
        return tagged.loads(data)
    if fmt == closedfiles.FORMAT:
        return closedfiles.loads(data)
    if fmt == "pickle":
        return _unpickled(data)
    if fmt == "module":
        return importlib.import_module(data.decode())
    raise InvalidInput(f"unknown artifact format {fmt!r}")


def _unpickled(data: bytes) -> Any:
    """`pickle.loads`, without the figures it registers with pyplot: the inline backend
    would draw each again at the end of the cell (a figure is shown and let go of by
    the cell that drew it)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    before = set(pyplot.get_fignums()) if pyplot is not None else set()
    try:
        return pickle.loads(data)
    finally:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            for number in set(pyplot.get_fignums()) - before:
                pyplot.close(number)


def sha256(data: bytes) -> str:
    """The sha256 hex digest of `data`."""
    return hashlib.sha256(data).hexdigest()


def path_for(digest: str, fmt: str) -> str:
    """Where an artifact lives in a run's tree."""
    return f"artifacts/{digest[:2]}/{digest}.{fmt}"
