"""The magics on a real IPython shell."""

import __future__

import json
from pathlib import Path

import pytest
from conftest import git, stepstone_cli
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import stepstone


@pytest.fixture
def ip(workdir: Path):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "stepstone")
    for name in ("counter", "rows", "total"):
        shell.user_ns.pop(name, None)
    yield shell
    shell.run_line_magic("unload_ext", "stepstone")


def _cells(ip, counter_file: Path) -> None:
    def note(name: str) -> None:
        with counter_file.open("a") as handle:
            handle.write(name + "\n")

    ip.user_ns["note"] = note
    ip.run_cell_magic(
        "step",
        "load --check file:rows.json --out rows",
        "import json, pathlib\nnote('load')\n"
        "rows = [1, 2, 3]\npathlib.Path('rows.json').write_text(json.dumps(rows))",
    )
    ip.run_cell_magic(
        "step", 'total --check "expr:total == 6" --out total', "note('total')\ntotal = sum(rows)"
    )


def test_a_resumed_shell_skips_verified_cells_and_restores_outputs(ip, workdir: Path, capsys):
    counter = workdir / "executions.txt"
    ip.run_line_magic("resume", "--run demo")
    _cells(ip, counter)
    # a "new kernel": the namespace is gone
    ip.user_ns.pop("rows")
    ip.user_ns.pop("total")
    ip.run_line_magic("resume", "--run demo")
    out = capsys.readouterr().out
    assert "verified" in out and "incremental" in out
    _cells(ip, counter)
    assert counter.read_text().split() == ["load", "total"]
    assert ip.user_ns["rows"] == [1, 2, 3] and ip.user_ns["total"] == 6
    assert "skipped, verified" in capsys.readouterr().out
    subjects = git("log", "--format=%s", cwd=workdir / ".stepstone")
    assert subjects.count(": confirmed") == 2


def test_an_edited_cell_runs_again(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "a --out x", "x = 1")
    ip.run_cell_magic("step", "a --out x", "x = 2")
    assert ip.user_ns["x"] == 2


def test_step_before_resume_is_a_usage_error(ip):
    with pytest.raises(UsageError, match="run %resume first"):
        ip.run_cell_magic("step", "a", "x = 1")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a --bogus", "unrecognized arguments"),
        ("a --check nope:x", "unknown check"),
        ("", "required"),
        ("../x", "invalid step name"),
    ],
)
def test_bad_step_lines_are_one_line_usage_errors(ip, line, message):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("step", line, "x = 1")


def test_a_cell_that_raises_is_recorded_failed(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("step", "boom", "1 / 0")
    assert "step 1 boom: failed" in git("log", "-1", "--format=%s", cwd=workdir / ".stepstone")


def test_an_out_variable_the_cell_did_not_define_fails_the_step(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(UsageError, match="not defined by step"):
        ip.run_cell_magic("step", "a --out never_defined", "y = 1")


def test_a_failed_check_is_a_usage_error_and_a_failed_record(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(UsageError, match="did not pass"):
        ip.run_cell_magic("step", "a --check file:missing.csv", "pass")


def test_decide_unknown_and_finish(ip, workdir: Path, capsys):
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "a", "pass")
    ip.run_line_magic("decide", 'model=ridge --why "lowest error"')
    ip.run_cell("import stepstone; chosen = stepstone.decided('model')")
    assert ip.user_ns["chosen"] == "ridge"
    ip.run_line_magic("unknown", "is the feed complete?")
    with pytest.raises(UsageError, match="unknown U1 is open"):
        ip.run_line_magic("finish", "")
    ip.run_line_magic("unknown", "--resolve U1 yes, vendor confirmed")
    ip.run_line_magic("finish", "")
    assert "stepstone/demo" in git("tag", "--list", cwd=workdir / ".stepstone")
    summary = git("show", "stepstone/demo:summary.md", cwd=workdir / ".stepstone")
    assert "lowest error" in summary and "vendor confirmed" in summary


def test_decide_without_a_reason_is_refused(ip):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(UsageError, match="--why"):
        ip.run_line_magic("decide", "model=ridge")


def test_an_explicit_plan_cell(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("plan", "", "- fetch\n- name: clean\n  checks: [file:clean.csv]\n")
    with pytest.raises(UsageError, match="'fetch' is not confirmed"):
        ip.run_cell_magic("step", "clean", "pass")


def test_resume_without_a_run_id_asks_for_one(ip, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    with pytest.raises(UsageError, match="--run ID"):
        ip.run_line_magic("resume", "")


def test_an_output_that_cannot_be_saved_fails_the_step(ip, workdir: Path):
    ip.run_line_magic("resume", "--run demo")
    with pytest.raises(UsageError, match="cannot be saved"):
        ip.run_cell_magic("step", "a --out gen", "gen = (i for i in range(3))")
    assert "step 1 a: failed" in git("log", "-1", "--format=%s", cwd=workdir / ".stepstone")


@pytest.mark.kernel
def test_the_quickstart_resumes_in_a_shell_after_a_headless_run(ip, workdir: Path, monkeypatch):
    import shutil
    import subprocess
    import sys

    import nbformat

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "notebooks" / "quickstart.ipynb", workdir)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("STEPSTONE_")}
    done = subprocess.run(
        [sys.executable, "-m", "stepstone", "run", "quickstart.ipynb"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("STEPSTONE_NOTEBOOK", str(workdir / "quickstart.ipynb"))
    monkeypatch.setenv("STEPSTONE_RUN", "quickstart")
    book = nbformat.read(str(workdir / "quickstart.ipynb"), as_version=4)
    tip = git("rev-parse", "HEAD", cwd=workdir / ".stepstone")
    for cell in book.cells:
        if cell.cell_type == "code":
            result = ip.run_cell(cell.source)
            assert result.success, result.error_in_exec or result.error_before_exec
    # every step was skipped and its outputs restored; nothing new was committed
    assert ip.user_ns["n_rows"] == 90 and sorted(ip.user_ns["summary"]) == [
        "ACME",
        "GLOBEX",
        "INITECH",
    ]
    assert git("rev-parse", "HEAD", cwd=workdir / ".stepstone") == tip


def test_a_cell_error_stays_visible_when_its_failure_cannot_be_recorded(ip, workdir: Path):
    from stepstone.errors import RunFinished

    ip.run_line_magic("resume", "--run demo")
    cell = "import stepstone.run\nstepstone.run.active_run().finish(force=True)\n1 / 0"
    with pytest.raises(RunFinished) as raised:
        ip.run_cell_magic("step", "a", cell)
    assert not isinstance(raised.value, UsageError)  # shown with its traceback, not one line
    assert isinstance(raised.value.__context__, ZeroDivisionError)


def test_a_note_cell_is_weak_evidence_and_is_skipped_when_resumed(ip, workdir: Path, capsys):
    runs = workdir / "runs.txt"
    ip.user_ns["runs"] = runs
    cell = (
        "import stepstone\nwith runs.open('a') as f: f.write('x')\nstepstone.note('rows are daily')"
    )
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "explore --note", cell)
    assert "confirmed (note (weak): rows are daily)" in capsys.readouterr().out
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "explore --note", cell)
    assert "skipped, verified (note (weak): rows are daily)" in capsys.readouterr().out
    assert runs.read_text() == "x"


def test_a_result_resting_on_an_open_unknown_blocks_finish_and_its_answer_reruns_it(
    ip, workdir: Path, capsys
):
    runs = workdir / "runs.txt"
    ip.user_ns["runs"] = runs
    cell = "with runs.open('a') as out:\n    out.write('x')"
    ip.run_line_magic("resume", "--run demo")
    ip.run_line_magic("unknown", "Are the prices in EUR or USD?")
    ip.run_cell_magic("step", "convert --uses U1", cell)
    with pytest.raises(UsageError, match="step convert rests on open unknown U1"):
        ip.run_line_magic("finish", "")
    ip.run_line_magic("resume", "--run demo")
    assert "step convert rests on open unknown U1" in capsys.readouterr().out
    ip.run_line_magic("unknown", "--resolve U1 EUR, says the vendor")
    ip.run_line_magic("resume", "--run demo")
    assert "U1, which it rests on, was answered since it ran" in capsys.readouterr().out
    ip.run_cell_magic("step", "convert --uses U1", cell)
    assert runs.read_text() == "xx"  # ran again with the answer
    ip.run_line_magic("finish", "")


def test_a_cell_that_reads_an_answer_rests_on_it_without_declaring_it(ip, workdir: Path):
    runs = workdir / "runs.txt"
    ip.user_ns["runs"] = runs
    cell = (
        "import stepstone\ncurrency = stepstone.answer('U1', 'EUR')\n"
        "with runs.open('a') as out:\n    out.write(currency + ' ')"
    )
    ip.run_line_magic("resume", "--run demo")
    ip.run_line_magic("unknown", "Are the prices in EUR or USD?")
    ip.run_cell_magic("step", "convert", cell)
    with pytest.raises(UsageError, match="step convert rests on open unknown U1"):
        ip.run_line_magic("finish", "")
    ip.run_line_magic("unknown", "--resolve U1 USD")
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "convert", cell)
    assert runs.read_text().split() == ["EUR", "USD"]  # ran again with the answer
    record = stepstone.open_run("demo", drive=False).records["convert"]
    assert record.inputs == {"unknown:U1": "USD"}
    ip.run_line_magic("finish", "")


def test_reading_the_answer_to_a_question_never_asked_names_the_questions(ip):
    ip.run_line_magic("resume", "--run demo")
    ip.run_line_magic("unknown", "Are the prices in EUR or USD?")
    with pytest.raises(stepstone.InvalidInput, match="has no question 'U7'; its questions: U1"):
        ip.run_cell_magic("step", "other", "import stepstone\nstepstone.answer('U7')")


def test_decide_dry_run_names_the_readers_and_records_nothing(ip, workdir: Path, capsys):
    ip.run_line_magic("resume", "--run demo")
    ip.run_line_magic("decide", 'threshold=105 --why "first guess"')
    ip.run_cell_magic("step", "report", "import stepstone\nt = stepstone.decided('threshold')")
    ip.run_cell_magic("step", "other", "u = 1")
    capsys.readouterr()
    ip.run_line_magic("decide", 'threshold=110 --why "too many" --revise --dry-run')
    said = capsys.readouterr().out
    # other reads nothing of report's, but is recorded after it: the conservative rule
    assert "revising threshold: 105 → 110 would run again: report, other (nothing" in said
    assert stepstone.open_run("demo", drive=False).decided("threshold") == "105"
    ip.run_line_magic("decide", 'threshold=110 --why "too many" --revise')
    said = capsys.readouterr().out
    assert "revised threshold: 105 → 110 (too many); runs again: report, other" in said
    ip.run_cell_magic("step", "report", "import stepstone\nt = stepstone.decided('threshold')")
    ip.run_cell_magic("step", "other", "u = 1")
    said = capsys.readouterr().out
    assert "report" in said and "other" in said and "skipped" not in said  # both ran again


def test_decide_previews_follow_the_values_the_readers_saw(ip, workdir: Path, capsys):
    ip.run_line_magic("resume", "--run demo")
    reader = "import stepstone\nv = stepstone.decided('k', '1')"  # a default, not decided
    ip.run_cell_magic("step", "a", reader)
    ip.run_cell_magic("step", "b", "w = 1")
    capsys.readouterr()
    ip.run_line_magic("decide", 'k=2 --why "first" --dry-run')
    assert "deciding k=2 runs again: a, b (nothing recorded)" in capsys.readouterr().out
    ip.run_line_magic("decide", 'k=2 --why "first"')
    assert "decided k=2 (first); runs again: a, b" in capsys.readouterr().out
    ip.run_cell_magic("step", "a", reader)
    ip.run_cell_magic("step", "b", "w = 1")
    assert "skipped" not in capsys.readouterr().out  # both ran, as said
    ip.run_line_magic("decide", 'k=3 --why "second" --revise')
    capsys.readouterr()  # and back before anything ran: a saw 2
    ip.run_line_magic("decide", 'k=2 --why "back" --revise --dry-run')
    assert "would run again: no recorded step" in capsys.readouterr().out
    ip.run_line_magic("decide", 'k=2 --why "back" --revise')
    ip.run_cell_magic("step", "a", reader)
    ip.run_cell_magic("step", "b", "w = 1")
    assert capsys.readouterr().out.count("skipped") == 2


def test_decide_dry_run_in_a_notebook_says_what_the_line_would_meet(ip, workdir: Path, capsys):
    ip.run_line_magic("resume", "--run demo")
    ip.run_line_magic("decide", 'threshold=105 --why "first guess"')
    capsys.readouterr()
    # a change without --revise: refused by the line, so refused by its preview
    with pytest.raises(UsageError, match="not reopening it with '110'"):
        ip.run_line_magic("decide", 'threshold=110 --why "too many" --dry-run')
    # revised outside the notebook: that decision stands over this line, and the preview
    # says so instead of promising a revision
    ip.magics_manager.registry["StepstoneMagics"].close()
    with stepstone.open_run("demo") as run:
        run.decide("threshold", "120", "the desk asked", revise=True)
    ip.run_line_magic("resume", "--run demo")
    capsys.readouterr()
    ip.run_line_magic("decide", 'threshold=105 --why "first guess" --dry-run')
    said = capsys.readouterr().out
    assert "threshold=120 stands: decided outside the notebook" in said
    ip.run_line_magic("decide", 'threshold=105 --why "first guess"')
    assert "threshold=120 stands: decided outside the notebook" in capsys.readouterr().out
    assert stepstone.open_run("demo", drive=False).decided("threshold") == "120"


def test_step_rerun_runs_a_verified_cell_once_for_its_reason(ip, workdir: Path, capsys):
    counter = workdir / "executions.txt"

    def note(name: str) -> None:
        with counter.open("a") as handle:
            handle.write(name + "\n")

    ip.user_ns["note"] = note
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", "fetch --out x", "note('fetch')\nx = 1")
    ip.run_cell_magic("step", "use --out y", "note('use')\ny = x + 1")
    ip.run_line_magic("resume", "--run demo")
    line = 'fetch --out x --rerun "the feed was re-issued"'
    ip.run_cell_magic("step", line, "note('fetch')\nx = 1")
    ip.run_cell_magic("step", "use --out y", "note('use')\ny = x + 1")
    assert counter.read_text().split() == ["fetch", "use", "fetch", "use"]
    # the reason is in Git, and a resume with the same line does not run it again
    subjects = git("log", "--format=%s", cwd=workdir / ".stepstone")
    assert "rerun fetch: the feed was re-issued" in subjects
    ip.run_line_magic("resume", "--run demo")
    ip.run_cell_magic("step", line, "note('fetch')\nx = 1")
    ip.run_cell_magic("step", "use --out y", "note('use')\ny = x + 1")
    assert counter.read_text().split() == ["fetch", "use", "fetch", "use"]
    # a new reason runs it again
    ip.run_cell_magic("step", "fetch --out x --rerun 'second issue'", "note('fetch')\nx = 1")
    assert counter.read_text().split()[-1] == "fetch"


def test_step_force_help_says_what_it_does(ip):
    from stepstone.notebook import cellargs

    usage = " ".join(cellargs._parser("step").format_help().split())
    assert "--force run the step although the step before it is not verified" in usage
    assert "--rerun REASON run the cell again although its evidence verifies" in usage


def test_a_step_cell_not_in_the_saved_notebook_asks_for_a_save(
    ip, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    import nbformat

    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"),
        nbformat.v4.new_code_cell("%%step a\nx = 1"),
        nbformat.v4.new_code_cell("%%step b\ny = x + 1"),
    ]
    nbformat.write(book, str(workdir / "job.ipynb"))
    monkeypatch.setenv("STEPSTONE_NOTEBOOK", str(workdir / "job.ipynb"))  # as a client says
    ip.run_line_magic("resume", "")
    ip.run_cell_magic("step", "a", "x = 2  # edited in the browser, not saved: runs as seen")
    assert ip.user_ns["x"] == 2
    with pytest.raises(UsageError, match=r"not in job\.ipynb as last saved: save the notebook"):
        ip.run_cell_magic("step", "c", "z = 3  # a new cell, not saved")


def test_a_reader_of_a_renamed_step_is_not_tied_to_a_new_step_that_took_its_old_name(
    ip, workdir: Path
):
    make_a = "import pathlib\npathlib.Path('a.txt').write_text('a')"
    read_a = (
        "import pathlib\nwith open('ran.log', 'a') as log:\n    log.write('clean ')\n"
        "pathlib.Path('b.txt').write_text(pathlib.Path('a.txt').read_text())"
    )
    ip.run_line_magic("resume", "--run job")
    load = '{"name": "load", "checks": ["file:a.txt"]}'
    clean = '{"name": "clean", "checks": ["file:b.txt"]}'
    ip.run_cell_magic("plan", "", f"[{load}, {clean}]")
    ip.run_cell_magic("step", "load --check file:a.txt", make_a)
    ip.run_cell_magic("step", "clean --check file:b.txt", read_a)  # reads load's a.txt
    fetch = '{"name": "fetch", "renamed_from": ["load"], "checks": ["file:a.txt"]}'
    new_load = '{"name": "load", "checks": ["file:c.txt"]}'  # a new step takes the old name
    ip.run_cell_magic("plan", "", f"[{fetch}, {clean}, {new_load}]")
    ip.run_cell_magic("step", "fetch --check file:a.txt", make_a)
    ip.run_cell_magic("step", "clean --check file:b.txt", read_a)
    new = "import pathlib\npathlib.Path('c.txt').write_text('c')"
    ip.run_cell_magic("step", "load --check file:c.txt", new)
    with stepstone.open_run("job", drive=False) as reader:
        states = {s.name: (s.state, s.reason) for s in reader.status().steps}
    assert states["clean"] == ("verified", ""), states  # it read fetch's a.txt, not load's
    assert (workdir / "ran.log").read_text() == "clean "  # and was skipped

    def logged(step: str) -> list[str]:
        done = stepstone_cli("log", "--step", step, "--json", cwd=workdir)
        assert done.returncode == 0, done.stderr
        return [entry["subject"] for entry in json.loads(done.stdout)]

    # each step's log has its own commits: fetch's under its old name, not the new load's
    # a step's plan entry rides in its first commit: one commit a step
    assert logged("load") == ["step 3 load: confirmed"]
    assert logged("fetch") == ["plan: update step 1 fetch", "step 1 load: confirmed"]


def test_a_step_cell_compiles_as_a_plain_cell_does(ip, workdir: Path):
    ip.run_line_magic("resume", "--run compiled")
    ip.run_cell("%%step typed\ndef f(x: int): pass\nstep_hints = f.__annotations__")
    ip.run_cell("def g(x: int): pass\nplain_hints = g.__annotations__")
    # stepstone's own `from __future__ import annotations` must not reach the cell
    assert ip.user_ns["step_hints"] == ip.user_ns["plain_hints"] == {"x": int}
    for name in ("f", "step_hints"):
        ip.user_ns.pop(name)
    ip.run_line_magic("resume", "--run compiled")
    ip.run_cell("%%step typed\ndef f(x: int): pass\nstep_hints = f.__annotations__")
    assert ip.user_ns["f"].__annotations__ == {"x": int}  # made again on skip, the same
    ip.run_cell("%%step postponed\nfrom __future__ import annotations\ndef h(x: int): pass")
    ip.run_cell("def k(x: int): pass\nlater_hints = k.__annotations__")
    assert ip.user_ns["later_hints"] == {"x": "int"}  # as after a plain cell's import
    broken = ip.run_cell("%%step broken\nx = (")
    assert isinstance(broken.error_in_exec, SyntaxError)
    for name in ("f", "g", "h", "k", "step_hints", "plain_hints", "later_hints"):
        ip.user_ns.pop(name, None)
    ip.compile.flags &= ~__future__.annotations.compiler_flag  # the shell is shared by tests


def test_a_step_line_is_read_as_written_without_kernel_variables(ip, workdir: Path):
    # as the plan read from the saved notebook has it: `{n}` is a set, not the text 5
    ip.user_ns["n"] = 5
    ip.run_line_magic("resume", "--run literal")
    result = ip.run_cell("%%step part --check 'expr:{n} == {5}'\ny = 1")
    assert result.error_in_exec is None
    run = ip.magics_manager.registry["StepstoneMagics"].session.run
    assert [ev.check for ev in run.records["part"].evidence] == ["expr:{n} == {5}"]
    for name in ("n", "y"):
        ip.user_ns.pop(name, None)


def test_a_new_reason_for_the_same_decision_is_recorded_and_an_outside_one_stands(
    ip, workdir: Path, capsys
):
    ip.run_line_magic("resume", "--run reasons")
    ip.run_line_magic("decide", 'threshold=105 --why "first guess"')
    ip.run_line_magic("decide", 'threshold=105 --why "mean of the feed"')  # the line edited
    assert "decided threshold=105 (mean of the feed)" in capsys.readouterr().out
    assert "reason for threshold" in git("log", "-1", "--format=%s", cwd=workdir / ".stepstone")
    ip.magics_manager.registry["StepstoneMagics"].close()
    with stepstone.open_run("reasons") as run:  # the same value, reasoned outside
        run.decide("threshold", "105", "the desk confirmed it")
    ip.run_line_magic("resume", "--run reasons")
    ip.run_line_magic("decide", 'threshold=105 --why "mean of the feed"')  # run again
    reader = stepstone.open_run("reasons", drive=False)
    (decision,) = [d for d in reader.decisions.values() if d.key == "threshold"]
    assert (decision.value, decision.why, decision.by) == ("105", "the desk confirmed it", "python")
    ip.run_line_magic("decide", 'threshold=110 --why "too many" --revise')  # the line's own
    reader = stepstone.open_run("reasons", drive=False)
    assert reader.decided("threshold") == "110"


def test_finish_in_the_notebook_refuses_to_leave_out_a_step_edited_since_it_ran(
    ip, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    import nbformat

    def save(b_body: str) -> None:
        book = nbformat.v4.new_notebook()
        book.cells = [
            nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"),
            nbformat.v4.new_code_cell("%%step a\nx = 1"),
            nbformat.v4.new_code_cell(f"%%step b\n{b_body}"),
            nbformat.v4.new_code_cell("%finish"),
        ]
        nbformat.write(book, str(workdir / "job.ipynb"))

    save("y = x + 1")
    monkeypatch.setenv("STEPSTONE_NOTEBOOK", str(workdir / "job.ipynb"))
    ip.run_line_magic("resume", "--run job")
    ip.run_cell_magic("step", "a", "x = 1")
    ip.run_cell_magic("step", "b", "y = x + 1")
    save("y = x + 2")  # edited and saved in the browser, not run
    with pytest.raises(UsageError, match=r"edited or added since they ran: b\. Run them first"):
        ip.run_line_magic("finish", "")
    assert "finish" not in git("log", "--format=%s", cwd=workdir / ".stepstone")
    ip.run_cell_magic("step", "b", "y = x + 2")
    ip.run_line_magic("finish", "")
    assert "finish: 2 steps" in git("log", "--format=%s", cwd=workdir / ".stepstone")


def test_decide_dry_run_of_the_same_value_says_whether_its_new_reason_would_be_recorded(
    ip, workdir: Path, capsys
):
    ip.run_line_magic("resume", "--run reasons")
    ip.run_line_magic("decide", 'threshold=105 --why "first guess"')
    capsys.readouterr()
    ip.run_line_magic("decide", 'threshold=105 --why "mean of the feed" --dry-run')
    said = capsys.readouterr().out
    assert "threshold is already 105: its reason would become 'mean of the feed'" in said
    assert "no step runs again (nothing recorded)" in said
    assert stepstone.open_run("reasons", drive=False).decisions["threshold"].why == "first guess"
    ip.run_line_magic("decide", 'threshold=105 --why "first guess" --dry-run')
    assert "threshold is already 105: nothing changes" in capsys.readouterr().out
    ip.magics_manager.registry["StepstoneMagics"].close()
    cli = stepstone_cli("decide", "threshold", "105", "--why", "desk", "--dry-run", cwd=workdir)
    assert "its reason would become 'desk'" in cli.stdout, cli.stderr
    with stepstone.open_run("reasons") as run:  # reasoned outside: the line rewords it no more
        run.decide("threshold", "105", "the desk confirmed it")
    ip.run_line_magic("resume", "--run reasons")
    capsys.readouterr()
    ip.run_line_magic("decide", 'threshold=105 --why "mean of the feed" --dry-run')
    assert "threshold is already 105: nothing changes" in capsys.readouterr().out


def test_a_step_run_again_after_a_failed_attempt_starts_from_what_the_attempt_found(
    ip, workdir: Path, capsys
):
    import pandas as pd

    stop = workdir / "stop"
    load = "%%step load\nimport pandas as pd\ndf = pd.DataFrame({'price': [10.0, 20.0]})"
    clean = (
        "%%step clean\nimport pathlib\ndf['price'] = df['price'] * 1.1\n"
        "if pathlib.Path('stop').exists():\n    raise KeyboardInterrupt\nn = len(df)"
    )
    ip.run_line_magic("resume", "--run retry")
    assert ip.run_cell(load, store_history=True).success
    stop.touch()  # interrupted after its in-place change
    assert not ip.run_cell(clean, store_history=True).success
    said = capsys.readouterr().out
    assert "it changed df in place, which the cell's next run first puts back" in said
    assert not ip.run_cell(clean, store_history=True).success  # Ctrl-C again
    assert "df (as it was before it)" in capsys.readouterr().out
    stop.unlink()
    assert ip.run_cell(clean, store_history=True).success  # run again, as the card says
    assert "put back as the failed attempt found them: df (as it was before it)" in (
        capsys.readouterr().out
    )
    assert list(ip.user_ns["df"]["price"]) == [11.0, 22.0]  # as one run top to bottom
    pd.testing.assert_frame_equal(
        stepstone.open_run("retry", drive=False).saved_values("clean", ["df"])["df"],
        ip.user_ns["df"],
    )

    # another cell ran in between: the attempt's change is told from its own start
    assert ip.run_cell("x = 1", store_history=True).success
    stop.touch()
    again = clean.replace("%%step clean", "%%step again")
    assert not ip.run_cell(again, store_history=True).success
    assert "it changed df in place" in capsys.readouterr().out
    stop.unlink()
    assert ip.run_cell(again, store_history=True).success
    assert "df (as it was before it)" in capsys.readouterr().out
    assert list(ip.user_ns["df"]["price"]) == pytest.approx([12.1, 24.2])  # as one run
    for name in ("df", "pd", "n", "x"):
        ip.user_ns.pop(name, None)


def test_a_step_whose_check_failed_runs_again_from_what_its_attempt_found(
    ip, workdir: Path, capsys
):
    load = "%%step load\nimport numpy as np\nprices = np.array([10.0, 20.0])"
    scale = "prices *= 2\nn = int(prices.sum())"
    ip.run_line_magic("resume", "--run checked")
    assert ip.run_cell(load, store_history=True).success
    assert not ip.run_cell(f'%%step scale --check "expr:n == 61"\n{scale}').success
    assert "step scale: it changed prices in place" in capsys.readouterr().out
    assert ip.run_cell(f'%%step scale --check "expr:n == 60"\n{scale}').success  # fixed
    assert list(ip.user_ns["prices"]) == [20.0, 40.0]
    for name in ("np", "prices", "n"):
        ip.user_ns.pop(name, None)


def test_a_value_changed_through_an_alias_is_saved_by_the_step_that_changed_it(
    ip, workdir: Path, capsys
):
    ip.run_line_magic("resume", "--run alias")
    assert ip.run_cell("%%step load\nimport numpy as np\na = np.arange(3.0)\nb = a").success
    assert ip.run_cell("%%step double\nb *= 2").success  # a changed too: the same array
    double = stepstone.run.active.driven_run().records.get("double")
    assert double is not None and {"a", "b"} <= set(double.outputs)
    assert not ip.run_cell("%%step total\nt = a.sum()\nraise KeyboardInterrupt").success
    said = capsys.readouterr().out
    assert "differ" not in said and "put back" not in said  # a is as double saved it
    assert ip.run_cell("%%step total\nt = a.sum()").success
    assert ip.user_ns["t"] == 6.0  # as one run top to bottom: double's change stands
    for name in ("np", "a", "b", "t"):
        ip.user_ns.pop(name, None)


def _commits(workdir: Path) -> int:
    return int(git("rev-list", "--count", "--all", cwd=workdir / ".stepstone").strip())


def test_a_step_a_plan_names_costs_one_commit_as_an_unplanned_one_does(ip, workdir: Path):
    ip.run_line_magic("resume", "--run planned")
    ip.run_cell_magic("plan", "", '["a", "b", "c"]')
    planned = _commits(workdir)
    for name in "abc":
        ip.run_cell_magic("step", f"{name} --check expr:True", f"x_{name} = 1")
    assert _commits(workdir) - planned == 3
    with stepstone.open_run("api", drive=True) as run:
        run.set_plan([{"name": "p", "checks": ["expr:True"]}, "q"])
        planned = _commits(workdir)
        run.step("p", lambda: 1, checks=["expr:True"])
        run.step("q", lambda: 2)
    assert _commits(workdir) - planned == 2
    subjects = git("log", "--format=%s", "api", cwd=workdir / ".stepstone").split("\n")
    assert not [s for s in subjects if s.startswith("plan: update")]
    with stepstone.open_run("api", drive=False) as reader:  # the entries were committed
        assert [s.state for s in reader.status().steps] == ["verified", "verified"]
        assert reader.plan.steps[0].checks == ("expr:True",)


def test_resume_reads_the_notebook_file_once(ip, workdir: Path, monkeypatch: pytest.MonkeyPatch):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    book = new_notebook(cells=[new_code_cell("%%step a\nx = 1"), new_code_cell("%%step b\ny = 2")])
    path = workdir / "job.ipynb"
    nbformat.write(book, str(path))
    monkeypatch.setenv("STEPSTONE_NOTEBOOK", str(path))
    import builtins
    import io

    reads: list[str] = []
    real = builtins.open

    def counted(file, *args, **kwargs):
        if str(file).endswith("job.ipynb") and "w" not in (args[0] if args else "r"):
            reads.append(str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counted)
    monkeypatch.setattr(io, "open", counted)
    ip.run_line_magic("resume", "")
    assert len(reads) == 1
    ip.run_cell_magic("step", "a", "x = 1")
    edited = path.read_text().replace("x = 1", "x = 3")
    path.write_text(edited)  # edited: read again, once
    del reads[:]
    ip.run_line_magic("resume", "")
    assert len(reads) == 1
