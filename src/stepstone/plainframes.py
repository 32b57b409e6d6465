"""A plain frame read back from Parquet one column chunk at a time, into the memory the
frame keeps: pandas' own reader holds Arrow's whole table and the frame at once (2.4x
the frame at its peak), this holds the frame and one row group of one column.

Plain is what `bigvalues.plainly_parquet` saves without a read-back: NumPy number and
bool columns with unique str names, a RangeIndex without a name, no attrs. Anything
else in the file's pandas metadata, or a null where NumPy has none, means `None`: the
caller reads the file the usual way.
"""

from __future__ import annotations

from typing import Any


def read(source: Any) -> Any | None:
    """The plain frame in the seekable Parquet file `source`, or None if it is not one."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    file = pq.ParquetFile(source)
    shape = _plain_shape(file.schema_arrow)
    if shape is None:
        return None
    names, dtypes, rows = shape
    if file.metadata.num_rows != len(rows):
        return None
    single = len(set(dtypes)) == 1
    block = np.empty((len(names), len(rows)), dtype=dtypes[0]) if single else None
    columns: dict[str, Any] = {}
    for number, (name, dtype) in enumerate(zip(names, dtypes, strict=True)):
        into = block[number] if block is not None else np.empty(len(rows), dtype=dtype)
        at = 0
        for group in range(file.num_row_groups):
            chunked = file.read_row_group(group, columns=[name], use_pandas_metadata=False)
            for chunk in chunked.column(0).chunks:
                if chunk.null_count and dtype.kind != "f":
                    return None  # NumPy has no null for it: pandas' reader decides
                into[at : at + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
                at += len(chunk)
        if at != len(rows):
            return None
        columns[name] = into
    index = pd.RangeIndex(rows.start, rows.stop, rows.step)
    if block is not None:
        return pd.DataFrame(block.T, index=index, columns=pd.Index(names), copy=False)
    return pd.DataFrame(columns, index=index, copy=False)


def _plain_shape(schema: Any) -> tuple[list[str], list[Any], range] | None:
    """The column names, their NumPy dtypes and the index range of a plain frame's
    Parquet schema; None for any other."""
    import numpy as np
    import pyarrow as pa

    meta = schema.pandas_metadata
    if meta is None or set(schema.metadata) != {b"pandas"} or meta.get("attributes"):
        return None
    indexes, levels = meta.get("index_columns"), meta.get("column_indexes")
    if not (isinstance(indexes, list) and len(indexes) == 1 and isinstance(indexes[0], dict)):
        return None
    index = indexes[0]
    if index.get("kind") != "range" or index.get("name") is not None:
        return None
    if not (isinstance(levels, list) and len(levels) == 1):
        return None
    if levels[0].get("name") is not None or levels[0].get("pandas_type") != "unicode":
        return None
    names: list[str] = []
    dtypes: list[Any] = []
    for column in meta.get("columns", []):
        name = column.get("name")
        if not isinstance(name, str) or column.get("field_name") != name or column.get("metadata"):
            return None
        try:
            dtype = np.dtype(column.get("numpy_type"))
            field = schema.field(name)
        except (TypeError, KeyError):
            return None
        if dtype.kind not in "biuf" or dtype == np.float16:
            return None
        if field.type != pa.from_numpy_dtype(dtype):
            return None
        names.append(name)
        dtypes.append(dtype)
    if not names or len(set(names)) != len(names) or len(names) != len(schema.names):
        return None
    try:
        rows = range(index["start"], index["stop"], index["step"])
    except (KeyError, TypeError, ValueError):
        return None
    return names, dtypes, rows
