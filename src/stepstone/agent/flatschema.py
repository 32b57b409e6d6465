"""Output schemas a client validates quickly. An MCP client checks each tool result
against the tool's `outputSchema`, node by node; pydantic's schemas reach each step's
shape through a `$ref` and make every optional field an `anyOf` with null, which
doubles what the check walks on a long run's `status`. The same schema, flat: each
`$ref` written out in place, an optional field as a list of types, titles left out
(the descriptions stay: agents read them)."""

from __future__ import annotations

from typing import Any

_COMBINED = {"anyOf", "oneOf", "allOf", "const", "$ref", "not"}  # kept as an `anyOf`


def flat(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` inlined and nullable `anyOf`s as type lists."""
    defs = schema.get("$defs", {})
    found = _flat(schema, defs, 0)
    assert isinstance(found, dict)
    return found


def _flat(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if depth > 32:  # a recursive shape: leave the rest as it is
        return node
    if isinstance(node, list):
        return [_flat(item, defs, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node and node["$ref"].startswith("#/$defs/"):
        inlined = dict(defs[node["$ref"].rpartition("/")[2]])
        inlined.update({k: v for k, v in node.items() if k != "$ref"})
        return _flat(inlined, defs, depth + 1)
    out = {k: _flat(v, defs, depth + 1) for k, v in node.items() if k not in ("$defs", "title")}
    choices = out.get("anyOf")
    if isinstance(choices, list) and len(choices) == 2 and {"type": "null"} in choices:
        (other,) = [c for c in choices if c != {"type": "null"}]
        if (
            isinstance(other, dict)
            and not set(other) & _COMBINED
            and isinstance(other.get("type"), str)
        ):
            del out["anyOf"]
            out.update(other)  # its other keywords apply to values of its own type only
            out["type"] = [other["type"], "null"]
            if "enum" in other:
                out["enum"] = [*other["enum"], None]
    return out
