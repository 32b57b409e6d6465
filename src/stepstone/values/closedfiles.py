"""A file object its cell has closed (`with open(p) as f` leaves `f`), saved as what it
says of itself (its type, name, mode and encoding) and given back closed: a later cell
reads `f.name` or `f.closed` as in an uninterrupted run. Loading it opens no file of the
user's (the object is made over `os.devnull`, closed at once) and runs no code."""

from __future__ import annotations

import io
import json
import os
from typing import Any

FORMAT = "closedfile"
_TYPES: dict[str, Any] = {
    cls.__name__: cls
    for cls in (
        io.TextIOWrapper,
        io.BufferedReader,
        io.BufferedWriter,
        io.BufferedRandom,
        io.FileIO,
    )
}


def describe(value: Any) -> dict[str, Any] | None:
    """What a closed file object says of itself; None for anything else."""
    cls = type(value)
    if _TYPES.get(cls.__name__) is not cls or not value.closed:
        return None
    try:
        name = value.name
        mode = value.mode
    except (AttributeError, ValueError):
        return None
    if not isinstance(name, str) or not isinstance(mode, str):
        return None
    said: dict[str, Any] = {"type": cls.__name__, "name": name, "mode": mode}
    if cls is io.TextIOWrapper:
        said["encoding"], said["errors"] = value.encoding, value.errors
    return said


def dumps(value: Any) -> bytes:
    said = describe(value)
    if said is None:
        raise ValueError("not a closed file")
    return json.dumps(said, sort_keys=True).encode()


def loads(data: bytes) -> Any:
    """The closed file object `data` describes."""
    said = json.loads(data)
    cls = _TYPES[said["type"]]
    text = cls is io.TextIOWrapper
    raw_mode = "r" if text else said["mode"].replace("b", "").replace("x", "w") or "r"
    raw = io.FileIO(os.devnull, raw_mode)
    raw.name = said["name"]
    made: Any = raw
    if text:
        made = io.TextIOWrapper(
            io.BufferedReader(raw), encoding=said["encoding"], errors=said["errors"]
        )
        made.mode = said["mode"]
    elif cls is not io.FileIO:
        made = cls(raw)
    made.close()
    return made
