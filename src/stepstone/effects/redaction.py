"""Keeping credentials out of records: redaction of payloads, receipts and error texts."""

from __future__ import annotations

import re
import traceback
from typing import Any

from ..settings import credential_values

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|api[-_]?key|authori[sz]ation|credential|cookie|"
    r"private[-_]?key|session[-_]?id|signature",
    re.IGNORECASE,
)
_SECRET_TEXT = re.compile(
    r"(?i)(bearer\s+|basic\s+|(?:token|api[-_]?key|password|secret)[\"']?\s*[=:]\s*[\"']?)"
    r"[A-Za-z0-9._~+/=-]{4,}"
)


def looks_secret(name: str) -> bool:
    """Whether a field or variable called `name` likely holds a credential."""
    return bool(_SECRET_KEY.search(name))


def redact(value: Any, *, environment: bool = True) -> Any:
    """A copy of `value` with credential-looking fields and strings replaced; with
    `environment`, also the values of credential-looking environment variables (which
    makes the result depend on the environment: fingerprints leave it out)."""
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and _SECRET_KEY.search(k)
            else redact(v, environment=environment)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, environment=environment) for v in value]
    if isinstance(value, str):
        text = _SECRET_TEXT.sub(lambda m: m.group(1) + REDACTED, value)
        for secret in credential_values(looks_secret) if environment else ():
            text = text.replace(secret, REDACTED)
        return text
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(str(value), environment=environment)


def error_text(exc: BaseException, *, limit: int = 2000) -> str:
    """The last line(s) of an exception as text, credentials redacted, at most `limit` chars."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return str(redact(text))[-limit:]
