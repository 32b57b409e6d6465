"""Never twice, whatever the user edits (issue 47): an effect is its name and canonical
payload within its lineage, whichever step or run asks for it (docs/effects.md).

Each test is one observation of the issue, reproduced as a new user met it, with a
receiver on loopback that logs every request (tests/fx.py sends to it): through the
real command line and real kernels where the user met it there, through the Python
API where that is where it happened.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import clean_env
from conftest import stepstone_cli as cli
from nbformat.v4 import new_code_cell, new_notebook
from receiver import Receiver

import stepstone

TESTS = Path(__file__).resolve().parent
SETUP = "%load_ext stepstone\n%resume"


# -- a notebook, its runs, and what reached the receiver ------------------------------


def _write(folder: Path, cells: list[str | tuple[str, str]], name: str = "job.ipynb") -> Path:
    """A notebook of `cells` (a source, or ("parameters", source) for papermill's cell)."""
    made = []
    for cell in cells:
        if isinstance(cell, tuple):
            made.append(new_code_cell(cell[1]))
            made[-1].metadata["tags"] = [cell[0]]
        else:
            made.append(new_code_cell(cell))
    book = new_notebook(cells=made)
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / name
    nbformat.write(book, str(path))
    return path


def _run(
    folder: Path, receiver: Receiver, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`stepstone ARGS` in `folder`, its kernels able to import fx and reach `receiver`."""
    return subprocess.run(
        [sys.executable, "-m", "stepstone", *args],
        cwd=folder,
        env=clean_env(PYTHONPATH=str(TESTS), FX_RECEIVER=receiver.url, **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _sent(receiver: Receiver) -> list[tuple[str, Any]]:
    """(name, payload) of every request the receiver applied, in order."""
    return [(body["name"], body["payload"]) for _, body in receiver.bodies()]


def _status(folder: Path, run: str | None = None) -> dict[str, Any]:
    args = ["status", "--json", *(["--run", run] if run else [])]
    done = subprocess.run(
        [sys.executable, "-m", "stepstone", *args],
        cwd=folder,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def receiver(tmp_path: Path) -> Any:
    with Receiver(tmp_path / "receiver.db") as r:
        yield r


# -- 1. every cell a step: a cell inserted above an effect cell ------------------------


@pytest.mark.kernel
def test_a_cell_inserted_above_an_effect_cell_does_not_send_it_again(workdir: Path, receiver):
    _write(workdir, ["import fx\nx = 1", "fx.blind('notify')\nprint('sent')"])
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    _write(workdir, ["import fx\nx = 1", "y = 2", "fx.blind('notify')\nprint('sent!')"])
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("notify", None)]
    assert [e["name"] for e in _status(workdir)["effects"]] == ["notify"]


# -- 2. %%step notebooks: three ordinary edits -----------------------------------------


def _steps(*cells: str) -> list[str | tuple[str, str]]:
    return [SETUP, "import fx", *cells]


@pytest.mark.kernel
def test_an_effect_moved_to_another_step_is_not_sent_again(workdir: Path, receiver):
    build = "%%step build\nfx.blind('announce', {'v': 1})\nbuilt = 1"
    _write(workdir, _steps(build, "%%step publish\nprint('published', built)"))
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    moved = "%%step publish\nfx.blind('announce', {'v': 1})\nprint('published', built)"
    _write(workdir, _steps("%%step build\nbuilt = 1", moved))
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("announce", {"v": 1})]


@pytest.mark.kernel
def test_a_step_and_its_effect_renamed_in_one_edit_are_not_sent_again(workdir: Path, receiver):
    _write(workdir, _steps("%%step notify\nfx.blind('send', {'text': 'ready'})"))
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    renamed = "%%step notify-team\nfx.blind('announce', {'text': 'ready'})"
    _write(workdir, _steps(renamed))
    done = _run(workdir, receiver, "run", "job.ipynb")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "EffectRenamed" in said, said
    assert "--was notify" in said and "was='send'" in said  # the way on
    _write(
        workdir,
        _steps(
            "%%step notify-team --was notify\nfx.blind('announce', {'text': 'ready'}, was='send')"
        ),
    )
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("send", {"text": "ready"})]


@pytest.mark.kernel
def test_a_step_renamed_with_an_edited_body_while_a_new_step_takes_its_name(
    workdir: Path, receiver
):
    _write(workdir, _steps("%%step notify\nfx.blind('send', {'text': 'ready'})"))
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    _write(
        workdir,
        _steps(
            "%%step notify-team\nfx.blind('send', {'text': 'ready'})\nprint('edited')",
            "%%step notify\nprint('a new step of that name')",
        ),
    )
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("send", {"text": "ready"})]


# -- 3. parameters, as papermill users write them -------------------------------------


def _charging(folder: Path) -> None:
    _write(folder, [("parameters", "n = 3"), "import fx\nfx.blind('charge', {'n': n})"])


@pytest.mark.kernel
def test_an_unknown_parameter_is_refused_before_a_kernel_starts(workdir: Path, receiver):
    _charging(workdir)
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    done = _run(workdir, receiver, "run", "job.ipynb", "-p", "nn", "4")
    assert done.returncode == 2, done.stderr
    assert "did you mean 'n'" in done.stderr and "--new" in done.stderr
    assert "running job.ipynb" not in done.stderr  # no kernel started
    insisted = _run(workdir, receiver, "run", "job.ipynb", "-p", "nn", "4", "--new")
    assert insisted.returncode == 0, insisted.stderr
    # a run of its own, in the notebook's lineage: the same charge is not sent again
    assert _sent(receiver) == [("charge", {"n": 3})]


@pytest.mark.kernel
def test_a_parameter_in_two_spellings_is_one_run_and_one_charge(workdir: Path, receiver):
    _charging(workdir)
    first = _run(workdir, receiver, "run", "job.ipynb", "-p", "n", "4")
    again = _run(workdir, receiver, "run", "job.ipynb", "-p", "n", "4.0")
    yaml = _run(workdir, receiver, "run", "job.ipynb", "-y", "n: 4")
    assert first.returncode == again.returncode == yaml.returncode == 0, again.stderr
    ran = [done.stderr.split(" as run ")[1].split()[0] for done in (first, again, yaml)]
    assert ran[0] == ran[1] == ran[2]
    assert _sent(receiver) == [("charge", {"n": 4})]


@pytest.mark.kernel
def test_a_parameter_set_that_adds_a_member_sends_only_the_new_member(workdir: Path, receiver):
    mails = "import fx\nfor user in users:\n    fx.blind(f'mail/{user}', {'to': user})"
    _write(workdir, [("parameters", "users = ['ann', 'bob']"), mails])
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    done = _run(workdir, receiver, "run", "job.ipynb", "-y", "users: [ann, bob, cid]")
    assert done.returncode == 0, done.stderr
    assert [name for name, _ in _sent(receiver)] == ["mail/ann", "mail/bob", "mail/cid"]
    # the step's card (kept in the executed notebook's metadata) says what was not sent
    out = nbformat.read(str(workdir / "job.out.ipynb"), as_version=4)
    said = " ".join(" ".join(c.metadata.get("stepstone", {}).get("said", [])) for c in out.cells)
    assert "effect mail/ann: confirmed by run job" in said and "not performed again" in said


# -- 4. --diverge on a copy that never diverged ---------------------------------------


@pytest.mark.kernel
def test_diverge_is_refused_on_a_copy_that_can_still_take_turns(tmp_path: Path, receiver):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    fail = "import os\nif os.path.exists('fail'):\n    raise RuntimeError('not yet')"
    _write(a, _steps("%%step load\nx = 1", f"%%step send\n{fail}\nfx.blind('notify')"))
    (a / "fail").write_text("")
    assert _run(a, receiver, "run", "job.ipynb").returncode == 1
    shutil.copytree(a, b)
    (a / "fail").unlink()
    (b / "fail").unlink()
    assert _run(a, receiver, "run", "job.ipynb").returncode == 0
    done = _run(b, receiver, "run", "job.ipynb", "--diverge")
    assert done.returncode == 2, done.stderr
    assert "not diverged" in done.stderr and "without --diverge" in done.stderr
    done = _run(b, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("notify", None)]


# -- 5. a plain `git clone --bare` of the shared remote takes the lease -----------------


def test_a_plain_bare_clone_of_the_shared_remote_takes_the_lease(tmp_path: Path):
    from conftest import git, stepstone_cli

    origin = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        run.step("start", lambda: 0)
    pushed = stepstone_cli("push", "--remote", str(origin), cwd=a)
    assert pushed.returncode == 0, pushed.stderr
    b.mkdir()
    git("clone", "--bare", "-q", str(origin), str(b / ".stepstone"), cwd=tmp_path)
    b_drives = (
        "import stepstone\n"
        "with stepstone.open_run('job', repo='.stepstone') as run:\n"
        "    run.step('start', lambda: 0)\n"
        "    run.step('send', lambda: stepstone.effect('notify', lambda key: print('sent')))\n"
    )
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        refused = subprocess.run(
            [sys.executable, "-c", b_drives],
            cwd=b,
            env=clean_env(),
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 1 and "LeaseHeld" in refused.stderr, refused.stderr
        assert "sent" not in refused.stdout
        run.step("send", lambda: stepstone.effect("notify", lambda key: print("a sent")))
    assert stepstone_cli("push", cwd=a).returncode == 0
    # once A let go, B takes the lease, brings in A's history and sends nothing again
    done = subprocess.run(
        [sys.executable, "-c", b_drives], cwd=b, env=clean_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "sent" not in done.stdout


# -- 6. a clock-named member once a fixed member is asked first -----------------------


def test_a_clock_named_member_after_a_fixed_member_is_refused(workdir: Path):
    sent: list[str] = []

    def alerts() -> None:
        stepstone.effect("alert/daily", lambda key: sent.append("daily"))
        stamp = time.time_ns()
        stepstone.effect(f"alert/run-{stamp}", lambda key: sent.append(f"run-{stamp}"))
        raise RuntimeError("the step fails after its alerts")

    for _ in range(3):
        with (
            stepstone.open_run("job") as run,
            pytest.raises((RuntimeError, stepstone.EffectRenamed)),
        ):
            run.step("alert", alerts)
    assert len(sent) == 2, sent  # daily once, the first clock-named one once


def test_the_refusal_of_a_clock_named_member_says_what_to_do(workdir: Path):
    def alerts() -> None:
        stepstone.effect("alert/daily", lambda key: None)
        stepstone.effect(f"alert/run-{time.time_ns()}", lambda key: None)
        raise RuntimeError("fails")

    with stepstone.open_run("job") as run, pytest.raises(RuntimeError):
        run.step("alert", alerts)
    with stepstone.open_run("job") as run, pytest.raises(stepstone.EffectRenamed) as refused:
        run.step("alert", alerts)
    said = str(refused.value)
    assert "same inputs" in said and "not the time" in said and "new=True" in said


# -- 7. a run and its fork re-running an inherited step at the same moment -----------

RACE = """
import sys, time, stepstone
run_id, sent = sys.argv[1], sys.argv[2]
def work():
    def send(key):
        with open(sent, "a") as log:
            log.write(run_id + "\\n")
        time.sleep(0.5)
        return {"ok": 1}
    stepstone.effect("eb", send)
with stepstone.open_run(run_id) as run:
    run.set_plan(["a", "b"])
    run.step("a", lambda: 1)
    time.sleep(float(sys.argv[3]))
    run.step("b", work)
"""


@pytest.mark.kernel
def test_a_run_and_its_fork_asking_for_one_effect_at_once_send_it_once(workdir: Path):
    from conftest import git, stepstone_cli

    with stepstone.open_run("job") as run:
        run.set_plan(["a", "b"])
        run.step("a", lambda: 1)
    done = stepstone_cli("fork", "job", "--at", "a", "--as", "alt", cwd=workdir)
    assert done.returncode == 0, done.stderr
    script = workdir / "race.py"
    script.write_text(RACE)
    sent = workdir / "sent.txt"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), run_id, str(sent), "0.3"],
            cwd=workdir,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run_id in ("job", "alt")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err  # the one that waited took the other's receipt
    assert len(sent.read_text().split()) == 1, sent.read_text()
    logs = [
        git("log", "--format=%s", run_id, cwd=workdir / ".stepstone") for run_id in ("job", "alt")
    ]
    assert sum("effect eb: confirmed, as refs/heads/" in log for log in logs) == 1, logs
    for run_id in ("job", "alt"):
        with stepstone.open_run(run_id) as run:
            run.step("a", lambda: 1)
            run.step("b", lambda: stepstone.effect("eb", lambda key: 1 / 0))
    assert len(sent.read_text().split()) == 1


def test_a_person_settling_an_effect_in_one_run_settles_it_in_its_fork(workdir: Path):
    """Found by the generator: an effect in doubt in a fork, and in its source; settled
    in the source as not sent, the source's run took the fork's doubt again at every try."""
    from conftest import stepstone_cli

    def fails(key: str) -> None:
        raise TimeoutError("no answer")

    with stepstone.open_run("job") as run:
        run.set_plan(["a", "b"])
        run.step("a", lambda: 1)
    assert stepstone_cli("fork", "job", "--at", "a", "--as", "alt", cwd=workdir).returncode == 0
    for run_id, raised in (("alt", TimeoutError), ("job", stepstone.UnresolvedEffect)):
        with stepstone.open_run(run_id) as run, pytest.raises(raised):  # job: alt's doubt
            run.step("a", lambda: 1)
            run.step("b", lambda: stepstone.effect("notify", fails))
    with stepstone.open_run("job") as run:
        (key,) = run.effects
        run.resolve_effect(key, happened=False, why="not in the outbox")
    sent: list[str] = []
    for run_id in ("job", "alt"):
        with stepstone.open_run(run_id) as run:
            run.step("a", lambda: 1)
            run.step("b", lambda r=run_id: stepstone.effect("notify", lambda key: sent.append(r)))
    assert sent == ["job"]


# -- 8. an effect from a thread that outlives its step ---------------------------------


def test_an_effect_from_a_thread_that_outlived_its_step_is_refused(workdir: Path):
    sent: list[str] = []
    errors: list[BaseException] = []

    def late() -> None:
        time.sleep(0.3)
        try:
            stepstone.effect("late", lambda key: sent.append(key))
        except BaseException as exc:
            errors.append(exc)

    def starts_a_thread() -> None:
        threading.Thread(target=late).start()

    with stepstone.open_run("job") as run:
        run.set_plan(["a", "b"])
        run.step("a", starts_a_thread)
        run.step("b", lambda: time.sleep(0.6))
        assert not run.effects
    assert sent == [] and len(errors) == 1
    assert "after that step ended" in str(errors[0]) and "join" in str(errors[0])


def test_a_thread_pool_made_before_the_step_works_for_the_step(workdir: Path):
    from concurrent.futures import ThreadPoolExecutor

    sent: list[str] = []
    pool = ThreadPoolExecutor(2)
    pool.submit(lambda: None).result()  # its threads exist before the step

    def mails() -> None:
        for future in [
            pool.submit(stepstone.effect, f"mail/{n}", lambda key, n=n: sent.append(n))
            for n in range(4)
        ]:
            future.result()

    with stepstone.open_run("job") as run:
        run.step("mail", mails)
        assert {e.step for e in run.effects.values()} == {"mail"}
    pool.shutdown()
    assert sorted(sent) == [0, 1, 2, 3]


# -- 9. clock skew ----------------------------------------------------------------------

KEYED = """
import os, stepstone
from receiver import send
def charge():
    url = os.environ["FX_RECEIVER"]
    return stepstone.effect(
        "charge", lambda key: send(url, "keyed", {"ref": key, "name": "charge", "payload": None},
                                   {"Idempotency-Key": key}), keyed=True)
with stepstone.open_run("job") as run:
    run.step("pay", charge)
"""


@pytest.mark.fault
def test_an_intent_dated_in_the_future_is_in_doubt_not_retried(workdir: Path, receiver):
    env = clean_env(PYTHONPATH=str(TESTS), FX_RECEIVER=receiver.url)
    ahead = {**env, "STEPSTONE_CLOCK_SKEW": "3600", "STEPSTONE_FAULT": "effect.submitted"}
    killed = subprocess.run(
        [sys.executable, "-c", KEYED], cwd=workdir, env=ahead, capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr
    resumed = subprocess.run(
        [sys.executable, "-c", KEYED], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 1 and "UnresolvedEffect" in resumed.stderr, resumed.stderr
    assert "in the future" in resumed.stderr
    assert receiver.applied("keyed") == {}


TWO_STEPS = """
import os, sys, stepstone
from receiver import send
def charge():
    url = os.environ["FX_RECEIVER"]
    return stepstone.effect(
        "charge", lambda key: send(url, "keyed", {"ref": key, "name": "charge", "payload": None},
                                   {"Idempotency-Key": key}), keyed=True)
with stepstone.open_run(sys.argv[1]) as run:
    run.step("first", lambda: 1)
    run.step("pay", charge)
"""


@pytest.mark.fault
def test_an_intent_dated_in_the_future_that_a_person_settled_is_not_in_doubt_again_via_a_fork(
    workdir: Path, receiver
):
    """Found by the generated round (seed 7366): a person's resolution made "now" is
    earlier than an intent a clock ahead dated in the future, so the same intent held
    by a fork kept the effect in doubt at every run, resolved as often as asked."""
    env = clean_env(PYTHONPATH=str(TESTS), FX_RECEIVER=receiver.url)
    ahead = {**env, "STEPSTONE_CLOCK_SKEW": "3600", "STEPSTONE_FAULT": "effect.submitted"}

    def run(name: str, with_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", TWO_STEPS, name]
        return subprocess.run(argv, cwd=workdir, env=with_env, capture_output=True, text=True)

    assert run("job", ahead).returncode == -9
    forked = cli("fork", "job", "--at", "first", "--as", "other", cwd=workdir)
    assert forked.returncode == 0, forked.stderr
    in_fork = run("other", env)  # the fork takes the intent in doubt in
    assert in_fork.returncode == 1 and "UnresolvedEffect" in in_fork.stderr, in_fork.stderr
    key = json.loads(cli("status", "--json", "--run", "job", cwd=workdir).stdout)["effects"][0]
    settled = cli(
        "resolve", key["key"], "--run", "job", "--not-happened", "--why", "not there",
        cwd=workdir,
    )  # fmt: skip
    assert settled.returncode == 0, settled.stderr
    again = run("job", env)
    assert again.returncode == 0, again.stderr
    assert len(receiver.applied("keyed")) == 1


# -- 10. redaction by exact field names -------------------------------------------------


def test_a_receipt_with_fields_that_only_look_like_credentials_comes_back_whole(workdir: Path):
    receipt = {"passenger_id": 42, "usage": {"total_tokens": 7}}
    with stepstone.open_run("job") as run:
        got = run.step("book", lambda: stepstone.effect("book", lambda key: receipt)).value
        (record,) = run.effects.values()
    assert got == receipt and record.receipt == receipt


def test_a_payload_changed_only_in_fields_that_look_like_credentials_is_a_change(
    workdir: Path,
):
    booked: list[Any] = []

    def book(payload: dict[str, Any]) -> Any:
        return stepstone.effect(
            "book", lambda key: booked.append(payload) or {"n": len(booked)}, payload=payload
        )

    with stepstone.open_run("job") as run:
        run.step("book", lambda: book({"passenger": "Alice", "max_tokens": 100}))
        run.rerun("book", "book again")
    with stepstone.open_run("job") as run, pytest.raises(stepstone.EffectChanged):
        run.step("book", lambda: book({"passenger": "Bob", "max_tokens": 999}))
    assert booked == [{"passenger": "Alice", "max_tokens": 100}]


def test_credentials_are_redacted_by_exact_field_name(workdir: Path):
    from stepstone.effects.redaction import redact

    assert redact({"Authorization": "Bearer x", "token": "t", "passenger": "Alice"}) == {
        "Authorization": "[redacted]",
        "token": "[redacted]",
        "passenger": "Alice",
    }
    assert redact({"pin": "1234"}, fields=frozenset({"pin"})) == {"pin": "[redacted]"}


# -- 11. a revised decision that adds family members ------------------------------------

ALERTS = """%%step alert
orders = [(1001, 350), (1002, 600), (1003, 800), (1004, 420)]
threshold = int(stepstone.decided("threshold"))
for order, amount in orders:
    if amount > threshold:
        fx.blind(f"alert/{order}", {"order": order, "amount": amount})"""


@pytest.mark.kernel
def test_a_revised_decision_that_adds_members_sends_only_the_new_ones(workdir: Path, receiver):
    cells = [SETUP, "import fx, stepstone", '%decide threshold=500 --why "the feed\'s mean"']
    _write(workdir, [*cells, ALERTS])
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    revised = _run(workdir, receiver, "decide", "threshold", "300", "--revise", "--why", "more")
    assert revised.returncode == 0, revised.stderr
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stdout + done.stderr
    names = [name for name, _ in _sent(receiver)]
    assert names == ["alert/1002", "alert/1003", "alert/1001", "alert/1004"]


# -- 12. a family iterated from a set of text -------------------------------------------

SET_FAMILY = """%%step mail
import os, signal
users = {"ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lea"}
for n, user in enumerate(users):
    fx.blind(f"mail/{user}", {"to": user})
    if n == 5 and os.path.exists("kill"):
        os.remove("kill")
        os.kill(os.getpid(), signal.SIGKILL)"""


@pytest.mark.kernel
def test_a_family_iterated_from_a_set_resumes_in_a_new_kernel(workdir: Path, receiver):
    _write(workdir, [SETUP, "import fx", SET_FAMILY])
    (workdir / "kill").write_text("")
    assert _run(workdir, receiver, "run", "job.ipynb").returncode != 0
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stdout + done.stderr
    names = [name for name, _ in _sent(receiver)]
    assert len(names) == len(set(names)) == 12


@pytest.mark.kernel
def test_a_set_iterated_with_another_seed_the_user_set_is_refused_with_the_way_on(
    workdir: Path, receiver
):
    _write(workdir, [SETUP, "import fx", SET_FAMILY])
    (workdir / "kill").write_text("")
    killed = _run(workdir, receiver, "run", "job.ipynb", PYTHONHASHSEED="1")
    assert killed.returncode != 0
    done = _run(workdir, receiver, "run", "job.ipynb", PYTHONHASHSEED="2")
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "sorted(" in said, said
    names = [name for name, _ in _sent(receiver)]
    assert len(names) == len(set(names))


# -- 13. top-level await in a step ------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize("mode", ["%%step", "--cells"])
def test_top_level_await_runs_in_a_step(workdir: Path, receiver, mode: str):
    body = "import asyncio\nawait asyncio.sleep(0)\nwaited = 'yes'\nprint('awaited')"
    cells = [SETUP, f"%%step wait\n{body}"] if mode == "%%step" else [body]
    _write(workdir, [*cells, "print(waited)"])
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stdout + done.stderr
    out = nbformat.read(str(workdir / "job.out.ipynb"), as_version=4)
    assert "awaited" in "".join(o.get("text", "") for c in out.cells for o in c.get("outputs", []))
    again = _run(workdir, receiver, "run", "job.ipynb")
    assert again.returncode == 0, again.stdout + again.stderr


# -- 14. a rename in --cells mode ---------------------------------------------------------


@pytest.mark.kernel
def test_a_cell_renamed_with_was_in_cells_mode_keeps_its_step(workdir: Path, receiver):
    _write(workdir, ["import fx", "# step: notify\nfx.blind('send')\nprint(1)"])
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    _write(workdir, ["import fx", "# step: notify-team --was notify\nfx.blind('send')\nprint(2)"])
    done = _run(workdir, receiver, "run", "job.ipynb")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [s["name"] for s in _status(workdir)["steps"]]
    assert "notify-team" in steps and "notify" not in steps
    assert _sent(receiver) == [("send", None)]


# -- 15. refusals exit 2 with their name ------------------------------------------------

HOLD = """
import sys, time, stepstone
with stepstone.open_run("job"):
    print("holding", flush=True)
    time.sleep(60)
"""


@pytest.mark.kernel
def test_a_run_driven_elsewhere_is_refused_with_exit_2_and_its_name(workdir: Path, receiver):
    _write(workdir, _steps("%%step one\nx = 1"))
    assert _run(workdir, receiver, "run", "job.ipynb").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        cwd=workdir,
        env=clean_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        done = _run(workdir, receiver, "run", "job.ipynb")
    finally:
        holder.kill()
        holder.communicate()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "RunLocked" in done.stderr and "UsageError" not in done.stderr


# -- found by the generator: copies that diverged, and turns taken through a remote ----


def _drive(folder: Path, steps: list[str], ran: list[str], **kw: Any) -> None:
    with stepstone.open_run("job", repo=folder / ".stepstone", workdir=folder, **kw) as run:
        for name in steps:
            run.step(name, lambda name=name: ran.append(f"{folder.name}:{name}"))


def test_a_git_clone_driven_on_as_a_new_lineage_is_not_refused_again(tmp_path: Path):
    from conftest import git

    a, b, away = tmp_path / "a", tmp_path / "b", tmp_path / "away"
    ran: list[str] = []
    _drive(a, ["load"], ran)
    git("clone", "--bare", "-q", str(a / ".stepstone"), str(b / ".stepstone"), cwd=tmp_path)
    _drive(b, ["load"], ran)  # the clone and its origin know each other now
    b.rename(away)  # each is driven while the other is away: they go apart
    _drive(a, ["load", "fit"], ran)
    away.rename(b)
    a.rename(away)
    _drive(b, ["load", "score"], ran)
    away.rename(a)
    with pytest.raises(stepstone.Diverged):
        _drive(b, ["load", "score"], ran)
    _drive(b, ["load", "score"], ran, diverge=True)
    _drive(b, ["load", "score", "report"], ran)  # its own lineage from now on
    assert ran == ["a:load", "a:fit", "b:score", "b:report"]


def _shared_from(tmp_path: Path, ran: list[str]) -> tuple[Path, Path, Path]:
    """(the remote, a, b): a's run, one step done, pushed to a new bare remote, which
    shares it; b is an empty folder."""
    from conftest import git, stepstone_cli

    origin = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    _drive(a, ["load"], ran)
    assert stepstone_cli("push", "--remote", str(origin), cwd=a).returncode == 0
    return origin, a, b


def test_a_driver_that_lets_go_of_the_lease_hands_over_what_it_did(tmp_path: Path):
    from conftest import git

    ran: list[str] = []
    origin, a, b = _shared_from(tmp_path, ran)
    git("clone", "--bare", "-q", str(origin), str(b / ".stepstone"), cwd=tmp_path)
    _drive(b, ["load", "fit"], ran)  # takes the lease, and hands `fit` over with it
    _drive(a, ["load", "fit", "score"], ran)
    _drive(b, ["load", "fit", "score", "report"], ran)
    assert ran == ["a:load", "b:fit", "a:score", "b:report"]


def test_a_git_clone_of_a_store_that_shares_its_run_takes_turns_with_it(tmp_path: Path):
    from conftest import git

    ran: list[str] = []
    _, a, b = _shared_from(tmp_path, ran)
    _drive(a, ["load", "fit"], ran)  # the run says `shared` now
    git("clone", "--bare", "-q", str(a / ".stepstone"), str(b / ".stepstone"), cwd=tmp_path)
    with (
        stepstone.open_run("job", repo=a / ".stepstone", workdir=a),
        pytest.raises((stepstone.RunLocked, stepstone.LeaseHeld)),
    ):
        _drive(b, ["load", "fit", "score"], ran)
    _drive(b, ["load", "fit", "score"], ran)
    _drive(a, ["load", "fit", "score", "report"], ran)
    assert ran == ["a:load", "a:fit", "b:score", "a:report"]


@pytest.mark.kernel
def test_diverge_says_on_the_console_what_it_sends_anew(tmp_path: Path, receiver):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.mkdir()
    _write(a, _steps("%%step load\nx = 1", "%%step send\nfx.blind('notify')"))
    assert _run(a, receiver, "run", "job.ipynb").returncode == 0
    shutil.copytree(a, b)
    shutil.copytree(a, c)
    shutil.rmtree(a)  # the original is gone before the copies met it
    # nobody drove it when it was copied (issue 50): the copy takes the run over
    taken = _run(c, receiver, "run", "job.ipynb")
    assert taken.returncode == 0 and "takes the run over" in taken.stderr, taken.stderr
    assert _sent(receiver) == [("notify", None)]
    lock = b / ".stepstone" / "stepstone" / "locks" / "job.lock"  # as a live driver left it:
    held = json.loads(lock.read_text())  # copied while driven, what it did since is unknown
    del held["released"]
    lock.write_text(json.dumps(held))
    refused = _run(b, receiver, "run", "job.ipynb")
    assert refused.returncode == 2 and "Diverged" in refused.stderr, refused.stderr
    done = _run(b, receiver, "run", "job.ipynb", "--diverge")
    assert done.returncode == 0, done.stderr
    assert "as a new lineage" in done.stderr and "sent anew" in done.stderr, done.stderr
    assert _sent(receiver) == [("notify", None)]


def _charge_held_back(folder: Path, receiver: Receiver) -> None:
    """The notebook of a parameters cell, a step `load` and a step `send` that charges,
    run in `folder` while `send` fails (while the file `fail` is there)."""
    fail = "import os\nif os.path.exists('fail'):\n    raise RuntimeError('not yet')"
    cells = [
        ("parameters", "n = 3"),
        "%%step load\nx = 1",
        f"%%step send\n{fail}\nfx.blind('charge')",
    ]
    _write(folder, [SETUP, "import fx", *cells])
    (folder / "fail").write_text("")
    assert _run(folder, receiver, "run", "job.ipynb").returncode == 1


def _store_cloned(a: Path, b: Path) -> None:
    """`b`: a plain `git clone --bare` of `a`'s store beside a copy of its notebook."""
    from conftest import git

    b.mkdir()
    git("clone", "--bare", "-q", str(a / ".stepstone"), str(b / ".stepstone"), cwd=a.parent)
    shutil.copy(a / "job.ipynb", b / "job.ipynb")


@pytest.mark.kernel
def test_a_parameter_set_takes_what_a_clone_of_the_shared_remote_sent(tmp_path: Path, receiver):
    """Found by the generator (seed 2079): a notebook's run shared through a remote, a
    plain clone of the remote sends its effect, then the notebook runs here with other
    parameters: the new parameter set is in the run's lineage, and its effect was sent."""
    from conftest import git

    origin, a, b = tmp_path / "remote.git", tmp_path / "a", tmp_path / "b"
    git("init", "-q", "--bare", str(origin), cwd=tmp_path)
    a.mkdir()
    _charge_held_back(a, receiver)
    assert _run(a, receiver, "push", "--remote", str(origin)).returncode == 0
    b.mkdir()
    git("clone", "--bare", "-q", str(origin), str(b / ".stepstone"), cwd=tmp_path)
    shutil.copy(a / "job.ipynb", b / "job.ipynb")
    assert _run(b, receiver, "run", "job.ipynb").returncode == 0
    assert _sent(receiver) == [("charge", None)]
    (a / "fail").unlink()
    done = _run(a, receiver, "run", "job.ipynb", "-p", "n", "4")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("charge", None)]


@pytest.mark.kernel
def test_a_parameter_set_in_a_clone_of_a_store_takes_what_the_original_sent_since(
    tmp_path: Path, receiver
):
    """Found by the generator (seed 8003): a `git clone --bare` of a store on this machine,
    taken before the notebook's run sent its effect, then the notebook run in the clone
    with other parameters: the parameter set is in the lineage of the original's run,
    but it looks for the effect only in the clone's stale copy of that run."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    _charge_held_back(a, receiver)
    _store_cloned(a, b)
    (a / "fail").unlink()
    assert _run(a, receiver, "run", "job.ipynb").returncode == 0
    assert _sent(receiver) == [("charge", None)]
    done = _run(b, receiver, "run", "job.ipynb", "-p", "n", "4")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("charge", None)]


@pytest.mark.kernel
def test_the_original_takes_what_a_parameter_set_in_its_clone_sent(tmp_path: Path, receiver):
    """The other way round of seed 8003: the parameter set driven in the clone sends
    first; the notebook's run in the store it was cloned from then asks the same."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    _charge_held_back(a, receiver)
    _store_cloned(a, b)
    done = _run(b, receiver, "run", "job.ipynb", "-p", "n", "4")
    assert done.returncode == 0, done.stderr
    assert _sent(receiver) == [("charge", None)]
    (a / "fail").unlink()
    again = _run(a, receiver, "run", "job.ipynb")
    assert again.returncode == 0, again.stderr
    assert _sent(receiver) == [("charge", None)]
