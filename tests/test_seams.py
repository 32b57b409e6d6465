"""The promise at the seams: a store handed over by any copy, and a damaged one, never
repeats a step or an effect (real Git, real kernels, a loopback receiver)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git
from conftest import stepstone_cli as cli
from jobs import POST, executions, step_cell, write_job
from receiver import Receiver

import stepstone

DRIVERS = Path(__file__).resolve().parent / "drivers"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    with Receiver(tmp_path / "receiver.db") as r:
        yield r


def run_job(folder: Path, receiver: Receiver, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("run", "job.ipynb", *args, cwd=folder, RECEIVER=receiver.url)


def _finished_job(folder: Path, receiver: Receiver) -> None:
    folder.mkdir()
    write_job(folder)
    done = run_job(folder, receiver)
    assert done.returncode == 0, done.stderr
    assert executions(folder) == ["make", "total", "notify"]
    assert list(receiver.applied("blind").values()) == [1]


def assert_nothing_repeated(a: Path, receiver: Receiver) -> None:
    """Running the job again in `a` executes no step again and sends nothing again."""
    done = run_job(a, receiver)
    assert done.returncode == 0, done.stderr
    assert executions(a) == ["make", "total", "notify"]
    assert list(receiver.applied("blind").values()) == [1]


def _copy_work_files(a: Path, b: Path) -> None:
    """What agent B gets besides the store: the notebook and the files it made."""
    shutil.copytree(a, b, ignore=shutil.ignore_patterns(".stepstone"))


def _hand_over(how: str, a: Path, b: Path) -> None:
    if how == "cp -r":
        shutil.copytree(a, b, symlinks=True)
    elif how == "tar":
        archive = a.parent / "handoff.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(a, arcname="b")
        with tarfile.open(archive) as tar:
            tar.extractall(b.parent, filter="tar")
    else:
        _copy_work_files(a, b)
        source = str(a / ".stepstone")
        if how == "git clone --bare":
            git("clone", "-q", "--bare", source, str(b / ".stepstone"), cwd=b)
        elif how == "git clone":
            git("clone", "-q", source, str(b / ".stepstone"), cwd=b)
        else:
            done = cli("clone", source, ".stepstone", cwd=b)
            assert done.returncode == 0, done.stderr


@pytest.mark.kernel
@pytest.mark.parametrize(
    "how", ["git clone --bare", "git clone", "cp -r", "tar", "stepstone clone"]
)
def test_a_finished_run_handed_over_by_any_copy_executes_nothing_again(
    tmp_path: Path, receiver: Receiver, how: str
):
    a, b = tmp_path / "a", tmp_path / "b"
    _finished_job(a, receiver)
    _hand_over(how, a, b)
    before = executions(b)

    status = cli("status", "--json", "--repo", str(b / ".stepstone"), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    done = run_job(b, receiver)
    assert done.returncode == 0, done.stderr
    assert executions(b) == before  # nothing ran again on B
    assert list(receiver.applied("blind").values()) == [1]  # and nothing was sent twice
    log = git("log", "--format=%s", "job", cwd=b / ".stepstone")
    assert "step 3 notify: confirmed" in log


@pytest.mark.kernel
def test_a_store_whose_settings_were_lost_still_holds_its_runs(tmp_path: Path, receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    (a / ".stepstone" / "config").write_text("")  # truncated: stepstone.dedicated is gone
    status = cli("status", cwd=a)
    assert status.returncode == 0, status.stderr
    assert "notify  verified" in status.stdout
    assert_nothing_repeated(a, receiver)


@pytest.mark.kernel
def test_a_damaged_ref_stops_the_run_and_names_the_repair(tmp_path: Path, receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    store = a / ".stepstone"
    tip = git("rev-parse", "job", cwd=store).strip()
    (store / "refs" / "heads" / "job").write_text("")  # a torn ref file

    status = cli("status", cwd=a)
    assert status.returncode == 2
    assert "refs/heads/job" in status.stderr and "stepstone repair --run job" in status.stderr
    refused = run_job(a, receiver)
    assert refused.returncode != 0
    assert "stepstone repair --run job" in refused.stderr
    assert executions(a) == ["make", "total", "notify"]  # no new run was started
    assert list(receiver.applied("blind").values()) == [1]

    repaired = cli("repair", cwd=a)
    assert repaired.returncode == 0, repaired.stderr
    assert git("rev-parse", "job", cwd=store).strip() == tip
    assert_nothing_repeated(a, receiver)
    fsck(store)


@pytest.mark.kernel
def test_a_run_whose_ref_is_gone_but_whose_archive_tag_remains_is_not_started_afresh(
    tmp_path: Path, receiver
):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    assert cli("finish", cwd=a).returncode == 0
    store = a / ".stepstone"
    (store / "refs" / "heads" / "job").unlink()
    refused = run_job(a, receiver)
    assert refused.returncode != 0
    assert "stepstone/job" in refused.stderr and "repair" in refused.stderr
    assert list(receiver.applied("blind").values()) == [1]
    assert cli("repair", cwd=a, STEPSTONE_RUN="job").returncode == 0
    assert_nothing_repeated(a, receiver)


@pytest.mark.kernel
def test_a_renamed_step_is_neither_run_nor_sent_again(tmp_path: Path, receiver: Receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    write_job(a, notify_name="notify-team")  # renamed, the cell's body as it was
    done = run_job(a, receiver)
    assert done.returncode == 0, done.stderr
    assert list(receiver.applied("blind").values()) == [1]
    executed = (a / "job.out.ipynb").read_text()
    assert "renamed notify -> notify-team" in executed
    assert executions(a) == ["make", "total", "notify"]  # its record went with its name

    write_job(a, notify_name="notify-all", notify_options=" --was notify-team")
    assert_nothing_repeated(a, receiver)
    status = cli("status", "--json", cwd=a)
    steps = json.loads(status.stdout)["steps"]
    assert [(s["name"], s["state"]) for s in steps][-1] == ("notify-all", "verified")


@pytest.mark.kernel
def test_a_renamed_and_edited_step_does_not_send_its_effect_again(
    tmp_path: Path, receiver: Receiver
):
    """An effect is its name and payload, whichever step asks for it (issue 47): a step
    renamed with its body edited, saying nothing, sends nothing again; nor when it says
    what it was, misspelled or not."""
    a = tmp_path / "a"
    _finished_job(a, receiver)
    for options in ("", " --was notfy", " --was notify"):
        write_job(
            a, notify_name="notify-team", notify_body="\nprint('edited')", notify_options=options
        )
        done = run_job(a, receiver)
        assert done.returncode == 0, done.stderr
        assert list(receiver.applied("blind").values()) == [1]
    assert run_job(a, receiver).returncode == 0  # --was stays in the line: nothing changes


@pytest.mark.kernel
def test_a_renamed_effect_is_refused_until_it_says_what_it_was(tmp_path: Path, receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    write_job(a, effect_args="'announce-team', post")
    refused = run_job(a, receiver)
    assert refused.returncode == 1
    assert "was='announce'" in refused.stderr
    assert list(receiver.applied("blind").values()) == [1]
    write_job(a, effect_args="'announce-team', post, was='announce'")
    done = run_job(a, receiver)
    assert done.returncode == 0, done.stderr
    assert list(receiver.applied("blind").values()) == [1]


@pytest.mark.kernel
def test_two_notebooks_with_one_name_and_one_store_never_share_a_run(
    tmp_path: Path, receiver: Receiver
):
    shared = tmp_path / "shared-store"
    for folder in ("dirA", "dirB"):
        (tmp_path / folder).mkdir()
        write_job(tmp_path / folder)
    first = run_job(tmp_path / "dirA", receiver, "--repo", str(shared))
    assert first.returncode == 0, first.stderr
    refused = run_job(tmp_path / "dirB", receiver, "--repo", str(shared))
    assert refused.returncode == 2  # a refusal, named (issue 47)
    assert "belongs to the notebook" in refused.stderr and "--run" in refused.stderr
    assert executions(tmp_path / "dirB") == []
    assert list(receiver.applied("blind").values()) == [1]
    own = run_job(tmp_path / "dirB", receiver, "--repo", str(shared), "--run", "job-b")
    assert own.returncode == 0, own.stderr
    assert executions(tmp_path / "dirB") == ["make", "total", "notify"]
    again = run_job(tmp_path / "dirA", receiver, "--repo", str(shared))
    assert again.returncode == 0, again.stderr
    assert executions(tmp_path / "dirA") == ["make", "total", "notify"]


@pytest.mark.kernel
def test_a_renamed_notebook_does_not_start_its_run_again(tmp_path: Path, receiver: Receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    (a / "job.ipynb").rename(a / "job-final.ipynb")
    refused = cli("run", "job-final.ipynb", cwd=a, RECEIVER=receiver.url)
    assert refused.returncode == 2
    assert "--run job" in refused.stderr and "job-final" in refused.stderr
    done = cli("run", "job-final.ipynb", "--run", "job", cwd=a, RECEIVER=receiver.url)
    assert done.returncode == 0, done.stderr
    assert executions(a) == ["make", "total", "notify"]
    assert list(receiver.applied("blind").values()) == [1]
    assert "notebook moved" in (a / "job-final.out.ipynb").read_text()
    again = cli("run", "job-final.ipynb", cwd=a, RECEIVER=receiver.url)  # the run it drives
    assert again.returncode == 0, again.stderr
    assert "as run job " in again.stderr
    assert executions(a) == ["make", "total", "notify"]
    assert list(receiver.applied("blind").values()) == [1]


@pytest.mark.kernel
def test_a_notebook_moved_away_from_its_store_is_pointed_back_to_it(
    tmp_path: Path, receiver: Receiver
):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    (a / "notebooks").mkdir()
    (a / "job.ipynb").rename(a / "notebooks" / "job.ipynb")
    refused = cli("run", "notebooks/job.ipynb", cwd=a, RECEIVER=receiver.url)
    assert refused.returncode == 2
    assert "--run job --repo" in refused.stderr
    assert not (a / "notebooks" / ".stepstone").exists()
    assert list(receiver.applied("blind").values()) == [1]
    suggested = re.search(r"`stepstone (run [^`]*)`", refused.stderr)
    assert suggested is not None, refused.stderr
    done = cli(*shlex.split(suggested.group(1)), cwd=a, RECEIVER=receiver.url)  # as it says
    assert done.returncode == 0, done.stderr
    assert executions(a) == ["make", "total", "notify"]
    assert list(receiver.applied("blind").values()) == [1]


@pytest.mark.kernel
def test_every_command_resolves_files_in_the_runs_work_folder(tmp_path: Path, receiver):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    write_job(project)
    store = tmp_path / "stores" / "job-store"
    assert run_job(project, receiver, "--repo", str(store)).returncode == 0
    for command in ("status", "verify", "brief"):
        done = cli(command, "--repo", str(store), cwd=elsewhere)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "does not exist" not in done.stdout


@pytest.mark.kernel
def test_the_briefs_command_works_in_a_shell_with_spaces_and_parentheses(
    tmp_path: Path, receiver: Receiver
):
    folder = tmp_path / "my work (v2)"
    folder.mkdir()
    write_job(folder)
    (folder / "job.ipynb").rename(folder / "job (final).ipynb")
    store = tmp_path / "stores (shared)" / "s"
    first = cli("run", "job (final).ipynb", "--repo", str(store), cwd=folder, RECEIVER=receiver.url)
    assert first.returncode == 0, first.stderr
    (folder / "data" / "numbers.json").unlink()  # the first step must run again
    brief = cli("brief", "--json", "--repo", str(store), cwd=tmp_path)
    command = json.loads(brief.stdout)["next_command"]
    assert command["argv"][:3] == ["stepstone", "run", "job (final).ipynb"]
    text = cli("brief", "--repo", str(store), cwd=tmp_path).stdout
    assert shlex.join(command["argv"]) in text
    again = subprocess.run(
        ["bash", "-c", command["shell"]],
        capture_output=True,
        text=True,
        env=clean_env(RECEIVER=receiver.url, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin"),
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert executions(folder) == ["make", "total", "notify"] * 2  # the file made anew
    assert list(receiver.applied("blind").values()) == [1]  # its effect is not sent again
    finish = json.loads(cli("brief", "--json", "--repo", str(store), cwd=tmp_path).stdout)
    assert finish["next_command"]["argv"][:2] == ["stepstone", "finish"]  # all verified


SCRIPT = DRIVERS / "etl.py"  # a user's script: copied into their folder as etl.py


def test_the_brief_of_a_python_run_names_its_script_and_not_a_notebook(tmp_path: Path):
    shutil.copy(SCRIPT, tmp_path / "etl.py")
    done = subprocess.run(
        [sys.executable, "etl.py"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(cli("brief", "--json", cwd=tmp_path).stdout)
    assert data["next_command"]["argv"] == ["python", "etl.py"]
    assert "NOTEBOOK" not in json.dumps(data) and "--repo" not in data["next_command"]["shell"]
    assert "so far" in data["next_action"] and "run it again" in data["next_action"]


@pytest.mark.kernel
def test_a_cloned_store_with_pickled_outputs_finishes_and_says_how_to_trust_them(
    tmp_path: Path, receiver: Receiver
):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    pickled = "%%step tags --out tags\nfrom fractions import Fraction\ntags = Fraction(1, 3)"
    write_job(a, extra_cells=(pickled,))
    assert run_job(a, receiver).returncode == 0
    _copy_work_files(a, b)
    agent_b = {"STEPSTONE_CONFIG": str(tmp_path / "agent-b-config"), "RECEIVER": receiver.url}
    assert cli("clone", str(a / ".stepstone"), ".stepstone", cwd=b, **agent_b).returncode == 0

    status = cli("status", cwd=b, **agent_b)
    line = next(line for line in status.stdout.splitlines() if line.split()[:2] == ["4", "tags"])
    assert line.split()[2] == "stale" and "stepstone trust --repo" in line
    first = cli("run", "job.ipynb", cwd=b, **agent_b)
    assert first.returncode == 0, first.stderr
    assert "[4/4] tags: done" in first.stderr
    second = cli("run", "job.ipynb", cwd=b, **agent_b)  # B's own value now: skipped
    assert second.returncode == 0, second.stderr
    assert "[4/4] tags: skipped" in second.stderr
    assert list(receiver.applied("blind").values()) == [1]

    c = tmp_path / "c"
    _copy_work_files(a, c)
    agent_c = {"STEPSTONE_CONFIG": str(tmp_path / "agent-c-config"), "RECEIVER": receiver.url}
    assert cli("clone", str(a / ".stepstone"), ".stepstone", cwd=c, **agent_c).returncode == 0
    assert cli("trust", cwd=c, **agent_c).returncode == 0
    trusted = cli("run", "job.ipynb", cwd=c, **agent_c)
    assert trusted.returncode == 0, trusted.stderr
    assert "[4/4] tags: skipped" in trusted.stderr


# -- smaller, from the same trial -----------------------------------------------------


def test_a_folder_check_is_evidenced_by_the_files_in_it(workdir: Path):
    def make() -> None:
        Path("data").mkdir(exist_ok=True)
        Path("data/a.csv").write_text("x\n1\n")
        Path("data/b.csv").write_text("y\n2\n")

    with stepstone.open_run("job") as run:
        record = run.step("make", make, checks=["file:data"]).record
    assert record.evidence[0].detail.startswith("folder, 2 files")
    Path("data/.ipynb_checkpoints").mkdir()
    Path("data/.ipynb_checkpoints/a-checkpoint.csv").write_text("x\n")  # Jupyter's, not data
    assert stepstone.open_run("job", drive=False).status().steps[0].state == "verified"
    Path("data/b.csv").write_text("y\n3\n")
    status = stepstone.open_run("job", drive=False).status()
    assert status.steps[0].state == "stale" and "changed" in status.steps[0].reason


KILLED_AFTER_TWO_EFFECTS = str(DRIVERS / "killed_after_effects.py")


def test_a_step_killed_after_its_effects_says_so(workdir: Path):
    killed = subprocess.run(
        [sys.executable, KILLED_AFTER_TWO_EFFECTS], cwd=workdir, env=clean_env(), check=False
    )
    assert killed.returncode == -9
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    send = status["steps"][0]
    assert send["state"] == "pending"
    assert send["reason"] == "interrupted partway; 2 effect(s) confirmed"
    assert "interrupted partway" in status["next_action"]


@pytest.mark.kernel
def test_a_finished_notebook_changes_no_more_until_it_is_reopened(
    tmp_path: Path, receiver: Receiver
):
    a = tmp_path / "a"
    a.mkdir()
    write_job(a, extra_cells=("%finish",))
    assert run_job(a, receiver).returncode == 0
    assert run_job(a, receiver).returncode == 0  # run again unchanged: nothing to do
    assert executions(a) == ["make", "total", "notify"]

    write_job(a, notify_body="\nprint('edited')", extra_cells=("%finish",))
    refused = run_job(a, receiver)
    assert refused.returncode == 2  # a refusal, named (issue 47)
    assert "was finished" in refused.stderr and "stepstone reopen" in refused.stderr
    assert executions(a) == ["make", "total", "notify"]
    reopened = cli("reopen", "--why", "the announcement text changed", cwd=a)
    assert reopened.returncode == 0, reopened.stderr
    done = run_job(a, receiver)
    assert done.returncode == 0, done.stderr
    assert executions(a) == ["make", "total", "notify", "notify"]
    assert list(receiver.applied("blind").values()) == [1]  # its effect happened already
    assert "reopen: the announcement text changed" in git(
        "log", "--format=%s", cwd=a / ".stepstone"
    )


def test_a_finished_python_run_takes_no_more_records(workdir: Path):
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
        run.finish()
        with pytest.raises(stepstone.RunFinished, match="stepstone reopen"):
            run.decide("model", "ridge", "lowest error")
        with pytest.raises(stepstone.RunFinished):
            run.step("b", lambda: 2)
        assert run.finish() == run.finish()  # finishing again changes nothing
    with stepstone.open_run("job") as run:
        assert run.step("a", lambda: pytest.fail("verified")).skipped


def test_runs_counts_only_the_steps_of_the_plan(workdir: Path):
    with stepstone.open_run("job") as run:
        run.set_plan(["a", "b", "c", "d"])
        for name in "abcd":
            run.step(name, lambda: 1)
        run.set_plan(["a", "b"])
    (row,) = json.loads(cli("runs", "--json", cwd=workdir).stdout)
    assert (row["confirmed"], row["steps"]) == (2, 2)
    last = git("log", "-1", "--format=%cI", "job", cwd=workdir / ".stepstone").strip()
    assert row["last_activity"][:19] == last[:19].replace("+00:00", "")[:19]


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with a notebook, mounted read-only (needs root; skipped elsewhere)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    write_job(mount)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_folder_is_named_as_the_cause(read_only_folder: Path, receiver: Receiver):
    done = run_job(read_only_folder, receiver)
    assert done.returncode == 2
    assert "Read-only file system" in done.stderr and "--repo" in done.stderr
    assert "executed notebook" not in done.stderr


@pytest.mark.kernel
def test_a_run_whose_ref_file_was_deleted_is_not_started_afresh(tmp_path: Path, receiver):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    (a / ".stepstone" / "refs" / "heads" / "job").unlink()  # not finished: no archive tag
    status = cli("status", cwd=a)
    assert status.returncode == 2 and "stepstone repair --run job" in status.stderr
    refused = run_job(a, receiver)
    assert refused.returncode != 0 and "repair" in refused.stderr
    assert list(receiver.applied("blind").values()) == [1]
    assert cli("repair", "--run", "job", cwd=a).returncode == 0
    assert_nothing_repeated(a, receiver)


@pytest.mark.kernel
def test_a_step_renamed_while_a_new_step_takes_its_old_name_sends_each_once(
    tmp_path: Path, receiver: Receiver
):
    a = tmp_path / "a"
    _finished_job(a, receiver)
    (first_key,) = receiver.applied("blind")
    new_notify = step_cell(
        "notify", POST + "import stepstone\nstepstone.effect('announce', post, payload='v2')"
    )
    write_job(a, notify_name="notify-team", extra_cells=(new_notify,))
    done = run_job(a, receiver)
    assert done.returncode == 0, done.stderr
    applied = receiver.applied("blind")
    assert applied[first_key] == 1 and len(applied) == 2  # the new step's own, once
    assert run_job(a, receiver).returncode == 0
    assert receiver.applied("blind") == applied


def test_finishing_again_restores_an_archive_tag_a_kill_lost(workdir: Path):
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
        summary = run.finish()
    git("tag", "-d", "stepstone/job", cwd=workdir / ".stepstone")  # killed before the tag
    with stepstone.open_run("job") as run:
        assert run.finish() == summary
    assert git("tag", cwd=workdir / ".stepstone").split() == ["stepstone/job"]


@pytest.mark.kernel
def test_a_value_whose_class_is_defined_in_its_step_comes_back_in_a_new_kernel(
    tmp_path: Path, receiver: Receiver
):
    a = tmp_path / "a"
    a.mkdir()
    boxed = "%%step box --out box\nclass Box:\n    n = 3\nbox = Box()"
    shown = "assert type(box) is Box and box.n == 3"
    write_job(a, extra_cells=(boxed, shown))
    assert run_job(a, receiver).returncode == 0
    again = run_job(a, receiver)
    assert again.returncode == 0, again.stderr
    assert "[4/4] box: skipped" in again.stderr  # the class is defined before box loads
    assert list(receiver.applied("blind").values()) == [1]


def test_a_torn_head_of_the_store_is_written_again(workdir: Path):
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
    (workdir / ".stepstone" / "HEAD").write_text("")
    with stepstone.open_run("job") as run:
        assert run.step("b", lambda: 2).value == 2
    assert "step 2 b: confirmed" in git("log", "--format=%s", cwd=workdir / ".stepstone")


@pytest.mark.kernel
def test_a_commit_made_by_hand_in_a_work_tree_clone_that_drops_effects_is_refused(
    tmp_path: Path, receiver: Receiver
):
    a, b = tmp_path / "a", tmp_path / "b"
    _finished_job(a, receiver)
    _copy_work_files(a, b)
    git("clone", "-q", str(a / ".stepstone"), str(b / ".stepstone"), cwd=b)
    effects = next((b / ".stepstone" / "effects").iterdir())
    shutil.rmtree(effects)  # the work tree lost them, and the user commits that
    git("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "tidy", cwd=b / ".stepstone")
    refused = run_job(b, receiver)
    assert refused.returncode != 0 and "made by hand" in refused.stderr
    assert list(receiver.applied("blind").values()) == [1]
    assert cli("repair", cwd=b).returncode == 0
    assert run_job(b, receiver).returncode == 0
    assert list(receiver.applied("blind").values()) == [1]


HOLDER = str(DRIVERS / "holder.py")


def test_a_store_copied_while_its_run_is_driven_is_not_driven_too(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    ready = tmp_path / "ready"
    holder = subprocess.Popen(
        [sys.executable, HOLDER, "job", str(ready), "--repo", str(a / ".stepstone"), "--step", "a"],
        env=clean_env(),
        cwd=a,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        shutil.copytree(a, b)
        with pytest.raises(stepstone.RunLocked, match="in the copy of this store at"):
            stepstone.open_run("job", repo=b / ".stepstone", workdir=b)
    finally:
        holder.kill()
        holder.wait()
    with stepstone.open_run("job", repo=b / ".stepstone", workdir=b) as run:
        assert run.driving  # once the original's driver is gone, the copies take turns


def test_opening_a_run_twice_in_one_process_says_so(workdir: Path):
    with stepstone.open_run("job"), pytest.raises(stepstone.RunLocked, match="this process"):
        stepstone.open_run("job")


def test_a_script_run_from_another_folder_does_not_start_its_run_again(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPT, project / "etl.py")
    first = subprocess.run([sys.executable, "etl.py"], cwd=project, env=clean_env())
    assert first.returncode == 0
    elsewhere = subprocess.run(
        [sys.executable, "project/etl.py"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert elsewhere.returncode == 1 and "lives in" in elsewhere.stderr
    assert not (tmp_path / ".stepstone").exists()


def _mail_job(ran: list[str], sent: list[str]) -> Callable[[str], Callable[[], str]]:
    """Step bodies that log that they ran; those of `mail...` steps send one effect."""

    def body(name: str) -> Callable[[], str]:
        def work() -> str:
            ran.append(name)
            if name.startswith("mail"):
                stepstone.effect("send", lambda key: sent.append(key) or {"id": key})
            return name

        return work

    return body


def test_a_step_renamed_in_a_python_plan_with_was_is_neither_run_nor_sent_again(workdir: Path):
    ran: list[str] = []
    sent: list[str] = []
    body = _mail_job(ran, sent)
    for names in (["load", "mail", "report"], ["load", "mail-team", "report"]):
        with stepstone.open_run("job") as run:
            run.set_plan(names)  # the plan already says the new name
            for name in names:
                run.step(name, body(name), was="mail" if name == "mail-team" else None)
    assert ran == ["load", "mail", "report"]  # the renamed step's record went with it
    assert len(sent) == 1
    with stepstone.open_run("job", drive=False) as reader:
        assert reader.records["mail-team"].status == "confirmed"
        assert "mail" not in reader.records
    shown = json.loads(cli("show", "mail-team", "--json", cwd=workdir).stdout)
    assert [e["name"] for e in shown["effects"]] == ["send"]  # keyed by its first name
    assert json.loads(cli("show", "mail", "--json", cwd=workdir).stdout) == shown  # old name
    logged = json.loads(cli("log", "--step", "mail-team", "--json", cwd=workdir).stdout)
    assert {e["step"] for e in logged} == {"2 mail", "2 mail-team"}  # and its commits


def test_a_step_renamed_with_was_in_an_incremental_plan_ends_as_a_clean_run(
    workdir: Path, tmp_path: Path
):
    ran: list[str] = []
    sent: list[str] = []
    body = _mail_job(ran, sent)
    for names in (["load", "mail", "report"], ["load", "mail-team", "report"]):
        with stepstone.open_run("job") as run:  # no plan given: the steps make it
            for name in names:
                run.step(name, body(name), was="mail" if name == "mail-team" else None)
    assert ran == ["load", "mail", "report"] and len(sent) == 1
    os.chdir(tmp_path)  # a clean run of the renamed script, for comparison
    with stepstone.open_run("job") as clean:
        for name in ["load", "mail-team", "report"]:
            clean.step(name, body(name))
    os.chdir(workdir)
    with stepstone.open_run("job", drive=False) as reader:
        assert reader.steps.names == clean.steps.names == ["load", "mail-team", "report"]
        assert {n: r.status for n, r in reader.records.items()} == {
            n: r.status for n, r in clean.records.items()
        }


def test_a_chain_of_renames_in_one_plan_change_moves_each_record_once(workdir: Path):
    ran: list[str] = []
    with stepstone.open_run("job") as run:
        run.set_plan(["a", "b"])
        for name in ("a", "b"):
            run.step(name, lambda name=name: ran.append(name) or name)
    with stepstone.open_run("job") as run:  # a -> b and b -> c at once
        run.set_plan([{"name": "b", "renamed_from": ["a"]}, {"name": "c", "renamed_from": ["b"]}])
        assert run.step("b", lambda: ran.append("b2") or "b2").value == "a"
        assert run.step("c", lambda: ran.append("c") or "c").value == "b"
    assert ran == ["a", "b"]
