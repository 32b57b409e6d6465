"""Property-based tests: any input works or raises a StepstoneError with a message."""

import json
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stepstone
from stepstone.effects.effectkeys import derive_key, effect_path
from stepstone.model import names
from stepstone.model.models import Decision, PlannedStep, RunInfo, StepRecord, Unknown, load
from stepstone.notebook import cellargs
from stepstone.rules import checks
from stepstone.run import plan_path, step_path

TEXT = st.text(min_size=0, max_size=80)
NASTY = st.one_of(
    TEXT,
    st.sampled_from(
        [
            "..",
            "../x",
            "/etc/passwd",
            "a\x00b",
            "x" * 300,
            ".git",
            "a/../b",
            "a.lock",
            "-rf",
            "CON",
            "~",
            "a b",
            "ü",
            "\n",
        ]
    ),
)


def _stays_inside(path: str, top: str) -> None:
    parts = PurePosixPath(path).parts
    assert parts[0] == top and ".." not in parts and not PurePosixPath(path).is_absolute()
    assert "\x00" not in path


@given(NASTY)
def test_run_ids_are_valid_or_refused(value: str):
    try:
        valid = names.run_id(value)
    except stepstone.StepstoneError as exc:
        assert str(exc)
    else:
        assert "/" not in valid and ".." not in valid and not valid.startswith(".")


@given(NASTY)
def test_step_names_never_escape_the_store(value: str):
    try:
        names.step_name(value)
    except stepstone.StepstoneError as exc:
        assert str(exc)
    else:
        _stays_inside(step_path(value), "steps")


@given(NASTY, NASTY, NASTY)
def test_effect_keys_are_short_url_safe_and_inside_the_store(run: str, step: str, name: str):
    key = derive_key(run, name, step)
    assert len(key) <= 40 and all(c.isalnum() or c == "-" for c in key)
    _stays_inside(effect_path(key), "effects")


@given(st.integers(min_value=1, max_value=10**9))
def test_plan_paths_are_inside_the_store(number: int):
    _stays_inside(plan_path(number), "plan")


@given(NASTY)
def test_check_specs_parse_or_are_refused(spec: str):
    try:
        parsed = checks.parse(spec)
    except stepstone.StepstoneError as exc:
        assert str(exc)
    else:
        assert parsed.kind in checks.KINDS


@given(TEXT)
def test_magic_lines_parse_or_are_refused(line: str):
    for parse in (
        cellargs.parse_step_line,
        cellargs.parse_decide_line,
        cellargs.parse_unknown_line,
        cellargs.parse_resume_line,
        cellargs.parse_finish_line,
    ):
        try:
            parse(line)
        except stepstone.StepstoneError as exc:
            assert str(exc)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@given(st.one_of(st.binary(max_size=200), JSONISH.map(lambda v: json.dumps(v).encode())))
def test_records_load_or_raise_a_record_error(data: bytes):
    for cls in (RunInfo, PlannedStep, StepRecord, Decision, Unknown):
        try:
            load(cls, data, "fuzzed.json")
        except stepstone.RecordError as exc:
            assert "fuzzed.json" in str(exc)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            NASTY,
            st.dictionaries(
                st.sampled_from(["name", "checks", "inputs", "outputs", "bogus"]),
                JSONISH,
                max_size=4,
            ),
        ),
        max_size=5,
    )
)
def test_plans_are_committed_or_refused_with_nothing_lost(workdir: Path, steps):
    with stepstone.open_run("fuzz") as run:
        before = [s.model_dump() for s in run.steps]
        try:
            run.set_plan(steps)
        except stepstone.StepstoneError as exc:
            assert str(exc)
            assert [s.model_dump() for s in run.steps] == before
    reread = stepstone.open_run("fuzz", drive=False)
    assert all(isinstance(s, PlannedStep) for s in reread.steps)


@pytest.mark.parametrize("bad", ["..", "/abs", "a/../b", "\x00", "x" * 201])
def test_effect_names_that_could_escape_are_refused(workdir: Path, bad: str):
    with stepstone.open_run("fx") as run, pytest.raises(stepstone.InvalidInput):
        run.step("s", lambda: stepstone.effect(bad, lambda k: 1))
