"""A generative adversary: a seeded random walk of what people and agents do
(tests/adversary.py lists the actions), on the real command line and real kernels.

After every action: no logical effect (lineage, step, effect) applied twice at any
receiver, whatever keys it came with; `git fsck --strict` on every store; no step
confirmed without evidence; every refusal exits 2 saying what to do. At the end of each
case: every folder, driven to its end, holds the same files as a clean, uninterrupted
run of its final notebook, and each effect of that notebook was applied once in its
lineage.

Each case is a script of actions drawn from a seed. A failing case prints its seed and
script, then shrinks the script (dropping actions, as delta debugging does, each
candidate replayed in a fresh world) to the shortest one that still fails the same
way, and prints that. Hypothesis' stateful runner was tried first: it replays a failing
case to shrink it and reports "inconsistent data generation" when a world of real
processes and kills does not fail at the same step twice, hiding the failure itself.

CI runs a short mode (`--adversary-actions 30`). The long mode:
`python -m pytest tests/test_adversary.py -n0 -s --adversary-actions 5000`;
one case again: `--adversary-seed SEED` (figures in docs/reliability.md).
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from adversary import STEPS, World
from receiver import Receiver

pytestmark = pytest.mark.soak

# what a person or an agent does, weighted by how often
ACTIONS = [
    *["run"] * 6,
    *["kill"] * 5,
    "kill-kernel",
    "interrupt",
    *["rename-step"] * 2,
    "rename-effect",
    "edit-plain",
    *["revise"] * 2,
    "answer",
    "fork",
    "rerun",
    *["copy"] * 2,
    "copy-while-driven",
    "both",
    "parameters",
    "typo",
    "retention",
]
ACTIONS_PER_CASE = 15
SHRINK_SECONDS = 900  # how long a failing case may spend shrinking

Action = dict[str, Any]


def script(seed: int, length: int) -> list[Action]:
    """The actions of case `seed`, each with the choices it makes."""
    rng = random.Random(seed)
    return [
        {
            "action": rng.choice(ACTIONS),
            "pick": rng.randrange(64),
            "other": rng.randrange(64),
            "step": rng.randrange(STEPS),
            "delay": round(rng.uniform(0.2, 4.0), 2),
            "choice": rng.random() < 0.5,
        }
        for _ in range(length)
    ]


def act(world: World, a: Action) -> None:
    folders = world.folders
    folder, other = folders[a["pick"] % len(folders)], folders[a["other"] % len(folders)]
    world.rng.seed(a["pick"] * 64 + a["other"])
    world.counts[a["action"]] += 1
    world.counts["actions"] += 1
    name, step, choice = a["action"], a["step"], a["choice"]
    if name == "run":
        world.run(folder)
    elif name in ("kill", "kill-kernel", "interrupt"):
        sig = signal.SIGINT if name == "interrupt" else signal.SIGKILL
        world.kill(folder, a["delay"], kernel_only=name == "kill-kernel", sig=sig)
    elif name == "rename-step":
        world.rename_step(folder, step, say_was=choice)
    elif name == "rename-effect":
        world.rename_effect(folder, [1, 2, 4][step % 3])
    elif name == "edit-plain":
        world.edit_plain(folder)
    elif name == "revise":
        world.revise(folder, "product" if choice else "sum", by_line=bool(a["other"] % 2))
    elif name == "answer":
        world.answer(folder, "yes", by_line=choice)
    elif name == "fork":
        world.fork(folder, step)
    elif name == "rerun":
        world.rerun(folder, step)
    elif name == "copy":
        world.add_folder(folder, ["cp -r", "tar", "git clone --bare"][a["other"] % 3])
    elif name == "copy-while-driven":
        world.copy_while_driven(folder, a["delay"], ["cp -r", "tar"][a["other"] % 2])
    elif name == "both":
        world.both(folder, other)
    elif name == "parameters":
        world.parameters(folder, a["other"])
    elif name == "typo":
        world.typo(folder)
    elif name == "retention":
        world.retention(folder)


class Cases:
    """Runs scripts in fresh worlds under one receiver; sums what they did."""

    def __init__(self, root: Path, receiver: Receiver) -> None:
        self.root = root
        self.receiver = receiver
        self.totals: dict[str, int] = {}
        self.made = 0

    def play(self, actions: list[Action]) -> str | None:
        """Run `actions` in a fresh world; None when every invariant held, else the
        failure (its first line first)."""
        self.made += 1
        case = self.root / f"c{self.made}"
        case.mkdir()
        world = World(case, self.receiver, random.Random(0))
        try:
            world.first_folder()
            for a in actions:
                act(world, a)
                world.check()
            world.finish_and_compare(case / "clean")
        except Exception as exc:  # an invariant, or anything else that broke
            return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        finally:
            for key, value in world.counts.items():
                self.totals[key] = self.totals.get(key, 0) + value
        return None

    def shrink(self, actions: list[Action], failure: str) -> list[Action]:
        """The shortest sub-script found that fails the same way (its first words, numbers
        aside), by dropping chunks of actions and replaying each candidate."""
        wanted = signature(failure)
        deadline = time.monotonic() + SHRINK_SECONDS
        chunk = max(1, len(actions) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            start, shrunk = 0, False
            while start < len(actions) and time.monotonic() < deadline:
                candidate = actions[:start] + actions[start + chunk :]
                again = self.play(candidate) if candidate else None
                if again is not None and signature(again) == wanted:
                    actions, shrunk = candidate, True
                else:
                    start += chunk
            if not shrunk:
                chunk //= 2
        return actions


def signature(failure: str) -> str:
    """What kind of failure this is: its first words, numbers aside (folder and step
    names change as a script shrinks)."""
    return re.sub(r"\d+", "N", failure.splitlines()[0])[:48]


def test_random_user_actions_never_apply_an_effect_twice_and_end_as_a_clean_run(
    tmp_path: Path, request: pytest.FixtureRequest
):
    budget = int(request.config.getoption("--adversary-actions"))
    only = request.config.getoption("--adversary-seed")
    first = random.randrange(1 << 30) if only is None else int(only)
    started = time.monotonic()
    root = tmp_path / "cases"
    root.mkdir()
    with Receiver(tmp_path / "receiver.db") as receiver:
        cases = Cases(root, receiver)
        seed, done = first, 0
        while done < budget:
            length = min(ACTIONS_PER_CASE, budget - done) if only is None else ACTIONS_PER_CASE
            actions = script(seed, length)
            failure = cases.play(actions)
            if failure is not None:
                print(f"\nadversary: seed {seed} failed after {len(actions)} actions:\n{failure}")
                print("script:", json.dumps(actions))
                shortest = cases.shrink(actions, failure)
                pytest.fail(
                    f"seed {seed} (rerun: --adversary-seed {seed}) failed: "
                    f"{failure.splitlines()[0]}\nshortest failing script "
                    f"({len(shortest)} actions): {json.dumps(shortest)}",
                    pytrace=False,
                )
            done += len(actions)
            seed += 1
            if only is not None:
                break
    figures = {
        **cases.totals,
        "cases": cases.made,
        "first seed": first,
        "seconds": round(time.monotonic() - started),
    }
    print("\nadversary:", json.dumps(figures, sort_keys=True))
