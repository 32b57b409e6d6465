"""A frame saved as Arrow IPC (the Feather v2 file, uncompressed) when the round trip
is proven exact without reading it back, and read back a column at a time.

Proven exact: every column and index level has a dtype whose values Arrow carries
as they are (NumPy numbers, bools and datetimes; pandas' strings, categoricals,
nullable numbers, time-zoned datetimes, Arrow-backed dtypes), the column labels
are unique strings, `attrs` are plain JSON, and the frame's first row, written and
read back by this very code, equals itself (dtypes, categories, index names and
type, column index, attrs: what a schema decides). The values of the other rows go
through the same per-dtype conversion (`tests/test_big_values.py` checks that by
hypothesis). Anything else: `table_of` says None and the caller uses Parquet with a
read-back.

Reading opens the file once per field (`included_fields`) and takes it a batch at a
time: NumPy columns are copied into the blocks the frame keeps, other columns' chunks
copied out of the batch body Arrow reads them into (a buffer as large as the whole
batch), so a string column kept by the restored frame holds no other column's bytes.
Peak memory is the frame plus about one batch.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from . import artifacts

FORMAT = "arrow"
BATCH_BYTES = 2 << 20  # the most one record batch holds (and a read holds at once)
_META = b"stepstone"  # schema metadata: {"rows": n, "attrs": {...}, "freq": "D" | None}

Write = Callable[[bytes], Any]


def table_of(frame: Any) -> Any | None:
    """The Arrow table `frame` is saved as, or None when its round trip is not proven
    exact by its schema."""
    import pandas as pd

    if type(frame) is not pd.DataFrame or not _plain_shape(frame):
        return None
    try:
        table = _table(frame)
        head = _table(frame.iloc[:1])
        if table is None or head is None:
            return None
        if not head.schema.equals(table.schema, check_metadata=False):
            return None
        back = read(io.BytesIO(encode(head)))
    except Exception:  # Arrow cannot hold it, or not as it is: not proven
        return None
    return table if artifacts.same_value(back, frame.iloc[:1]) else None


def _plain_shape(frame: Any) -> bool:
    import pandas as pd

    columns = frame.columns
    return (
        type(columns) is pd.Index
        and columns.is_unique
        and all(type(name) is str for name in columns)
        and frame.flags.allows_duplicate_labels
        and all(map(_carried, frame.dtypes))
        and all(_carried(level.dtype) for level in _levels(frame.index))
    )


def _levels(index: Any) -> list[Any]:
    import pandas as pd

    return list(index.levels) if isinstance(index, pd.MultiIndex) else [index]


def _carried(dtype: Any) -> bool:
    """Whether Arrow carries every value of `dtype` as it is."""
    import numpy as np
    import pandas as pd

    if isinstance(dtype, np.dtype):
        if dtype.kind in "biu" or dtype in (np.float32, np.float64):
            return dtype.isnative
        return dtype.kind in "Mm" and np.datetime_data(dtype)[0] in ("s", "ms", "us", "ns")
    if isinstance(dtype, pd.CategoricalDtype):
        return _carried(dtype.categories.dtype)
    return isinstance(
        dtype,
        (
            pd.StringDtype,
            pd.DatetimeTZDtype,
            pd.ArrowDtype,
            pd.BooleanDtype,
            pd.Int8Dtype,
            pd.Int16Dtype,
            pd.Int32Dtype,
            pd.Int64Dtype,
            pd.UInt8Dtype,
            pd.UInt16Dtype,
            pd.UInt32Dtype,
            pd.UInt64Dtype,
            pd.Float32Dtype,
            pd.Float64Dtype,
        ),
    )


def _table(frame: Any) -> Any | None:
    import pyarrow as pa

    attrs = frame.attrs
    if attrs:
        try:
            plain = json.loads(json.dumps(attrs))
        except (TypeError, ValueError):
            return None
        if not artifacts.same_value(plain, attrs):
            return None
    table = pa.Table.from_pandas(frame, preserve_index=None)
    freq = getattr(frame.index, "freq", None)  # a DatetimeIndex's, which Arrow drops
    mine = {"rows": len(frame), "attrs": attrs, "freq": None if freq is None else freq.freqstr}
    extra = json.dumps(mine).encode()  # attrs in their own order
    return table.replace_schema_metadata({**(table.schema.metadata or {}), _META: extra})


def _batches(table: Any) -> list[Any]:
    import pyarrow as pa

    rows = max(1, BATCH_BYTES * table.num_rows // max(1, table.nbytes))
    batches = list(table.to_batches(max_chunksize=rows))
    if not batches:  # no rows: one empty batch still carries the categories
        columns = [column.combine_chunks() for column in table.columns]
        batches = [pa.record_batch(columns, schema=table.schema)]
    return batches


def size(table: Any) -> int:
    """How many bytes `write` writes of `table`."""
    import pyarrow as pa

    mock = pa.MockOutputStream()
    _write_to(table, mock)
    return int(mock.size())


def write(table: Any, out: Write) -> None:
    """Write `table` as an Arrow IPC file, in pieces, to `out`."""
    import pyarrow as pa

    _write_to(table, pa.PythonFile(_Out(out), mode="w"))


def encode(table: Any) -> bytes:
    """The bytes `write` writes of `table`."""
    import pyarrow as pa

    buffer = pa.BufferOutputStream()
    _write_to(table, buffer)
    return bytes(buffer.getvalue())


def _write_to(table: Any, sink: Any) -> None:
    import pyarrow as pa

    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in _batches(table):
            writer.write_batch(batch)


class _Out:
    """What pyarrow's PythonFile writes to: hands each piece to a function."""

    closed = False

    def __init__(self, out: Write) -> None:
        self._out = out

    def write(self, data: bytes) -> int:
        self._out(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _In:
    """What pyarrow's PythonFile reads from: each read a buffer of Arrow's own pool,
    filled in place (memory Python's allocator freed would not serve Arrow's next)."""

    closed = False

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def read(self, size: int = -1) -> Any:
        import pyarrow as pa

        if size is None or size < 0:
            return bytes(self._raw.read())
        buffer = pa.allocate_buffer(size, memory_pool=_pool())
        view, got = memoryview(buffer), 0
        while got < size:
            count = self._raw.readinto(view[got:])
            if not count:
                break
            got += count
        return buffer if got == size else buffer.slice(0, got)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self._raw.tell())

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def read(source: Any) -> Any:
    """The frame in the seekable Arrow IPC file `source` (as `write` wrote it)."""
    import pyarrow as pa

    default = pa.default_memory_pool()
    pa.set_memory_pool(_pool())  # the reader allocates batch bodies in the default pool
    try:
        return _read(source)
    finally:
        pa.set_memory_pool(default)


def _read(source: Any) -> Any:
    import pyarrow as pa

    file = pa.PythonFile(_In(source), mode="r")
    schema = pa.ipc.open_file(file).schema
    meta = schema.pandas_metadata
    mine = json.loads(schema.metadata[_META])
    rows, attrs = int(mine["rows"]), mine["attrs"]
    template = schema.empty_table().to_pandas()
    fields = _column_fields(schema)
    if len(fields) != len(template.columns):
        raise ValueError("the file's fields are not its frame's columns")

    def chunks(name: str) -> Any:
        field = schema.get_field_index(name)
        options = pa.ipc.IpcReadOptions(included_fields=[field], use_threads=False)
        each = pa.ipc.open_file(file, options=options, memory_pool=_pool())
        for number in range(each.num_record_batches):
            yield each.get_batch(number).column(0)

    blocks = _Blocks(rows)
    for position, (name, dtype) in enumerate(zip(fields, template.dtypes, strict=True)):
        blocks.add(position, dtype, chunks(name), schema.field(name).type)
    index = _index(template.index, meta, rows, chunks, schema)
    if mine.get("freq") is not None:  # checked against the values, as pandas does
        index = type(index)(index, freq=mine["freq"], name=index.name)
    frame = blocks.frame(index, template.columns)
    frame.attrs = attrs
    return frame


def _pool() -> Any:
    """Where a read allocates: jemalloc told to give freed pages back at once (Arrow's
    default pool, mimalloc, and the system's malloc keep them a while, which at a big
    frame's restore is as much again as the frame); else the default pool."""
    import pyarrow as pa

    global _POOL
    if _POOL is None:
        try:
            _POOL = pa.jemalloc_memory_pool()
            pa.jemalloc_set_decay_ms(0)
        except (NotImplementedError, pa.ArrowNotImplementedError):
            _POOL = pa.default_memory_pool()
    return _POOL


_POOL: Any = None


def shape(source: Any) -> tuple[int, list[str]]:
    """The rows and column fields of the frame in the Arrow IPC file `source`, read
    from its schema alone."""
    import pyarrow as pa

    schema = pa.ipc.open_file(source).schema
    return int(json.loads(schema.metadata[_META])["rows"]), _column_fields(schema)


def _column_fields(schema: Any) -> list[str]:
    """The fields of `schema` that hold columns (the others hold the index)."""
    stored = [c for c in schema.pandas_metadata["index_columns"] if isinstance(c, str)]
    return [name for name in schema.names if name not in stored]


def _index(template: Any, meta: dict[str, Any], rows: int, chunks: Any, schema: Any) -> Any:
    import pandas as pd

    kept = meta["index_columns"]
    if len(kept) == 1 and isinstance(kept[0], dict):
        spec = kept[0]
        if spec.get("kind") != "range":
            raise ValueError(f"an index of kind {spec.get('kind')!r} is not read here")
        index = pd.RangeIndex(spec["start"], spec["stop"], spec["step"], name=spec.get("name"))
        if len(index) != rows:
            raise ValueError("the file's index is not as long as its rows")
        return index
    levels = _levels(template)
    arrays = [
        _column(level.dtype, chunks(name), rows, schema.field(name).type)
        for level, name in zip(levels, kept, strict=True)
    ]
    if isinstance(template, pd.MultiIndex):
        return pd.MultiIndex.from_arrays(arrays, names=template.names)
    return pd.Index(arrays[0], name=template.name, dtype=template.dtype, copy=False)


def _column(dtype: Any, chunks: Any, rows: int, kind: Any) -> Any:
    """The pandas array of `dtype` (as pandas reads the field) of the field's chunks."""
    import numpy as np
    import pyarrow as pa

    if isinstance(dtype, np.dtype):
        out = np.empty(rows, dtype)
        _fill(out, chunks)
        return out
    # each chunk copied out of the batch body Arrow read it into (sized for every field)
    whole = pa.chunked_array(
        [pa.concat_arrays([chunk], memory_pool=_pool()) for chunk in chunks], type=kind
    )
    convert = getattr(dtype, "__from_arrow__", None)
    if convert is not None:
        return convert(whole)
    return whole.to_pandas().array  # a categorical: its dictionary is its categories


def _fill(out: Any, chunks: Any) -> None:
    at = 0
    for chunk in chunks:
        values = chunk.to_numpy(zero_copy_only=False)
        out[at : at + len(values)] = values
        at += len(values)
        del values
    if at != len(out):
        raise ValueError("the file holds fewer rows than it says")


class _Blocks:
    """A frame's columns gathered as pandas keeps them: NumPy columns of one dtype in
    one 2-D block, each extension array a block of its own."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.numpy: dict[Any, list[tuple[int, Any]]] = {}
        self.other: list[tuple[int, Any]] = []

    def add(self, position: int, dtype: Any, chunks: Any, kind: Any) -> None:
        import numpy as np

        if isinstance(dtype, np.dtype):
            self.numpy.setdefault(dtype, []).append((position, chunks))
        else:
            self.other.append((position, _column(dtype, chunks, self.rows, kind)))

    def frame(self, index: Any, columns: Any) -> Any:
        import numpy as np
        import pandas as pd

        blocks: list[tuple[Any, Any]] = []
        for dtype, members in self.numpy.items():
            block = np.empty((len(members), self.rows), dtype)
            for row, (_, chunks) in enumerate(members):
                _fill(block[row], chunks)
            blocks.append((block, np.array([p for p, _ in members], dtype=np.intp)))
        blocks += [(array, np.array([p], dtype=np.intp)) for p, array in self.other]
        try:
            from pandas.api.internals import create_dataframe_from_blocks
        except ImportError:  # an older pandas: its constructor consolidates (a copy)
            by_position: dict[int, Any] = {}
            for array, places in blocks:
                for row, place in enumerate(places):
                    by_position[int(place)] = array[row] if array.ndim == 2 else array
            made = pd.DataFrame(
                {i: by_position[i] for i in range(len(columns))}, index=index, copy=False
            )
            made.columns = columns
            return made
        return create_dataframe_from_blocks(blocks, index=index, columns=columns)
