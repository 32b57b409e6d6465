"""A plain frame read back from Parquet a few column chunks at a time, into the memory
the frame keeps: pandas' own reader holds Arrow's whole table and the frame at once
(2.4x the frame at its peak), this holds the frame and a bounded slice of one row group.

Plain is what `bigvalues.plainly_parquet` saves without a read-back: NumPy number and
bool columns with unique str names, a RangeIndex without a name, no attrs. The column
labels and dtypes are those pandas itself gives the file's schema (read from an empty
table of it), so pandas' version decides them, as it does for `read_parquet`. Anything
else, or a null where NumPy has none, means `None`: the caller reads the file the usual
way.
"""

from __future__ import annotations

import io
from typing import Any

BATCH_BYTES = 32 << 20  # the Arrow data one read of a row group's columns brings in


def read(source: Any) -> Any | None:
    """The plain frame in the seekable Parquet file `source`, or None if it is not one."""
    import numpy as np
    import pyarrow.parquet as pq

    file = pq.ParquetFile(source)
    shape = _plain_shape(file.schema_arrow)
    if shape is None or file.metadata.num_rows != len(shape[1]):
        return None
    template, rows = shape
    dtypes = list(template.dtypes)
    places: dict[Any, list[int]] = {}  # one block per dtype, as pandas consolidates them
    for position, dtype in enumerate(dtypes):
        places.setdefault(dtype, []).append(position)
    if len(places) > 1 and _from_blocks() is None:
        return None  # an older pandas: its own reader consolidates the blocks
    blocks = {dtype: np.empty((len(at), len(rows)), dtype) for dtype, at in places.items()}
    into: list[Any] = [None] * len(dtypes)
    for dtype, positions in places.items():
        for row, position in enumerate(positions):
            into[position] = blocks[dtype][row]
    names = list(template.columns)
    start = 0
    for group in range(file.num_row_groups):
        count = file.metadata.row_group(group).num_rows
        width = max(1, BATCH_BYTES // max(1, count * 8))
        for first in range(0, len(names), width):
            table = file.read_row_group(
                group, columns=names[first : first + width], use_pandas_metadata=False
            )
            for offset, column in enumerate(table.columns):
                target, at = into[first + offset], start
                for chunk in column.chunks:
                    if chunk.null_count and target.dtype.kind != "f":
                        return None  # NumPy has no null for it: pandas' reader decides
                    target[at : at + len(chunk)] = chunk.to_numpy(zero_copy_only=False)
                    at += len(chunk)
                if at != start + count:
                    return None
            del table
        start += count
    return _frame(template, rows, [(blocks[d], np.array(at)) for d, at in places.items()])


def _frame(template: Any, rows: range, blocks: list[tuple[Any, Any]]) -> Any:
    import pandas as pd

    index = pd.RangeIndex(rows.start, rows.stop, rows.step)
    if len(blocks) == 1:
        return pd.DataFrame(blocks[0][0].T, index=index, columns=template.columns, copy=False)
    make = _from_blocks()
    assert make is not None
    return make(blocks, index=index, columns=template.columns)


def _from_blocks() -> Any | None:
    """pandas' constructor of a frame from its blocks (pandas 3), or None."""
    try:
        from pandas.api.internals import create_dataframe_from_blocks
    except ImportError:
        return None
    return create_dataframe_from_blocks


def _plain_shape(schema: Any) -> tuple[Any, range] | None:
    """An empty frame as pandas reads `schema` (its columns and dtypes) and the index
    range of a plain frame's Parquet schema; None for any other."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = schema.pandas_metadata
    if not isinstance(meta, dict) or set(schema.metadata) != {b"pandas"}:
        return None
    indexes = meta.get("index_columns")
    if not (isinstance(indexes, list) and len(indexes) == 1 and isinstance(indexes[0], dict)):
        return None
    index = indexes[0]
    if index.get("kind") != "range" or index.get("name") is not None or meta.get("attributes"):
        return None
    start, stop, step = index.get("start"), index.get("stop"), index.get("step")
    if not (type(start) is int and type(stop) is int and type(step) is int) or step == 0:
        return None
    empty = io.BytesIO()
    pq.write_table(schema.empty_table(), empty)
    template = pd.read_parquet(io.BytesIO(empty.getvalue()))
    names = list(template.columns)
    if not names or names != schema.names or len(set(names)) != len(names) or template.attrs:
        return None
    for name, dtype in zip(names, template.dtypes, strict=True):
        plain = isinstance(dtype, np.dtype) and dtype.kind in "biuf" and dtype.isnative
        if not plain or dtype.itemsize > 8 or dtype == np.float16 or type(name) is not str:
            return None
        if schema.field(name).type != pa.from_numpy_dtype(dtype):
            return None
    return template, range(start, stop, step)
