"""Tagged JSON: Python's own containers saved without pickle, so they load anywhere.

`tuple`, `set`, `frozenset`, `dict` (any keys), `OrderedDict`, `defaultdict` (of a
builtin factory), `Counter`, `bytes`, `complex` and non-finite floats, nested in one
another and in lists, as JSON objects tagged with `"$"`; and a generator that has run
to its end (`list(G)` consumed it), as one that yields nothing, by its name (a
generator part-way through cannot be saved: its frame is not data). Exact types only: a
subclass (a named tuple, say) is not encodable here and goes on to pickle. Loading
runs no code, so these values come back for a reader who does not trust the store.
"""

from __future__ import annotations

import base64
import json
import math
import types
from collections import Counter, OrderedDict, defaultdict
from typing import Any

FORMAT = "pyjson"
_FACTORIES: dict[str, type] = {
    t.__name__: t for t in (list, set, frozenset, dict, tuple, int, float, str, bytes)
}
_SCALARS = (type(None), bool, int, str)


def encodable(value: Any, depth: int = 0) -> bool:
    """Whether `value` is made only of the types tagged JSON keeps."""
    if depth > 200:
        return False
    kind = type(value)
    if kind in _SCALARS or kind in (float, bytes, complex):
        return True
    if kind in (list, tuple, set, frozenset):
        return all(encodable(item, depth + 1) for item in value)
    if kind is defaultdict and _factory_name(value) is None:
        return False
    if kind in (dict, OrderedDict, defaultdict, Counter):
        return all(encodable(k, depth + 1) and encodable(v, depth + 1) for k, v in value.items())
    return spent(value)


def spent(value: Any) -> bool:
    """Whether `value` is a generator that has run to its end."""
    return type(value) is types.GeneratorType and value.gi_frame is None


def _spent(name: str, qualname: str) -> Any:
    """A generator named `name` that has run to its end: it yields nothing."""
    nothing: tuple[Any, ...] = ()
    generator: Any = (item for item in nothing)
    generator.__name__, generator.__qualname__ = name, qualname
    next(generator, None)
    return generator


def _factory_name(value: defaultdict[Any, Any]) -> str | None:
    factory = value.default_factory
    if factory is None:
        return "None"
    name = getattr(factory, "__name__", "")
    return name if _FACTORIES.get(name) is factory else None


def dumps(value: Any) -> bytes:
    """`value` as tagged JSON."""
    return json.dumps(_tag(value), ensure_ascii=True, allow_nan=False).encode()


def _tag(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if kind is list:
        return [_tag(item) for item in value]
    if kind in (tuple, set, frozenset):
        return {"$": kind.__name__, "v": [_tag(item) for item in value]}
    if kind is bytes:
        return {"$": "bytes", "v": base64.b64encode(value).decode()}
    if kind is complex:
        return {"$": "complex", "v": [_tag(value.real), _tag(value.imag)]}
    if kind is types.GeneratorType:
        return {"$": "generator", "v": [value.__name__, value.__qualname__]}
    items = [[_tag(k), _tag(v)] for k, v in value.items()]
    if kind is defaultdict:
        return {"$": "defaultdict", "factory": _factory_name(value), "v": items}
    return {"$": kind.__name__, "v": items}


def loads(data: bytes) -> Any:
    """A value saved by `dumps`."""
    return _untag(json.loads(data))


def _untag(node: Any) -> Any:
    if isinstance(node, list):
        return [_untag(item) for item in node]
    if not isinstance(node, dict):
        return node
    tag, items = node["$"], node["v"]
    if tag == "float":
        return float(items)
    if tag == "bytes":
        return base64.b64decode(items)
    if tag == "complex":
        return complex(_untag(items[0]), _untag(items[1]))
    if tag == "generator":
        return _spent(str(items[0]), str(items[1]))
    if tag in ("tuple", "set", "frozenset"):
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](_untag(i) for i in items)
    pairs = [(_untag(k), _untag(v)) for k, v in items]
    if tag == "defaultdict":
        factory = node["factory"]
        return defaultdict(None if factory == "None" else _FACTORIES[factory], pairs)
    if tag == "Counter":
        return Counter(dict(pairs))
    return {"dict": dict, "OrderedDict": OrderedDict}[tag](pairs)
