"""Files that travel: `keep:PATH` checks (`%%step --keep`) keep the files a step writes
in the store, and a skipped step puts back the ones that are missing: a clone of the
store with only the notebook resumes without running anything again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import git
from conftest import stepstone_cli as cli
from nbformat.v4 import new_code_cell, new_notebook

import stepstone
from stepstone.model.models import dump
from stepstone.notebook.cellargs import parse_step_line

BIG = os.urandom(3 << 20)  # over the streaming threshold


def _write_out(folder: Path) -> None:
    (folder / "out").mkdir(exist_ok=True)
    (folder / "out" / "table.csv").write_text("a,b\n1,2\n")
    (folder / "out" / "weights.bin").write_bytes(BIG)


def test_keep_on_a_step_line_is_a_keep_check_and_a_bare_keep_keeps_the_file_checks():
    line = parse_step_line("make --check file:a.csv --keep out/model.bin --check cmd:true")
    assert line.checks == ("file:a.csv", "cmd:true", "keep:out/model.bin")
    bare = parse_step_line("make --check file:a.csv --keep --check cmd:true")
    assert bare.checks == ("keep:a.csv", "cmd:true")


def test_a_missing_kept_folder_is_put_back_and_the_step_skipped(workdir: Path):
    ran = []
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: ran.append(1) or _write_out(workdir), checks=["keep:out"])
    record = run.records["make"]
    assert sorted(record.kept) == ["out/table.csv", "out/weights.bin"]
    shutil.rmtree(workdir / "out")
    assert cli("status", cwd=workdir).returncode == 0  # a reader: the copy is in the store
    assert "verified" in cli("status", cwd=workdir).stdout
    with stepstone.open_run("keep") as run:
        again = run.step("make", lambda: ran.append(2), checks=["keep:out"])
        assert any("restored kept out/table.csv, out/weights.bin" in n for n in run.notes)
    assert again.skipped and ran == [1]
    assert (workdir / "out" / "weights.bin").read_bytes() == BIG
    assert (workdir / "out" / "table.csv").read_text() == "a,b\n1,2\n"


def test_reading_a_run_puts_back_no_kept_file(workdir: Path):
    """`stepstone status` and the other readers leave the work folder as it is: only a
    driver puts back a kept file that is missing."""
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: _write_out(workdir), checks=["keep:out"])
    shutil.rmtree(workdir / "out")
    for command in (["status"], ["status", "--json"], ["verify"], ["brief"]):
        done = cli(*command, cwd=workdir)
        assert done.returncode == 0, done.stderr
    with stepstone.open_run("keep", drive=False, create=False) as reader:
        assert reader.status().steps[0].state == "verified"
    assert not (workdir / "out").exists()
    with stepstone.open_run("keep") as run:
        run.status()
    assert (workdir / "out" / "table.csv").read_text() == "a,b\n1,2\n"


def test_a_kept_file_changed_locally_is_left_as_it_is_and_the_step_runs_again(workdir: Path):
    seen = []

    def make() -> None:
        target = workdir / "model.txt"
        seen.append(target.read_text() if target.exists() else None)
        target.write_text("made")

    with stepstone.open_run("keep") as run:
        run.step("make", make, checks=["keep:model.txt"])
    (workdir / "model.txt").write_text("edited by hand")
    with stepstone.open_run("keep") as run:
        again = run.step("make", make, checks=["keep:model.txt"])
    assert not again.skipped
    assert seen == [None, "edited by hand"]  # stepstone did not overwrite it first


@pytest.mark.parametrize("path", ["../outside.txt", "/tmp/stepstone-abs.txt", "a/../../b"])
def test_a_kept_path_outside_the_work_folder_is_refused_before_the_step_runs(
    workdir: Path, path: str
):
    ran = []
    with stepstone.open_run("keep") as run:
        with pytest.raises(stepstone.StepstoneError, match="outside the work folder"):
            run.step("make", lambda: ran.append(1), checks=[f"keep:{path}"])
        assert "make" not in run.records and ran == []


def test_a_kept_path_through_a_symbolic_link_is_refused(workdir: Path, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "data.txt").write_text("x")
    (workdir / "linked").symlink_to(elsewhere)
    with (
        stepstone.open_run("keep") as run,
        pytest.raises(stepstone.StepstoneError, match="symbolic link"),
    ):
        run.step("make", lambda: None, checks=["keep:linked/data.txt"])


def test_a_crafted_record_restores_nothing_and_its_step_runs_again(workdir: Path):
    (workdir / "model.txt").write_text("made")
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: None, checks=["keep:model.txt"])
        record = run.records["make"]
        art = record.kept["model.txt"]
        crafted = record.model_copy(update={"kept": {"model.txt": art, "../escaped.txt": art}})
        path = next(
            p for p in run.state.store.tree_files(run.state.snap.tree, lambda t: t == "steps")
        )
        run.ledger.commit({path: dump(crafted)}, "a crafted record", [], verbatim=True)
    (workdir / "model.txt").unlink()
    with stepstone.open_run("keep") as run:
        run.status()
        assert any("kept files not restored" in n and "outside" in n for n in run.notes)
        with pytest.raises(stepstone.CheckFailed):  # not restored: the step runs again
            run.step("make", lambda: None, checks=["keep:model.txt"])
    assert not (workdir.parent / "escaped.txt").exists()
    assert not (workdir / "model.txt").exists()


def _notebook(folder: Path) -> Path:
    make = (
        "%%step make --keep out\n"
        "open('executions.log', 'a').write('make\\n')\n"
        "import os, pathlib\n"
        "pathlib.Path('out').mkdir(exist_ok=True)\n"
        "pathlib.Path('out/table.csv').write_text('a,b\\n1,2\\n')\n"
        "pathlib.Path('out/big.bin').write_bytes(bytes(range(256)) * 8192)"
    )
    use = (
        "%%step use --check file:summary.txt --keep\n"
        "open('executions.log', 'a').write('use\\n')\n"
        "rows = open('out/table.csv').read().splitlines()\n"
        "open('summary.txt', 'w').write(str(len(rows)))"
    )
    cells = [new_code_cell("%load_ext stepstone\n%resume"), new_code_cell(make)]
    cells.append(new_code_cell(use))
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


@pytest.mark.kernel
def test_a_clone_with_only_the_notebook_resumes_without_running_a_step(workdir: Path, tmp_path):
    _notebook(workdir)
    first = cli("run", "job.ipynb", cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert (workdir / "executions.log").read_text() == "make\nuse\n"
    other = tmp_path / "other-machine"
    other.mkdir()
    shutil.copy(workdir / "job.ipynb", other / "job.ipynb")
    git("clone", "--bare", "-q", str(workdir / ".stepstone"), str(other / ".stepstone"), cwd=other)
    before = cli("status", "--json", cwd=other)  # a reader: the files are not there yet
    assert [s["state"] for s in json.loads(before.stdout)["steps"]] == ["verified", "verified"]
    assert "puts back its kept copy" in before.stdout
    again = cli("run", "job.ipynb", cwd=other)
    assert again.returncode == 0, again.stderr
    assert not (other / "executions.log").exists()  # nothing ran again
    for name in ("out/table.csv", "out/big.bin", "summary.txt"):
        assert (other / name).read_bytes() == (workdir / name).read_bytes()
    status = json.loads(cli("status", "--json", cwd=other).stdout)
    assert [s["state"] for s in status["steps"]] == ["verified", "verified"]


def test_a_kept_folder_with_a_file_added_by_hand_runs_again(workdir: Path):
    ran = []
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: ran.append(1) or _write_out(workdir), checks=["keep:out"])
    (workdir / "out" / "extra.csv").write_text("x\n")
    (workdir / "out" / "table.csv").unlink()  # missing, but the folder also changed
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert status["steps"][0]["state"] == "stale"
    with stepstone.open_run("keep") as run:
        assert not run.step("make", lambda: ran.append(2), checks=["keep:out"]).skipped
    assert ran == [1, 2]


def test_a_kept_path_that_cannot_be_put_back_does_not_block_other_steps(workdir: Path):
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: _write_out(workdir), checks=["keep:out"])
    shutil.rmtree(workdir / "out")
    (workdir / "out").write_text("a file where the kept folder was")
    with stepstone.open_run("keep") as run:
        assert run.step("other", lambda: 7, force=True).value == 7  # make is stale
        assert any("step make: kept files not restored" in n for n in run.notes)
    assert (workdir / "out").read_text() == "a file where the kept folder was"


def test_a_reader_sees_missing_kept_files_as_put_back_not_as_changed_inputs(workdir: Path):
    with stepstone.open_run("keep") as run:
        run.step("make", lambda: _write_out(workdir), checks=["keep:out"])
    shutil.rmtree(workdir / "out")
    reader = stepstone.open_run("keep", drive=False)
    assert [s.state for s in reader.status().steps] == ["verified"]
    assert any("out is missing; the next run puts back its kept copy" in n for n in reader.notes)
    reader.close()
