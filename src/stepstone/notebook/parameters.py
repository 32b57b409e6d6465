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


def _parameters_cell(nb: Any) -> Any:
    return next(
        (c for c in nb.cells if "parameters" in getattr(c, "metadata", {}).get("tags", [])), None
    )


def _assignments(nb: Any) -> list[tuple[str, Any]]:
    """(name, value node) of each top-level assignment of the cell tagged `parameters`."""
    import ast

    cell = _parameters_cell(nb)
    if cell is None:
        return []
    try:
        tree = ast.parse("".join(cell.source))
    except SyntaxError:
        return []
    found: list[tuple[str, Any]] = []
    for node in tree.body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        found += [(t.id, value) for t in targets if isinstance(t, ast.Name)]
    return found


def defaults(nb: Any) -> dict[str, Any]:
    """The values the cell tagged `parameters` assigns (`region = "eu"`), as papermill
    reads them: top-level assignments of literals; other lines are left out."""
    import ast

    found: dict[str, Any] = {}
    for name, value in _assignments(nb):
        try:
            found[name] = ast.literal_eval(value)
        except ValueError:
            continue
    return found


def declared(nb: Any) -> set[str] | None:
    """The names the cell tagged `parameters` assigns, literals or not (None: the notebook
    has no such cell, and papermill takes any parameter)."""
    if _parameters_cell(nb) is None:
        return None
    return {name for name, _ in _assignments(nb)}


def refuse_unknown(given: Mapping[str, Any], known: set[str] | None, notebook: str) -> None:
    """Refuse parameters the notebook's cell tagged `parameters` does not assign (papermill
    only warns): a misspelled name would run the notebook on its defaults as a run of its
    own. `--new` runs it anyway."""
    import difflib

    if known is None:
        return
    unknown = sorted(name for name in given if name not in known)
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    listing = ", ".join(sorted(known)) or "none"
    raise InvalidInput(
        f"{notebook} has no parameter {', '.join(hints)}: its cell tagged `parameters` "
        f"assigns {listing}. Correct the name; to pass it anyway (the notebook reads it "
        f"some other way), add --new"
    )


def _same(default: Any, given: Any) -> bool:
    """Whether a given value is its default in another spelling (3 and 3.0; not True and 1)."""
    numbers = (int, float)
    if isinstance(default, bool) or isinstance(given, bool):
        return type(default) is type(given) and default == given
    if isinstance(default, numbers) and isinstance(given, numbers):
        return bool(default == given)
    return type(default) is type(given) and default == given


def normalised(given: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with each value in the spelling of its default's type: 3.0 for a default of
    3 is 3, 4.0 is 4, and 4 for a default of 3.5 is 4.0 (a default given again is the
    default itself). The cell injected, what the notebook computes and the run's identity
    are then the same however a value was spelled (`-p`, `-y`, `-f`)."""
    return {
        name: _as_default(known[name], value) if name in known else value
        for name, value in given.items()
    }


def _as_default(default: Any, value: Any) -> Any:
    if _same(default, value):
        return default
    numbers = (int, float)
    if isinstance(default, bool) or isinstance(value, bool):
        return value
    if isinstance(default, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    if isinstance(default, numbers) and isinstance(value, numbers):
        return value
    return value


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
    """The parameters as canonical JSON ("" for none): what a run records. A number that
    is a whole number is written as one (4.0 as 4), so that its spellings are one run."""
    if not parameters:
        return ""
    try:
        return json.dumps(_whole(dict(parameters)), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"parameters must be JSON values (numbers, text, lists): {exc}") from exc


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_whole(v) for v in value]
    return value


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
    if recorded:
        recorded = canonical(beyond_defaults(json.loads(recorded), known or {}))
    if recorded != given and (recorded or begun):
        made = recorded or "no parameters"
        now = given or "none"
        raise InvalidInput(
            f"run {run!r} was made with {made}; these are {now}. Give the same parameters, "
            f"or leave --run out: the default run id carries a hash of the parameters"
        )
