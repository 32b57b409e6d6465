"""What a step cell displayed: its outputs as the notebook keeps them (text it printed,
what it displayed, the value of its last expression), captured as it runs, kept with
its record (plain JSON under `KEY`), and shown again when the cell is skipped, so that
the executed notebook of a resumed run has the outputs of an uninterrupted one.

Captured: `print` and anything else written to `sys.stdout` and `sys.stderr` while the
cell runs, `display(...)` and `update_display` (rich outputs: HTML, images, a widget's
text fallback), `clear_output`, and the last expression's value. Not captured: what a C
library writes to the process's file descriptors, and outputs sent from another thread
after the cell ended. Outputs over `LIMIT` bytes in all are not kept (the card says so).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..effects.redaction import redact

KEY = "__displayed__"  # the name a step's outputs are kept under
LIMIT = 8 << 20  # bytes of outputs kept with one step, at most
CARD = "stepstone"  # the metadata key that marks stepstone's own card, which is not kept
_UNSET = object()


class _Outputs(list[dict[str, Any]]):
    """The outputs recorded so far; `muted` while the display hook writes a value to the
    terminal itself (it is recorded as the value, not as text)."""

    muted = False


class _Tee:
    """A stream that also records what is written to it."""

    def __init__(self, stream: Any, name: str, outputs: _Outputs) -> None:
        self._stream, self._name, self._outputs = stream, name, outputs

    def write(self, text: str) -> int:
        if isinstance(text, str) and text and not self._outputs.muted:
            last = self._outputs[-1] if self._outputs else None
            if last and last["output_type"] == "stream" and last["name"] == self._name:
                last["text"] += text
            else:
                self._outputs.append({"output_type": "stream", "name": self._name, "text": text})
        return self._stream.write(text)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Shown:
    """The last expression's value of a skipped cell, as it was displayed."""

    def __init__(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self._data, self._metadata = data, metadata

    def _repr_mimebundle_(self, **_: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return self._data, self._metadata

    def __repr__(self) -> str:
        return str(self._data.get("text/plain", ""))


@contextmanager
def capturing(ip: Any) -> Iterator[list[dict[str, Any]]]:
    """While the body runs, what the shell `ip` shows is also recorded, in order, as
    nbformat outputs (without execution counts)."""
    outputs = _Outputs()
    publisher, hook = ip.display_pub, ip.displayhook
    publish, write_data = publisher.publish, hook.write_format_data
    write_prompt = hook.write_output_prompt
    clear = getattr(publisher, "clear_output", None)

    def recorded_publish(data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(metadata, dict) and CARD in metadata):
            shown: dict[str, Any] = {
                "output_type": "display_data",
                "data": dict(data or {}),
                "metadata": dict(metadata or {}),
            }
            if kwargs.get("transient"):
                shown["transient"] = dict(kwargs["transient"])
            if kwargs.get("update"):
                shown["update"] = True
            outputs.append(shown)
        return publish(data, metadata, *args, **kwargs)

    def recorded_write(format_dict: Any, md_dict: Any = None) -> Any:
        outputs.append(
            {
                "output_type": "execute_result",
                "data": dict(format_dict or {}),
                "metadata": dict(md_dict or {}),
            }
        )
        outputs.muted = True  # a terminal's display hook prints the value itself
        try:
            return write_data(format_dict, md_dict)
        finally:
            outputs.muted = False

    def muted_prompt() -> Any:
        outputs.muted = True
        try:
            return write_prompt()
        finally:
            outputs.muted = False

    def recorded_clear(wait: bool = False) -> Any:
        outputs.append({"output_type": "clear_output", "wait": bool(wait)})
        assert clear is not None
        return clear(wait)

    patched = [
        (publisher, "publish", recorded_publish),
        (hook, "write_format_data", recorded_write),
        (hook, "write_output_prompt", muted_prompt),
    ]
    if clear is not None:
        patched.append((publisher, "clear_output", recorded_clear))
    before = [(obj, name, obj.__dict__.get(name, _UNSET)) for obj, name, _ in patched]
    streams = sys.stdout, sys.stderr
    for obj, name, recording in patched:
        setattr(obj, name, recording)
    sys.stdout, sys.stderr = (
        _Tee(streams[0], "stdout", outputs),
        _Tee(streams[1], "stderr", outputs),
    )
    try:
        yield outputs
    finally:
        sys.stdout, sys.stderr = streams
        for obj, name, was in before:
            if was is _UNSET:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, was)


def kept(outputs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`outputs` as kept with the record (JSON), their text redacted as records are
    (credential-looking text, the values of credential-looking environment variables);
    None when they are too large or hold what JSON cannot."""
    try:
        text = json.dumps([_redacted(out) for out in outputs])
    except (TypeError, ValueError):
        return None
    return None if len(text) > LIMIT else json.loads(text)


def _redacted(out: dict[str, Any]) -> dict[str, Any]:
    """An output with its text redacted (images and other binary data as they are)."""
    out = dict(out)
    if "text" in out:
        out["text"] = redact(out["text"])
    if "data" in out:
        out["data"] = {
            mime: redact(value) if mime.startswith("text/") or mime.endswith("json") else value
            for mime, value in out["data"].items()
        }
    return out


def show_again(ip: Any, outputs: list[dict[str, Any]]) -> None:
    """Show a skipped cell's kept outputs as it showed them."""
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            stream = sys.stderr if out.get("name") == "stderr" else sys.stdout
            stream.write(out.get("text", ""))
            stream.flush()
        elif kind == "display_data":
            extra = {"transient": out["transient"]} if out.get("transient") else {}
            if out.get("update"):
                extra["update"] = True
            ip.display_pub.publish(data=out.get("data", {}), metadata=out.get("metadata"), **extra)
        elif kind == "execute_result":
            ip.displayhook(_Shown(out.get("data", {}), out.get("metadata", {})))
        elif kind == "clear_output" and hasattr(ip.display_pub, "clear_output"):
            ip.display_pub.clear_output(out.get("wait", False))


def say(ip: Any, text: str) -> None:
    """Show stepstone's own words in a cell (what a resume gives back, a decision made):
    text marked as stepstone's, which `stepstone run` keeps in the cell's metadata rather
    than among the outputs the cell's code made."""
    ip.display_pub.publish(data={"text/plain": text}, metadata={CARD: {"said": True}})
