"""Big values, saved streaming in their native format and loaded back the same way.

A NumPy array of `THRESHOLD` bytes or more is written as `.npy` straight from its
own memory (the header, then the array's buffer in `CHUNK`-sized views: no copy),
a pandas DataFrame as Arrow IPC when its schema proves the round trip exact
(`arrowframes`), else as Parquet through a scratch file beside the store's packs
(checked to come back equal, as every Parquet value is). Both go to a sink that
hashes while it writes (`store.bigblobs`). The bytes are exactly those the small
path (`artifacts.encode`) makes, so a value's sha256 does not depend on the path.
Loading reads the `.npy` buffer straight into a new array, Arrow IPC a column at a
time, and Parquet through a seekable file over the stored blob (a plain frame column
by column: `plainframes`).
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from . import arrowframes, artifacts, plainframes

THRESHOLD = 1 << 20  # values this big (in memory) take the streaming path
CHUNK = 16 << 20
FORMATS = frozenset({"npy", "parquet", arrowframes.FORMAT})


class Written(Protocol):
    @property
    def oid(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...


class Sink(Protocol):
    def write(self, chunk: bytes | memoryview) -> None: ...
    def close(self) -> Written: ...
    def abort(self) -> None: ...


class BigStore(Protocol):
    """Where big values go: a sink for a blob of a known size, and a scratch folder
    on the same file system for formats whose size is known only once written."""

    scratch_dir: str

    def sink(self, size: int) -> Sink: ...


def is_big(value: Any) -> bool:
    """Whether `value` is an array or a frame of `THRESHOLD` bytes or more."""
    cls = type(value)
    module = cls.__module__.split(".")[0]
    try:
        if module == "numpy" and cls.__name__ == "ndarray":
            return not value.dtype.hasobject and value.nbytes >= THRESHOLD
        if module == "pandas" and cls.__name__ == "DataFrame":
            return int(value.memory_usage(index=True, deep=False).sum()) >= THRESHOLD
    except Exception:
        return False
    return False


def save(value: Any, store: BigStore) -> tuple[str, Written] | None:
    """Write a big `value` in its native format: (format, the blob written), or None
    when its format does not bring it back exact (the caller tries the others)."""
    if type(value).__name__ == "ndarray":
        header, size, chunks = _npy_parts(value)
        return "npy", _drain(store.sink(size), [header], chunks)
    table = arrowframes.table_of(value)
    if table is not None:
        sink = store.sink(arrowframes.size(table))
        try:
            arrowframes.write(table, sink.write)
        except BaseException:
            sink.abort()
            raise
        return arrowframes.FORMAT, sink.close()
    return _save_parquet(value, store)


def sha256_as(fmt: str, value: Any) -> str | None:
    """The sha256 of big `value` saved as `fmt` (`npy` or `arrow`), without keeping
    the bytes; None when it is not saved that way."""
    import hashlib

    if fmt == "npy" and type(value).__name__ == "ndarray":
        return npy_sha256(value)
    if fmt == arrowframes.FORMAT:
        table = arrowframes.table_of(value)
        if table is None:
            return None
        digest = hashlib.sha256()
        arrowframes.write(table, digest.update)
        return digest.hexdigest()
    return None


def npy_sha256(value: Any) -> str:
    """The sha256 of `value` saved as `.npy`, without a copy of its data."""
    import hashlib

    header, _, chunks = _npy_parts(value)
    digest = hashlib.sha256(header)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _npy_parts(array: Any) -> tuple[bytes, int, Iterator[memoryview]]:
    """The `.npy` header `np.save` writes for `array`, the file's size, and its data
    in chunks (views of the array's memory when it is contiguous)."""
    import numpy as np

    fmt = np.lib.format
    head = io.BytesIO()
    meta = fmt.header_data_from_array_1_0(array)
    write_header = getattr(fmt, "_write_array_header", None)
    if write_header is not None:
        write_header(head, meta, None)
    else:  # pragma: no cover - NumPy without the private helper
        fmt.write_array_header_1_0(head, meta)
    header = head.getvalue()
    return header, len(header) + array.nbytes, _array_chunks(array)


def _array_chunks(array: Any) -> Iterator[memoryview]:
    import numpy as np

    if array.flags.c_contiguous:
        flat = memoryview(array.reshape(-1).view(np.uint8))
    elif array.flags.f_contiguous:  # saved with fortran_order: the transpose's C order
        flat = memoryview(array.T.reshape(-1).view(np.uint8))
    else:
        rows = max(1, CHUNK // max(1, array.itemsize))
        chunk: Any
        for chunk in np.nditer(
            array, flags=["external_loop", "buffered", "zerosize_ok"], buffersize=rows, order="C"
        ):
            yield memoryview(chunk.tobytes("C"))
        return
    for at in range(0, len(flat), CHUNK):
        yield flat[at : at + CHUNK]


def _drain(sink: Sink, first: list[bytes], chunks: Iterator[Any]) -> Written:
    try:
        for part in first:
            sink.write(part)
        for chunk in chunks:
            sink.write(chunk)
    except BaseException:
        sink.abort()
        raise
    return sink.close()


def _save_parquet(value: Any, store: BigStore) -> tuple[str, Written] | None:
    scratch = f"{store.scratch_dir}/tmp_pack_stepstone_frame_{os.getpid()}_{threading.get_ident()}"
    os.makedirs(store.scratch_dir, exist_ok=True)
    try:
        value.to_parquet(scratch)
        if not plainly_parquet(value):
            back = _read_back(scratch)
            if type(back) is not type(value) or not artifacts.same_value(back, value):
                return None
            del back
        size = os.path.getsize(scratch)
        with open(scratch, "rb", buffering=0) as handle:
            return "parquet", _drain(store.sink(size), [], _file_chunks(handle))
    except (OSError, ValueError, TypeError, ImportError):
        return None
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)


def _read_back(path: str) -> Any:
    """The frame saved at `path`, read only to compare and drop: pandas 3 lets Arrow
    free each column as it converts (the columns may then be read-only views, which is
    why a frame given back to a kernel is read the plain way)."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        kwargs = {"self_destruct": True, "split_blocks": True}
        return pd.read_parquet(path, to_pandas_kwargs=kwargs)
    return pd.read_parquet(path)


def plainly_parquet(frame: Any) -> bool:
    """Whether Parquet is known to bring `frame` back exact, without reading it back:
    NumPy number and bool columns (not float16) with unique str names, a RangeIndex
    without a name, no attrs (`tests/test_big_values.py` checks this by hypothesis)."""
    import pandas as pd

    columns = frame.columns
    return (
        type(frame) is pd.DataFrame
        and type(frame.index) is pd.RangeIndex
        and frame.index.name is None
        and type(columns) is pd.Index
        and (columns.dtype == object or str(columns.dtype) == "str")
        and columns.name is None
        and columns.is_unique
        and all(type(name) is str for name in columns)
        and not frame.attrs
        and frame.flags.allows_duplicate_labels
        and all(
            type(dtype).__module__.startswith("numpy")
            and dtype.kind in "biuf"
            and dtype != "float16"
            for dtype in frame.dtypes
        )
    )


def _file_chunks(handle: Any) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def load(fmt: str, reader: io.RawIOBase, size: int) -> Any:
    """The value saved as `fmt` in the `size` bytes `reader` gives."""
    if fmt == "npy":
        return _load_npy(reader, size)
    if fmt == arrowframes.FORMAT:
        return arrowframes.read(reader)
    if fmt == "parquet":
        import pandas as pd

        source = io.BufferedReader(reader, 1 << 20)
        frame = plainframes.read(source)
        if frame is not None:
            return frame
        source.seek(0)
        return pd.read_parquet(source)
    raise ValueError(f"no streaming load for {fmt!r}")


def decode(fmt: str, data: bytes) -> Any:
    """A value saved by either path, from its bytes (read whole: a blob Git re-packed)."""
    if fmt == arrowframes.FORMAT:
        return arrowframes.read(io.BytesIO(data))
    return artifacts.decode(fmt, data)


def _load_npy(reader: io.RawIOBase, size: int) -> Any:
    import numpy as np

    fmt = np.lib.format
    buffered = io.BufferedReader(reader, 1 << 16)
    version = fmt.read_magic(buffered)
    read_header: Callable[..., Any] = (
        fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    )
    shape, fortran, dtype = read_header(buffered)
    if dtype.hasobject:
        raise ValueError("an .npy of Python objects is not loaded")
    header = buffered.tell()
    count = 1
    for length in shape:
        count *= int(length)
    if header + count * dtype.itemsize != size:  # before allocating what it claims
        raise ValueError(f".npy holds {size - header} bytes of data, not {count * dtype.itemsize}")
    array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    reader.seek(header)
    flat: Any = (array.T if fortran else array).reshape(-1).view(np.uint8)
    target = memoryview(flat)
    if reader.readinto(target) != array.nbytes:
        raise ValueError("the stored .npy ends early")
    return array
