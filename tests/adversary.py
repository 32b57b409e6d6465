"""The world a generative adversary acts on (tests/test_adversary.py): project folders,
each a notebook and its store, driven by the real `stepstone` command line in real
kernels against keyed, queryable and blind receivers on loopback.

A folder's notebook has five steps; four send effects (s1 keyed, s2 queryable, s3 a
family of three blind mails, s4 blind), s1 reads a parameter, s2 a decision, s3 the
answer to a question. Each effect's request says which folder and run sent it and which
step and effect it is; the world knows each folder's lineages (a copy shares its
original's, and so does a fork), so it can tell one logical effect (lineage, step,
effect) applied twice, whatever keys it came with.

The actions are what people and agents do: run, kill -9 (the driver and its kernel, or
the kernel alone), Ctrl-C, rename a step or an effect, edit a plain cell, revise a
decision and answer a question (command line and notebook line), fork and drive the
fork, rerun --downstream, copy the folder (cp -r, tar, git clone --bare; while driven
or not) and drive the copy, the original or both, run with parameters in several
spellings, and with a misspelled --run, and let the receiver's keys expire (the
store's retention shortened to a second).
"""

from __future__ import annotations

import contextlib
import io
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
from conftest import fsck
from nbformat.v4 import new_code_cell, new_notebook

import stepstone

TESTS = Path(__file__).resolve().parent
STEPS = 5
# step -> (receiver kind, the names of its effects as first given)
EFFECTS = {1: ("keyed", ["k1"]), 2: ("lookup", ["q2"]), 3: ("blind", ["mail/a", "mail/b"])}
EFFECTS[4] = ("blind", ["b4"])
RENAMEABLE = {1: "k1", 2: "q2", 4: "b4"}
QUESTION = "Does the receiver keep its keys?"
NOTEBOOK = "job.ipynb"
RUN = "job"

HELPERS = """\
import json, os, pathlib, random, time
import stepstone
from receiver import find, send
URL, FOLDER = os.environ["ADV_RECEIVER"], os.environ["ADV_FOLDER"]
RUN = os.environ.get("STEPSTONE_RUN", "")

def ran(step):
    with open(os.environ["ADV_LOG"], "a") as log:
        log.write(f"{FOLDER} {RUN} {step}\\n")

def post(kind, key, i, name):
    headers = {"X-Delay-Before": str(random.random() * 0.2)}
    if kind == "keyed":
        headers["Idempotency-Key"] = key
    body = {"ref": key, "folder": FOLDER, "run": RUN, "i": i, "n": name}
    return send(URL, kind, body, headers)

def lookup(key):
    return find(URL, "lookup", key)

def previous(i):
    return int(pathlib.Path(f"out/s{i - 1}.txt").read_text()) if i else 1
"""


def _copy_live(source: Path, path: Path) -> None:
    """`cp -r` of a folder a driver may be writing: a file renamed away between the
    listing and its copy (a temporary file of an atomic write) is skipped, as cp
    reports and skips it."""
    try:
        shutil.copytree(source, path, symlinks=True)
    except shutil.Error as exc:
        problems = exc.args[0]
        if not all("No such file or directory" in str(why) for _, _, why in problems):
            raise


def _tar_live(tar: tarfile.TarFile, source: Path, name: str) -> None:
    """`tar c` of a folder a driver may be writing: a file removed before it was read is
    skipped, as tar reports and skips it; a file is archived as it was when read (one
    that shrank meanwhile is not an error, as tar pads it and goes on)."""
    tar.add(source, arcname=name, recursive=False)
    for folder, dirs, files in os.walk(source):
        for entry in sorted(dirs) + sorted(files):
            full = Path(folder) / entry
            arcname = f"{name}/{full.relative_to(source)}"
            try:
                if full.is_file() and not full.is_symlink():
                    info = tar.gettarinfo(full, arcname=arcname)
                    data = full.read_bytes()
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.add(full, arcname=arcname, recursive=False)
            except FileNotFoundError:
                continue


@dataclass
class Notebook:
    """What a folder's notebook says: step names, effect names, its decision and answer
    lines, a plain cell's comment, and the run its %resume names."""

    names: list[str] = field(default_factory=lambda: [f"s{i}" for i in range(STEPS)])
    said_was: dict[int, str] = field(default_factory=dict)  # the --was each step says
    effect_names: dict[int, str] = field(default_factory=dict)  # renamed effects
    mode: str = "sum"
    mode_revised: bool = False
    answer: str | None = None
    comment: int = 0

    def copy(self) -> Notebook:
        return Notebook(
            list(self.names),
            dict(self.said_was),
            dict(self.effect_names),
            self.mode,
            self.mode_revised,
            self.answer,
            self.comment,
        )

    def cells(self) -> list[Any]:
        parameters = new_code_cell('region = "eu"')
        parameters.metadata["tags"] = ["parameters"]
        revise = " --revise" if self.mode_revised else ""
        cells = [
            new_code_cell("%load_ext stepstone\n%resume"),
            parameters,
            new_code_cell(HELPERS + f"# edited {self.comment} times\n"),
            new_code_cell(f'%decide mode={self.mode}{revise} --why "the adversary chose"'),
            new_code_cell(f"%unknown {QUESTION}"),
        ]
        if self.answer is not None:
            cells.append(new_code_cell(f"%unknown --resolve U1 {self.answer}"))
        cells += [new_code_cell(self.step_cell(i)) for i in range(STEPS)]
        return cells

    def step_cell(self, i: int) -> str:
        line = f"%%step {self.names[i]} --check file:out/s{i}.txt"
        if i in self.said_was:
            line += f" --was {self.said_was[i]}"
        if i % 2 == 0:
            line += " --keep"
        body = [f'ran("s{i}")', f"value = previous({i}) + {i}"]
        if i == 1:
            body.append("value += len(region)")
        if i == 2:
            body.append("value = value if stepstone.decided('mode') == 'sum' else value * 2")
        if i == 3:
            body.append("value += len(stepstone.answer('U1', 'open'))")
        for first in EFFECTS.get(i, ("", []))[1]:
            kind = EFFECTS[i][0]
            name = self.effect_names.get(i, first) if i in RENAMEABLE else first
            was = f", was={first!r}" if name != first else ""
            body.append(
                f"stepstone.effect({name!r}, lambda key: post({kind!r}, key, {i}, {first!r}), "
                f"keyed={kind == 'keyed'}, lookup={'lookup' if kind == 'lookup' else None}, "
                f"payload={{'i': {i}, 'n': {first!r}}}{was})"
            )
        body += [
            "time.sleep(0.05)",
            "pathlib.Path('out').mkdir(exist_ok=True)",
            f"pathlib.Path('out/s{i}.txt').write_text(str(value))",
        ]
        return line + "\n" + "\n".join(body)

    def write(self, path: Path) -> None:
        nbformat.write(new_notebook(cells=self.cells()), str(path))


@dataclass
class Folder:
    """A project folder: its notebook, its store, the run it drives, and which lineage
    keys the effects of each of that run's steps (a model token per lineage)."""

    name: str
    path: Path
    notebook: Notebook
    run: str
    lineage: dict[int, str]
    history: list[str] = field(default_factory=list)
    torn: bool = False  # copied while a commit was written: mended when it is first driven

    @property
    def store(self) -> Path:
        return self.path / ".stepstone"


class World:
    """Folders, the receiver, and the invariants; each action returns what it did."""

    def __init__(self, root: Path, receiver: Any, rng: random.Random) -> None:
        self.root = root
        self.tag = root.name  # requests of this world's folders say `TAG/FOLDER`
        self.receiver = receiver
        self.rng = rng
        self.folders: list[Folder] = []
        self.lineages = 0
        self.counts: Counter[str] = Counter()
        self.log = root / "executions.log"
        self.touched: set[str] = set()  # folders an action ran a command in, to check

    # -- running the command line -----------------------------------------------------

    def env(self, folder: Folder) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
            ADV_RECEIVER=self.receiver.url,
            ADV_FOLDER=f"{self.tag}/{folder.name}",
            ADV_LOG=str(self.log),
        )
        return env

    def cli(
        self, folder: Folder, *args: str, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        self.touched.add(folder.name)
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", *args],
            cwd=folder.path,
            env=self.env(folder),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.counts["commands"] += 1
        if args[:1] == ("run",) and done.returncode in (0, 1):
            folder.torn = False  # driven: it took in its original first
        why = _last_line(done.stderr) if done.returncode not in (0, None) else ""
        folder.history.append(f"{' '.join(args)[:80]} -> {done.returncode} {why}".rstrip())
        self.check_refusal(done)
        return done

    def start(self, folder: Folder, *extra: str) -> subprocess.Popen[str]:
        self.touched.add(folder.name)
        return subprocess.Popen(
            [sys.executable, "-m", "stepstone", "run", NOTEBOOK, "--run", folder.run, *extra],
            cwd=folder.path,
            env=self.env(folder),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def check_refusal(self, done: subprocess.CompletedProcess[str]) -> None:
        """Every refusal exits 2 with a line that says what went wrong and the way on (read
        from its `stepstone: ` line to the end: progress lines may come before it)."""
        if done.returncode == 2:
            text = done.stderr.strip()
            start = text.rfind("\nstepstone: ")
            said = text[start + 1 :] if start >= 0 and not text.startswith("stepstone: ") else text
            assert said.startswith("stepstone: ") or "Error:" in said, said
            assert re.search(r"--|stepstone |%|wait|pass |repair|give ", said), said

    # -- the world's folders ----------------------------------------------------------

    def new_lineage(self) -> str:
        self.lineages += 1
        return f"L{self.lineages}"

    def first_folder(self) -> Folder:
        path = self.root / "f0"
        path.mkdir()
        folder = Folder("f0", path, Notebook(), RUN, {})
        lineage = self.new_lineage()
        folder.lineage = {i: lineage for i in range(STEPS)}
        folder.notebook.write(path / NOTEBOOK)
        self.folders.append(folder)
        return folder

    def add_folder(self, source: Folder, how: str, *, run: str | None = None) -> Folder:
        """A copy of `source`'s folder (`cp -r`, tar, or `git clone --bare` of its store
        beside a copy of its notebook alone)."""
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
        elif not source.store.exists():  # nothing to clone yet: the notebook alone
            path.mkdir()
            shutil.copy(source.path / NOTEBOOK, path / NOTEBOOK)
        else:
            path.mkdir()
            subprocess.run(
                ["git", "clone", "--bare", "-q", str(source.store), str(path / ".stepstone")],
                check=True,
                capture_output=True,
            )
            shutil.copy(source.path / NOTEBOOK, path / NOTEBOOK)
        lineage = dict(source.lineage)
        if not _holds(path / ".stepstone", run or source.run):  # a run of its own
            fresh = self.new_lineage()
            lineage = {i: fresh for i in range(STEPS)}
        folder = Folder(name, path, source.notebook.copy(), run or source.run, lineage)
        self.folders.append(folder)
        self.touched.add(name)
        self.counts[f"copy {how}"] += 1
        return folder

    # -- reading a run --------------------------------------------------------------

    def status(self, folder: Folder) -> dict[str, Any] | None:
        if not folder.store.exists():
            return None
        done = self.cli(folder, "status", "--json", "--run", folder.run)
        if done.returncode not in (0, 1):  # 1: something needs doing (README)
            return None
        return json.loads(done.stdout)

    # -- invariants -------------------------------------------------------------------

    def applied(self) -> list[dict[str, Any]]:
        with sqlite3.connect(self.receiver.db) as con:
            rows = con.execute("SELECT kind, body FROM applied ORDER BY n").fetchall()
        bodies = [{"kind": kind, **json.loads(body)} for kind, body in rows]
        mine = [b for b in bodies if b["folder"].startswith(f"{self.tag}/")]
        for body in mine:
            body["folder"] = body["folder"].partition("/")[2]
        return mine

    def logical(self, body: dict[str, Any]) -> tuple[str, int, str]:
        """The logical effect a request was: its lineage, step and effect."""
        folder = next(f for f in self.folders if f.name == body["folder"])
        lineage = self.lineage_of(folder, body["run"], body["i"])
        return (lineage, body["i"], body["n"])

    def lineage_of(self, folder: Folder, run: str, i: int) -> str:
        if run == folder.run:
            return folder.lineage[i]
        # a run this folder's store holds but does not drive (the original, beside a fork)
        owner = next(f for f in self.folders if f.run == run)
        return owner.lineage[i]

    def check(self) -> None:
        """After every action: no logical effect applied twice; every store passes `git
        fsck --strict`; no step confirmed without evidence."""
        seen = Counter(self.logical(b) for b in self.applied())
        twice = {k: n for k, n in seen.items() if n > 1}
        assert not twice, f"applied twice: {twice}; {self.story()}"
        touched, self.touched = self.touched, set()
        for folder in self.folders:  # those the action ran a command in, or made
            if folder.name not in touched or not folder.store.exists() or folder.torn:
                continue
            fsck(folder.store)
            try:
                reader = stepstone.open_run(folder.run, repo=folder.store, drive=False)
            except stepstone.RunNotFound:
                continue
            with reader:
                for name, record in reader.records.items():
                    if record.status == "confirmed":
                        assert record.evidence, (folder.name, name, record)

    def story(self) -> str:
        return "; ".join(f"{f.name}: {f.history[-12:]}" for f in self.folders)

    # -- what a person does about an effect in doubt -------------------------------

    def settle(self, folder: Folder) -> bool:
        """Settle the run's unresolved effects as a person would: ask the receiver
        whether it got the request. Whether there were any."""
        status = self.status(folder)
        if status is None:
            return False
        unresolved = [e for e in status["effects"] if e["state"] == "unresolved"]
        applied = {b["ref"]: b for b in self.applied()}
        for effect in unresolved:
            key = effect["key"]
            if key in applied:
                args = ["--happened", "--receipt", json.dumps({"ref": key})]
            else:
                args = ["--not-happened", "--why", "not in the receiver's log"]
            done = self.cli(folder, "resolve", key, *args, "--run", folder.run)
            assert done.returncode == 0, done.stderr
            self.counts["settled"] += 1
        return bool(unresolved)

    # -- actions ----------------------------------------------------------------------

    def run(self, folder: Folder, *extra: str) -> int:
        done = self.cli(folder, "run", NOTEBOOK, "--run", folder.run, *extra)
        self.counts["runs"] += 1
        if done.returncode == 1 and "UnresolvedEffect" in done.stdout + done.stderr:
            self.settle(folder)
        return done.returncode

    def kill(self, folder: Folder, delay: float, kernel_only: bool, sig: int) -> int:
        """Start a run and kill it (SIGKILL of the driver and its kernel, or of the kernel
        alone; SIGINT to the group as a terminal's Ctrl-C) `delay` seconds in."""
        proc = self.start(folder)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            if kernel_only:
                import psutil

                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.send_signal(signal.SIGKILL)
            else:
                os.killpg(proc.pid, sig)
            self.counts["kills" if sig == signal.SIGKILL else "interrupts"] += 1
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        folder.history.append(
            f"run killed at {delay:.2f}s ({sig}, kernel {kernel_only}) -> {proc.returncode} "
            f"{_last_line(err) if proc.returncode else ''}".rstrip()
        )
        with_children_gone(proc)
        if proc.returncode == 1 and "UnresolvedEffect" in err:
            self.settle(folder)
        return proc.returncode or 0

    def rename_step(self, folder: Folder, i: int, say_was: bool) -> None:
        nb = folder.notebook
        was = nb.names[i]
        nb.names[i] = f"s{i}-r{self.rng.randrange(1000)}"
        if say_was:  # the name it had, as its author would say
            nb.said_was[i] = was
        nb.write(folder.path / NOTEBOOK)
        folder.history.append(f"renamed step {i} to {nb.names[i]} (--was: {say_was})")

    def rename_effect(self, folder: Folder, i: int) -> None:
        nb = folder.notebook
        nb.effect_names[i] = f"{RENAMEABLE[i]}-r{self.rng.randrange(1000)}"
        nb.write(folder.path / NOTEBOOK)
        folder.history.append(f"renamed effect of step {i} to {nb.effect_names[i]}")

    def edit_plain(self, folder: Folder) -> None:
        folder.notebook.comment += 1
        folder.notebook.write(folder.path / NOTEBOOK)
        folder.history.append("edited a plain cell")

    def revise(self, folder: Folder, value: str, by_line: bool) -> None:
        if by_line:
            folder.notebook.mode = value
            folder.notebook.mode_revised = True
            folder.notebook.write(folder.path / NOTEBOOK)
            folder.history.append(f"line decides mode={value}")
            return
        status = self.status(folder)
        if status is None or not any(d["key"] == "mode" for d in status["decisions"]):
            return
        done = self.cli(
            folder, "decide", "mode", value, "--revise", "--why", "adversary", "--run", folder.run
        )
        assert done.returncode in (0, 2), done.stderr

    def answer(self, folder: Folder, text: str, by_line: bool) -> None:
        if by_line:
            folder.notebook.answer = text
            folder.notebook.write(folder.path / NOTEBOOK)
            folder.history.append(f"line answers {text}")
            return
        status = self.status(folder)
        if status is None or not any(
            u["id"] == "U1" and u["state"] == "open" for u in status["unknowns"]
        ):
            return
        done = self.cli(folder, "answer", "U1", text, "--run", folder.run)
        assert done.returncode in (0, 2), done.stderr

    def rerun(self, folder: Folder, i: int) -> None:
        status = self.status(folder)
        if status is None or i >= len(status["steps"]):
            return
        name = status["steps"][i]["name"]
        done = self.cli(
            folder, "rerun", name, "--downstream", "--why", "adversary", "--run", folder.run
        )
        assert done.returncode in (0, 2), done.stderr

    def fork(self, folder: Folder, k: int) -> Folder | None:
        """Fork the folder's run at its step k (when confirmed), in a copy of the folder
        that drives the fork."""
        status = self.status(folder)
        if status is None or k >= len(status["steps"]) or status["steps"][k]["state"] != "verified":
            return None
        new = f"fk{len(self.folders)}"
        name = status["steps"][k]["name"]
        done = self.cli(folder, "fork", folder.run, "--at", name, "--as", new)
        if done.returncode != 0:
            return None
        forked = self.add_folder(folder, "cp -r", run=new)
        # a fork is in its source's lineage (docs/effects.md): nothing either sent is sent
        # again by the other
        forked.lineage = dict(folder.lineage)
        self.counts["forks"] += 1
        return forked

    def copy_while_driven(self, folder: Folder, delay: float, how: str) -> Folder:
        proc = self.start(folder)
        time.sleep(delay)
        copy = self.add_folder(folder, how)
        copy.torn = True
        lock = copy.store / "stepstone" / "locks" / f"{folder.run}.lock"
        ref = subprocess.run(
            ["git", "--git-dir", str(copy.store), "rev-parse", "--verify", "-q", folder.run],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        said = lock.read_text()[:120] if lock.exists() else "no lock file"
        copy.history.append(f"copied: ref {ref[:10] or 'missing'}, lock {said}")
        proc.communicate(timeout=300)
        copy.history.append(f"copied from {folder.name} while driven ({delay:.2f}s in)")
        return copy

    def both(self, a: Folder, b: Folder) -> tuple[int, int]:
        """Drive two folders at once."""
        first, second = self.start(a), self.start(b)
        out = []
        for proc, folder in ((first, a), (second, b)):
            _, err = proc.communicate(timeout=300)
            folder.history.append(f"run beside another -> {proc.returncode} {_last_line(err)}")
            if proc.returncode == 2:
                assert err.strip(), "a refusal says why"
            if proc.returncode == 1 and "UnresolvedEffect" in err:
                self.settle(folder)
            out.append(proc.returncode)
        self.counts["runs at once"] += 1
        return out[0], out[1]

    def parameters(self, folder: Folder, spelling: int) -> int:
        given = [[], ["-p", "region", "eu"], ["-f", str(self.params_file())]][spelling % 3]
        return self.run(folder, *given)

    def params_file(self) -> Path:
        path = self.root / "params.yaml"
        path.write_text("region: eu\n")
        return path

    def retention(self, folder: Folder) -> None:
        """The receiver's keys expire: a keyed intent in doubt older than the store's
        retention is not retried with its key (it would be a new request) but settled."""
        if not folder.store.exists():
            return
        subprocess.run(
            ["git", "--git-dir", str(folder.store), "config", "stepstone.effectRetention", "1"],
            check=True,
        )
        time.sleep(1.2)
        try:
            self.run(folder)
        finally:
            subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(folder.store),
                    "config",
                    "--unset-all",
                    "stepstone.effectRetention",
                ],
                check=False,
            )
        self.counts["retention expired"] += 1

    def typo(self, folder: Folder) -> None:
        if not _holds_the_run(folder.store, RUN) or folder.run != RUN:
            return  # no run 'job' yet: 'jbo' is no typo of anything
        done = self.cli(folder, "run", NOTEBOOK, "--run", "jbo")
        assert done.returncode == 2 and "did you mean --run job" in done.stderr, done.stderr
        self.counts["typos refused"] += 1

    # -- the end: each folder as a clean run of its notebook would leave it -----------

    def finish_and_compare(self, clean_root: Path) -> None:
        for folder in self.folders:
            self.drive_to_the_end(folder)
        for folder in self.folders:
            self.compare_with_a_clean_run(folder, clean_root)

    def drive_to_the_end(self, folder: Folder) -> None:
        """Run the folder until it ends, doing what a refusal says to do, as its user
        would (a refusal that names no way on fails the case)."""
        for _ in range(6):
            done = self.cli(folder, "run", NOTEBOOK, "--run", folder.run)
            said = done.stdout + done.stderr
            if done.returncode == 0:
                return
            if "UnresolvedEffect" in said:
                self.settle(folder)
            elif renamed := re.search(r"If '([^']+)' is '([^']+)' renamed, say so", said):
                step = folder.notebook.names.index(renamed.group(1))
                folder.notebook.said_was[step] = renamed.group(2)
                folder.notebook.write(folder.path / NOTEBOOK)
                folder.history.append(f"said step {step} was {renamed.group(2)}, as told")
            elif kept := re.search(r"decision 'mode' was already made as '(\w+)'", said):
                folder.notebook.mode, folder.notebook.mode_revised = kept.group(1), False
                folder.notebook.write(folder.path / NOTEBOOK)
                folder.history.append(f"line decides mode={kept.group(1)}, as recorded")
        raise AssertionError(f"{folder.name} did not reach its end: {self.story()}")

    def clean_files(self, notebook: Notebook, clean_root: Path) -> dict[str, str]:
        """The files a clean, uninterrupted run of `notebook` makes (they depend on its
        decision and answer alone: names and comments change no file), run once each."""
        key = (notebook.mode, notebook.answer)
        if key not in _CLEAN:
            clean = clean_root / f"clean-{len(list(clean_root.glob('*')))}"
            clean.mkdir(parents=True)
            notebook.write(clean / NOTEBOOK)
            twin = Folder(f"clean-{clean.name}", clean, notebook, RUN, {})
            done = subprocess.run(
                [sys.executable, "-m", "stepstone", "run", NOTEBOOK],
                cwd=clean,
                env=self.env(twin),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            _CLEAN[key] = files(clean)
        return _CLEAN[key]

    def compare_with_a_clean_run(self, folder: Folder, clean_root: Path) -> None:
        status = self.status(folder)
        assert status is not None
        assert all(s["state"] == "verified" for s in status["steps"]), status["steps"]
        decided = {d["key"]: d["value"] for d in status["decisions"]}
        answered = {
            u["id"]: u.get("answer") for u in status["unknowns"] if u["state"] == "resolved"
        }
        notebook = folder.notebook.copy()
        notebook.mode, notebook.mode_revised = decided.get("mode", notebook.mode), False
        notebook.answer = answered.get("U1")
        assert files(folder.path) == self.clean_files(notebook, clean_root), (
            folder.name,
            self.story(),
        )
        # every effect of the final notebook applied exactly once in its lineage
        seen = Counter(
            self.logical(b) for b in self.applied() if not b["folder"].startswith("clean-")
        )
        for i, (_, names) in EFFECTS.items():
            for name in names:
                key = (folder.lineage[i], i, name)
                assert seen[key] == 1, (folder.name, key, seen[key], self.story())


def _holds_the_run(store: Path, run: str) -> bool:
    """Whether `store` has a ref of `run`."""
    if not store.exists():
        return False
    found = subprocess.run(
        ["git", "--git-dir", str(store), "rev-parse", "--verify", "-q", run],
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


def _holds(store: Path, run: str) -> bool:
    """Whether a copied store holds the run, or will take it in from where it was copied
    (its run lock names the store it came from, or it is a clone, whose `origin` does):
    then the copy shares its lineage. A copy taken before its original made its run,
    with nothing that names the original, makes a run of its own."""
    if not store.exists():
        return False
    lock = store / "stepstone" / "locks" / f"{run}.lock"
    try:
        named = bool(json.loads(lock.read_text()).get("lock"))
    except (OSError, ValueError, AttributeError):
        named = False
    origin = subprocess.run(
        ["git", "--git-dir", str(store), "config", "--get", "remote.origin.url"],
        capture_output=True,
        check=False,
    )
    return _holds_the_run(store, run) or named or bool(origin.stdout.strip())


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return f"({lines[-1][:300]})" if lines else ""


_CLEAN: dict[tuple[str, str | None], dict[str, str]] = {}  # (decision, answer) -> files


def files(folder: Path) -> dict[str, str]:
    out = folder / "out"
    return {p.name: p.read_text() for p in sorted(out.iterdir())} if out.exists() else {}


def with_children_gone(proc: subprocess.Popen[str]) -> None:
    """After a kill: make sure nothing of the process group is left running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
