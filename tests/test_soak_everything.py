"""Random-kill soak of everything together.

A notebook is driven in a real IPython shell (tests/drivers/shell_notebook.py) and
killed at random instants, while between attempts a person or an agent does what
people do: revises a decision from the command line, answers the open question,
renames a step and its effect, renames the notebook, hands the store over by plain
`git clone` (bare, then with a work tree) to a folder holding only the notebook, and
forks the finished run in another clone. Its steps keep their files (`--keep`), one
saves a 2 MiB array that the next reads back, three send effects (keyed, queryable,
blind).

After every attempt: `git fsck --strict`, no step confirmed without evidence, no
effect applied twice. At the end: every step verified, the same files and the same
effects as a clean run of the notebook with the same decision and answer, and no
step repeated more often than the interruptions and the changes that made it stale
explain (a hand-off, a rename or a fork repeats nothing).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from conftest import fsck, git
from nbformat.v4 import new_code_cell, new_notebook
from receiver import Receiver

import stepstone

pytestmark = pytest.mark.soak

DRIVER = Path(__file__).resolve().parent / "drivers" / "shell_notebook.py"
STEPS = 10
BIG = 3  # saves a 2 MiB array; the next step reads it back from the kernel
DECIDES = 6  # reads the decision `mode`
ANSWERS = 7  # reads the answer to U1
RENAMED = 5  # renamed while the run goes on (its body unchanged), and its effect renamed
KINDS = {2: "keyed", 5: "lookup", 8: "blind"}
EVENTS = (
    *("revise", "answer", "rename-step", "rename-effect", "rename-notebook"),
    *("handoff", "handoff"),
)

HELPERS = """\
import os, pathlib, time
import numpy, stepstone
from receiver import find, send
URL, TAG, LOG = os.environ["RECEIVER"], os.environ["SOAK_TAG"], os.environ["SOAK_LOG"]

def ran(step):
    with open(LOG, "a") as log:
        log.write(step + "\\n")

def post(kind, key, i):
    headers = {"Idempotency-Key": key} if kind == "keyed" else {}
    return send(URL, kind, {"ref": key, "tag": TAG, "i": i}, headers)

def lookup(key):
    return find(URL, "lookup", key)

def previous(i):
    return int(pathlib.Path(f"out/s{i - 1}.txt").read_text()) if i else 1
"""


def step_name(i: int, renamed: bool) -> str:
    return f"s{i}-renamed" if renamed and i == RENAMED else f"s{i}"


def step_cell(i: int, renamed: bool, effect_renamed: bool) -> str:
    options = " --out big" if i == BIG else ""
    if renamed and i == RENAMED:
        options += f" --was s{i}"
    body = [f'ran("s{i}")', "time.sleep(0.05)", f"value = previous({i}) + {i}"]
    if i == BIG:
        body.append("big = numpy.full(1 << 18, value, dtype='float64')")
    if i == BIG + 1:
        body.append(f"value = int(big[-1]) + {i}")  # the saved array, restored if skipped
    if i == DECIDES:
        body.append("value = value if stepstone.decided('mode') == 'sum' else value * 2")
    if i == ANSWERS:
        body.append("value += len(stepstone.answer('U1', 'open'))")
    if i in KINDS:
        kind = KINDS[i]
        name, was = f"notify/{i}", ""
        if effect_renamed and i == RENAMED:  # an edit of the cell: it runs again
            name, was = f"notify/{i}-renamed", f", was='notify/{i}'"
        body.append(
            f"stepstone.effect('{name}', lambda key: post('{kind}', key, {i}), "
            f"keyed={kind == 'keyed'}, lookup={'lookup' if kind == 'lookup' else None}, "
            f"payload={{'i': {i}}}{was})"
        )
    body += [
        "pathlib.Path('out').mkdir(exist_ok=True)",
        f"pathlib.Path('out/s{i}.txt').write_text(str(value))",
    ]
    return (
        f"%%step {step_name(i, renamed)} --check file:out/s{i}.txt --keep{options}\n"
        + "\n".join(body)
    )


def write_notebook(
    path: Path,
    *,
    run: str | None,
    renamed: bool = False,
    effect_renamed: bool = False,
    mode: str = "sum",
    answer: str | None = None,
) -> None:
    cells = [
        "%load_ext stepstone\n%resume" + (f" --run {run}" if run else ""),
        HELPERS,
        f'%decide mode={mode} --why "the soak adds step numbers"',
        "%unknown Does the receiver keep its keys?",
    ]
    if answer is not None:
        cells.append(f"%unknown --resolve U1 {answer}")
    cells += [step_cell(i, renamed, effect_renamed) for i in range(STEPS)]
    cells.append("%finish")
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), str(path))


@dataclass
class Job:
    """One run being soaked: where it is now and what was done to it."""

    run: str
    folder: Path
    notebook: Path
    log: Path
    resume_run: str | None = None  # the `%resume --run` its first cell says
    renamed: bool = False
    effect_renamed: bool = False
    interruptions: int = 0
    made_stale: int = 0  # at most how many step executions revisions and answers explain
    answered: bool = False
    hops: int = 0
    done: list[str] = field(default_factory=list)  # what happened to it, for a failure

    @property
    def store(self) -> Path:
        return self.folder / ".stepstone"

    def write(self) -> None:
        write_notebook(
            self.notebook,
            run=self.resume_run,
            renamed=self.renamed,
            effect_renamed=self.effect_renamed,
        )

    def executions(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


def _env(**extra: str) -> dict[str, str]:
    """This environment without stepstone's settings, with `extra`; the notebook's cells
    import the receiver's client from the tests' folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.update(PYTHONPATH=str(DRIVER.parents[1]), **extra)
    return env


def _cli(job: Job, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepstone", *args],
        cwd=job.folder,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )


def _applied(receiver: Receiver, tag: str) -> list[tuple[str, int]]:
    """The effects `receiver` applied for runs tagged `tag`, as (kind, step number)."""
    return sorted((kind, body["i"]) for kind, body in receiver.bodies() if body["tag"] == tag)


def _files(folder: Path) -> dict[str, str]:
    out = folder / "out"
    return {p.name: p.read_text() for p in sorted(out.iterdir())} if out.exists() else {}


class Soak:
    def __init__(self, root: Path, receiver: Receiver, clean_receiver: Receiver, seed: int):
        self.root = root
        self.receiver = receiver
        self.clean_receiver = clean_receiver
        self.rng = random.Random(seed)
        self.kills = 0
        self.attempts = 0
        self.events: dict[str, int] = {}
        self.cleans: dict[str, tuple[dict[str, str], list[tuple[str, int]]]] = {}

    # -- reading the run as an agent would ------------------------------------------

    def reader(self, job: Job) -> stepstone.Run | None:
        if not job.store.exists():
            return None
        try:
            return stepstone.open_run(job.run, repo=job.store, drive=False, cached=False)
        except stepstone.RunNotFound:
            return None

    def check(self, job: Job) -> None:
        """The invariants after any attempt, killed or not."""
        if job.store.exists():
            fsck(job.store)
        reader = self.reader(job)
        if reader is not None:
            with reader:
                for record in reader.records.values():
                    if record.status == "confirmed":
                        assert record.evidence, record
        for kind in KINDS.values():
            counts = self.receiver.applied(kind)
            assert all(n == 1 for n in counts.values()), (kind, counts, job.done)

    # -- what people do between attempts --------------------------------------------

    def event(self, job: Job, what: str) -> bool:
        """Do `what` to the job if it can be done now; whether it was."""
        reader = self.reader(job)
        if reader is None:
            return False  # nothing recorded yet: nothing to revise, answer or hand over
        with reader:
            decisions, unknowns = dict(reader.decisions), dict(reader.unknowns)
            planned, finished = bool(reader.info.notebook), bool(reader.info.finished)
        if finished:  # killed after `%finish`: the next attempt only reads it back
            return False
        if what == "revise":
            if "mode" not in decisions:
                return False
            done = _cli(
                job, "decide", "mode", "product", "--why", "soak", "--revise", "--run", job.run
            )
            assert done.returncode == 0, done.stderr
            job.made_stale += STEPS - DECIDES
        elif what == "answer":
            if "U1" not in unknowns or unknowns["U1"].state != "open":
                return False
            self.answer(job)
        elif what == "rename-step":  # the same body under a new name: nothing runs again
            job.renamed = True
            job.write()
        elif what == "rename-effect":
            job.effect_renamed = True
            job.made_stale += STEPS - RENAMED
            job.write()
        elif what == "rename-notebook":
            if not planned:  # a run killed before its plan holds nothing: a new name starts anew
                return False
            renamed = job.notebook.with_name(f"{job.notebook.stem}-final.ipynb")
            job.notebook.rename(renamed)
            job.notebook = renamed
        elif what == "handoff":
            self.hand_off(job)
        job.done.append(f"{what}@{len(job.executions())}")
        self.events[what] = self.events.get(what, 0) + 1
        return True

    def answer(self, job: Job) -> None:
        done = _cli(job, "answer", "U1", "yes", "--why", "soak", "--run", job.run)
        assert done.returncode == 0, done.stderr
        job.made_stale += STEPS - ANSWERS
        job.answered = True

    def hand_off(self, job: Job, folder: Path | None = None) -> None:
        """Give the store to a new folder by plain `git clone`, with only the notebook."""
        job.hops += 1
        target = folder or self.root / f"{job.run}-hop{job.hops}"
        target.mkdir()
        bare = ["--bare"] if job.hops % 2 else []
        git("clone", "-q", *bare, str(job.store), str(target / ".stepstone"), cwd=self.root)
        shutil.copy(job.notebook, target / job.notebook.name)
        job.folder, job.notebook = target, target / job.notebook.name

    def settle(self, job: Job) -> None:
        """Settle unknown outcomes the way a person would: look at the receiver's log."""
        reader = self.reader(job)
        assert reader is not None
        with reader:
            unresolved = [k for k, e in reader.effects.items() if e.state == "unresolved"]
        assert unresolved
        for key in unresolved:
            landed = sum(self.receiver.applied(kind).get(key, 0) for kind in KINDS.values())
            verdict = ["--happened", "--receipt", "{}"] if landed else ["--not-happened"]
            done = _cli(
                job, "resolve", key, *verdict, "--why", "the receiver's log", "--run", job.run
            )
            assert done.returncode == 0, done.stderr

    # -- driving ----------------------------------------------------------------------

    def attempt(self, job: Job) -> tuple[int | None, str]:
        self.attempts += 1
        proc = subprocess.Popen(
            [sys.executable, str(DRIVER), job.notebook.name],
            cwd=job.folder,
            env=_env(RECEIVER=self.receiver.url, SOAK_TAG=job.run, SOAK_LOG=str(job.log)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        patience = 1 + job.interruptions // 8  # a loaded machine gets further each time
        try:
            _, err = proc.communicate(timeout=self.rng.uniform(0.7, 1.8) * patience)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            self.kills += 1
            job.interruptions += 1
            job.done.append(f"kill@{len(job.executions())}")
            return None, ""
        return proc.returncode, err

    def drive(self, job: Job, events: list[str]) -> None:
        """Attempt the notebook until it finishes, doing `events` at random moments."""
        schedule = sorted((self.rng.randrange(12), what) for what in events)
        for n in range(150):
            while schedule and schedule[0][0] <= n and self.event(job, schedule[0][1]):
                schedule.pop(0)
            before = len(job.executions())
            code, err = self.attempt(job)
            if code == 0:
                self.check(job)
                return
            if code is not None:
                self.respond(job, err, before)
            self.check(job)
        pytest.fail(f"{job.run} never finished: {job.done}")

    def respond(self, job: Job, err: str, executed_before: int) -> None:
        """What a person does when the notebook stops with an error."""
        job.done.append(f"stopped@{len(job.executions())}: {err.splitlines()[-1][:60]}")
        if "UnresolvedEffect" in err:
            self.settle(job)
            job.interruptions += 1
        elif "cannot finish yet" in err and "U1" in err:
            self.answer(job)
        elif "would start a new run" in err:  # the notebook was renamed: say which run it is
            assert f"--run {job.run}" in err, err
            assert len(job.executions()) == executed_before, "a refused %resume ran a step"
            job.resume_run = job.run
            job.write()
        else:
            pytest.fail(f"{job.run}: {err} (after {job.done})")

    # -- what a clean run makes ---------------------------------------------------------

    def clean(self, mode: str) -> tuple[dict[str, str], list[tuple[str, int]]]:
        """Files and effects of one uninterrupted run with decision `mode`, answer yes."""
        if mode not in self.cleans:
            folder = self.root / f"clean-{mode}"
            folder.mkdir()
            write_notebook(folder / "clean.ipynb", run=None, mode=mode, answer="yes")
            tag = f"clean-{mode}"
            done = subprocess.run(
                [sys.executable, str(DRIVER), "clean.ipynb"],
                cwd=folder,
                env=_env(
                    RECEIVER=self.clean_receiver.url,
                    SOAK_TAG=tag,
                    SOAK_LOG=str(folder / "executions"),
                ),
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            self.cleans[mode] = (_files(folder), _applied(self.clean_receiver, tag))
        return self.cleans[mode]

    def finished_like_a_clean_run(
        self, job: Job, *, after: int = -1, kept: frozenset[int] = frozenset()
    ) -> None:
        """Every step verified; files and effects (of steps after `after`, but those
        whose keys a fork `kept` from its source) as a clean run's."""
        status = _cli(job, "status", "--json", "--run", job.run)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert [s["state"] for s in report["steps"]] == ["verified"] * STEPS, report["steps"]
        reader = self.reader(job)
        assert reader is not None
        with reader:
            mode = reader.decisions["mode"].value
            assert reader.unknowns["U1"].answer == "yes"
        files, effects = self.clean(mode)
        assert _files(job.folder) == files, (job.done, mode)
        wanted = [e for e in effects if e[1] > after and e[1] not in kept]
        assert _applied(self.receiver, job.run) == wanted


def test_random_kills_with_edits_answers_hand_offs_and_forks_end_as_a_clean_run(
    tmp_path: Path, everything_kills: int
):
    with (
        Receiver(tmp_path / "receiver.db") as receiver,
        Receiver(tmp_path / "clean.db") as clean_receiver,
    ):
        soak = Soak(tmp_path, receiver, clean_receiver, seed=20261203)
        started = time.monotonic()
        n = 0
        while soak.kills < everything_kills:
            run = f"soak-{n}"
            n += 1
            folder = tmp_path / f"{run}-hop0"
            folder.mkdir()
            job = Job(run, folder, folder / f"{run}.ipynb", tmp_path / f"{run}.executions")
            job.write()
            soak.drive(job, list(EVENTS))
            soak.finished_like_a_clean_run(job)
            executions = job.executions()
            repeated = len(executions) - len(set(executions))
            assert repeated <= job.interruptions + job.made_stale, (" ".join(executions), job.done)

            # fork the finished run in a plain clone of its store
            at = soak.rng.randrange(1, STEPS - 1)
            fork = Job(f"{run}-fork", job.folder, job.notebook, tmp_path / f"{run}-fork.executions")
            fork.renamed, fork.effect_renamed = job.renamed, job.effect_renamed
            soak.hand_off(fork, tmp_path / f"{run}-fork")
            at_step = step_name(at, job.renamed)
            forked = _cli(fork, "fork", run, "--at", at_step, "--as", fork.run, "--json")
            assert forked.returncode == 0, forked.stderr
            anew = {int(e["step"][1:]) for e in json.loads(forked.stdout)["anew"]}
            # named by the steps' first names; a later step whose effects the branch point
            # records (it ran before step `at` ran again) keeps the source's keys
            # (docs/effects.md, the fork row): which ones depends on where the kills fell
            assert anew <= {i for i in KINDS if i > at}
            fork.resume_run = fork.run
            fork.write()
            soak.drive(fork, [])
            kept = frozenset({i for i in KINDS if i > at} - anew)  # applied once, by the source
            soak.finished_like_a_clean_run(fork, after=at, kept=kept)
            ran = fork.executions()
            first = ANSWERS if fork.answered else at + 1  # an answer makes its readers stale
            assert all(int(s[1:]) >= min(first, at + 1) for s in ran), (at, ran, fork)
            assert len(ran) - len(set(ran)) <= fork.interruptions + fork.made_stale
    print(
        f"{soak.kills} kills over {soak.attempts} attempts, {n} runs and their forks, "
        f"{time.monotonic() - started:.0f} s; events: {soak.events}"
    )
