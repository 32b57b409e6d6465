"""The check vocabulary: each check makes evidence that verify re-checks."""

import hashlib
from pathlib import Path

import pytest

import stepstone
from stepstone.rules import checks


def _ev(spec, workdir, **kw):
    return checks.run(checks.parse(spec), workdir=workdir, **kw)


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("a.json", '{"a": 1}', "json"),
        ("a.yaml", "a: [1, 2]\n", "yaml"),
        ("a.csv", "x,y\n1,2\n", "csv, 2 rows"),
        ("a.txt", "hello", "text"),
    ],
)
def test_a_file_that_parses_gives_its_sha256(tmp_path: Path, name, content, kind):
    (tmp_path / name).write_text(content)
    ev = _ev(f"file:{name}", tmp_path)
    assert ev.value == hashlib.sha256(content.encode()).hexdigest()
    assert ev.detail.startswith(kind)
    assert checks.verify(ev, workdir=tmp_path).ok


@pytest.mark.parametrize(
    ("name", "content"),
    [("a.json", "{oops"), ("a.yaml", "a: [1,"), ("a.ipynb", "{}"), ("a.csv", "")],
)
def test_a_file_that_does_not_parse_fails_its_check(tmp_path: Path, name, content):
    (tmp_path / name).write_text(content)
    with pytest.raises(checks.CheckNotPassed):
        _ev(f"file:{name}", tmp_path)


def test_sha256_check_compares_with_the_given_digest(tmp_path: Path):
    (tmp_path / "f.bin").write_bytes(b"abc")
    good = hashlib.sha256(b"abc").hexdigest()
    assert _ev(f"sha256:f.bin={good}", tmp_path).value == good
    with pytest.raises(checks.CheckNotPassed, match="expected"):
        _ev(f"sha256:f.bin={'0' * 64}", tmp_path)


def test_cmd_check_records_exit_status_and_reports_failures(tmp_path: Path):
    assert _ev("cmd:test 1 -eq 1", tmp_path).value == 0
    with pytest.raises(checks.CheckNotPassed, match="exited 3"):
        _ev("cmd:exit 3", tmp_path)


def test_expr_check_uses_the_given_values(tmp_path: Path):
    assert _ev("expr:len(rows) == 2", tmp_path, namespace={"rows": [1, 2]}).value is True
    with pytest.raises(checks.CheckNotPassed, match="is False"):
        _ev("expr:len(rows) == 3", tmp_path, namespace={"rows": [1, 2]})
    with pytest.raises(checks.CheckNotPassed, match="not defined"):
        _ev("expr:missing > 0", tmp_path)


def test_registered_callable_returns_an_identifier_that_verify_compares(tmp_path: Path):
    state = {"status": "sent"}

    @stepstone.check("record-4711")
    def record_status():
        return state["status"]

    ev = _ev("call:record-4711", tmp_path)
    assert ev.value == "sent"
    state["status"] = "bounced"
    verdict = checks.verify(ev, workdir=tmp_path)
    assert not verdict.ok and "bounced" in verdict.reason


def test_a_plain_callable_works_as_a_check(tmp_path: Path):
    spec = checks.parse(lambda: True)
    assert spec.kind == "call" and checks.run(spec, workdir=tmp_path).value is True


@pytest.mark.parametrize("bad", ["nope:x", "file", "file:", "sha256:x=12", "expr:1 +", 3])
def test_malformed_checks_are_refused_at_plan_time(bad):
    with pytest.raises(stepstone.InvalidInput):
        checks.parse(bad)
