"""Saved output values: safe formats by type, pickle only as a documented fallback.

JSON for plain values, `.npy` (pickling disabled) for NumPy arrays, Parquet for
pandas DataFrames when pyarrow is present, and pickle for anything else. A
pickle runs code when loaded: it is loaded only from a store the user trusts
(one this user's driver wrote, or from a store this user trusts: see `trust`).
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
from typing import Any

from .errors import InvalidInput


def _is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return not (isinstance(value, float) and value != value)  # NaN does not round-trip
    if isinstance(value, list):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def encode(name: str, value: Any) -> tuple[str, bytes]:
    """Serialise `value` in the safest format its type allows: (format, bytes)."""
    if _is_plain(value):
        return "json", json.dumps(value, sort_keys=True).encode()
    module = type(value).__module__.split(".")[0]
    if module == "numpy" and type(value).__name__ == "ndarray" and value.dtype != object:
        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, value, allow_pickle=False)
        return "npy", buffer.getvalue()
    if module == "pandas" and type(value).__name__ == "DataFrame":
        try:
            buffer = io.BytesIO()
            value.to_parquet(buffer)
            return "parquet", buffer.getvalue()
        except Exception:
            pass
    try:
        return "pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        if name == "return":
            raise InvalidInput(
                f"the step's return value ({type(value).__name__}) cannot be saved: {exc}. "
                f"Return a plain value, an array or a DataFrame (or None, writing the "
                f"value to a file the step's check names)"
            ) from exc
        raise InvalidInput(
            f"output {name!r} ({type(value).__name__}) cannot be saved: {exc}. Drop it from "
            f"--out, or convert it to a plain value, an array or a DataFrame"
        ) from exc


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
    if fmt == "pickle":
        return pickle.loads(data)
    raise InvalidInput(f"unknown artifact format {fmt!r}")


def sha256(data: bytes) -> str:
    """The sha256 hex digest of `data`."""
    return hashlib.sha256(data).hexdigest()


def path_for(digest: str, fmt: str) -> str:
    """Where an artifact lives in a run's tree."""
    return f"artifacts/{digest[:2]}/{digest}.{fmt}"
