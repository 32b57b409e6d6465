"""One step as an agent inspects it from outside the notebook: its record, evidence,
inputs, the commit that recorded it, its effects, and each saved output described
(type, shape, size) without running any code, with its bytes ready to be written out.

`stepstone show`, `stepstone outputs` and the MCP server's `show` give this JSON.
"""

from __future__ import annotations

import io
import json
import pickletools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, StepstoneError
from ..model import message, names
from ..model.models import Artifact, StepRecord
from ..values import arrowframes, artifacts, bigvalues, closedfiles, tagged

if TYPE_CHECKING:
    from .view import RunView

_CHUNK = 1 << 20
_PREVIEW = 200  # characters of a small value shown as it is
_LOADERS = {
    "json": "json.load(open({file!r}))",
    "npy": "numpy.load({file!r})",
    "parquet": "pandas.read_parquet({file!r})",
    "arrow": "pandas.read_feather({file!r})",
    "pickle": "pickle.load(open({file!r}, 'rb'))  # runs code: only from a store you trust",
    tagged.FORMAT: "stepstone.tagged.loads(open({file!r}, 'rb').read())",
    closedfiles.FORMAT: "json.load(open({file!r}))  # a closed file: what it said of itself",
}
_SUFFIXES = {
    closedfiles.FORMAT: "json",
    "json": "json",
    "npy": "npy",
    "parquet": "parquet",
    "arrow": "arrow",
    "pickle": "pkl",
}


def show(view: RunView, step: str) -> dict[str, Any]:
    """Everything recorded about `step`: state now, record, evidence, what it read,
    outputs described, kept files, the commit that recorded it and its effects."""
    step, number = _planned(view, step)
    record = view.records.get(step)
    state = next(s for s in view.status().steps if s.name == step)
    shown: dict[str, Any] = {
        "run": view.id,
        "step": step,
        "number": number,
        "state": state.state,
        "reason": state.reason,
    }
    effects = [
        {"key": e.key, "name": e.name, "state": e.state, "receipt": e.receipt}
        for e in view.effects.values()
        if e.step == view.identity_of(step)  # keyed by its first name, across renames
    ]
    if record is None:  # effects too when an attempt that asked for some died unrecorded
        return {**shown, "record": None, "outputs": [], "effects": effects, "commit": None}
    return {
        **shown,
        "record": {
            "status": record.status,
            "attempt": record.attempt,
            "started": record.started,
            "finished": record.finished,
            "error": record.error,
            "holder": record.holder,
            "rerun": record.rerun,
        },
        "evidence": [
            e.model_dump(mode="json", exclude={"schema_version"}) for e in record.evidence
        ],
        "inputs": record.inputs and view.state.inputs_now(record.inputs),
        "reads": list(record.reads),
        "binds": list(record.binds),
        "outputs": outputs(view, step),
        "unsaved": record.unsaved,
        "kept": {path: art.sha256 for path, art in record.kept.items()},
        "commit": recording_commit(view, record),
        "effects": effects,
    }


def outputs(view: RunView, step: str) -> list[dict[str, Any]]:
    """The values `step` saved, each described without loading code: name, format,
    size, sha256, type, shape, and how to get and load it."""
    step, _ = _planned(view, step)
    record = view.records.get(step)
    if record is None:
        return []
    return [_described(view, step, var, art) for var, art in sorted(record.outputs.items())]


def output_bytes(view: RunView, step: str, var: str) -> tuple[Artifact, Iterator[bytes]]:
    """Output `var` of `step` as its stored bytes (`.npy`, Parquet, JSON, pickle: the
    format its record names), streamed; checked against its sha256 as they go."""
    step, _ = _planned(view, step)
    record = view.records.get(step)
    if record is None or var not in record.outputs:
        saved = names.listing(sorted(record.outputs)) if record else "none: it has not run"
        raise InvalidInput(f"step {step!r} saved no output {var!r} (outputs: {saved})")
    art = record.outputs[var]
    return art, _checked(art, _chunks(view, art))


def recording_commit(view: RunView, record: StepRecord) -> dict[str, Any] | None:
    """The commit that wrote `record` (found by its sequence number), or None."""
    for commit in view.store.history(view.id):
        if commit.trailers.get(message.SEQ) == [str(record.seq)]:
            return {"id": commit.id, "time": commit.time, "subject": commit.subject}
    return None


def _planned(view: RunView, step: str) -> tuple[str, int]:
    """Step `step` as the plan names it now (an earlier name finds it too), its number."""
    name = view.state.now_named(step)
    if name not in view.steps.names:
        known = names.listing(view.steps.names)
        raise InvalidInput(f"run {view.id!r} has no step {step!r} (steps: {known})")
    return name, view.steps.names.index(name) + 1


def file_name(var: str, art: Artifact) -> str:
    """The file an output is written to by default: `NAME.<its format's suffix>`."""
    return f"{var}.{_SUFFIXES.get(art.format, art.format)}"


def _described(view: RunView, step: str, var: str, art: Artifact) -> dict[str, Any]:
    file = file_name(var, art)
    shown: dict[str, Any] = {
        "name": var,
        "format": art.format,
        "size": art.size,
        "sha256": art.sha256,
        "file": file,
        "get": f"stepstone outputs {step} --run {view.id} --get {var}",
        "load": _LOADERS.get(art.format, "").format(file=file),
    }
    try:
        shown.update(_what(view, art))
    except (StepstoneError, ValueError, OSError, ImportError) as exc:
        shown["type"] = f"unreadable ({exc})"
    return shown


def _what(view: RunView, art: Artifact) -> dict[str, Any]:
    """The type and shape of a saved value, read from its bytes without running code."""
    if art.format == "npy":
        import numpy as np

        head = io.BytesIO(_head(view, art, 64 << 10))
        major, _ = np.lib.format.read_magic(head)
        read = (
            np.lib.format.read_array_header_1_0
            if major == 1
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read(head)
        return {"type": "numpy.ndarray", "shape": list(shape), "dtype": str(dtype)}
    if art.format == "parquet":
        import pyarrow.parquet as pq

        meta = pq.read_metadata(io.BytesIO(b"".join(_chunks(view, art))))
        columns = [meta.schema.column(i).name for i in range(meta.num_columns)]
        return {
            "type": "pandas.DataFrame",
            "shape": [meta.num_rows, len(columns)],
            "columns": columns,
        }
    if art.format == arrowframes.FORMAT:
        with _seekable(view, art) as source:
            rows, columns = arrowframes.shape(source)
        return {"type": "pandas.DataFrame", "shape": [rows, len(columns)], "columns": columns}
    if art.format == "pickle":
        return {"type": _pickled_class(_head(view, art, 1 << 16)) or "pickle", "loaded": False}
    data = b"".join(_chunks(view, art))
    if art.format == "module":
        return {"type": "module", "value": data.decode()}
    if art.format == closedfiles.FORMAT:
        said = json.loads(data)
        return {"type": f"{said['type']} (closed)", "value": said["name"]}
    value = json.loads(data) if art.format == "json" else tagged.loads(data)
    shown: dict[str, Any] = {"type": type(value).__name__}
    if hasattr(value, "__len__"):
        shown["shape"] = [len(value)]
    text = json.dumps(value) if art.format == "json" else repr(value)
    if len(text) <= _PREVIEW:  # JSON as itself; tagged JSON's sets, tuples... as Python
        shown["value"] = value if art.format == "json" else text
    return shown


def _pickled_class(head: bytes) -> str | None:
    """The class a pickle makes first (`module.Name`), read from its opcodes, or None."""
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(head):
            if op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                return arg.replace(" ", ".")
            if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(arg, str):
                strings.append(arg)
    except (ValueError, EOFError):  # cut short by `head`, or not a pickle
        pass
    return None


def _head(view: RunView, art: Artifact, size: int) -> bytes:
    got = b""
    for chunk in _chunks(view, art):
        got += chunk
        if len(got) >= size:
            break
    return got[:size]


def _seekable(view: RunView, art: Artifact) -> Any:
    """A seekable file over a saved value: the big blob read in place, or its bytes."""
    tree = view.state.snap.tree
    if art.format in bigvalues.FORMATS and art.size >= bigvalues.THRESHOLD and tree:
        reader = view.store.open_blob(tree, artifacts.path_for(art.sha256, art.format))
        if reader is not None:
            return reader
    return io.BytesIO(b"".join(_chunks(view, art)))


def _chunks(view: RunView, art: Artifact) -> Iterator[bytes]:
    path = artifacts.path_for(art.sha256, art.format)
    tree = view.state.snap.tree
    if art.format in bigvalues.FORMATS and art.size >= bigvalues.THRESHOLD and tree:
        reader = view.store.open_blob(tree, path)
        if reader is not None:
            with reader:
                while chunk := reader.read(_CHUNK):
                    yield chunk
            return
    data = view.state.blob(path)
    if data is None:
        raise StepstoneError(f"saved output at {path} is missing from the run's store")
    yield data


def _checked(art: Artifact, chunks: Iterator[bytes]) -> Iterator[bytes]:
    import hashlib

    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
    if digest.hexdigest() != art.sha256:
        raise StepstoneError(
            f"saved output {art.sha256[:12]} does not match its sha256: the store is damaged "
            f"(`stepstone verify` says which steps; `stepstone repair` moves the run back)"
        )
