"""Names that share objects, as the running kernel has them: `view` a view of `arr`,
`pop_df` holding `pop`'s index, `by_id["r"]` the very list `rows` is.

Each name is saved on its own, so a skipped step would give such names back as
separate copies: equal, but no longer one object, and a later change through one no
longer shows in the other. When a step is confirmed, the sharing among the names it
may give back is found by walking what they hold (`Sharing`) and kept as links with its
record (plain JSON under `KEY`); a skipped step makes the links again (`relink`) once
its values are back. Names that share are also one value for what a step changed
(`Sharing.partners`): a change through `view` changes `arr`, which is saved again
with it.

What is walked: dicts, lists, tuples and sets, the attributes of instances of the
notebook's own classes, a frame's or Series' index and columns, and an array's memory
(a view is found by the array that owns the memory). Library objects are walked no
further than themselves: two names bound to one are found, their insides are not.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, Mapping, MutableMapping
from contextlib import suppress
from itertools import islice
from typing import Any

KEY = "shared"  # where a step's links are kept (its record's `kernel`)
WALK_LIMIT = 2000  # objects walked from one name; past it, its sharing is not looked for

Step = tuple[str, Any]  # ("item", key) | ("attr", name) | ("axis", "index"/"columns")
Place = tuple[str, tuple[Step, ...]]  # a name, and the steps from its value to the object

_ATOMS = (
    type(None), bool, int, float, complex, str, bytes, range, slice,
    type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
    types.MethodType, types.CodeType,
)  # fmt: skip
_KEYS = (str, int, bool, type(None))  # dict keys a link can name in JSON


def _memory(array: Any) -> Any:
    """The object that owns an array's memory (following bases)."""
    found = array
    while True:
        if type(found).__name__ == "ndarray" or type(found).__name__ == "DummyArray":
            nxt = getattr(found, "base", None)
        elif isinstance(found, memoryview):
            nxt = found.obj
        else:
            nxt = None
        if nxt is None:
            return found
        found = nxt


def _is_array(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "ndarray" and cls.__module__ == "numpy"


def _numpy_atom(value: Any) -> bool:
    """A NumPy scalar, dtype or ufunc: nothing to share."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.generic, np.dtype, np.ufunc))


def _is_pandas(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "pandas"


def _notebook_instance(value: Any) -> bool:
    cls = type(value)
    return (cls.__module__ == "__main__" and hasattr(value, "__dict__")) or isinstance(
        value, types.SimpleNamespace
    )


def walk(name: str, value: Any, found: dict[Any, list[Place]]) -> None:
    """Add to `found` (object key -> where it is) the mutable objects `value` holds,
    each with the first place it is met under `name`."""
    budget = WALK_LIMIT
    seen: set[int] = set()
    todo: list[tuple[Any, tuple[Step, ...]]] = [(value, ())]
    while todo and budget > 0:
        obj, path = todo.pop()
        budget -= 1
        if isinstance(obj, _ATOMS) or _numpy_atom(obj):
            continue
        if _is_array(obj):
            found.setdefault(("memory", id(_memory(obj))), []).append((name, path))
            continue
        held = not isinstance(obj, (tuple, frozenset))  # immutable holders need no identity
        if held:
            found.setdefault(("object", id(obj)), []).append((name, path))
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            items = islice(obj.items(), budget)
            todo += [(v, (*path, ("item", k))) for k, v in items if isinstance(k, _KEYS)]
        elif isinstance(obj, (list, tuple)):
            todo += [(v, (*path, ("item", i))) for i, v in enumerate(islice(obj, budget))]
        elif _is_pandas(obj) and hasattr(obj, "index") and not hasattr(obj, "levels"):
            todo.append((obj.index, (*path, ("axis", "index"))))
            if hasattr(obj, "columns"):
                todo.append((obj.columns, (*path, ("axis", "columns"))))
        elif _notebook_instance(obj):
            todo += [(v, (*path, ("attr", k))) for k, v in vars(obj).items()]


class Sharing:
    """What the names of `values` share with each other, found once."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        found: dict[Any, list[Place]] = {}
        for name, value in values.items():
            try:
                walk(name, value, found)
            except Exception:  # a value whose insides raise when read: not looked into
                continue
        self.places = {key: at for key, at in found.items() if len(at) > 1}

    def _groups(self) -> dict[str, set[str]]:
        groups: dict[str, set[str]] = {}
        for at in self.places.values():
            group = {name for name, _ in at}
            for name in list(group):
                group |= groups.get(name, set())
            for name in group:
                groups[name] = group
        return groups

    def partners(self, names: Iterable[str]) -> set[str]:
        """The names that share an object with one of `names`, transitively (`names`
        themselves left out)."""
        groups, wanted = self._groups(), set(names)
        return {n for w in wanted for n in groups.get(w, ())} - wanted

    def groups(self, names: Iterable[str]) -> list[set[str]]:
        """`names` with the names they share objects with, one set for each group of
        names that share."""
        groups, made, met = self._groups(), [], set()
        for name in sorted(set(names)):
            if name not in met:
                group = groups.get(name, {name})
                met |= group
                made.append(group)
        return made

    def links(self, given: Iterable[str]) -> list[dict[str, Any]]:
        """The links that make `given` (the names a skipped step gives back) share again
        what they share now, with each other and with the other names, as plain JSON."""
        given = set(given)
        values = self.values
        made: list[dict[str, Any]] = []
        for key, at in self.places.items():
            if not any(p[0] in given for p in at):
                continue
            if key[0] == "memory":
                with suppress(Exception):  # arrays that do not tell their memory: no link
                    made += _view_links(values, at, given)
                continue
            owner = min(at, key=lambda p: (p[0] in given, len(p[1]), p))
            for place in at:
                if place != owner and place[0] in given and _settable(values, place):
                    made.append({"to": _json(place), "from": _json(owner)})
        made.sort(key=lambda link: (len(link["from"][1]), link["to"]))
        return made


def _view_links(
    values: Mapping[str, Any], at: list[Place], given: set[str]
) -> list[dict[str, Any]]:
    """Links that make the arrays at `at`, which share memory, views of the one that
    holds all of their memory (none when no one does)."""
    import numpy as np

    bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None)
    bounds = bounds or np.byte_bounds  # type: ignore[attr-defined]  # NumPy 1
    arrays = {place: _resolve(values, place) for place in at}
    owners = [p for p, a in arrays.items() if a.flags.c_contiguous or a.flags.f_contiguous]
    owners.sort(key=lambda p: (p[0] in given, arrays[p].base is not None, len(p[1]), p))
    for owner in owners:
        low, high = bounds(arrays[owner])
        made = []
        for place, array in arrays.items():
            if place == owner or place[0] not in given or not _settable(values, place):
                continue
            start, end = bounds(array)
            if not (low <= start and end <= high):
                break
            made.append(
                {
                    "to": _json(place),
                    "from": _json(owner),
                    "view": {
                        "offset": array.__array_interface__["data"][0] - low,
                        "shape": list(array.shape),
                        "strides": list(array.strides),
                        "dtype": array.dtype.str,
                    },
                }
            )
        else:
            return made
    return []


def _settable(values: Mapping[str, Any], place: Place) -> bool:
    """Whether a link can put an object at `place`: the name itself, or a step into a
    dict, a list, a notebook instance's attribute or a pandas object's axis."""
    name, path = place
    if not path:
        return True
    try:
        parent = _resolve(values, (name, path[:-1]))
    except Exception:
        return False
    kind, _ = path[-1]
    if kind == "item":
        return isinstance(parent, (dict, list))
    if kind == "attr":
        return _notebook_instance(parent)
    return kind == "axis"


def _json(place: Place) -> list[Any]:
    name, path = place
    return [name, [list(step) for step in path]]


def _place(data: list[Any]) -> Place:
    name, path = data
    return name, tuple((kind, key) for kind, key in path)


def _step(obj: Any, step: Step) -> Any:
    kind, key = step
    if kind == "item":
        return obj[key]
    if kind == "attr":
        return vars(obj)[key]
    return getattr(obj, key)


def _resolve(values: Mapping[str, Any], place: Place) -> Any:
    name, path = place
    obj = values[name]
    for step in path:
        obj = _step(obj, step)
    return obj


def _put(namespace: MutableMapping[str, Any], place: Place, obj: Any) -> None:
    name, path = place
    if not path:
        namespace[name] = obj
        return
    parent = _resolve(namespace, (name, path[:-1]))
    kind, key = path[-1]
    if kind == "item":
        parent[key] = obj
    elif kind == "attr":
        vars(parent)[key] = obj
    else:
        setattr(parent, key, obj)


def relink(namespace: MutableMapping[str, Any], made: Iterable[dict[str, Any]]) -> list[str]:
    """Make the links `made` (from `links`) in `namespace`; the names of the links that
    could not be made (a name not given back, a value no longer of that shape)."""
    missed = []
    for link in made:
        to, source = _place(link["to"]), _place(link["from"])
        try:
            obj = _resolve(namespace, source)
            view = link.get("view")
            if view is not None:  # a view of an array: numpy made it, so numpy is here
                import numpy as np

                now = _resolve(namespace, to)
                obj = np.ndarray(
                    tuple(view["shape"]), np.dtype(view["dtype"]), buffer=obj,
                    offset=view["offset"], strides=tuple(view["strides"]),
                )  # fmt: skip
                if not np.array_equal(now, obj, equal_nan=now.dtype.kind in "fc"):
                    raise ValueError("not the same values")
            _put(namespace, to, obj)
        except Exception:
            missed.append(f"{to[0]} and {source[0]}")
    return missed
