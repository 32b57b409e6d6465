"""Keeping credentials out of records: redaction of payloads, receipts and error texts."""

from __future__ import annotations

import re
import traceback
from typing import Any

from ..settings import credential_values

REDACTED = "[redacted]"
# The fields whose values are credentials, compared whole (case, `-` and `_` aside): the
# well-known credential headers and the names OAuth and common APIs give them. A field
# that only contains one of these words (`passenger_id`, `total_tokens`) is data.
CREDENTIAL_FIELDS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "bearer_token",
        "api_key",
        "apikey",
        "x_api_key",
        "authorization",
        "proxy_authorization",
        "cookie",
        "set_cookie",
        "private_key",
        "session_id",
        "sessionid",
        "x_auth_token",
        "x_csrf_token",
        "credentials",
    }
)
# environment variables: a name that contains one of these words holds a credential
_SECRET_NAME = re.compile(
    r"pass(word|wd)?|secret|token|api[-_]?key|authori[sz]ation|credential|cookie|"
    r"private[-_]?key|session[-_]?id|signature",
    re.IGNORECASE,
)
_SECRET_TEXT = re.compile(
    r"(?i)(bearer\s+|basic\s+|(?:token|api[-_]?key|password|secret)[\"']?\s*[=:]\s*[\"']?)"
    r"[A-Za-z0-9._~+/=-]{4,}"
)


def field_name(name: str) -> str:
    """A field's name as credential fields are compared: lower case, `-` as `_`."""
    return name.strip().lower().replace("-", "_")


def looks_secret(name: str) -> bool:
    """Whether an environment variable called `name` likely holds a credential."""
    return bool(_SECRET_NAME.search(name))


def is_credential(name: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a field called `name` holds a credential: one of `CREDENTIAL_FIELDS`, or of
    the names a store adds (`git config stepstone.redact`), compared whole."""
    found = field_name(name)
    return found in CREDENTIAL_FIELDS or found in extra


def redact(value: Any, *, environment: bool = True, fields: frozenset[str] = frozenset()) -> Any:
    """A copy of `value` with the values of credential fields (`is_credential`, `fields`
    the store's own names) and credentials written in text (`Bearer ...`, `token=...`)
    replaced; with `environment`, also the values of credential-looking environment
    variables (which makes the result depend on the environment)."""
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and is_credential(k, fields)
            else redact(v, environment=environment, fields=fields)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, environment=environment, fields=fields) for v in value]
    if isinstance(value, str):
        text = _SECRET_TEXT.sub(lambda m: m.group(1) + REDACTED, value)
        for secret in credential_values(looks_secret) if environment else ():
            text = text.replace(secret, REDACTED)
        return text
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(str(value), environment=environment, fields=fields)


def redact_like_before(value: Any) -> Any:
    """`value` redacted as stepstone did before 2026-12 (any field whose name contains a
    credential word), to recognise a payload fingerprint recorded then."""
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and _SECRET_NAME.search(k) else redact_like_before(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_like_before(v) for v in value]
    if isinstance(value, str):
        return _SECRET_TEXT.sub(lambda m: m.group(1) + REDACTED, value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_like_before(str(value))


def error_text(exc: BaseException, *, limit: int = 2000) -> str:
    """The last line(s) of an exception as text, credentials redacted, at most `limit` chars."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return str(redact(text))[-limit:]
