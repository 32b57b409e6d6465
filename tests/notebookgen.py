"""Notebooks from a grammar of what real notebooks do, and what users do to them (issue
49's oracle): data read through pandas, `glob` and Parquet, values changed in place,
helpers in cells, generators drawn from, process state (print options, `decimal`),
files written and appended to across cells, plots left to the inline backend; and
between runs, kills at any cell, edits of constants, comments, inserted and deleted
cells, and data changed outside. One seed draws the notebook and the actions.

After the actions, `oracle.compare` holds `stepstone run`'s folder against a fresh
papermill run of the final notebook on the final data.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oracle import Case

KILL = (
    "import os as _os, signal as _signal\n"
    "if _os.path.exists('kill-at-{n}'):\n"
    "    _os.remove('kill-at-{n}')\n"
    "    _os.kill(_os.getpid(), _signal.SIGKILL)\n"
)


@dataclass(frozen=True)
class Kind:
    """A kind of cell: what it needs bound before it, what it binds, its code."""

    name: str
    needs: frozenset[str]
    gives: frozenset[str]
    code: Callable[[int], str]


def _kind(name: str, needs: str, gives: str, code: Callable[[int], str]) -> Kind:
    return Kind(name, frozenset(needs.split()), frozenset(gives.split()), code)


SETUP = _kind(
    "setup",
    "",
    "pd np glob decimal os",
    lambda k: (
        "import glob, decimal, os\nimport numpy as np\nimport pandas as pd\n"
        "os.makedirs('out', exist_ok=True)"
    ),
)
KINDS = [
    _kind("load", "pd", "df", lambda k: "df = pd.read_csv('data/input.csv')\nprint(len(df))"),
    _kind("scale", "df", "", lambda k: f"df['v'] = df['v'] * {k}"),
    _kind("total", "df", "total", lambda k: f"total = int(df['v'].sum()) + {k}\ntotal"),
    _kind("head", "df", "", lambda k: f"df.head({k % 3 + 1})"),
    _kind("parquet", "df", "", lambda k: "df.to_parquet('out/df.parquet')"),
    _kind(
        "read-parquet",
        "pd",
        "back",
        lambda k: "back = pd.read_parquet('data/extra.parquet')\nprint(back['w'].sum())",
    ),
    _kind("rows", "", "rows", lambda k: f"rows = [{k}]"),
    _kind("append", "rows", "", lambda k: f"rows.append({k})\nprint(len(rows))"),
    _kind(
        "parts",
        "glob pd",
        "parts",
        lambda k: (
            "parts = sorted(glob.glob('data/parts/*.csv'))\n"
            "sizes = [len(pd.read_csv(p)) for p in parts]\nprint(parts, sizes)"
        ),
    ),
    _kind(
        "header",
        "",
        "header",
        lambda k: "with open('out/results.txt', 'w') as f:\n    f.write('name\\n')",
    ),
    _kind(
        "result",
        "header",
        "",
        lambda k: f"with open('out/results.txt', 'a') as f:\n    f.write('exp{k}\\n')",
    ),
    _kind("helper", "", "scale_by", lambda k: f"def scale_by(x):\n    return x * {k}"),
    _kind(
        "use-helper",
        "scale_by",
        "scaled",
        lambda k: f"scaled = [scale_by(i) for i in range({k % 4 + 1})]\nprint(scaled)",
    ),
    _kind("rng", "np", "rng", lambda k: f"rng = np.random.default_rng({k})"),
    _kind("draw", "rng", "", lambda k: f"draw = rng.integers(0, 100, {k % 3 + 1})\nprint(draw)"),
    _kind("print-options", "np", "", lambda k: f"np.set_printoptions(precision={k % 4 + 1})"),
    _kind("show-array", "np", "", lambda k: f"print(np.array([1 / 3, 2 / 3]) * {k})"),
    _kind("decimal", "decimal", "", lambda k: f"decimal.getcontext().prec = {k % 6 + 2}"),
    _kind("show-decimal", "decimal", "", lambda k: "print(decimal.Decimal(1) / 7)"),
    _kind("dict", "", "d", lambda k: f"d = {{'a': {k}}}"),
    _kind("dict-set", "d", "", lambda k: f"d['k{k}'] = {k}\nd"),
    _kind(
        "plot",
        "np",
        "",
        lambda k: f"import matplotlib.pyplot as plt\nplt.plot([1, {k}, 2])\nplt.title('t{k}')",
    ),
    _kind("write", "df", "", lambda k: f"df.head({k % 3 + 1}).to_csv('out/df.csv', index=False)"),
    _kind(
        "names",
        "",
        "names_file",
        lambda k: f"with open('out/names.txt', 'w') as f:\n    f.write('b{k}\\na\\nc\\n')",
    ),
    _kind("sort", "names_file", "", lambda k: "!sort -o out/names.txt out/names.txt"),
    _kind(
        "sqlite",
        "",
        "",
        lambda k: (
            "import sqlite3\nwith sqlite3.connect('data/db.sqlite') as c:\n"
            f"    print(c.execute('select sum(v) * {k} from t').fetchone())"
        ),
    ),
    _kind(
        "counter",
        "",
        "counter",
        lambda k: (
            f"def make():\n    n = {k}\n    def count():\n        nonlocal n\n"
            "        n += 1\n        return n\n    return count\ncounter = make()"
        ),
    ),
    _kind("count", "counter", "", lambda k: "print(counter())"),
    _kind("value", "", "value", lambda k: f"[{k}, {k + 1}]"),
    _kind("underscore", "value", "", lambda k: "print(_)"),
]


@dataclass
class Cell:
    kind: Kind
    k: int

    def source(self, n: int, kill: bool) -> str:
        return (KILL.format(n=n) if kill else "") + self.kind.code(self.k)


@dataclass
class Generated:
    """A generated notebook driven through its actions, as a `Case`."""

    case: Case
    rng: random.Random
    cells: list[Cell] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # the actions, for the failure's report
    comments: dict[int, str] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)

    def write(self) -> None:
        sources = []
        for n, cell in enumerate(self.cells):
            source = cell.source(n, kill=True)
            if id(cell) in self.comments:
                source = self.comments[id(cell)] + source
            sources.append(source)
        self.case.write(sources)

    def valid(self, cells: list[Cell]) -> bool:
        bound: set[str] = set()
        for cell in cells:
            if not cell.kind.needs <= bound:
                return False
            bound |= cell.kind.gives
        return True


def data(gen: Generated) -> None:
    """The input files, drawn anew."""
    rng = gen.rng
    values = [rng.randint(0, 9) for _ in range(rng.randint(2, 5))]
    gen.case.put("data/input.csv", "v\n" + "".join(f"{v}\n" for v in values))
    for n in range(rng.randint(1, 2)):
        gen.case.put(f"data/parts/p{n}.csv", "x\n1\n")
    import pandas as pd

    target = gen.case.folder / "data" / "extra.parquet"
    pd.DataFrame({"w": [rng.randint(0, 9) for _ in range(3)]}).to_parquet(target)
    gen.case.took("data/extra.parquet")
    import sqlite3

    db = gen.case.folder / "data" / "db.sqlite"
    db.unlink(missing_ok=True)
    with sqlite3.connect(db) as c:
        c.execute("create table t (v int)")
        c.executemany("insert into t values (?)", [(rng.randint(0, 9),) for _ in range(3)])
    c.close()
    gen.case.took("data/db.sqlite")


def generate(case: Case, seed: int) -> Generated:
    """A notebook of 5 to 11 cells whose names are bound before they are read."""
    rng = random.Random(seed)
    gen = Generated(case, rng)
    gen.cells = [Cell(SETUP, 0)]
    bound = set(SETUP.gives)
    for _ in range(rng.randint(4, 10)):
        choices = [k for k in KINDS if k.needs <= bound]
        kind = rng.choice(choices)
        gen.cells.append(Cell(kind, rng.randint(1, 9)))
        bound |= kind.gives
    data(gen)
    gen.write()
    return gen


def _edit(gen: Generated) -> str:
    cell = gen.rng.choice(gen.cells[1:])
    cell.k = gen.rng.randint(1, 9)
    return f"edit {cell.kind.name} to {cell.k}"


def _comment(gen: Generated) -> str:
    cell = gen.rng.choice(gen.cells)
    gen.comments[id(cell)] = f"# note {gen.rng.randint(0, 99)}\n\n"
    return f"comment on {cell.kind.name}"


def _first_that_fits(
    gen: Generated, what: str, draw: Callable[[], tuple[list[Cell], str] | None]
) -> str:
    """Draw a new list of cells (and what it did) up to 20 times; take the first whose
    names are bound before they are read."""
    for _ in range(20):
        drawn = draw()
        if drawn is not None and gen.valid(drawn[0]):
            gen.cells = drawn[0]
            return drawn[1]
    return f"{what} (none fits)"


def _insert(gen: Generated) -> str:
    def draw() -> tuple[list[Cell], str]:
        at = gen.rng.randint(1, len(gen.cells))
        new = Cell(gen.rng.choice(KINDS), gen.rng.randint(1, 9))
        return [*gen.cells[:at], new, *gen.cells[at:]], f"insert {new.kind.name} at {at}"

    return _first_that_fits(gen, "insert", draw)


def _delete(gen: Generated) -> str:
    def draw() -> tuple[list[Cell], str] | None:
        at = gen.rng.randint(1, len(gen.cells) - 1) if len(gen.cells) > 2 else 0
        if not at:
            return None
        return gen.cells[:at] + gen.cells[at + 1 :], f"delete {gen.cells[at].kind.name} at {at}"

    return _first_that_fits(gen, "delete", draw)


def _move(gen: Generated) -> str:
    def draw() -> tuple[list[Cell], str] | None:
        at = gen.rng.randint(1, len(gen.cells) - 2) if len(gen.cells) > 3 else 0
        if not at:
            return None
        cells = list(gen.cells)
        cells[at], cells[at + 1] = cells[at + 1], cells[at]
        return cells, f"move {cells[at + 1].kind.name} after {cells[at].kind.name}"

    return _first_that_fits(gen, "move", draw)


def _data(gen: Generated) -> str:
    data(gen)
    return "data changed"


EDITS: list[Callable[[Generated], str]] = [_edit, _comment, _insert, _delete, _move, _data]


def drive(gen: Generated, actions: int) -> Any:
    """`actions` rounds of: maybe an edit, then a run, killed at a random cell half the
    time; then a run to the end. The last run's `Ended`."""
    rng = gen.rng
    for _ in range(actions):
        if rng.random() < 0.6:
            gen.said.append(rng.choice(EDITS)(gen))
            gen.write()
        if rng.random() < 0.5:
            at = rng.randint(0, len(gen.cells) - 1)
            (gen.case.folder / f"kill-at-{at}").write_text("")
            gen.said.append(f"run, killed at cell {at}")
        else:
            gen.said.append("run")
        ended = gen.case.run()
        for flag in gen.case.folder.glob("kill-at-*"):
            flag.unlink()  # a kill at a cell the run stopped before
        gen.totals["runs"] = gen.totals.get("runs", 0) + 1
        if ended.code not in (0, 1, -9, 137) and "stepstone:" not in ended.said:
            return ended
    gen.said.append("run to the end")
    return gen.case.run()
