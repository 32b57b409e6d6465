"""What a step cell displayed: its outputs as the notebook's client receives them (text
it printed, what it displayed or updated, the value of its last expression, a cleared
output), captured as it runs, kept with its record (plain JSON under `KEY`: each output
as its message type and content), and shown again when the cell is skipped, so that the
executed notebook of a resumed run has the outputs of an uninterrupted one.

In a Jupyter kernel every output message the cell's code sends on IOPub is captured at
the kernel's session: `print`, `display`, `update_display`, `clear_output`, the last
expression's value, what a C library writes to the process's standard streams (which
the kernel forwards) and messages a cell sends itself. In a plain IPython shell, what
reaches `sys.stdout`, `sys.stderr`, the display publisher and the display hook is.
Not captured: output sent from another thread after the cell ended. Outputs over
`LIMIT` bytes in all are not kept.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..effects.redaction import redact

KEY = "displayed"  # where a step's displayed outputs are kept (its record's `kernel`)
LIMIT = 8 << 20  # bytes of outputs kept with one step, at most
CARD = "stepstone"  # the metadata key that marks what stepstone itself shows in a cell
# a card's display id: unique to this kernel by a counter (a uuid4 each cost a step
# 0.1 ms, drawing from the OS's random source), and among kernels by its prefix
_PROCESS = uuid.uuid4().hex[:16]
_CARDS = itertools.count(1)
OUTPUTS = frozenset(
    {"stream", "display_data", "execute_result", "update_display_data", "clear_output"}
)
_UNSET = object()

Shown = dict[str, Any]  # {"msg_type": ..., "content": {...}}


def _ours(content: Any) -> bool:
    return isinstance(content, dict) and CARD in (content.get("metadata") or {})


class _Outputs(list[Shown]):
    """The outputs recorded so far; `muted` while a terminal's display hook prints a
    value itself (it is recorded as the value, not as text)."""

    muted = False

    def add(self, msg_type: str, content: dict[str, Any]) -> None:
        if msg_type not in OUTPUTS or _ours(content):
            return
        last = self[-1] if self else None
        if (
            msg_type == "stream"
            and last is not None
            and last["msg_type"] == "stream"
            and last["content"].get("name") == content.get("name")
        ):
            last["content"]["text"] += content.get("text", "")
            return
        self.append({"msg_type": msg_type, "content": copy.deepcopy(content)})


class _Tee:
    """A stream that also records what is written to it."""

    def __init__(self, stream: Any, name: str, outputs: _Outputs) -> None:
        self._stream, self._name, self._outputs = stream, name, outputs

    def write(self, text: str) -> int:
        if isinstance(text, str) and text and not self._outputs.muted:
            self._outputs.add("stream", {"name": self._name, "text": text})
        return self._stream.write(text)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Value:
    """The last expression's value of a skipped cell, as it was displayed."""

    def __init__(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self._data, self._metadata = data, metadata

    def _repr_mimebundle_(self, **_: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return self._data, self._metadata

    def __repr__(self) -> str:
        return str(self._data.get("text/plain", ""))


def _session(ip: Any) -> Any:
    """The Jupyter kernel's session the shell sends its messages with, if it runs in one."""
    return getattr(getattr(ip, "kernel", None), "session", None)


@contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    before = [(obj, name, obj.__dict__.get(name, _UNSET)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, was in before:
            if was is _UNSET:
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, was)


@contextmanager
def capturing(ip: Any) -> Iterator[list[Shown]]:
    """While the body runs, the outputs the shell `ip` sends are also recorded, in order."""
    outputs = _Outputs()
    session = _session(ip)
    if session is not None:
        send = session.send

        def recorded_send(
            stream: Any, msg_or_type: Any, content: Any = None, *a: Any, **k: Any
        ) -> Any:
            if isinstance(msg_or_type, dict):
                kind = msg_or_type.get("header", {}).get("msg_type") or msg_or_type.get("msg_type")
                outputs.add(str(kind), msg_or_type.get("content") or {})
            else:
                outputs.add(str(msg_or_type), content or {})
            return send(stream, msg_or_type, content, *a, **k)

        with _patched([(session, "send", recorded_send)]):
            try:
                yield outputs
            finally:
                for stream in (sys.stdout, sys.stderr):  # what the cell wrote, sent now
                    stream.flush()
        return
    yield from _terminal(ip, outputs)


def _terminal(ip: Any, outputs: _Outputs) -> Iterator[list[Shown]]:
    """`capturing` in a plain IPython shell: the streams, the publisher, the display hook."""
    publisher, hook = ip.display_pub, ip.displayhook
    publish, write_data, write_prompt = (
        publisher.publish,
        hook.write_format_data,
        hook.write_output_prompt,
    )

    def recorded_publish(data: Any, metadata: Any = None, *args: Any, **kwargs: Any) -> Any:
        content: dict[str, Any] = {"data": dict(data or {}), "metadata": dict(metadata or {})}
        if kwargs.get("transient"):
            content["transient"] = dict(kwargs["transient"])
        outputs.add("update_display_data" if kwargs.get("update") else "display_data", content)
        return publish(data, metadata, *args, **kwargs)

    def recorded_write(format_dict: Any, md_dict: Any = None) -> Any:
        content = {"data": dict(format_dict or {}), "metadata": dict(md_dict or {})}
        outputs.add("execute_result", content)
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

    streams = sys.stdout, sys.stderr
    patches = [
        (publisher, "publish", recorded_publish),
        (hook, "write_format_data", recorded_write),
        (hook, "write_output_prompt", muted_prompt),
    ]
    with _patched(patches):
        sys.stdout = _Tee(streams[0], "stdout", outputs)
        sys.stderr = _Tee(streams[1], "stderr", outputs)
        try:
            yield outputs
        finally:
            sys.stdout, sys.stderr = streams


def draw_figures() -> None:
    """Draw the figures the cell left to the inline backend, as IPython has it do after
    the cell (`post_execute`): inside the step, so that they are its outputs, kept and
    shown again on skip (`df.plot()` without `plt.show()`)."""
    inline = sys.modules.get("matplotlib_inline.backend_inline")
    if inline is None:
        return
    with contextlib.suppress(Exception):  # IPython's own call after the cell says what failed
        inline.flush_figures()


def kept(outputs: list[Shown]) -> list[Shown] | None:
    """`outputs` as kept with the record (JSON), their text redacted as records are
    (credential-looking text, the values of credential-looking environment variables);
    None when they are too large or hold what JSON cannot."""
    try:
        text = json.dumps([_redacted(out) for out in outputs])
    except (TypeError, ValueError):
        return None
    return None if len(text) > LIMIT else json.loads(text)


def _redacted(out: Shown) -> Shown:
    """An output with its text redacted (images and other binary data as they are)."""
    content = dict(out["content"])
    if "text" in content:
        content["text"] = redact(content["text"])
    if "data" in content:
        content["data"] = {
            mime: redact(value) if mime.startswith("text/") or mime.endswith("json") else value
            for mime, value in content["data"].items()
        }
    return {"msg_type": out["msg_type"], "content": content}


def show_again(ip: Any, outputs: list[Shown], result: Any = _UNSET) -> None:
    """Show a skipped cell's kept outputs as it showed them; `result`, the value its last
    line evaluated to, is what the kernel's `_`, `_N` and `Out[N]` then hold (not the
    stand-in that shows it)."""
    before = ip.user_ns.get("_")
    _show_again(ip, outputs)
    shown = ip.user_ns.get("_")
    if result is _UNSET or shown is before or not isinstance(shown, _Value):
        return
    for ns in (ip.user_ns, getattr(ip, "user_ns_hidden", {})):  # (IPython compares both)
        for key in [k for k, v in ns.items() if v is shown and (k == "_" or k[1:].isdigit())]:
            ns[key] = result
    ns = ip.user_ns
    out = ns.get("Out")
    if isinstance(out, dict):
        for key in [k for k, v in out.items() if v is shown]:
            out[key] = result
    hook = ip.displayhook  # keeps `_`, `__`, `___` itself, and moves them on only if the
    for attr in ("_", "__", "___"):  # namespace still holds its own
        if getattr(hook, attr, None) is shown:
            setattr(hook, attr, result)


def _show_again(ip: Any, outputs: list[Shown]) -> None:
    session = _session(ip)
    for out in outputs:
        kind, content = out.get("msg_type"), dict(out.get("content") or {})
        if kind not in OUTPUTS:
            continue
        if session is not None:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            if kind == "execute_result":
                ip.displayhook(_Value(content.get("data", {}), content.get("metadata", {})))
                continue
            session.send(ip.kernel.iopub_socket, kind, content, parent=ip.parent_header)
        elif kind == "stream":
            stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
            stream.write(content.get("text", ""))
            stream.flush()
        elif kind in ("display_data", "update_display_data"):
            extra: dict[str, Any] = (
                {"transient": content["transient"]} if content.get("transient") else {}
            )
            if kind == "update_display_data":
                extra["update"] = True
            ip.display_pub.publish(
                data=content.get("data", {}), metadata=content.get("metadata"), **extra
            )
        elif kind == "execute_result":
            ip.displayhook(_Value(content.get("data", {}), content.get("metadata", {})))
        elif hasattr(ip.display_pub, "clear_output"):
            ip.display_pub.clear_output(content.get("wait", False))


def say(ip: Any, text: str) -> None:
    """Show stepstone's own words in a cell (what a resume gives back, a decision made):
    text marked as stepstone's, which `stepstone run` keeps in the cell's metadata rather
    than among the outputs the cell's code made."""
    ip.display_pub.publish(data={"text/plain": text}, metadata={CARD: {"said": True}})


class Card:
    """A step cell's outcome card. In a Jupyter kernel it is shown before the cell's code
    runs and updated in place when the cell ends (an update is no new output: a
    `clear_output(wait=True)` the code left pending stays pending, as in a plain cell);
    in a terminal it is printed when the cell ends."""

    def __init__(self, ip: Any, bundle: dict[str, str]) -> None:
        self.ip = ip
        self.display_id = f"stepstone-card-{_PROCESS}-{next(_CARDS)}"
        self.shown = _session(ip) is not None
        if self.shown:
            self._publish(bundle, update=False)

    def _publish(self, bundle: dict[str, str], *, update: bool) -> None:
        self.ip.display_pub.publish(
            data=bundle,
            metadata={CARD: {"card": True}},
            transient={"display_id": self.display_id},
            update=update,
        )

    def end(self, bundle: dict[str, str]) -> None:
        """The card as the cell ended."""
        if self.shown:
            self._publish(bundle, update=True)
        else:
            self.ip.display_pub.publish(data=bundle, metadata={CARD: {"card": True}})
