"""The rule: an effect is its name and its payload within its lineage (docs/effects.md).

Each test here is one observation of issue 35 (made under the rule before: a lineage,
a step's identity and a name), reproduced as a new user met it, on the Python API and
the real command line over a real store; a fork now shares its source's lineage, so
an effect either performed is never sent again by the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import stepstone_cli as cli

import stepstone

Sent = list[tuple[str, str]]


def _job(sent: Sent, *, mode_in_b: bool = False) -> dict[str, Callable[[], object]]:
    """Three steps: `a` writes a file, `b` and `c` each send one effect (`eb`, `ec`)
    and write a file; `b` may read the decision `mode`, which its payload leaves out."""

    def step(name: str, effect: str | None) -> Callable[[], object]:
        def work() -> object:
            if name == "b" and mode_in_b:
                stepstone.decided("mode", "sum")
            if effect is not None:
                stepstone.effect(effect, lambda key: sent.append((effect, key)) or {"n": len(sent)})
            Path(f"{name}.txt").write_text(name)
            return name

        return work

    return {"a": step("a", None), "b": step("b", "eb"), "c": step("c", "ec")}


PLAN = [{"name": name, "checks": [f"file:{name}.txt"]} for name in "abc"]


def _drive(run_id: str, sent: Sent, **options: bool) -> list[str]:
    """Drive `run_id` over the three steps; the steps that ran (not skipped)."""
    ran = []
    with stepstone.open_run(run_id) as run:
        run.set_plan(PLAN)
        for name, work in _job(sent, **options).items():
            if not run.step(name, work, checks=[f"file:{name}.txt"]).skipped:
                ran.append(name)
    return ran


def _forked(workdir: Path, sent: Sent, **options: bool) -> None:
    assert _drive("job", sent, **options) == ["a", "b", "c"]
    done = cli("fork", "job", "--at", "b", "--as", "alt", cwd=workdir)
    assert done.returncode == 0, done.stderr


def test_a_fork_that_reruns_a_step_before_its_fork_point_does_not_send_its_effect_again(
    workdir: Path,
):
    sent: Sent = []
    _forked(workdir, sent)
    done = cli("rerun", "b", "--run", "alt", "--why", "try it again", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert _drive("alt", sent) == ["b", "c"]  # it was stuck: EffectRenamed for 'eb'
    # eb and ec are the original's effects, replayed: the fork is in the same lineage
    assert [name for name, _ in sent] == ["eb", "ec"]
    with stepstone.open_run("alt", drive=False) as alt, stepstone.open_run("job") as job:
        assert alt.records["b"].status == "confirmed"
        (eb,) = [e for e in alt.effects.values() if e.name == "eb"]
        assert eb.key == sent[0][1]  # the same key: a keyed receiver would know it too
        assert {e.key for e in job.effects.values()} == {sent[0][1], sent[1][1]}


def test_a_fork_whose_step_file_is_missing_reruns_it_without_sending_again(workdir: Path):
    sent: Sent = []
    _forked(workdir, sent)
    assert _drive("alt", sent) == ["c"]  # the files are there: only after the fork point
    Path("b.txt").unlink()
    assert _drive("alt", sent) == ["b", "c"]
    assert [name for name, _ in sent] == ["eb", "ec"]


def test_a_decision_revised_on_a_fork_reruns_its_reader_without_sending_again(workdir: Path):
    sent: Sent = []
    _forked(workdir, sent, mode_in_b=True)
    revised = cli("decide", "mode", "double", "--why", "try it", "--run", "alt", cwd=workdir)
    assert revised.returncode == 0, revised.stderr
    assert _drive("alt", sent, mode_in_b=True) == ["b", "c"]
    assert [name for name, _ in sent] == ["eb", "ec"]


def test_an_effect_the_original_performed_after_the_fork_is_not_sent_again_by_the_fork(
    workdir: Path,
):
    """A step before the fork point runs again in the original and sends a new effect;
    the fork, running that step again, finds it in the original's history."""
    sent: Sent = []
    _forked(workdir, sent)

    def later(run_id: str) -> None:
        with stepstone.open_run(run_id) as run:
            run.rerun("b", "send the correction too")
            run.set_plan(PLAN)
            for name, work in _job(sent).items():

                def with_fix(work: Callable[[], object] = work, name: str = name) -> object:
                    if name == "b":
                        stepstone.effect("fix", lambda key: sent.append(("fix", key)), new=True)
                    return work()

                run.step(name, with_fix, checks=[f"file:{name}.txt"])

    later("job")
    assert [name for name, _ in sent] == ["eb", "ec", "fix"]
    later("alt")
    assert [name for name, _ in sent] == ["eb", "ec", "fix"]  # one lineage: nothing again
    with stepstone.open_run("alt", drive=False) as alt:
        (fix,) = [e for e in alt.effects.values() if e.name == "fix"]
        assert fix.state == "confirmed" and fix.key == sent[2][1]
    log = cli("log", "--run", "alt", cwd=workdir).stdout
    assert "effect fix: confirmed, as refs/heads/job records it" in log


def test_a_fork_at_a_step_that_ran_again_keeps_the_effects_its_branch_point_records(
    workdir: Path,
):
    """Found by the adversary: `a` ran again after `b` and `c` sent their effects, so the
    commit that confirmed `a` last (the branch point) records them; the fork ran `b`
    again (stale by the conservative rule) and stopped with EffectRenamed."""
    sent: Sent = []
    assert _drive("job", sent) == ["a", "b", "c"]
    with stepstone.open_run("job") as run:
        run.rerun("a", "again")
    assert _drive("job", sent) == ["a", "b", "c"]  # b and c replay their effects
    done = cli("fork", "job", "--at", "a", "--as", "alt", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert json.loads(cli("fork", "alt", "--at", "a", "--as", "x", "--json", cwd=workdir).stdout)
    assert _drive("alt", sent) == ["b", "c"]
    assert [name for name, _ in sent] == ["eb", "ec"]  # the shared history's, replayed


def test_a_fork_of_a_fork_is_in_the_lineage_of_the_run_they_came_from(workdir: Path):
    sent: Sent = []
    _forked(workdir, sent)
    assert _drive("alt", sent) == ["c"]  # ec: the original's, replayed
    done = cli("fork", "alt", "--at", "c", "--as", "alt2", cwd=workdir)
    assert done.returncode == 0, done.stderr
    done = cli("rerun", "a", "--downstream", "--run", "alt2", "--why", "all", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert _drive("alt2", sent) == ["a", "b", "c"]
    assert [name for name, _ in sent] == ["eb", "ec"]  # nothing sent by alt or alt2
    keys = {
        run: {e.name: e.key for e in stepstone.open_run(run, drive=False).effects.values()}
        for run in ("job", "alt", "alt2")
    }
    assert keys["alt2"] == keys["alt"] == keys["job"]


@pytest.mark.parametrize("where", ["in the fork's record", "in the original's record"])
def test_status_json_of_a_fork_names_the_inherited_effects_by_their_original_key(
    workdir: Path, where: str
):
    sent: Sent = []
    _forked(workdir, sent)
    run = "alt" if where == "in the fork's record" else "job"
    status = json.loads(cli("status", "--json", "--run", run, cwd=workdir).stdout)
    (eb,) = [e for e in status["effects"] if e["name"] == "eb"]
    assert eb["key"] == sent[0][1] and eb["state"] == "confirmed"


def _alerts(run_id: str, names: Callable[[int], list[str]], sent: list[str], *, fail: bool):
    """Step `alert` sends one effect per name (in a pool of four threads when there
    are several), then fails if `fail` (as a kill after the effects would leave it)."""
    from concurrent.futures import ThreadPoolExecutor

    attempt = len(sent)

    def send(name: str) -> object:
        return stepstone.effect(name, lambda key: sent.append(name) or {"id": key})

    def work() -> None:
        wanted = names(attempt)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, wanted))
        if fail:
            raise RuntimeError("interrupted after its effects")

    with stepstone.open_run(run_id) as run:
        run.step("alert", work)


def test_a_family_member_named_from_the_clock_is_refused_before_it_is_sent_again(
    workdir: Path,
):
    import uuid

    sent: list[str] = []
    with pytest.raises(RuntimeError):
        _alerts("job", lambda _: [f"alert/{uuid.uuid4()}"], sent, fail=True)
    with pytest.raises(stepstone.EffectRenamed, match="new at every try") as refused:
        _alerts("job", lambda _: [f"alert/{uuid.uuid4()}"], sent, fail=False)
    assert len(sent) == 1  # it was sent again, silently
    assert "pass new=True" in str(refused.value) and "not the time" in str(refused.value)


@pytest.mark.parametrize("order", ["the same list", "a rotated list"])
def test_a_pool_that_asks_for_its_members_in_another_order_sends_each_once(
    workdir: Path, order: str
):
    """Interrupted after some members, a pool asks again for all of them: the new ones
    may come first from a thread while the earlier ones come from the others."""
    sent: list[str] = []
    members = [f"mail/{n}" for n in range(12)]

    def names(attempt: int) -> list[str]:
        if attempt == 0:
            return members[:6]
        return members if order == "the same list" else members[3:] + members[:3]

    with pytest.raises(RuntimeError):
        _alerts("job", names, sent, fail=True)
    if order == "the same list":
        _alerts("job", names, sent, fail=False)
        assert sorted(sent) == sorted(members)
        return
    # on the same inputs the same code asks for the same members in the same order: a
    # list in another order is made from something that changes at each try, as a clock
    with pytest.raises(stepstone.EffectRenamed, match="sorted") as refused:
        _alerts("job", names, sent, fail=False)
    assert "new=True" in str(refused.value)
    assert len(sent) == len(set(sent))  # nothing sent twice


def test_a_loop_resumed_partway_sends_the_rest_once(workdir: Path):
    sent: list[str] = []
    members = [f"mail/{n}" for n in range(5)]
    with stepstone.open_run("job") as run:

        def partway() -> None:
            for name in members[:2]:
                stepstone.effect(name, lambda key, name=name: sent.append(name))
            raise RuntimeError("killed")

        with pytest.raises(RuntimeError):
            run.step("mail", partway)
    with stepstone.open_run("job") as run:

        def whole() -> None:
            for name in members:
                stepstone.effect(name, lambda key, name=name: sent.append(name))

        run.step("mail", whole)
    assert sent == members


CLOCK_NAMED = """
import os, signal, time, stepstone
def alert():
    def send(key):
        with open("sent.txt", "a") as log:
            log.write(key + "\\n")
        return {"key": key}
    stepstone.effect(f"alert/{time.time_ns()}", send)
    if os.environ.get("KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
with stepstone.open_run("job") as run:
    run.step("alert", alert)
"""


@pytest.mark.fault
def test_a_clock_named_alert_killed_after_it_was_sent_is_not_sent_again(workdir: Path):
    from conftest import run_python

    killed = run_python(CLOCK_NAMED, cwd=workdir, env={"KILL": "1"}, check=False)
    assert killed.returncode == -9
    resumed = run_python(CLOCK_NAMED, cwd=workdir, check=False)
    assert resumed.returncode == 1 and "EffectRenamed" in resumed.stderr
    assert "new at every try" in resumed.stderr
    assert len(Path("sent.txt").read_text().split()) == 1


def test_a_step_that_uses_a_question_the_run_does_not_have_is_refused(workdir: Path):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "stepstone")
    try:
        ip.run_line_magic("resume", "--run job")
        ip.run_line_magic("unknown", "Are the prices in EUR?")
        with pytest.raises(UsageError, match=r"question U2 \(--uses U2\).*questions: U1"):
            ip.run_cell_magic("step", "report --uses U2", "out = 1")
        assert "out" not in ip.user_ns  # the cell did not run
    finally:
        ip.run_line_magic("unload_ext", "stepstone")
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert status["steps"] == []  # nothing recorded, not even the plan entry
    with stepstone.open_run("job") as run, pytest.raises(stepstone.InvalidInput) as refused:
        run.step("report", lambda: 1, inputs=["unknown:U2"])
    assert "question U2 (--uses U2)" in str(refused.value) and "questions: U1" in str(refused.value)


def _parameterised(folder: Path) -> Path:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    parameters = new_code_cell('region = "eu"\nlimit = 3')
    parameters.metadata["tags"] = ["parameters"]
    cells = [
        new_code_cell("%load_ext stepstone\n%resume"),
        parameters,
        new_code_cell(
            "%%step notify\nimport stepstone\n"
            "def send(key):\n"
            "    with open('sent.txt', 'a') as log:\n"
            "        log.write(f'{region} {limit} {key}\\n')\n"
            "stepstone.effect('notify', send, payload={'region': region, 'limit': limit})"
        ),
    ]
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


@pytest.mark.kernel
def test_parameters_spelled_differently_are_one_run_and_a_misspelled_run_is_refused(
    workdir: Path,
):
    _parameterised(workdir)
    spellings = [(), ("-p", "region", "eu"), ("-p", "region", "eu", "-p", "limit", "3")]
    spellings.append(("-p", "limit", "3.0"))
    for given in spellings:
        done = cli("run", "job.ipynb", *given, cwd=workdir)
        assert done.returncode == 0, done.stderr
    assert len(Path("sent.txt").read_text().splitlines()) == 1  # one notification, not four
    cells = json.loads(Path("job.out.ipynb").read_text())["cells"]
    assert "limit = 3\n" in "".join(cells[2]["source"])  # 3.0 injected as the default's 3
    runs = json.loads(cli("runs", "--json", cwd=workdir).stdout)
    assert [r["run"] for r in runs] == ["job"]

    typo = cli("run", "job.ipynb", "--run", "jbo", cwd=workdir)
    assert typo.returncode == 2 and "did you mean --run job?" in typo.stderr
    assert "--new" in typo.stderr
    assert len(Path("sent.txt").read_text().splitlines()) == 1

    other = cli("run", "job.ipynb", "-p", "region", "us", cwd=workdir)  # another run: its own
    assert other.returncode == 0, other.stderr
    on_purpose = cli("run", "job.ipynb", "--run", "jbo", "--new", cwd=workdir)
    assert on_purpose.returncode == 0, on_purpose.stderr
    assert [line.split()[:2] for line in Path("sent.txt").read_text().splitlines()] == [
        ["eu", "3"],
        ["us", "3"],
        ["eu", "3"],
    ]


def test_a_misspelled_run_is_refused_when_the_run_has_not_recorded_its_notebook_yet(
    workdir: Path,
):
    """Found by the adversary: the first drives of `job` were stopped before its plan (and
    its notebook) was committed, and `--run jbo` then started a new run silently."""
    _parameterised(workdir)
    stepstone.open_run("job").close()  # a run with no notebook recorded yet
    typo = cli("run", "job.ipynb", "--run", "jbo", cwd=workdir)
    assert typo.returncode == 2 and "did you mean --run job?" in typo.stderr, typo.stderr
    assert not (workdir / "sent.txt").exists()


PAUSING = """
import os, pathlib, sys, time, stepstone
def step(i):
    def work():
        def send(key):
            with open(os.environ["SENT"], "a") as log:
                log.write(f"e{i} {key}\\n")
            return {"i": i}
        stepstone.effect(f"e{i}", send)
        pathlib.Path(f"s{i}.txt").write_text(str(i))
        if str(i) == os.environ.get("FAIL_AT"):
            raise RuntimeError("stopped here")
        if i == 2 and os.environ.get("PAUSE"):
            pathlib.Path("paused").write_text("")
            while not pathlib.Path("go").exists():
                time.sleep(0.02)
    return work
diverging = bool(os.environ.get("DIVERGE"))
with stepstone.open_run(os.environ.get("RUN", "job"), diverge=diverging) as run:
    for note in run.notes:
        print("note:", note)
    for i in range(1, 5):
        run.step(f"s{i}", step(i), checks=[f"file:s{i}.txt"])
"""


def _copied_while_driven(tmp_path: Path) -> tuple[Path, Path, Path]:
    """`original` driven to its end, with `copy` taken by cp -r while it was paused
    after step 2; every effect appends a line to `sent`."""
    import shutil
    import subprocess
    import sys
    import time

    from conftest import clean_env

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    env = clean_env(SENT=str(sent), PAUSE="1")
    driver = subprocess.Popen([sys.executable, "-c", PAUSING], cwd=original, env=env)
    deadline = time.monotonic() + 60
    while not (original / "paused").exists():
        assert driver.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    shutil.copytree(original, copy, symlinks=True)
    (original / "go").write_text("")
    assert driver.wait(timeout=60) == 0
    assert len(sent.read_text().splitlines()) == 4
    return original, copy, sent


def _drive_copy(copy: Path, sent: Path, **env: str):
    import subprocess
    import sys

    from conftest import clean_env

    return subprocess.run(
        [sys.executable, "-c", PAUSING],
        cwd=copy,
        env=clean_env(SENT=str(sent), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_copy_taken_while_driven_takes_in_what_the_original_did_before_it_drives(
    tmp_path: Path,
):
    _, copy, sent = _copied_while_driven(tmp_path)
    done = _drive_copy(copy, sent)
    assert done.returncode == 0, done.stderr
    assert "took in run 'job'" in done.stdout
    assert len(sent.read_text().splitlines()) == 4  # e3 and e4 were sent again
    status = json.loads(cli("status", "--json", cwd=copy).stdout)
    assert {e["name"]: e["state"] for e in status["effects"]} == {
        f"e{i}": "confirmed" for i in range(1, 5)
    }
    again = _drive_copy(copy, sent)  # settled: an ordinary store now
    assert again.returncode == 0 and "took in" not in again.stdout


def test_a_copy_whose_original_is_gone_refuses_to_drive_until_it_diverges(tmp_path: Path):
    import shutil

    original, copy, sent = _copied_while_driven(tmp_path)
    shutil.rmtree(original)
    refused = _drive_copy(copy, sent)
    assert refused.returncode == 1 and "Diverged" in refused.stderr
    assert "is gone" in refused.stderr and "--diverge" in refused.stderr
    assert len(sent.read_text().splitlines()) == 4
    status = cli("status", cwd=copy)
    assert status.returncode == 0  # readers are not refused
    diverged = _drive_copy(copy, sent, DIVERGE="1")
    assert diverged.returncode == 0, diverged.stderr
    assert "a new lineage" in diverged.stdout and "its plan does not have yet" in diverged.stdout
    lines = sent.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["e1", "e2", "e3", "e4", "e3", "e4"]
    assert lines[2].split()[1] != lines[4].split()[1]  # a new lineage: new keys


@pytest.mark.fault
def test_a_store_moved_after_its_driver_was_killed_is_not_taken_for_a_copy(tmp_path: Path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import clean_env

    original, sent = tmp_path / "original", tmp_path / "sent.txt"
    original.mkdir()
    env = clean_env(SENT=str(sent), PAUSE="1")
    driver = subprocess.Popen([sys.executable, "-c", PAUSING], cwd=original, env=env)
    while not (original / "paused").exists():
        assert driver.poll() is None
        time.sleep(0.02)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    moved = tmp_path / "moved"
    original.rename(moved)
    (moved / "paused").unlink()
    done = _drive_copy(moved, sent)
    assert done.returncode == 0, done.stderr
    assert "took in" not in done.stdout and "copied" not in done.stdout + done.stderr
    assert [line.split()[0] for line in sent.read_text().splitlines()] == ["e1", "e2", "e3", "e4"]


@pytest.mark.parametrize("how", ["cp -r", "git clone --bare"])
def test_copies_of_an_idle_store_driven_one_after_the_other_send_each_effect_once(
    tmp_path: Path, how: str
):
    """Stopped at step 3, the folder is copied; the copy goes on to the end, then the
    original is driven again, then the copy: they take turns, each taking in the other's
    history first, and each effect is sent once."""
    import shutil

    from conftest import git

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    stopped = _drive_copy(original, sent, FAIL_AT="3")
    assert stopped.returncode == 1 and "stopped here" in stopped.stderr
    if how == "cp -r":
        shutil.copytree(original, copy, symlinks=True)
    else:
        copy.mkdir()
        git(
            "clone",
            "--bare",
            "-q",
            str(original / ".stepstone"),
            str(copy / ".stepstone"),
            cwd=tmp_path,
        )
        for name in ("s1.txt", "s2.txt"):
            shutil.copy(original / name, copy / name)
    for folder in (copy, original, copy, original):
        done = _drive_copy(folder, sent)
        assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in sent.read_text().splitlines()] == ["e1", "e2", "e3", "e4"]
    tips = {git("rev-parse", "HEAD", cwd=folder / ".stepstone") for folder in (original, copy)}
    assert len(tips) == 1  # the same history in both


@pytest.mark.parametrize("how", ["cp -r", "git clone --bare"])
def test_a_copy_taken_before_the_original_made_its_run_takes_turns_with_it(
    tmp_path: Path, how: str
):
    """The original's first driver was killed before its first commit (a store and a run
    lock, no run), then the folder was copied: the copy drives first, then the original,
    then the copy again. One lineage: each effect is sent once (found by the adversary:
    the clone made a run of its own, the original another, and each sent everything)."""
    import shutil

    from conftest import git

    from stepstone.run.copies import run_lock
    from stepstone.store import GitStore

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    store = GitStore(original / ".stepstone", create=True)
    lock = run_lock(store, "job", "killed@host")
    lock.acquire()
    lock.release()
    if how == "cp -r":
        shutil.copytree(original, copy, symlinks=True)
    else:
        copy.mkdir()
        git("clone", "--bare", "-q", str(store.git_dir), str(copy / ".stepstone"), cwd=tmp_path)
    for folder in (copy, original, copy):
        done = _drive_copy(folder, sent)
        assert done.returncode == 0, done.stderr
    assert [line.split()[0] for line in sent.read_text().splitlines()] == ["e1", "e2", "e3", "e4"]


def test_a_run_made_in_both_copies_of_a_store_after_the_copy_sends_each_effect_once(
    tmp_path: Path,
):
    """Found by the generator (seed 7013): a store with one run copied by cp -r, then a
    new run made in the original and, with the same id, in the copy. They are copies of
    one run: the copy takes in what the original did, and sends nothing again."""
    import shutil

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    assert _drive_copy(original, sent, RUN="sibling").returncode == 0
    shutil.copytree(original, copy, symlinks=True)
    for folder in (original, copy):
        done = _drive_copy(folder, sent, RUN="job")
        assert done.returncode == 0, done.stderr
    assert len(sent.read_text().splitlines()) == 8  # the sibling's four, the job's four
    again = _drive_copy(copy, sent, RUN="sibling")  # and the copies' first run takes turns
    assert again.returncode == 0 and len(sent.read_text().splitlines()) == 8, again.stderr


def test_a_copy_is_not_driven_while_its_original_is(tmp_path: Path):
    import shutil
    import subprocess
    import sys
    import time

    from conftest import clean_env

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    assert _drive_copy(original, sent, FAIL_AT="3").returncode == 1
    shutil.copytree(original, copy, symlinks=True)
    assert _drive_copy(copy, sent, FAIL_AT="4").returncode == 1  # the copy knows the original
    env = clean_env(SENT=str(sent), PAUSE="1")
    (original / "s2.txt").unlink()  # so that the original pauses in step 2 again
    driver = subprocess.Popen([sys.executable, "-c", PAUSING], cwd=original, env=env)
    try:
        while not (original / "paused").exists():
            assert driver.poll() is None
            time.sleep(0.02)
        refused = _drive_copy(copy, sent)
        assert refused.returncode == 1 and "RunLocked" in refused.stderr
        assert "in the copy of this store at" in refused.stderr
    finally:
        (original / "go").write_text("")
        assert driver.wait(timeout=60) == 0
    assert [line.split()[0] for line in sent.read_text().splitlines()] == ["e1", "e2", "e3", "e4"]


def test_a_renamed_effect_in_a_renamed_step_that_does_not_say_so_is_not_sent_again(
    workdir: Path,
):
    """Found by the adversary: the effect renamed with was=, then its step renamed (its
    body had changed, so not recognised) without --was: sent again under a new key. The
    effect is its name (`was=`) and payload, whichever step asks: replayed."""
    sent: list[str] = []

    def mail(name: str, was: str | None = None) -> Callable[[], object]:
        return lambda: stepstone.effect(name, lambda key: sent.append(key) or {"k": key}, was=was)

    with stepstone.open_run("job") as run:
        run.set_plan(["load", "mail"])
        run.step("load", lambda: 1)
        run.step("mail", mail("k1"))
    with stepstone.open_run("job") as run:
        run.set_plan(["load", "mail-team"])
        run.step("load", lambda: 1)
        run.step("mail-team", mail("k1-renamed", was="k1"))
    assert len(sent) == 1


def test_a_copy_torn_by_a_commit_made_while_it_was_copied_is_mended_by_its_original(
    tmp_path: Path,
):
    """Found by the adversary: `cp -r` of a store while a commit was written can take the
    moved ref without the objects it names; the copy, driven, fetches them first."""
    import shutil

    from conftest import fsck, git

    original, copy, sent = tmp_path / "original", tmp_path / "copy", tmp_path / "sent.txt"
    original.mkdir()
    assert _drive_copy(original, sent, FAIL_AT="3").returncode == 1
    shutil.copytree(original, copy, symlinks=True)
    assert _drive_copy(original, sent).returncode == 0  # commits the copy lacks
    ref = Path(git("rev-parse", "--symbolic-full-name", "job", cwd=original / ".stepstone").strip())
    (copy / ".stepstone" / ref).write_bytes((original / ".stepstone" / ref).read_bytes())
    with pytest.raises(AssertionError):
        fsck(copy / ".stepstone")  # torn: the ref names a commit it does not have
    done = _drive_copy(copy, sent)
    assert done.returncode == 0, done.stderr
    fsck(copy / ".stepstone")
    assert [line.split()[0] for line in sent.read_text().splitlines()] == ["e1", "e2", "e3", "e4"]


def test_settling_a_copy_clears_the_ref_lock_a_killed_commit_left_before_taking_in(
    tmp_path: Path,
):
    from stepstone.run.copies import settle_now
    from stepstone.store import GitStore

    original, copy, _ = _copied_while_driven(tmp_path)
    store = copy / ".stepstone"
    behind = GitStore(store, create=False).refs.tip("job")
    lock = store / "refs" / "heads" / "job.lock"
    lock.write_text(f"{behind}\n")  # what a writer killed between lock and rename leaves
    notes = settle_now(GitStore(store, create=False), "job")
    assert any("stale lock" in note for note in notes)
    assert any("took in run 'job'" in note for note in notes)
    assert GitStore(store, create=False).refs.tip("job") == GitStore(
        original / ".stepstone", create=False
    ).refs.tip("job")
    assert not lock.exists()
