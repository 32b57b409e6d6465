"""The kernel as it was after a skipped step: observations of issue 36, each reproduced
as a new user met it (a real IPython shell, or a real kernel through `stepstone run`)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from conftest import all_objects, stepstone_cli
from IPython.core.interactiveshell import InteractiveShell
from nbformat.v4 import new_code_cell, new_notebook

import stepstone.run
from stepstone.notebook.notebook_plan import plan_from_notebook
from stepstone.run.layout import source_hash

SPACES = "%%step a\ndef f():\n    return 1\n    \nx = f()"  # a line of four spaces in it


@pytest.fixture
def ip(workdir: Path):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "stepstone")
    yield shell
    shell.run_line_magic("unload_ext", "stepstone")


def _new_kernel(ip: InteractiveShell, *names: str) -> None:
    """What a kernel restart leaves: none of the cells' names."""
    for name in names:
        ip.user_ns.pop(name, None)


def test_a_line_of_spaces_in_a_step_hashes_as_the_cell_magic_sees_it(tmp_path: Path):
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(SPACES)]), str(path))
    (planned,) = plan_from_notebook(path)
    shell = InteractiveShell.instance()
    seen: list[str] = []
    shell.register_magic_function(lambda line, cell: seen.append(cell), "cell", "body")
    shell.run_cell(SPACES.replace("%%step a", "%%body a"))
    assert "\n\n" in seen[0] and "    \n" not in seen[0]  # IPython emptied the line
    assert planned.source_hash == source_hash(seen[0])


@pytest.mark.kernel
def test_a_step_with_a_line_of_spaces_is_skipped_on_the_next_run(workdir: Path):
    cells = [new_code_cell("%load_ext stepstone\n%resume"), new_code_cell(SPACES)]
    nbformat.write(new_notebook(cells=cells), "nb.ipynb")
    assert stepstone_cli("run", "nb.ipynb", cwd=workdir).returncode == 0
    again = stepstone_cli("run", "nb.ipynb", cwd=workdir)
    assert again.returncode == 0 and "a: skipped" in again.stderr, again.stderr
    status = json.loads(stepstone_cli("status", "--json", cwd=workdir).stdout)
    assert [s["state"] for s in status["steps"]] == ["verified"]


def test_date_and_time_indexes_come_back_after_a_skip(ip: InteractiveShell):
    make = (
        "%%step a\nimport pandas as pd\n"
        "dates = pd.date_range('2020-01-01', periods=5, freq='D', name='day')\n"
        "spans = pd.timedelta_range('1 day', periods=3)\n"
        "keys = pd.MultiIndex.from_tuples([('eu', 2020), ('us', 2021)], names=['r', 'y'])"
    )
    use = "%%step b\nshown = (str(dates[1]), dates.freqstr, str(spans[2]), list(keys.names))"
    ip.run_line_magic("resume", "--run idx")
    ip.run_cell(make)
    ip.run_cell(use)
    before = ip.user_ns["shown"]
    _new_kernel(ip, "dates", "spans", "keys", "shown", "pd")
    ip.run_line_magic("resume", "--run idx")
    ip.run_cell(make)  # skipped: the three come back (they could not be saved)
    assert ip.user_ns["dates"].freqstr == "D" and ip.user_ns["dates"].name == "day"
    ip.run_cell(use.replace("step b", "step c"))
    assert ip.user_ns["shown"] == before


def test_a_closure_and_a_lambda_come_back_after_a_skip(ip: InteractiveShell):
    make = (
        "%%step a\ndef scaler(k):\n    def scale(x):\n        return x * k\n    return scale\n"
        "sc = scaler(3)\nsquare = lambda x: x * x"
    )
    ip.run_line_magic("resume", "--run closures")
    ip.run_cell(make)
    ip.run_cell("%%step b\nresult = sc(2) + square(3)")
    _new_kernel(ip, "sc", "square", "scaler", "result")
    ip.run_line_magic("resume", "--run closures")
    ip.run_cell(make)  # skipped: sc gave NameError on every later run
    ip.run_cell("%%step c\nagain = sc(2) + square(3)")
    assert ip.user_ns["again"] == 15


def test_a_spent_generator_and_a_vectorized_function_come_back_after_a_skip(
    ip: InteractiveShell,
):
    """Found by the corpus (A Whirlwind Tour of Python, ch. 12; Python for Data Analysis,
    app. A): a generator consumed by `list(G)`, and `np.vectorize` after its first call
    (it caches a ufunc pickle cannot take), were not saved: a later `list(G)` raised
    NameError on resume instead of giving []."""
    make = (
        "%%step a\nimport numpy as np\nG = (n ** 2 for n in range(4))\nfirst = list(G)\n"
        "def add(x, y):\n    return x + y\n"
        "add_them = np.vectorize(add, otypes=[np.float64])\n"
        "add_them(np.arange(2), np.arange(2))"
    )
    use = "%%step b\nagain = list(G)\ntotal = add_them(np.arange(3), np.arange(3)).tolist()"
    ip.run_line_magic("resume", "--run spent")
    ip.run_cell(make)
    ip.run_cell(use)
    clean = (ip.user_ns["again"], ip.user_ns["total"])
    _new_kernel(ip, "G", "first", "add", "add_them", "again", "total", "np")
    stepstone.run.active.driven_run().rerun("b", "the kernel died in it")
    ip.run_line_magic("resume", "--run spent")
    ip.run_cell(make)  # skipped
    assert type(ip.user_ns["G"]).__name__ == "generator"
    ip.run_cell(use)
    assert (ip.user_ns["again"], ip.user_ns["total"]) == clean == ([], [0.0, 2.0, 4.0])


def test_the_global_generators_a_step_seeded_come_back_as_an_uninterrupted_run_has_them(
    ip: InteractiveShell,
):
    seed = "%%step seed\nimport random\nimport numpy as np\nrandom.seed(0)\nnp.random.seed(0)"
    draw = "%%step draw\nperm = np.random.permutation(10).tolist()\npick = random.random()"
    ip.run_line_magic("resume", "--run rng")
    ip.run_cell(seed)
    ip.run_cell(draw)
    clean = (ip.user_ns["perm"], ip.user_ns["pick"])
    # the kernel killed in `draw`: a new process, whose generators are seeded afresh
    _new_kernel(ip, "perm", "pick", "random", "np")
    import random

    import numpy as np

    np.random.seed(12345)
    random.seed(12345)
    stepstone.run.active.driven_run().rerun("draw", "the kernel died in it")
    ip.run_line_magic("resume", "--run rng")
    ip.run_cell(seed)  # skipped: it gives the generators back as it left them
    ip.run_cell(draw)
    assert (ip.user_ns["perm"], ip.user_ns["pick"]) == clean


def test_the_working_folder_and_variables_a_step_set_come_back(ip: InteractiveShell, workdir):
    (workdir / "data").mkdir()
    cell = (
        "%%step settle\nimport os, sys\nos.chdir('data')\nos.environ['REGION'] = 'eu'\n"
        "os.environ['API_TOKEN'] = 'not-kept-9f2'\nsys.path.insert(0, '/opt/helpers')"
    )
    ip.run_line_magic("resume", "--run process")
    ip.run_cell(cell)
    import os
    import sys

    os.chdir(workdir)  # a new kernel starts where the notebook is, with none of it
    for name in ("REGION", "API_TOKEN"):
        os.environ.pop(name)
    sys.path.remove("/opt/helpers")
    _new_kernel(ip, "os", "sys")
    ip.run_line_magic("resume", "--run process")
    try:
        ip.run_cell(cell)  # skipped
        assert Path.cwd() == workdir / "data" and os.environ["REGION"] == "eu"
        assert "/opt/helpers" in sys.path and "API_TOKEN" not in os.environ  # never kept
    finally:
        os.chdir(workdir)
        os.environ.pop("REGION", None)
        if "/opt/helpers" in sys.path:
            sys.path.remove("/opt/helpers")
    assert b"not-kept-9f2" not in all_objects(workdir / ".stepstone")


def test_a_generator_made_in_a_plain_cell_and_advanced_by_steps_draws_as_it_would_have(
    ip: InteractiveShell,
):
    plain = "import numpy as np\nrng = np.random.default_rng(42)\nseen = []"
    draw = "%%step a\nfirst = rng.random(2).tolist()\nseen.append(1)"
    then = "%%step b\nsecond = rng.random(2).tolist()\ncount = len(seen)"
    ip.run_line_magic("resume", "--run plain")
    ip.run_cell(plain)
    ip.run_cell(draw)
    ip.run_cell(then)
    clean = (ip.user_ns["second"], ip.user_ns["count"])
    _new_kernel(ip, "rng", "seen", "first", "second", "count", "np")
    stepstone.run.active.driven_run().rerun("b", "the kernel died in it")
    ip.run_line_magic("resume", "--run plain")
    ip.run_cell(plain)  # plain cells run again: a fresh generator, an empty list
    ip.run_cell(draw)  # skipped: gives back the generator and the list as it left them
    ip.run_cell(then)
    assert (ip.user_ns["second"], ip.user_ns["count"]) == clean


def _plain_and_steps(folder: Path, region: str) -> None:
    cells = [
        "%load_ext stepstone\n%resume",
        f'region = "{region}"',
        "%%step first --check file:first.txt\nopen('first.txt', 'w').write('1')",
        "%%step report --check file:out.txt\nopen('out.txt', 'w').write(region)",
    ]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), str(folder / "nb.ipynb"))


@pytest.mark.kernel
def test_an_edited_plain_cell_makes_the_steps_that_read_it_stale(workdir: Path):
    _plain_and_steps(workdir, "eu")
    assert stepstone_cli("run", "nb.ipynb", cwd=workdir).returncode == 0
    _plain_and_steps(workdir, "us")
    status = json.loads(stepstone_cli("status", "--json", cwd=workdir).stdout)
    assert {s["name"]: s["state"] for s in status["steps"]} == {
        "first": "verified",
        "report": "stale",
    }
    again = stepstone_cli("run", "nb.ipynb", cwd=workdir)
    assert again.returncode == 0, again.stderr
    assert "first: skipped" in again.stderr and "report: done" in again.stderr
    assert (workdir / "out.txt").read_text() == "us"  # it said eu: the step was skipped


def test_a_large_value_of_a_plain_cell_is_not_fingerprinted_at_every_step():
    import numpy as np

    from stepstone.kernel.kernelsession import PLAIN_LIMIT, _state_print

    small, large = np.zeros(1000), np.zeros(PLAIN_LIMIT // 8 + 1)
    assert _state_print(small) is not None
    assert _state_print(large) is None
    assert _state_print(list(range(10))) is not None
    assert _state_print(b"x" * (PLAIN_LIMIT + 1)) is None  # by its pickle's size


def _resumed(ip: InteractiveShell, run: str, cells: list[str], then: str) -> tuple[dict, dict]:
    """The names `then` binds after `cells` ran, and after a kernel killed in `then`
    resumed (every cell before it skipped)."""
    ip.run_line_magic("resume", f"--run {run}")
    for cell in cells:
        assert ip.run_cell(cell).success
    assert ip.run_cell(then).success
    clean = dict(ip.user_ns["seen"])
    made = {n for c in cells for n in ip.user_ns if n in c}
    _new_kernel(ip, *made, "seen")
    step = then.split()[1]
    stepstone.run.active.driven_run().rerun(step, "the kernel died in it")
    ip.run_line_magic("resume", f"--run {run}")
    for cell in cells:
        assert ip.run_cell(cell).success  # skipped
    assert ip.run_cell(then).success
    return clean, dict(ip.user_ns["seen"])


def test_a_view_changed_by_a_later_step_is_still_a_view_of_its_base_after_a_skip(ip):
    cells = [
        "%%step a\nimport numpy as np\narr = np.arange(10)\nview = arr[2:5]\n"
        "grid = np.arange(12).reshape(3, 4)\ncorner = grid[:2, :2]",
        "%%step b\nview[:] = -1\ncorner[0, 0] = 99",
    ]
    then = (
        "%%step c\nview[0] = 7\ncorner[1, 1] = 55\n"  # a change through the view, after
        "seen = {'arr': arr.tolist(), 'view': view.tolist(), 'grid': grid.tolist()}"
    )
    clean, resumed = _resumed(ip, "views", cells, then)
    assert clean["arr"] == [0, 1, 7, -1, -1, 5, 6, 7, 8, 9]
    assert resumed == clean


def test_names_that_share_an_index_or_a_list_share_it_after_a_skip(ip):
    cells = [
        "%%step a\nimport pandas as pd\n"
        "pop = pd.Series([1, 2, 3, 4], index=pd.MultiIndex.from_tuples("
        "[('ca', 2000), ('ca', 2010), ('ny', 2000), ('ny', 2010)]))\n"
        "pop_df = pd.DataFrame({'total': pop})\n"
        "rows = [1]\nby_id = {'r': rows}\nouter = {'inner': {'k': 0}}",
        "%%step b\npop.index.names = ['state', 'year']\nrows.append(2)\nouter['inner']['k'] = 1",
    ]
    then = (
        "%%step c\nby_id['r'].append(3)\n"  # through the other name, after the skip
        "seen = {'names': list(pop_df.index.names), 'same': pop_df.index is pop.index,"
        " 'rows': list(rows), 'by_id': by_id['r'] is rows, 'outer': outer['inner']['k']}"
    )
    clean, resumed = _resumed(ip, "shared", cells, then)
    assert clean == {"names": ["state", "year"], "same": True, "rows": [1, 2, 3],
                     "by_id": True, "outer": 1}  # fmt: skip
    assert resumed == clean


def test_a_cell_stopped_partway_and_run_again_starts_from_what_it_started_from(ip, workdir):
    ip.run_line_magic("resume", "--run retry")
    assert ip.run_cell("%%step a\nn = 10\nitems = [1, 2]\nseen = {'k': 0}\nlabel = 'x'").success
    # the same cell twice: stopped partway the first time (Ctrl-C), whole the second
    cell = (
        "%%step b\nimport os\nn = n + 1\nitems.append(3)\nseen['k'] += 1\nlabel += 'y'\n"
        "fresh = 1\nif not os.path.exists('go'):\n    raise KeyboardInterrupt"
    )
    assert not ip.run_cell(cell).success
    (workdir / "go").write_text("")
    assert ip.run_cell(cell).success
    ns = ip.user_ns
    assert (ns["n"], ns["items"], ns["seen"], ns["label"]) == (11, [1, 2, 3], {"k": 1}, "xy")


def test_a_large_array_a_stopped_attempt_changed_is_put_back_from_the_store(ip, workdir, capsys):
    ip.run_line_magic("resume", "--run big-retry")
    load = "%%step load\nimport numpy as np\nprices = np.ones(300_000)"  # 2.4 MB: not copied
    assert ip.run_cell(load, store_history=True).success
    cell = (
        "%%step scale\nimport os\nprices *= 2\nif not os.path.exists('go'):\n"
        "    raise KeyboardInterrupt\ntotal = float(prices.sum())"
    )
    assert not ip.run_cell(cell, store_history=True).success
    assert "it changed prices in place" in capsys.readouterr().out
    (workdir / "go").write_text("")
    assert ip.run_cell(cell, store_history=True).success
    assert "prices (saved by step load)" in capsys.readouterr().out
    assert ip.user_ns["total"] == 600_000.0


FOLLOW = {"STEPSTONE_FOLLOW_INPUTS": "1"}
LOG = "open('executions.log', 'a').write('{name}\\n')\n"


def _job(folder: Path, *cells: str) -> None:
    nbformat.write(
        new_notebook(cells=[new_code_cell(c) for c in ("%load_ext stepstone\n%resume", *cells)]),
        str(folder / "nb.ipynb"),
    )


def _step(name: str, line: str, body: str) -> str:
    return f"%%step {name} {line}\n{LOG.format(name=name)}{body}"


def _ran(folder: Path, **env: str) -> list[str]:
    """Run the notebook to its end: the steps that ran this time."""
    log = folder / "executions.log"
    before = len(log.read_text().split()) if log.exists() else 0
    done = stepstone_cli("run", "nb.ipynb", cwd=folder, **env)
    assert done.returncode == 0, done.stderr
    return log.read_text().split()[before:] if log.exists() else []


@pytest.mark.kernel
def test_a_helper_from_a_plain_cell_lets_the_steps_that_call_it_follow_their_inputs(
    workdir: Path,
):
    helper = (
        "from pathlib import Path\nSUFFIX = '.txt'\n"
        "def mark(name):\n    Path(name + SUFFIX).write_text(name)"
    )
    steps = [_step(n, f"--check file:{n}.txt", f"mark('{n}')") for n in "abc"]
    _job(workdir, helper, *steps)
    assert _ran(workdir, **FOLLOW) == ["a", "b", "c"]
    assert stepstone_cli("rerun", "a", "--why", "check it", cwd=workdir).returncode == 0
    # every step read `mark`, so each kept the conservative rule and ran again
    assert _ran(workdir, **FOLLOW) == ["a"]
    _job(workdir, helper.replace("'.txt'", "'.' + 'txt'"), *steps)
    assert _ran(workdir, **FOLLOW) == ["a", "b", "c"]  # the helper's cell is theirs


@pytest.mark.kernel
def test_a_file_read_through_a_path_built_at_run_time_is_an_input(workdir: Path):
    (workdir / "data").mkdir()
    (workdir / "input.csv").write_text("a\nb\n")
    load = _step(
        "load",
        "--in file:input.csv --check file:data/clean.csv",
        "from pathlib import Path\n"
        "Path('data/clean.csv').write_text(Path('input.csv').read_text().upper())",
    )
    count = _step(
        "count",
        "--check file:count.txt",
        "import os\n"
        "rows = open(os.path.join('data', 'clean' + '.csv')).read().splitlines()\n"
        "open('count.txt', 'w').write(str(len(rows)))",
    )
    _job(workdir, load, count)
    assert _ran(workdir, **FOLLOW) == ["load", "count"]
    (workdir / "input.csv").write_text("a\nb\nc\n")
    assert _ran(workdir, **FOLLOW) == ["load", "count"]  # count was skipped, saying 2
    assert (workdir / "count.txt").read_text() == "3"
    assert _ran(workdir, **FOLLOW) == []


@pytest.mark.kernel
def test_a_step_whose_input_file_changed_runs_again_by_default(workdir: Path):
    (workdir / "in").mkdir()
    (workdir / "in" / "x.txt").write_text("1")
    read = _step(
        "read",
        "--check file:out.txt",
        "import os\nopen('out.txt', 'w').write(open(os.path.join('in', 'x.txt')).read() * 2)",
    )
    _job(workdir, read, _step("after", "", "pass"))
    assert _ran(workdir) == ["read", "after"]
    assert _ran(workdir) == []
    (workdir / "in" / "x.txt").write_text("2")
    status = json.loads(stepstone_cli("status", "--json", cwd=workdir).stdout)
    assert [s["state"] for s in status["steps"]] == ["stale", "stale"]
    assert _ran(workdir) == ["read", "after"]  # it was skipped, out.txt saying 11
    assert (workdir / "out.txt").read_text() == "22"


@pytest.mark.kernel
def test_files_that_later_steps_write_or_remove_do_not_make_a_step_run_again(workdir: Path):
    steps = [
        _step("make", "", "open('tmp.txt', 'w').write('t')"),
        _step("use", "", "used = open('tmp.txt').read() + open('log.txt').read()"),
        _step("tidy", "", "import os\nos.remove('tmp.txt')\nopen('log.txt', 'a').write('x')"),
    ]
    (workdir / "log.txt").write_text("")
    _job(workdir, *steps)
    assert _ran(workdir) == ["make", "use", "tidy"]
    assert _ran(workdir) == []
    assert _ran(workdir, **FOLLOW) == []


@pytest.mark.kernel
def test_what_the_kernel_keeps_for_itself_is_no_output_of_the_users(workdir: Path):
    """Issue 48: displayed outputs, process state, sharing links and the exit flag are the
    kernel's part of a record, listed by no surface as a saved output."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "notebooks" / "quickstart.ipynb", workdir)
    done = stepstone_cli("run", "quickstart.ipynb", cwd=workdir)
    assert done.returncode == 0, done.stderr
    shown = json.loads(stepstone_cli("show", "report", "--json", cwd=workdir).stdout)
    assert shown["outputs"] and not [o for o in shown["outputs"] if o["name"].startswith("__")]
    listed = stepstone_cli("outputs", "report", cwd=workdir).stdout
    page = stepstone_cli("report", "-o", "report.html", cwd=workdir)
    assert page.returncode == 0, page.stderr
    for said in (listed, (workdir / "report.html").read_text(), json.dumps(shown)):
        assert "__displayed__" not in said and "__process__" not in said
    with stepstone.open_run("quickstart", drive=False) as run:
        assert "displayed" in run.records["report"].kernel


@pytest.mark.kernel
def test_a_skipped_step_needs_no_numpy_where_numpy_is_not_installed(workdir: Path, tmp_path):
    """Found by a new user: numpy comes with the tests' extra only; a step skipped on a
    plain install imported it to put back links between arrays it never had."""
    import os

    blocked = tmp_path / "blocked"
    (blocked / "numpy").mkdir(parents=True)
    (blocked / "numpy" / "__init__.py").write_text("raise ImportError('numpy is not installed')")
    shutil_copy = __import__("shutil").copy
    shutil_copy(Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb", workdir)
    path = os.pathsep.join(p for p in (str(blocked), os.environ.get("PYTHONPATH", "")) if p)
    for _ in range(2):
        done = stepstone_cli("run", "quickstart.ipynb", cwd=workdir, PYTHONPATH=path)
        assert done.returncode == 0, done.stderr
    assert "skipped" in done.stderr and "No module named" not in done.stderr
