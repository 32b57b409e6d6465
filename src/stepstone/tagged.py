"""`stepstone.tagged`, as the load hint of `stepstone outputs` (and `show`) spells it:
tagged JSON lives in `values/tagged.py`."""

from .values.tagged import FORMAT, dumps, encodable, loads

__all__ = ["FORMAT", "dumps", "encodable", "loads"]
