"""The oracle (issue 49): after an interruption or an edit, `stepstone run` ends as a
fresh papermill run of the final notebook on the final data, in another folder, or
stops first and says why. Each test is one observation of the issue, as a user met it."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import Case, compare

pytestmark = pytest.mark.kernel

KILL = (
    "import os as _os, signal as _signal\n"
    "if _os.path.exists('kill-here'):\n"
    "    _os.remove('kill-here')\n"
    "    _os.kill(_os.getpid(), _signal.SIGKILL)\n"
)


def _killed_then_resumed(case: Case) -> None:
    """A first run killed where the cells say (the file `kill-here`, not data)."""
    (case.folder / "kill-here").write_text("")
    first = case.run()
    assert first.code != 0, first.said
    assert not (case.folder / "kill-here").exists(), first.said


def test_a_cell_added_at_the_end_reads_what_the_cells_before_changed_in_place(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(
        [
            "import pandas as pd\nlst = []\ndf = pd.DataFrame({'v': [1, 2, 3]})",
            "lst.append(1)\ndf['v'] = df['v'] * 10",
            "print('done')",
        ]
    )
    assert case.run().code == 0
    case.cells.append("print(lst, df.v.tolist())")
    ended = case.run()
    assert ended.code == 0, ended.said
    assert compare(case, ended, tmp_path) == []


def test_a_name_no_cell_reads_comes_back_after_a_kill(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(["total = sum(range(10))\nlabel = 'sum'", KILL + "print('after')"])
    _killed_then_resumed(case)
    ended = case.run()
    assert ended.code == 0, ended.said
    assert compare(case, ended, tmp_path) == []


def test_a_plot_the_inline_backend_draws_at_the_end_of_a_cell_is_kept_on_a_skip(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(
        [
            "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
            "import matplotlib.pyplot as plt",
            "plt.plot([1, 3, 2])",
            "print('next')",
        ]
    )
    assert case.run().code == 0
    ended = case.run()
    assert ended.code == 0, ended.said
    assert "cell-2: skipped" in ended.said
    assert compare(case, ended, tmp_path) == []


def test_a_figure_a_later_cell_reads_is_drawn_once(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(
        [
            "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
            "import matplotlib.pyplot as plt",
            "fig, ax = plt.subplots()\nax.plot([1, 2])",
            "ax.set_title('t')\nprint(ax.get_title())",
        ]
    )
    ended = case.run()
    assert ended.code == 0, ended.said
    assert compare(case, ended, tmp_path) == []


def test_an_instance_whose_attribute_name_is_also_one_of_its_values_comes_back(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(
        [
            "class Box:\n    def __init__(self):\n"
            "        self.size = 3\n        self.fields = ['size']",
            "b = Box()",
            KILL + "print(b.size, b.fields)",
        ]
    )
    _killed_then_resumed(case)
    ended = case.run()
    assert ended.code == 0, ended.said
    assert "will not survive" not in ended.said
    assert compare(case, ended, tmp_path) == []


def test_a_value_that_cannot_come_back_is_named_on_the_terminal(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(["gen = (i for i in range(5))\nfirst = next(gen)", "print(first)"])
    ended = case.run()
    assert ended.code == 0, ended.said
    assert "will not survive a resume: gen" in ended.said


def test_a_comment_or_whitespace_edit_runs_nothing_again(tmp_path: Path):
    case = Case(tmp_path / "ours")
    case.write(["x = 1", "y = x + 1\nprint(y)", "print('end')"])
    assert case.run().code == 0
    case.cells[1] = "# the next value\ny = x  +  1   # one more\n\nprint(y)\n"
    ended = case.run()
    assert ended.code == 0, ended.said
    assert "cell-2: skipped" in ended.said, ended.said
    assert compare(case, ended, tmp_path) == []
