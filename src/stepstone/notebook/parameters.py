"""papermill's conventions for `stepstone run`: `-p NAME VALUE` (typed as papermill
types it) and `-f params.yaml`; a cell tagged `injected-parameters` put after the cell
tagged `parameters` (at the top when there is none); and parameters as part of a
run's identity: the default run id ends with a short hash of those that change the
notebook's defaults (a default given again, in any spelling, is no parameter), and a
run records them, so the same run is never resumed with others.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

INJECTED = "injected-parameters"


def typed(text: str) -> Any:
    """A `-p` value as papermill types it: True, False, None, an int, a float, else
    the text itself."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def gathered(
    pairs: Iterable[tuple[str, str]],
    files: Iterable[Path],
    *,
    raw: Iterable[tuple[str, str]] = (),
    yamls: Iterable[str] = (),
    base64s: Iterable[str] = (),
) -> dict[str, Any]:
    """The parameters, in papermill's order: `-b` base64-encoded YAML, `-f` files and `-y`
    strings of YAML mappings, `-p` pairs (typed as papermill types them), `-r` pairs (as
    text); a later one wins."""
    import base64

    import yaml

    found: dict[str, Any] = {}

    def mapping(text: str | bytes, where: str) -> None:
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInput(f"cannot read parameters from {where}: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise InvalidInput(f"{where} is not a YAML mapping of parameter names to values")
        found.update(loaded or {})

    for text in base64s:
        try:
            decoded = base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise InvalidInput(f"-b {text!r} is not base64: {exc}") from exc
        mapping(decoded, f"-b {text!r}")
    for path in files:
        try:
            content = path.read_text()
        except OSError as exc:
            raise InvalidInput(f"cannot read parameters from {path}: {exc}") from exc
        mapping(content, str(path))
    for text in yamls:
        mapping(text, f"-y {text!r}")
    found.update((name, typed(value)) for name, value in pairs)
    found.update(raw)
    for name in found:
        if not str(name).isidentifier():
            raise InvalidInput(f"parameter {name!r} is not a Python variable name")
    return found


def defaults(nb: Any) -> dict[str, Any]:
    """The values the cell tagged `parameters` assigns (`region = "eu"`), as papermill
    reads them: top-level assignments of literals; other lines are left out."""
    import ast

    cell = next(
        (c for c in nb.cells if "parameters" in getattr(c, "metadata", {}).get("tags", [])), None
    )
    if cell is None:
        return {}
    try:
        tree = ast.parse("".join(cell.source))
    except SyntaxError:
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = literal
    return found


def _same(default: Any, given: Any) -> bool:
    """Whether a given value is its default in another spelling (3 and 3.0; not True and 1)."""
    numbers = (int, float)
    if isinstance(default, bool) or isinstance(given, bool):
        return type(default) is type(given) and default == given
    if isinstance(default, numbers) and isinstance(given, numbers):
        return bool(default == given)
    return type(default) is type(given) and default == given


def normalised(given: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with each value that is its default in another spelling (3.0 for 3) given as
    the default itself: the cell injected, and what the notebook computes, are the same."""
    return {
        name: known[name] if name in known and _same(known[name], value) else value
        for name, value in given.items()
    }


def beyond_defaults(given: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of `given` that change the notebook's defaults `known`: what makes a
    run's identity. A parameter given with its default value, in any spelling, is the
    run without it: `-p region eu` is the same run as no `-p` when `region = "eu"`."""
    return {
        name: value
        for name, value in given.items()
        if name not in known or not _same(known[name], value)
    }


def canonical(parameters: Mapping[str, Any]) -> str:
    """The parameters as canonical JSON ("" for none): what a run records."""
    if not parameters:
        return ""
    try:
        return json.dumps(dict(parameters), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"parameters must be JSON values (numbers, text, lists): {exc}") from exc


def run_id_for(stem: str, parameters: Mapping[str, Any]) -> str:
    """A notebook's default run id: its name, and with parameters a hash of them."""
    if not parameters:
        return stem
    return f"{stem}-{hashlib.sha256(canonical(parameters).encode()).hexdigest()[:8]}"


def translated(value: Any) -> str:
    """A parameter's value as Python source, written as papermill's Python translator
    writes it (strings in double quotes, escaped), so that the injected cell is papermill's."""
    import math

    if value is None or isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return str(value)
        return "float('nan')" if math.isnan(value) else f"float('{'-' if value < 0 else ''}inf')"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quoted(k)}: {translated(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(translated(v) for v in value) + "]"
    return _quoted(value)


def _quoted(value: Any) -> str:
    text = value.encode("unicode_escape").decode("utf-8") if isinstance(value, str) else value
    return '"' + str(text).replace('"', r"\"") + '"'


def inject(nb: Any, parameters: Mapping[str, Any]) -> None:
    """Put the parameters in a code cell tagged `injected-parameters` after the cell
    tagged `parameters` (replacing an injected cell from before), as papermill does."""
    import nbformat

    nb.cells = [c for c in nb.cells if INJECTED not in c.get("metadata", {}).get("tags", [])]
    at = next(
        (i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), 0
    )
    lines = [
        "# Parameters",
        *(f"{name} = {translated(value)}" for name, value in parameters.items()),
    ]
    cell = nbformat.v4.new_code_cell("\n".join(lines) + "\n")  # type: ignore[no-untyped-call]
    cell.metadata["tags"] = [INJECTED]
    nb.cells.insert(at, cell)


def refuse_other(
    run: str, recorded: str, given: str, *, begun: bool, known: Mapping[str, Any] | None = None
) -> None:
    """Refuse to resume run `run`, made with parameters `recorded`, with `given` (both
    canonical JSON, as `beyond_defaults` leaves them; `known`: the notebook's defaults, which
    a run recorded by an earlier version may hold); a run that has recorded no step yet
    (`begun` False) takes them."""
    if recorded and known:
        recorded = canonical(beyond_defaults(json.loads(recorded), known))
    if recorded != given and (recorded or begun):
        made = recorded or "no parameters"
        now = given or "none"
        raise InvalidInput(
            f"run {run!r} was made with {made}; these are {now}. Give the same parameters, "
            f"or leave --run out: the default run id carries a hash of the parameters"
        )
