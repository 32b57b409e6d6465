"""Generated notebooks and what people and agents do to them (tests/generated.py; issue
47): a seeded case draws a notebook from a grammar and a script of actions, plays them
on the real command line in real kernels, and checks after every action that no logical
effect (lineage, name, canonical payload) reached the receiver twice, and at the end
that every folder, driven to its end as its refusals say, sent each effect its final
notebook asks for on its final data exactly once and holds a clean run's files.

A failing case prints its seed and script, then shrinks the script (dropping actions,
each candidate replayed in a fresh world) and prints the shortest that fails the same
way. CI runs a short mode (`--generated-actions 36`). The long mode:
`python -m pytest tests/test_generated.py -n0 -s --generated-actions 5000`;
one case again: `--generated-seed SEED` (figures in docs/reliability.md).
"""

from __future__ import annotations

import json
import random
import re
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from generated import World, act, script
from receiver import Receiver

pytestmark = pytest.mark.soak

SHRINK_SECONDS = 900


class Cases:
    """Plays scripts in fresh worlds under one receiver; sums what they did."""

    def __init__(self, root: Path, receiver: Receiver) -> None:
        self.root = root
        self.receiver = receiver
        self.totals: dict[str, int] = {}
        self.made = 0
        self.kinds: dict[str, int] = {}

    def play(self, seed: int, actions: list[dict[str, Any]]) -> str | None:
        """Play `actions` on case `seed`'s notebook in a fresh world; None when every
        invariant held, else the failure (its first line first)."""
        self.made += 1
        case = self.root / f"c{self.made}"
        case.mkdir()
        world = World(case, self.receiver, random.Random(seed))
        try:
            first = world.first_folder(random.Random(seed))
            for step in first.program.steps.values():
                self.kinds[step.kind] = self.kinds.get(step.kind, 0) + 1
            mode = "--cells" if first.program.cells_mode else "%%step"
            self.kinds[mode] = self.kinds.get(mode, 0) + 1
            for a in actions:
                act(world, a)
                world.check()
            world.finish_and_compare(case / "clean")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        finally:
            for key, value in world.counts.items():
                self.totals[key] = self.totals.get(key, 0) + value
        return None

    def shrink(
        self, seed: int, actions: list[dict[str, Any]], failure: str
    ) -> list[dict[str, Any]]:
        """The shortest sub-script found that fails the same way."""
        wanted = signature(failure)
        deadline = time.monotonic() + SHRINK_SECONDS
        chunk = max(1, len(actions) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            start, shrunk = 0, False
            while start < len(actions) and time.monotonic() < deadline:
                candidate = actions[:start] + actions[start + chunk :]
                again = self.play(seed, candidate)
                if again is not None and signature(again) == wanted:
                    actions, shrunk = candidate, True
                else:
                    start += chunk
            if not shrunk:
                chunk //= 2
        return actions


def signature(failure: str) -> str:
    """What kind of failure this is: its first words, numbers aside."""
    return re.sub(r"\d+", "N", failure.splitlines()[0])[:48]


def test_generated_notebooks_never_send_an_effect_twice_and_end_as_a_clean_run(
    tmp_path: Path, request: pytest.FixtureRequest
):
    budget = int(request.config.getoption("--generated-actions"))
    only = request.config.getoption("--generated-seed")
    per_case = int(request.config.getoption("--generated-per-case"))
    first = random.randrange(1 << 30) if only is None else int(only)
    started = time.monotonic()
    root = tmp_path / "cases"
    root.mkdir()
    with Receiver(tmp_path / "receiver.db") as receiver:
        cases = Cases(root, receiver)
        seed, done = first, 0
        while done < budget:
            length = min(per_case, budget - done) if only is None else per_case
            actions = script(seed, length)
            failure = cases.play(seed, actions)
            if failure is not None:
                print(f"\ngenerated: seed {seed} failed after {len(actions)} actions:\n{failure}")
                print("script:", json.dumps(actions))
                shrink = not request.config.getoption("--generated-no-shrink")
                shortest = cases.shrink(seed, actions, failure) if shrink else actions
                pytest.fail(
                    f"seed {seed} (rerun: --generated-seed {seed}) failed: "
                    f"{failure.splitlines()[0][:2000]}\nshortest failing script "
                    f"({len(shortest)} actions): {json.dumps(shortest)}",
                    pytrace=False,
                )
            done += len(actions)
            seed += 1
            if only is not None:
                break
    figures = {
        **cases.totals,
        "notebooks": cases.made,
        "kinds": cases.kinds,
        "first seed": first,
        "seconds": round(time.monotonic() - started),
    }
    print("\ngenerated:", json.dumps(figures, sort_keys=True))
