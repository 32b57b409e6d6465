"""Magic lines as written: lines ending in `?` in every shell, and clear option errors."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import clean_env, stepstone_cli
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from nbformat.v4 import new_code_cell, new_notebook

import stepstone
from stepstone.model.models import StepSpec
from stepstone.notebook import cellargs

QUESTION = "Are the prices in EUR or USD?"


@pytest.fixture
def shell(workdir: Path):
    ip = InteractiveShell.instance()
    yield ip
    ip.run_line_magic("unload_ext", "stepstone")
    for name in ("currency", "unit", "price", "x"):
        ip.user_ns.pop(name, None)


def _ok(ip: InteractiveShell, cell: str) -> None:
    result = ip.run_cell(cell)
    assert result.success, result.error_before_exec or result.error_in_exec


def _recorded(workdir: Path) -> tuple[list[str], dict[str, str]]:
    run = stepstone.open_run("demo", repo=workdir / ".stepstone", drive=False, create=False)
    questions = [u.question for u in sorted(run.unknowns.values(), key=lambda u: int(u.id[1:]))]
    return questions, {d.key: d.why for d in run.decisions.values()}


def test_question_lines_are_recorded_as_written_in_a_shell(shell, workdir: Path):
    _ok(shell, "%load_ext stepstone\n%resume --run demo")
    _ok(shell, f"%unknown {QUESTION}")
    _ok(shell, "%decide currency=EUR --why maybe?")
    _ok(shell, "currency = 'EUR'\nif currency:\n    %unknown Is $currency right?\nx = 1")
    _ok(shell, "%unknown Is the feed \\\n  daily?")
    _ok(shell, "%%step a\n%unknown Who owns the feed?\n")
    questions, whys = _recorded(workdir)
    assert questions == [QUESTION, "Is EUR right?", "Is the feed daily?", "Who owns the feed?"]
    assert whys == {"currency": "maybe?"}


def test_question_lines_in_the_cell_that_loads_the_extension_are_recorded(shell, workdir):
    _ok(
        shell,
        "%load_ext stepstone\n%resume --run demo\n"
        f"currency = 'EUR'\n%unknown {QUESTION}\n"
        "for unit in ['cents']:\n    %unknown Are they in $unit?\n"
        "%decide currency=EUR --why maybe?",
    )
    assert _recorded(workdir) == (
        [QUESTION, "Are they in cents?"],
        {"currency": "maybe?"},
    )


def test_help_requests_still_show_help_beside_question_lines(shell, workdir, capsys):
    shell.user_ns["price"] = 41
    _ok(shell, f"%load_ext stepstone\n%resume --run demo\n%unknown {QUESTION}\nprice?")
    _ok(shell, f"%unknown {QUESTION} Really?\nprice??\n%unknown?")
    _ok(shell, "%pinfo price")
    out = capsys.readouterr().out
    assert out.count("Type:") == 3 and re.search("String form:.* 41", out)
    assert "Record an open question" in out  # %unknown? shows the magic's help
    assert _recorded(workdir)[0] == [QUESTION, f"{QUESTION} Really?"]


def test_an_ipy_file_records_its_question_lines(workdir: Path):
    (workdir / "job.ipy").write_text(
        "%load_ext stepstone\n%resume --run demo\n"
        f"currency = 'EUR'\n%unknown {QUESTION}\n%unknown Is $currency right?\n"
        "price = 41\nprice?\n"
        "%decide currency=EUR --why maybe?\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "job.ipy"],
        cwd=workdir,
        env=clean_env(IPYTHONDIR=str(workdir / "ipython")),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "41" in done.stdout and "not found" not in done.stdout
    assert _recorded(workdir) == ([QUESTION, "Is EUR right?"], {"currency": "maybe?"})


@pytest.mark.kernel
def test_a_notebook_records_its_question_lines(workdir: Path):
    cells = [
        "%load_ext stepstone\n%resume\n%decide currency=EUR --why maybe?",
        f"%unknown {QUESTION}",
        "%%step a\n%unknown Who owns the feed?",
    ]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), "job.ipynb")
    done = stepstone_cli("run", "job.ipynb", cwd=workdir)
    assert done.returncode == 0, done.stderr
    status = stepstone_cli("status", "--json", cwd=workdir)
    assert status.returncode == 0, status.stderr
    record = json.loads(status.stdout)
    assert [u["question"] for u in record["unknowns"]] == [QUESTION, "Who owns the feed?"]
    assert [(d["key"], d["why"]) for d in record["decisions"]] == [("currency", "maybe?")]


@pytest.mark.parametrize(
    ("parse", "line", "named", "options"),
    [
        (
            cellargs.parse_step_line,
            "-x",
            "-x",
            "--check, --keep, --out, --in, --uses, --note, --force",
        ),
        (
            cellargs.parse_step_line,
            "a --chek file:x",
            "--chek",
            "--check, --keep, --out, --in, --uses, --note, --force",
        ),
        (cellargs.parse_step_line, "--out=n a --forse=1", "--forse", "--check, --keep, --out"),
        (
            cellargs.parse_decide_line,
            "k=v --why w --revize",
            "--revize",
            "--why, --revise, --dry-run",
        ),
        (cellargs.parse_decide_line, "--because w", "--because", "--why, --revise, --dry-run"),
        (cellargs.parse_unknown_line, "--resolv U1 yes", "--resolv", "--resolve"),
        (cellargs.parse_resume_line, "--rn demo", "--rn", "--run, --repo, --steal"),
        (cellargs.parse_finish_line, "--forse", "--forse", "--force"),
    ],
)
def test_an_unknown_option_is_named_with_the_options(parse, line, named, options):
    with pytest.raises(stepstone.InvalidInput) as caught:
        parse(line)
    message = str(caught.value)
    assert f"{named} is not an option" in message and f"(options: {options}" in message
    assert "required" not in message


def test_step_names_the_unknown_option_and_a_really_missing_name(shell, workdir: Path):
    _ok(shell, "%load_ext stepstone\n%resume --run demo")
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("step", "-x", "pass")
    assert str(caught.value).startswith(
        "%%step: unrecognized arguments: -x is not an option "
        "(options: --check, --keep, --out, --in, --uses, --note, --force"
    )
    with pytest.raises(UsageError, match="required: name"):
        shell.run_cell_magic("step", "--force", "pass")
    question = "-x is odd; is -5 too?"
    assert cellargs.parse_unknown_line(f"-- {question}") == (None, question)


@given(
    st.one_of(
        st.text(min_size=1, max_size=30),
        st.text(alphabet="ab-_.:/\"' \\\t\n\u00a0\x0b", min_size=1, max_size=12),
    )
)
def test_a_step_line_of_one_word_reads_as_the_option_parser_reads_it(line: str):
    def by_the_parser() -> StepSpec:
        return cellargs._parse_step_args(cellargs._parser("step").parse_args(cellargs.split(line)))

    try:
        expected = by_the_parser()
    except stepstone.StepstoneError:
        with pytest.raises(stepstone.StepstoneError):
            cellargs.parse_step_line(line)
    else:
        assert cellargs.parse_step_line(line) == expected
