"""Where a run's records live in its tree, and the hash that notices an edited step."""

from __future__ import annotations

import hashlib
import io
import re
import tokenize

from ..effects.effectkeys import effect_path
from ..model.models import Decision, EffectRecord, StepRecord, Unknown


def plan_path(number: int) -> str:
    """Where the plan entry of step `number` lives in a run's tree."""
    key = f"{number:08d}"
    return f"plan/{key[:4]}/{key[4:6]}/{key}.json"


def step_path(name: str, *, legacy: bool = False) -> str:
    """Where the record of step `name` lives: `steps/a/b/c/<name>.json` by the sha1 of
    the name, three levels of 16 folders, so that a step's commit rewrites small trees.
    Runs begun with the two-level layout (`steps/ab/<name>.json`, `legacy`) keep it."""
    digest = hashlib.sha1(name.encode()).hexdigest()
    if legacy:
        return f"steps/{digest[:2]}/{name}.json"
    return f"steps/{digest[0]}/{digest[1]}/{digest[2]}/{name}.json"


_BLANK = re.compile(r"^[ \t\f\v]+$", re.MULTILINE)


def source_hash(source: str, context: str = "") -> str:
    """The hash of a step's source, used to notice an edited cell: of its code, not of
    its comments, blank lines or the spaces between tokens (an edit of those changes
    nothing it does; the text of its strings counts). `context`: the plain cells the
    step reads from (a notebook's), whose hash follows a `+`, so that editing one makes
    the step stale."""
    own = hashlib.sha256(_code(source).encode()).hexdigest()
    if not context:
        return own
    return f"{own}+{hashlib.sha256(_code(context).encode()).hexdigest()[:16]}"


_LAYOUT = {tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE}
_UNSEEN = {tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER}


_SHELL = re.compile(r"^([ \t]*)((?:[\w.,\t ]*=[ \t]*)?[!%].*)$", re.MULTILINE)


def _code(source: str) -> str:
    """`source` as the tokens it is made of, its shell and magic lines as their text
    (`!cmd a-b` is not `!cmd a - b`); as text with lines of spaces emptied when it does
    not tokenize, or is a cell magic's (IPython empties such a line before a cell
    magic sees it)."""
    if source.lstrip().startswith("%%"):
        return _BLANK.sub("", source).strip()
    python = _SHELL.sub(lambda m: m.group(1) + repr(m.group(2).rstrip()), source)
    parts = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(python).readline):
            if token.type in _UNSEEN:
                continue
            parts.append(tokenize.tok_name[token.type] if token.type in _LAYOUT else token.string)
    except (tokenize.TokenError, SyntaxError):
        return _BLANK.sub("", source).strip()
    return "\x1f".join(parts)


def keeping_context(found: str, planned: str | None) -> str:
    """A step's source hash `found` as it ran, with the context its plan entry has (the
    kernel hashes the cell it runs; the plain cells it reads are the notebook's)."""
    if planned is None or "+" not in planned or "+" in found:
        return found
    return f"{found}+{planned.split('+', 1)[1]}"


def decision_path(key: str) -> str:
    """Where decision `key` lives."""
    return f"decisions/{key}.json"


def unknown_path(unknown_id: str) -> str:
    """Where unknown `unknown_id` (`U1`...) lives."""
    return f"unknowns/{unknown_id}.json"


def path_of(record: StepRecord | Decision | Unknown | EffectRecord, *, legacy: bool) -> str:
    """Where `record` lives in a run's tree, by its type (`legacy`: a step record of a
    run begun with the two-level layout)."""
    if isinstance(record, StepRecord):
        return step_path(record.name, legacy=legacy)
    if isinstance(record, Decision):
        return decision_path(record.key)
    if isinstance(record, Unknown):
        return unknown_path(record.id)
    return effect_path(record.key)


RUN_INFO = "run.json"
SUMMARY = "summary.md"
