"""A written note as a step's evidence: kept, shown as weak, never re-checked."""

import json
from pathlib import Path

import pytest
from conftest import stepstone_cli as cli

import stepstone
from stepstone.errors import CheckFailed, InvalidInput

FINDING = "The orders API pages at 100 rows; totals are in cents.\nSecond line of the note."


def _three_kinds(workdir: Path) -> None:
    """A note step, a step with no checks and a step with a file check."""
    with stepstone.open_run("job") as run:
        run.step("explore", lambda: stepstone.note(FINDING), checks=["note"])
        run.step("tidy", lambda: None)
        (workdir / "out.json").write_text("[1]")
        run.step("write", lambda: None, checks=["file:out.json"])


def test_a_note_is_kept_in_the_steps_record_and_the_step_is_not_redone(workdir: Path):
    _three_kinds(workdir)
    with stepstone.open_run("job") as run:
        (evidence,) = run.records["explore"].evidence
        assert (evidence.kind, evidence.value) == ("note", FINDING)
        assert run.step("explore", lambda: pytest.fail("verified by its note")).skipped


def test_status_marks_notes_and_unchecked_steps_weak_and_checks_strong(workdir: Path):
    _three_kinds(workdir)
    shown = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert [(s["name"], s["strength"]) for s in shown["steps"]] == [
        ("explore", "weak"),
        ("tidy", "weak"),
        ("write", "strong"),
    ]
    text = cli("status", cwd=workdir).stdout
    assert "note (weak): The orders API pages at 100 rows; totals are in cents.…" in text
    assert "completed, nothing to verify (weak)" in text
    brief = cli("brief", cwd=workdir).stdout
    assert "explore: note (weak)" in brief and "tidy: completed, nothing to verify" in brief


def test_verify_says_it_cannot_recheck_a_note(workdir: Path):
    _three_kinds(workdir)
    out = cli("verify", cwd=workdir).stdout
    assert "explore: verified - weak evidence: a note, which cannot be re-checked" in out
    assert "tidy: verified - weak evidence: the code completed, nothing to verify" in out
    assert "write: verified\n" in out


def test_the_summary_shows_the_note_as_weak_evidence(workdir: Path):
    _three_kinds(workdir)
    with stepstone.open_run("job") as run:
        summary = run.finish()
    assert "| explore | verified |" in summary and "note (weak): The orders API" in summary


def test_a_step_may_return_its_note(workdir: Path):
    with stepstone.open_run("job") as run:
        record = run.step("read", lambda: "three tables, one per year", checks=["note"]).record
    assert record.evidence[0].value == "three tables, one per year"


def test_a_note_step_that_wrote_no_note_fails_and_says_how(workdir: Path):
    with stepstone.open_run("job") as run:
        with pytest.raises(CheckFailed, match=r"wrote no note: call stepstone.note\(text\)"):
            run.step("explore", lambda: None, checks=["note"])
        assert run.records["explore"].status == "failed"


def test_a_note_outside_a_step_or_with_an_argument_is_refused(workdir: Path):
    with stepstone.open_run("job") as run:
        with pytest.raises(stepstone.StepstoneError, match="outside a step"):
            stepstone.note("nothing is running")
        with pytest.raises(InvalidInput, match="a note takes no argument"):
            run.step("explore", lambda: None, checks=["note:topic"])
