"""Notebooks as varied as users', and what people and agents do to them
(tests/test_generated.py drives them; issue 47).

A `Program` is a notebook drawn from a grammar: a parameters cell, a cell of helpers,
decisions, plain cells and steps, in `%%step` form or as plain cells run `--cells`. A
step is one of:

    one        sends one effect whose payload comes from a parameter (`e3`, {"i", "n"})
    data       a family from a data file: f3/<x> for each x in data/d3.json
    decided    a family from a data file and a decision: the x above the threshold
    set        a family from a set of text (iterated in the order Python hashes it)
    threads    a family sent from a thread pool
    gather     a family sent from asyncio tasks, with top-level `await`
    plain      no effect

and writes `out/<run>/s<i>.txt` from what it read. Every effect reaches a blind receiver
on loopback (no key, no lookup: a second send is seen) with the lineage the world says
its folder is in, its name (its first name, for one renamed with `was=`) and payload.

The `World` holds folders (a notebook, its data and its store), copies of them (`cp -r`,
tar, `git clone --bare` of the store, a plain `git clone --bare` of a shared remote),
and the actions: run, kill -9, Ctrl-C, kill the kernel; insert, delete, move and edit
cells; move an effect call to another step; rename a step, and a step with its effect;
change a family's data; revise a decision (command line or notebook line); run with
parameters in other spellings and with an unknown name; fork and drive the fork beside
its source; copy while driven and `--diverge`; drive two copies, or a copy received
through a remote, at once; run with the process clock an hour ahead or behind.

The oracle: after every action, no logical effect (lineage, name, canonical payload)
reached the receiver twice; every refusal (exit 2) says what to do; `git fsck` holds.
At the end, every folder is driven to its end doing what each refusal says (a refusal
that names no way on fails the case), and then every effect its final notebook asks for
on its final data (a clean run of that notebook in a new folder says which) reached the
receiver exactly once in the folder's lineage, and (in `--cells` form, where the files a
step wrote are its evidence) its files are the clean run's.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from adversary import _copy_live, _holds, _last_line, _tar_live, with_children_gone
from conftest import fsck
from nbformat.v4 import new_code_cell, new_notebook

TESTS = Path(__file__).resolve().parent
NOTEBOOK = "job.ipynb"
RUN = "job"
KINDS = ["one", "one", "data", "decided", "set", "threads", "gather", "plain"]

HELPERS = """\
import asyncio, json, os, pathlib, random
import stepstone
from receiver import send as _post

def fx(name, payload, **options):
    body = {
        "folder": os.environ["GEN_FOLDER"],
        "lineage": os.environ["GEN_LINEAGE"],
        "run": os.environ.get("STEPSTONE_RUN", ""),
        "name": options.get("was") or name,
        "payload": payload,
    }
    headers = {"X-Delay-Before": str(random.random() * 0.1)}
    def do(key):
        return _post(os.environ["GEN_RECEIVER"], "blind", {**body, "ref": key}, headers)
    return stepstone.effect(name, do, payload=payload, **options)

def data(name):
    return json.loads(pathlib.Path("data", name).read_text())

def write(i, value):
    folder = pathlib.Path("out", os.environ.get("STEPSTONE_RUN", "plain"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"s{i}.txt").write_text(json.dumps(value))
"""


@dataclass
class Call:
    """One `fx(...)` call of a `one` step: its name, the step it was first in, and what
    it says of itself (`was=`, `new=True`)."""

    name: str
    home: int  # the index of the step it was made for: its payload's `i`
    was: str | None = None
    new: bool = False

    def line(self) -> str:
        options = (f", was={self.was!r}" if self.was else "") + (", new=True" if self.new else "")
        return f"fx({self.name!r}, {{'i': {self.home}, 'n': n}}{options})"


@dataclass
class Step:
    """A step cell: its index (stable: its file is `s<i>.txt`), name, kind, the `one`
    calls it holds, what it says it was, and an edit count (a comment)."""

    i: int
    name: str
    kind: str
    calls: list[Call] = field(default_factory=list)
    said_was: str | None = None
    edits: int = 0
    new_members: bool = False  # its family members pass new=True (the way a refusal named)

    def body(self) -> str:
        i = self.i
        opt = ", new=True" if self.new_members else ""
        lines = [f"# edited {self.edits} times"] if self.edits else []
        lines += [c.line() for c in self.calls]
        if self.kind == "data":
            lines += [
                f"members = data('d{i}.json')",
                "for x in members:",
                f"    fx(f'f{i}/{{x}}', {{'x': x}}{opt})",
            ]
        elif self.kind == "decided":
            lines += [
                f"threshold = int(stepstone.decided('t{i}', '50'))",
                f"members = [x for x in data('d{i}.json') if x > threshold]",
                "for x in members:",
                f"    fx(f'h{i}/{{x}}', {{'x': x, 'over': threshold}}{opt})",
            ]
        elif self.kind == "set":
            lines += [
                f"members = sorted(set(data('u{i}.json')))",
                f"for u in set(data('u{i}.json')):",
                f"    fx(f'm{i}/{{u}}', {{'u': u}}{opt})",
            ]
        elif self.kind == "threads":
            lines += [
                "from concurrent.futures import ThreadPoolExecutor",
                f"members = sorted(data('d{i}.json'))",
                "with ThreadPoolExecutor(3) as pool:",
                f"    list(pool.map(lambda x: fx(f'p{i}/{{x}}', {{'x': x}}{opt}), members))",
            ]
        elif self.kind == "gather":
            lines += [
                f"members = sorted(data('d{i}.json'))",
                "async def _one(x):",
                f"    fx(f'g{i}/{{x}}', {{'x': x}}{opt})",
                "await asyncio.gather(*(_one(x) for x in members))",
            ]
        else:
            lines += ["members = []"]
        lines.append(f"write({i}, {{'members': members, 'n': n}})")
        return "\n".join(lines)


@dataclass
class Program:
    """A generated notebook: its cells in order (kinds: params, helpers, decide, plain,
    step), in `%%step` form or as plain cells run `--cells`."""

    cells_mode: bool
    order: list[tuple[str, int]]  # (kind, index) of each cell after the setup cell
    steps: dict[int, Step]
    decisions: dict[int, tuple[int, bool]]  # step index -> (threshold, revised on the line)
    plain_edits: dict[int, int] = field(default_factory=dict)
    n: int = 3

    def cells(self) -> list[Any]:
        made = []
        if not self.cells_mode:
            made.append(new_code_cell("%load_ext stepstone\n%resume"))
        for kind, index in self.order:
            if kind == "params":
                cell = new_code_cell(f"n = {self.n}\nregion = 'eu'")
                cell.metadata["tags"] = ["parameters"]
                made.append(cell)
            elif kind == "helpers":
                made.append(new_code_cell(HELPERS))
            elif kind == "decide":
                value, revised = self.decisions[index]
                again = " --revise" if revised else ""
                made.append(new_code_cell(f'%decide t{index}={value}{again} --why "generated"'))
            elif kind == "plain":
                made.append(
                    new_code_cell(f"z{index} = {index}  # edited {self.plain_edits.get(index, 0)}")
                )
            else:
                made.append(new_code_cell(self.step_source(self.steps[index])))
        return made

    def step_source(self, step: Step) -> str:
        was = f" --was {step.said_was}" if step.said_was else ""
        if self.cells_mode:
            return f"# step: {step.name}{was}\n{step.body()}"
        return f"%%step {step.name}{was}\n{step.body()}"

    def write(self, path: Path) -> None:
        book = new_notebook(cells=self.cells())
        book.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(book, str(path))

    def step_at(self, position: int) -> Step | None:
        steps = [self.steps[i] for kind, i in self.order if kind == "step"]
        return steps[position % len(steps)] if steps else None

    def named(self, name: str) -> Step | None:
        return next((s for s in self.steps.values() if s.name == name), None)


def generate(rng: random.Random) -> tuple[Program, dict[str, Any]]:
    """A notebook and its data files, drawn from the grammar."""
    count = rng.randint(2, 5)
    steps = {}
    data: dict[str, Any] = {}
    decisions = {}
    for i in range(count):
        kind = rng.choice(KINDS)
        step = Step(i, f"s{i}", kind)
        if kind == "one":
            step.calls.append(Call(f"e{i}", i))
        if kind in ("data", "decided", "threads", "gather"):
            data[f"d{i}.json"] = sorted(rng.sample(range(10, 99), rng.randint(1, 4)))
        if kind == "set":
            data[f"u{i}.json"] = rng.sample(["ann", "bob", "cid", "dan", "eve", "fay", "gus"], 4)
        if kind == "decided":
            decisions[i] = (rng.choice([30, 50, 70]), False)
        steps[i] = step
    order: list[tuple[str, int]] = [("params", 0), ("helpers", 0)]
    order += [("decide", i) for i in decisions]
    for i in range(count):
        if rng.random() < 0.4:
            order.append(("plain", 100 + i))
        order.append(("step", i))
    return Program(rng.random() < 0.5, order, steps, decisions), data


def write_data(folder: Path, data: dict[str, Any]) -> None:
    (folder / "data").mkdir(exist_ok=True)
    for name, value in data.items():
        (folder / "data" / name).write_text(json.dumps(value))


@dataclass
class Folder:
    """A project folder: its program, its data, its store, the run it drives, and the
    lineage the world says its effects are in."""

    name: str
    path: Path
    program: Program
    lineage: str
    run: str = RUN
    history: list[str] = field(default_factory=list)
    torn: bool = False  # copied while a commit was written: mended when first driven

    @property
    def store(self) -> Path:
        return self.path / ".stepstone"

    def data(self) -> dict[str, Any]:
        folder = self.path / "data"
        return {p.name: json.loads(p.read_text()) for p in sorted(folder.iterdir())}


WAY_ON = re.compile(r"--|stepstone |%|wait|pass |repair|give |add |run |correct|iterate")


class World:
    """Folders, the receiver, remotes, and the invariants; each action says what it did."""

    def __init__(self, root: Path, receiver: Any, rng: random.Random) -> None:
        self.root = root
        self.tag = root.name
        self.receiver = receiver
        self.rng = rng
        self.folders: list[Folder] = []
        self.lineages = 0
        # a lineage `--diverge` began -> the keys of the effects its copy held then: they
        # happened in the lineage it diverged from, and are this one's too
        self.inherited: dict[str, set[str]] = {}
        # a lineage a `--diverge` run was given that did not begin one (nothing to diverge
        # from): its sends are the folder's lineage's
        self.aliases: dict[str, str] = {}
        self.counts: Counter[str] = Counter()
        self.touched: set[str] = set()
        self.remotes = 0

    # -- running the command line -----------------------------------------------------

    def env(self, folder: Folder, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
        env.pop("PYTHONHASHSEED", None)
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
            GEN_RECEIVER=self.receiver.url,
            GEN_FOLDER=f"{self.tag}/{folder.name}",
            GEN_LINEAGE=folder.lineage,
            **extra,
        )
        return env

    def cli(
        self, folder: Folder, *args: str, timeout: float = 300, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        self.touched.add(folder.name)
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", *args],
            cwd=folder.path,
            env=self.env(folder, **extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.counts["commands"] += 1
        if args[:1] == ("run",) and done.returncode in (0, 1):
            folder.torn = False
        why = _last_line(done.stderr) if done.returncode not in (0, None) else ""
        folder.history.append(f"{' '.join(args)[:80]} -> {done.returncode} {why}".rstrip())
        self.check_refusal(done)
        return done

    def start(self, folder: Folder, *extra: str, **env: str) -> subprocess.Popen[str]:
        self.touched.add(folder.name)
        return subprocess.Popen(
            [sys.executable, "-m", "stepstone", "run", NOTEBOOK, *extra],
            cwd=folder.path,
            env=self.env(folder, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def finish(self, folder: Folder, proc: subprocess.Popen[str], what: str) -> int:
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        with_children_gone(proc)
        folder.history.append(f"{what} -> {proc.returncode} {_last_line(err)}")
        self.check_refusal_text(proc.returncode, err)
        return proc.returncode or 0

    def check_refusal(self, done: subprocess.CompletedProcess[str]) -> None:
        self.check_refusal_text(done.returncode, done.stderr)

    def check_refusal_text(self, code: int | None, stderr: str) -> None:
        """Every refusal exits 2 with a line that says what went wrong and the way on."""
        if code == 2:  # the refusal runs from its `stepstone: ` line to the end
            text = stderr.strip()
            start = text.rfind("\nstepstone: ")
            whole = text.startswith("stepstone: ") and start < 0
            said = text if whole else text[start + 1 :] if start >= 0 else text[-300:]
            assert said.startswith("stepstone: ") or "Error:" in said, stderr
            assert WAY_ON.search(said), stderr

    # -- the world's folders ----------------------------------------------------------

    def new_lineage(self) -> str:
        self.lineages += 1
        return f"L{self.lineages}"

    def first_folder(self, rng: random.Random) -> Folder:
        program, data = generate(rng)
        path = self.root / "f0"
        path.mkdir()
        folder = Folder("f0", path, program, self.new_lineage())
        program.write(path / NOTEBOOK)
        write_data(path, data)
        self.folders.append(folder)
        folder.history.append(
            f"made: {'--cells' if program.cells_mode else '%%step'} "
            f"{[(s.name, s.kind) for s in program.steps.values()]}"
        )
        return folder

    def copy_folder(self, source: Folder, how: str) -> Folder:
        name = f"f{len(self.folders)}"
        path = self.root / name
        if how == "cp -r":
            _copy_live(source.path, path)
        elif how == "tar":
            archive = self.root / f"{name}.tar"
            with tarfile.open(archive, "w") as tar:
                _tar_live(tar, source.path, name)
            with tarfile.open(archive) as tar:
                tar.extractall(self.root, filter="tar")
            archive.unlink()
        else:  # git clone --bare of the store, beside a copy of the notebook and data
            path.mkdir()
            if source.store.exists():
                subprocess.run(
                    ["git", "clone", "--bare", "-q", str(source.store), str(path / ".stepstone")],
                    check=True,
                    capture_output=True,
                )
            shutil.copy(source.path / NOTEBOOK, path / NOTEBOOK)
            shutil.copytree(source.path / "data", path / "data")
        # a copy of a store that holds a run of the notebook (any of its parameter sets, a
        # fork) or that names its original is in the original's lineage: the notebook's
        # runs there join it
        holds = _holds(path / ".stepstone", source.run) or _runs(path / ".stepstone")
        lineage = source.lineage if holds else self.new_lineage()
        folder = Folder(name, path, copy.deepcopy(source.program), lineage, source.run)
        self.folders.append(folder)
        self.touched.add(name)
        self.counts[f"copy {how}"] += 1
        folder.history.append(f"copied from {source.name} ({how})")
        return folder

    # -- invariants -------------------------------------------------------------------

    def applied(self) -> list[dict[str, Any]]:
        with sqlite3.connect(self.receiver.db) as con:
            rows = con.execute("SELECT body FROM applied ORDER BY n").fetchall()
        mine = [json.loads(body) for (body,) in rows]
        return [b for b in mine if str(b.get("folder", "")).startswith(f"{self.tag}/")]

    def logical(self, body: dict[str, Any]) -> tuple[str, str, str]:
        lineage = self.aliases.get(body["lineage"], body["lineage"])
        return (lineage, body["name"], json.dumps(body["payload"], sort_keys=True))

    def sent(self) -> Counter[tuple[str, str, str]]:
        """How many times each logical effect reached the receiver in each lineage: its
        own sends, and for a lineage `--diverge` began, the sends of the effects its copy
        held when it diverged."""
        applied = self.applied()
        seen = Counter(self.logical(b) for b in applied)
        for lineage, keys in self.inherited.items():
            for body in applied:
                if body["ref"] in keys and self.logical(body)[0] != lineage:
                    seen[(lineage, *self.logical(body)[1:])] += 1
        return seen

    def check(self) -> None:
        """After every action: no logical effect applied twice; every store touched passes
        `git fsck --strict`."""
        seen = self.sent()
        twice = {k: n for k, n in seen.items() if n > 1}
        assert not twice, f"applied twice: {twice}; {self.story()}"
        touched, self.touched = self.touched, set()
        for folder in self.folders:
            if folder.name in touched and folder.store.exists() and not folder.torn:
                fsck(folder.store)

    def story(self) -> str:
        return "; ".join(f"{f.name}: {f.history[-14:]}" for f in self.folders)

    # -- the actions ------------------------------------------------------------------

    def rewrite(self, folder: Folder, what: str) -> None:
        folder.program.write(folder.path / NOTEBOOK)
        folder.history.append(what)

    def run(self, folder: Folder, *extra: str, **env: str) -> int:
        done = self.cli(folder, "run", NOTEBOOK, "--run", folder.run, *extra, **env)
        self.counts["runs"] += 1
        return done.returncode

    def kill(self, folder: Folder, delay: float, how: str) -> None:
        proc = self.start(folder, "--run", folder.run)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            if how == "kernel":
                import psutil

                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.send_signal(signal.SIGKILL)
            else:
                os.killpg(proc.pid, signal.SIGINT if how == "interrupt" else signal.SIGKILL)
            self.counts[f"kill {how}"] += 1
        self.finish(folder, proc, f"run killed ({how}) at {delay:.2f}s")

    def insert_plain(self, folder: Folder) -> None:
        program = folder.program
        index = 200 + len(program.order)
        at = self.rng.randrange(2, len(program.order) + 1)
        program.order.insert(at, ("plain", index))
        self.rewrite(folder, f"inserted a plain cell at {at}")

    def delete_plain(self, folder: Folder) -> None:
        plain = [n for n, (kind, _) in enumerate(folder.program.order) if kind == "plain"]
        if plain:
            del folder.program.order[self.rng.choice(plain)]
            self.rewrite(folder, "deleted a plain cell")

    def move_cell(self, folder: Folder) -> None:
        """Swap two neighbouring cells after the helpers (steps read only their own data
        and decisions, so any order computes the same)."""
        order = folder.program.order
        movable = [n for n in range(2, len(order) - 1) if order[n][0] != "decide"]
        movable = [n for n in movable if order[n + 1][0] != "decide"]
        if movable:
            n = self.rng.choice(movable)
            order[n], order[n + 1] = order[n + 1], order[n]
            self.rewrite(folder, f"moved cell {n} below the next")

    def edit_step(self, folder: Folder, position: int) -> None:
        step = folder.program.step_at(position)
        if step is not None:
            step.edits += 1
            self.rewrite(folder, f"edited step {step.name}")

    def edit_plain(self, folder: Folder) -> None:
        plain = [i for kind, i in folder.program.order if kind == "plain"]
        if plain:
            index = self.rng.choice(plain)
            folder.program.plain_edits[index] = folder.program.plain_edits.get(index, 0) + 1
            self.rewrite(folder, f"edited plain cell z{index}")

    def move_effect(self, folder: Folder, position: int, other: int) -> None:
        """Move a `one` effect call to another step."""
        program = folder.program
        holders = [s for s in program.steps.values() if s.calls]
        target = program.step_at(other)
        if not holders or target is None:
            return
        source = holders[position % len(holders)]
        if source is target:
            return
        call = source.calls.pop(0)
        target.calls.append(call)
        self.rewrite(folder, f"moved effect {call.name} from {source.name} to {target.name}")

    def rename_step(self, folder: Folder, position: int, with_effect: bool, say: bool) -> None:
        step = folder.program.step_at(position)
        if step is None:
            return
        was, step.name = step.name, f"s{step.i}-r{self.rng.randrange(1000)}"
        if say:
            step.said_was = was
        what = f"renamed step {was} to {step.name} (--was: {say})"
        if with_effect and step.calls:
            call = step.calls[0]
            old, call.name = call.name, f"e{call.home}-r{self.rng.randrange(1000)}"
            if say:
                call.was = call.was or old
            what += f", and its effect {old} to {call.name}"
        self.rewrite(folder, what)

    def change_data(self, folder: Folder) -> None:
        data = folder.data()
        if not data:
            return
        name = self.rng.choice(sorted(data))
        members = list(data[name])
        if name.startswith("u"):
            extra = [u for u in ["hal", "ivy", "jon", "kim"] if u not in members]
            if extra and (len(members) < 2 or self.rng.random() < 0.6):
                members.append(self.rng.choice(extra))
            else:
                members.remove(self.rng.choice(members))
        elif len(members) < 2 or self.rng.random() < 0.6:
            members = sorted({*members, self.rng.randrange(10, 99)})
        else:
            members.remove(self.rng.choice(members))
        (folder.path / "data" / name).write_text(json.dumps(members))
        folder.history.append(f"data {name} now {members}")

    def revise(self, folder: Folder, position: int, by_line: bool) -> None:
        program = folder.program
        if not program.decisions:
            return
        index = sorted(program.decisions)[position % len(program.decisions)]
        value = self.rng.choice([20, 40, 60, 80])
        if by_line:
            program.decisions[index] = (value, True)
            self.rewrite(folder, f"line decides t{index}={value}")
            return
        done = self.cli(
            folder,
            "decide",
            f"t{index}",
            str(value),
            "--revise",
            "--why",
            "gen",
            "--run",
            folder.run,
        )
        assert done.returncode in (0, 2), done.stderr

    def parameters(self, folder: Folder, spelling: int) -> None:
        """Run with parameters: other spellings of one value, or an unknown name."""
        program = folder.program
        given = [
            ["-p", "n", str(program.n)],
            ["-p", "n", f"{program.n}.0"],
            ["-y", f"n: {program.n + 1}"],
            ["-p", "n", f"{program.n + 1}.0"],
            ["-p", "nn", "4"],
        ][spelling % 5]
        done = self.cli(folder, "run", NOTEBOOK, *given)
        if given[1] == "nn":
            assert done.returncode == 2 and "did you mean 'n'" in done.stderr, done.stderr
        self.counts["parameter runs"] += 1

    def fork_beside(self, folder: Folder, position: int) -> None:
        """Fork the folder's run at one of its confirmed steps and drive the fork and its
        source at once, in one folder."""
        status = self.status(folder)
        if status is None:
            return
        done_steps = [s["name"] for s in status["steps"] if s["state"] == "verified"]
        if not done_steps:
            return
        at = done_steps[position % len(done_steps)]
        fork = f"fk{self.counts['forks']}"
        made = self.cli(folder, "fork", folder.run, "--at", at, "--as", fork)
        if made.returncode != 0:
            return
        self.counts["forks"] += 1
        first = self.start(folder, "--run", folder.run)
        second = self.start(folder, "--run", fork)
        self.finish(folder, first, "run beside its fork")
        self.finish(folder, second, f"fork {fork} beside its source")

    def both(self, a: Folder, b: Folder) -> None:
        first, second = self.start(a, "--run", a.run), self.start(b, "--run", b.run)
        self.finish(a, first, f"run beside {b.name}")
        self.finish(b, second, f"run beside {a.name}")
        self.counts["runs at once"] += 1

    def copy_while_driven(self, folder: Folder, delay: float, how: str) -> Folder:
        proc = self.start(folder, "--run", folder.run)
        time.sleep(delay)
        made = self.copy_folder(folder, how)
        made.torn = True
        self.finish(folder, proc, f"run while copied to {made.name}")
        return made

    def diverge(self, folder: Folder) -> None:
        """`--diverge`: refused while the copy can take turns; else a new lineage, which
        holds the effects the copy held (read from the commit that began it)."""
        lineage, folder.lineage = folder.lineage, self.new_lineage()
        before = self.diverged(folder)
        code = self.run(folder, "--diverge")
        if self.diverged(folder) == before:
            self.aliases[folder.lineage] = lineage
            folder.lineage = lineage
            self.counts["diverge refused"] += 1
            assert code == 2 or not before, folder.history[-1]
            return
        self.counts["diverge driven"] += 1
        store = str(folder.store)
        commit = subprocess.run(
            [
                "git",
                "--git-dir",
                store,
                "log",
                "--format=%H",
                "-1",
                "--grep",
                "diverged from",
                folder.run,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        paths = subprocess.run(
            ["git", "--git-dir", store, "ls-tree", "-r", "--name-only", commit, "effects"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        self.inherited[folder.lineage] = {Path(p).stem for p in paths}

    def diverged(self, folder: Folder) -> int:
        """How many times the folder's run began a new lineage (`--diverge`)."""
        if not folder.store.exists():
            return 0
        found = subprocess.run(
            ["git", "--git-dir", str(folder.store), "log", "--format=%s", folder.run],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return found.count("a new lineage, diverged from its copies")

    def through_a_remote(self, folder: Folder) -> Folder | None:
        """Push the folder's run to a new bare remote, make a folder from a plain `git
        clone --bare` of it, and drive both at once: one of them holds the lease."""
        if not folder.store.exists() or self.status(folder) is None:
            return None
        self.remotes += 1
        remote = self.root / f"remote-{self.remotes}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        pushed = self.cli(folder, "push", "--remote", str(remote), "--run", folder.run)
        if pushed.returncode != 0:
            return None
        name = f"f{len(self.folders)}"
        path = self.root / name
        path.mkdir()
        subprocess.run(
            ["git", "clone", "--bare", "-q", str(remote), str(path / ".stepstone")],
            check=True,
            capture_output=True,
        )
        shutil.copy(folder.path / NOTEBOOK, path / NOTEBOOK)
        shutil.copytree(folder.path / "data", path / "data")
        clone = Folder(name, path, copy.deepcopy(folder.program), folder.lineage, folder.run)
        self.folders.append(clone)
        clone.history.append(f"plain git clone --bare of {folder.name}'s remote")
        self.counts["through a remote"] += 1
        self.both(folder, clone)
        return clone

    def skewed(self, folder: Folder, delay: float, ahead: bool) -> None:
        """A run whose process clock is an hour off, killed partway, then a plain run."""
        skew = "3600" if ahead else "-3600"
        proc = self.start(folder, "--run", folder.run, STEPSTONE_CLOCK_SKEW=skew)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        self.finish(folder, proc, f"run with the clock {'ahead' if ahead else 'behind'}")
        self.counts["clock skew"] += 1

    def status(self, folder: Folder) -> dict[str, Any] | None:
        if not folder.store.exists():
            return None
        done = self.cli(folder, "status", "--json", "--run", folder.run)
        if done.returncode not in (0, 1):
            return None
        return json.loads(done.stdout)

    # -- the end: each folder as a clean run of its notebook would leave it -----------

    def settle(self, folder: Folder, said: str) -> bool:
        """Settle the unresolved effects a run names, as a person would: ask the receiver
        whether it got the request."""
        keys = set(re.findall(r"stepstone resolve (ss-[0-9a-f]+)", said))
        applied = {b["ref"] for b in self.applied()}
        for key in keys:
            if key in applied:
                args = ["--happened", "--receipt", json.dumps({"ref": key})]
            else:
                args = ["--not-happened", "--why", "not in the receiver's log"]
            done = self.cli(folder, "resolve", key, *args, "--run", folder.run)
            assert done.returncode == 0, done.stderr
            self.counts["settled"] += 1
        return bool(keys)

    def drive_to_the_end(self, folder: Folder) -> None:
        """Run the folder until it ends, doing what each refusal says, as its user would;
        a refusal that names no way on fails the case."""
        for _ in range(8):
            done = self.cli(folder, "run", NOTEBOOK, "--run", folder.run)
            said = done.stdout + done.stderr
            if done.returncode == 0:
                return
            if self.follow(folder, said):
                continue
            raise AssertionError(f"{folder.name} is stuck: {said[-1500:]}\n{self.story()}")
        raise AssertionError(f"{folder.name} did not reach its end: {self.story()}")

    def follow(self, folder: Folder, said: str) -> bool:
        """Do what a refusal says; whether it named a way on this world can take."""
        program = folder.program
        if "UnresolvedEffect" in said or "stepstone resolve ss-" in said:
            return self.settle(folder, said)
        renamed = re.search(r"If '([^']+)' is '([^']+)' renamed, say so", said)
        if renamed:
            step = program.named(renamed.group(1))
            assert step is not None, said
            step.said_was = renamed.group(2)
            was = re.search(r"and pass was='([^']+)'", said)
            if was and step.calls:
                step.calls[0].was = was.group(1)
            self.rewrite(folder, f"said {step.name} was {renamed.group(2)}, as told")
            return True
        effect = re.search(r"If '([^']+)' is '([^']+)' renamed, pass was=", said)
        if effect:
            call = next(
                (c for s in program.steps.values() for c in s.calls if c.name == effect.group(1)),
                None,
            )
            assert call is not None, said
            call.was = effect.group(2)
            self.rewrite(folder, f"said {call.name} was {effect.group(2)}, as told")
            return True
        kept = re.search(r"decision 't(\d+)' was already made as '(\d+)'", said)
        if kept:
            index = int(kept.group(1))
            program.decisions[index] = (int(kept.group(2)), False)
            self.rewrite(folder, f"line decides t{index}={kept.group(2)}, as recorded")
            return True
        if "stepstone pull --keep" in said:  # went apart through a remote: keep its side
            done = self.cli(folder, "pull", "--keep", "remote", "--run", folder.run)
            folder.history.append(f"pull --keep remote -> {done.returncode}")
            return done.returncode == 0
        if "Diverged" in said:
            self.diverge(folder)
            return True
        if "RunLocked" in said or "LeaseHeld" in said:
            time.sleep(1)
            return True
        return False

    def final_program(self, folder: Folder) -> Program:
        """The folder's notebook with the decisions its run holds (a revision made outside
        the notebook stands over the line)."""
        program = copy.deepcopy(folder.program)
        status = self.status(folder)
        assert status is not None
        decided = {d["key"]: int(d["value"]) for d in status["decisions"]}
        for index in program.decisions:
            if f"t{index}" in decided:
                program.decisions[index] = (decided[f"t{index}"], False)
        return program

    def clean_run(self, program: Program, data: dict[str, Any], clean_root: Path) -> Folder:
        """A clean, uninterrupted run of `program` on `data` in a new folder."""
        path = clean_root / f"clean-{len(list(clean_root.glob('clean-*')))}"
        path.mkdir(parents=True)
        program.write(path / NOTEBOOK)
        write_data(path, data)
        twin = Folder(f"clean/{path.name}", path, program, f"clean-{path.name}")
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", "run", NOTEBOOK],
            cwd=path,
            env=self.env(twin),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return twin

    def finish_and_compare(self, clean_root: Path) -> None:
        for folder in self.folders:
            self.drive_to_the_end(folder)
        self.check()
        sent = self.sent()
        for folder in self.folders:
            twin = self.clean_run(self.final_program(folder), folder.data(), clean_root)
            asked = [self.logical(b)[1:] for b in self.applied() if b["lineage"] == twin.lineage]
            for name, payload in asked:
                times = sent[(folder.lineage, name, payload)]
                assert times == 1, (folder.name, name, payload, times, self.story())
            # --cells: the files a step wrote are its evidence, checked before it is skipped;
            # a %%step cell with no file check stands on its completion (docs/namespace.md)
            if folder.program.cells_mode:
                mine, clean = _files(folder.path, folder.run), _files(twin.path, RUN)
                assert mine == clean, (folder.name, mine, clean, self.story())


def _runs(store: Path) -> bool:
    """Whether a store holds any run (a branch of its own)."""
    if not store.exists():
        return False
    found = subprocess.run(
        ["git", "--git-dir", str(store), "for-each-ref", "--count=1", "refs/heads"],
        capture_output=True,
        text=True,
        check=False,
    )
    return bool(found.stdout.strip())


def _files(folder: Path, run: str) -> dict[str, str]:
    out = folder / "out" / run
    return {p.name: p.read_text() for p in sorted(out.iterdir())} if out.exists() else {}


ACTIONS = [
    *["run"] * 5,
    *["kill"] * 4,
    "kill-kernel",
    "interrupt",
    "insert-plain",
    "delete-plain",
    "move-cell",
    "edit-step",
    "edit-plain",
    *["move-effect"] * 2,
    "rename-step",
    *["rename-step-and-effect"] * 2,
    *["change-data"] * 3,
    *["revise"] * 2,
    *["parameters"] * 2,
    "fork-beside",
    "copy",
    "copy-while-driven",
    "both",
    "through-a-remote",
    "clock-skew",
]


def act(world: World, a: dict[str, Any]) -> None:
    folders = world.folders
    folder, other = folders[a["pick"] % len(folders)], folders[a["other"] % len(folders)]
    world.rng.seed(a["pick"] * 64 + a["other"])
    world.counts[a["action"]] += 1
    world.counts["actions"] += 1
    name, n, choice = a["action"], a["step"], a["choice"]
    if name == "run":
        world.run(folder)
    elif name in ("kill", "kill-kernel", "interrupt"):
        world.kill(
            folder, a["delay"], {"kill": "driver", "kill-kernel": "kernel"}.get(name, "interrupt")
        )
    elif name == "insert-plain":
        world.insert_plain(folder)
    elif name == "delete-plain":
        world.delete_plain(folder)
    elif name == "move-cell":
        world.move_cell(folder)
    elif name == "edit-step":
        world.edit_step(folder, n)
    elif name == "edit-plain":
        world.edit_plain(folder)
    elif name == "move-effect":
        world.move_effect(folder, n, a["other"])
    elif name == "rename-step":
        world.rename_step(folder, n, with_effect=False, say=choice)
    elif name == "rename-step-and-effect":
        world.rename_step(folder, n, with_effect=True, say=choice)
    elif name == "change-data":
        world.change_data(folder)
    elif name == "revise":
        world.revise(folder, n, by_line=choice)
    elif name == "parameters":
        world.parameters(folder, a["other"])
    elif name == "fork-beside":
        world.fork_beside(folder, n)
    elif name == "copy":
        world.copy_folder(folder, ["cp -r", "tar", "git clone --bare"][a["other"] % 3])
    elif name == "copy-while-driven":
        made = world.copy_while_driven(folder, a["delay"], ["cp -r", "tar"][a["other"] % 2])
        if choice:
            world.diverge(made)
    elif name == "both":
        world.both(folder, other)
    elif name == "through-a-remote":
        world.through_a_remote(folder)
    elif name == "clock-skew":
        world.skewed(folder, a["delay"], ahead=choice)


def script(seed: int, length: int) -> list[dict[str, Any]]:
    """The actions of case `seed` (its notebook is drawn from the same seed)."""
    rng = random.Random(seed * 7919 + 1)
    return [
        {
            "action": rng.choice(ACTIONS),
            "pick": rng.randrange(64),
            "other": rng.randrange(64),
            "step": rng.randrange(8),
            "delay": round(rng.uniform(0.5, 5.0), 2),
            "choice": rng.random() < 0.5,
        }
        for _ in range(length)
    ]
