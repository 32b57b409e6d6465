"""Every Python example in docs/effects.md runs, twice, against a real receiver."""

import re
from pathlib import Path

import pytest
from receiver import Receiver

import stepstone

DOC = Path(__file__).resolve().parents[1] / "docs" / "effects.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
ENDPOINT = {0: "keyed", 3: "blind"}


def test_the_effects_doc_has_its_four_recipes():
    assert len(BLOCKS) == 4


@pytest.mark.kernel
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_an_effects_recipe_runs_and_applies_once(workdir: Path, index: int):
    with Receiver(workdir / "receiver.db") as receiver:
        for _ in range(2):  # the second time is a resumed run: nothing happens again
            with stepstone.open_run("recipes") as run:
                exec(BLOCKS[index], {"RECEIVER": receiver.url, "run": run})
                (effect,) = run.effects.values()
                assert effect.state == "confirmed"
        if index in ENDPOINT:
            assert list(receiver.applied(ENDPOINT[index]).values()) == [1]
    if index == 1:
        import sqlite3

        con = sqlite3.connect(workdir / "ledger.db")
        assert con.execute("SELECT COUNT(*) FROM ledger").fetchone() == (1,)
        con.close()
    if index == 2:
        assert len(list((workdir / "exports").iterdir())) == 1
