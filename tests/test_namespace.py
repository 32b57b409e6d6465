"""A skipped `%%step` cell leaves the kernel as if it had run: its imports, functions
and classes made again, its data back exact, and what cannot be saved said twice."""

import math
import sqlite3
import sys
import threading
from collections import Counter, OrderedDict, defaultdict, namedtuple
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.extra import pandas as hpd
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from stepstone.notebook import namespace
from stepstone.values import artifacts


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dicts in the same key order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.flags.f_contiguous == b.flags.f_contiguous
            and a.tobytes(order="A") == b.tobytes(order="A")
        )
    if isinstance(a, dict):
        if isinstance(a, defaultdict) and a.default_factory is not b.default_factory:
            return False
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def round_trip(value: Any) -> tuple[str, Any]:
    fmt, data = artifacts.encode("v", value)
    return fmt, artifacts.decode(fmt, data)


# -- values come back exact ---------------------------------------------------------

keys = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
leaves = st.one_of(
    keys,
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.fractions(max_denominator=50),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(keys, children, max_size=4).map(OrderedDict),
        st.dictionaries(st.text(max_size=5), children, max_size=4).map(
            lambda d: defaultdict(list, d)
        ),
        st.lists(st.text(max_size=3), max_size=6).map(Counter),
        st.sets(keys, max_size=4),
        st.frozensets(keys, max_size=4),
    )


nested = st.recursive(leaves, _containers, max_leaves=25)


@given(nested)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_nested_values_come_back_of_the_same_types_in_the_same_order(value: Any):
    _, back = round_trip(value)
    assert same(back, value)


@given(
    hnp.arrays(
        dtype=st.one_of(
            hnp.integer_dtypes(),
            hnp.floating_dtypes(),
            hnp.boolean_dtypes(),
            hnp.complex_number_dtypes(),
        ),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
    ),
    st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_arrays_come_back_with_their_dtype_shape_and_order(array: np.ndarray, fortran: bool):
    if fortran:
        array = np.asfortranarray(array)
    fmt, back = round_trip(array)
    assert fmt == "npy" and same(back, array)


def _frames() -> list[pd.DataFrame]:
    daily = pd.DataFrame(
        {"x": np.arange(5.0), "k": pd.Categorical(list("abcab"))},
        index=pd.date_range("2026-01-01", periods=5, freq="D", name="day"),
    )
    daily.attrs["source"] = "sensor 4"
    plain = pd.DataFrame({"a": [1, 2], "b": ["x", None]})
    wide = pd.DataFrame([[1, 2], [3, 4]], columns=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)]))
    return [daily, plain, wide, pd.DataFrame({"t": pd.to_timedelta([1, 2], unit="s")})]


@pytest.mark.parametrize("frame", _frames(), ids=["freq-attrs", "plain", "multiindex", "td"])
def test_data_frames_come_back_with_index_freq_dtypes_and_attrs(frame: pd.DataFrame):
    _, back = round_trip(frame)
    pd.testing.assert_frame_equal(back, frame, check_freq=True, check_flags=True)
    assert type(back.index) is type(frame.index) and back.attrs == frame.attrs
    assert getattr(back.index, "freq", None) == getattr(frame.index, "freq", None)


def test_plain_frames_stay_parquet_and_a_frame_parquet_would_change_falls_back():
    _, freq_back = round_trip(_frames()[0])
    assert artifacts.encode("v", _frames()[1])[0] == "parquet"
    assert artifacts.encode("v", _frames()[0])[0] == "pickle"  # Parquet drops the freq
    assert freq_back.index.freq == "D"


def test_a_dict_keeps_its_key_order_and_json_stays_for_plain_values():
    value = {"zeta": 1, "alpha": [1.5, None, {"y": True, "b": "s"}]}
    fmt, back = round_trip(value)
    assert fmt == "json" and same(back, value)
    assert round_trip((1, 2))[1] == (1, 2) and round_trip({1: "a"})[1] == {1: "a"}
    assert math.isnan(round_trip(float("nan"))[1])
    assert round_trip(float("nan"))[0] == "pyjson" and round_trip({1: (2, {3})})[0] == "pyjson"
    assert round_trip(Fraction(1, 3)) == ("pickle", Fraction(1, 3))


@pytest.mark.parametrize(
    "value",
    [threading.Lock(), (i for i in range(3)), sqlite3.connect(":memory:")],
    ids=["lock", "generator", "connection"],
)
def test_a_value_no_format_keeps_is_refused_with_its_type(value: Any):
    with pytest.raises(artifacts.Unsaveable) as caught:
        artifacts.encode("v", value)
    assert caught.value.kind in ("_thread.lock", "generator", "sqlite3.Connection")


# -- the kernel gets it back --------------------------------------------------------

DEFINE = """\
import collections, sqlite3
from collections import OrderedDict
class Point:
    def __init__(self, x):
        self.x = x
    def __eq__(self, other):
        return type(other) is Point and other.x == self.x
rate = 3
def post(x, r=rate):
    return x * r * scale
scale = 2
tally = collections.defaultdict(list)
tally['z'].append(1)
tally['a'].append(2)
order = OrderedDict(b=1, a=2)
counts = collections.Counter('hello')
pair = (1, [2, 3], {4})
conn = sqlite3.connect(':memory:')
for last in range(3):
    pass
"""
MADE = ["collections", "sqlite3", "OrderedDict", "Point", "rate", "post", "scale", "tally",
        "order", "counts", "pair", "conn", "last"]  # fmt: skip


@pytest.fixture
def ip(workdir: Path):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "stepstone")
    yield shell
    shell.run_line_magic("unload_ext", "stepstone")
    for name in MADE:
        shell.user_ns.pop(name, None)


def _run_then_resume(ip: InteractiveShell, steps: dict[str, str], forget: tuple[str, ...]):
    """Run `steps` (name -> cell), forget the names a new kernel would not have, and run
    the same cells again after `%resume`, as a new kernel would."""

    def run_all() -> None:
        ip.run_line_magic("resume", "--run names")
        for name, cell in steps.items():
            ip.run_cell_magic("step", name, cell)

    run_all()
    for name in forget:
        ip.user_ns.pop(name)
    run_all()


def _new_kernel(ip: InteractiveShell) -> None:
    for name in MADE:
        ip.user_ns.pop(name, None)
    ip.run_line_magic("resume", "--run names")


def test_a_skipped_cell_gives_back_its_imports_functions_classes_and_exact_data(ip, capsys):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "define", DEFINE)
    before = {n: ip.user_ns[n] for n in MADE if n not in ("conn", "Point", "post")}
    _new_kernel(ip)
    capsys.readouterr()
    ip.run_cell_magic("step", "define", DEFINE)
    out = capsys.readouterr().out
    ns = ip.user_ns
    assert "skipped, verified" in out
    assert "made again OrderedDict, Point, collections, post, sqlite3" in out
    for name, value in before.items():
        assert same(ns[name], value), name
    assert ns["tally"].default_factory is list and list(ns["order"]) == ["b", "a"]
    assert ns["post"](1) == 6 and ns["Point"](1) == ns["Point"](1)
    assert "conn" not in ns and "not restored conn (sqlite3.Connection)" in out


def test_an_unsaveable_value_is_named_at_completion_and_when_a_later_cell_needs_it(ip, capsys):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "define", DEFINE)
    said = capsys.readouterr().out
    assert (
        "will not survive a resume: conn (sqlite3.Connection) - re-create it in the step "
        "that uses it" in said
    )
    _new_kernel(ip)
    ip.run_cell_magic("step", "define", DEFINE)
    capsys.readouterr()
    result = ip.run_cell("conn.execute('select 1')")
    err = capsys.readouterr()
    assert isinstance(result.error_in_exec, NameError)
    text = err.out + err.err
    assert "'conn' was made by step 'define', which was skipped on resume" in text
    assert "%%step define --rerun" in text
    ip.run_cell_magic("step", "again", "conn = None")  # a step that binds it again
    ip.run_cell("del conn\nconn")
    assert "skipped on resume" not in capsys.readouterr().out


def test_a_definition_that_cannot_be_made_again_stops_with_what_to_do(
    ip, workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    (workdir / "helper.py").write_text("def twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(workdir))
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "use", "from helper import twice\ny = twice(2)")
    (workdir / "helper.py").unlink()
    monkeypatch.delitem(sys.modules, "helper")
    _new_kernel(ip)
    with pytest.raises(UsageError, match=r"could not be made again \(ModuleNotFoundError.*--rerun"):
        ip.run_cell_magic("step", "use", "from helper import twice\ny = twice(2)")


def test_out_still_refuses_a_value_it_cannot_save(ip):
    ip.run_line_magic("resume", "--run names")
    with pytest.raises(UsageError, match=r"output 'conn' \(sqlite3.Connection\) cannot be saved"):
        ip.run_cell_magic(
            "step", "c --out conn", "import sqlite3\nconn = sqlite3.connect(':memory:')"
        )


# -- which names: every name a step binds --------------------------------------------

MAKE = """\
import sqlite3
rows = [1, 2]
scratch = 3
conn = sqlite3.connect(':memory:')
with open('x.txt', 'w') as handle:
    handle.write('x')
"""


def _notebook_of(folder: Path, *cells: str) -> Path:
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), str(path))
    return path


def _in_notebook(ip, monkeypatch: pytest.MonkeyPatch, path: Path) -> Any:
    from stepstone.notebook.notebook import NOTEBOOK_ENV

    monkeypatch.setenv(NOTEBOOK_ENV, str(path))
    ip.run_line_magic("resume", "")
    return ip.magics_manager.registry["StepstoneMagics"].session.run


def test_in_a_notebook_every_name_a_step_binds_is_saved_whether_a_later_cell_reads_it_or_not(
    ip, workdir, monkeypatch, capsys
):
    """Issue 49: a cell added later may read any of them; what cannot be saved is named."""
    path = _notebook_of(workdir, "%load_ext stepstone\n%resume", f"%%step make\n{MAKE}", "rows")
    run = _in_notebook(ip, monkeypatch, path)
    ip.run_cell_magic("step", "make", MAKE)
    assert set(run.records["make"].outputs) == {"rows", "scratch", "handle"}  # handle: closed
    assert "will not survive a resume: conn (sqlite3.Connection)" in capsys.readouterr().out
    for name in ("rows", "scratch", "conn", "handle", "sqlite3"):
        ip.user_ns.pop(name)
    _in_notebook(ip, monkeypatch, path)
    ip.run_cell_magic("step", "make", MAKE)
    assert ip.user_ns["rows"] == [1, 2] and ip.user_ns["scratch"] == 3
    capsys.readouterr()
    ip.run_cell("conn")
    said = capsys.readouterr().out
    assert "'conn' was made by step 'make', which was skipped on resume" in said


@pytest.mark.parametrize(
    "later",
    ["print(rows)", "def total():\n    return sum(rows) + scratch", "%time print(rows)", "pass"],
    ids=["read", "read-by-a-function", "magic", "unread"],
)
def test_what_a_step_binds_is_saved_whatever_later_cells_read(ip, workdir, monkeypatch, later):
    body = "rows = [1, 2]\nscratch = 3\nwith open('x.txt', 'w') as handle:\n    pass"
    path = _notebook_of(workdir, "%load_ext stepstone\n%resume", f"%%step make\n{body}", later)
    run = _in_notebook(ip, monkeypatch, path)
    ip.run_cell_magic("step", "make", body)
    assert set(run.records["make"].outputs) == {"rows", "scratch", "handle"}  # handle: closed
    assert set(run.records["make"].unsaved) == set()


def test_a_value_a_later_step_changes_in_place_comes_back_changed(ip, workdir):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "tally = {'a': [1]}\nsame = [0]")
    ip.run_cell_magic("step", "grow", "tally['a'].append(2)\nprint(same)")
    run = ip.magics_manager.registry["StepstoneMagics"].session.run
    assert set(run.records["grow"].outputs) == {"tally"}  # `same` did not change: not saved
    assert set(run.records["grow"].kernel) == {"displayed"}  # what it printed
    ip.user_ns.pop("tally")
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "tally = {'a': [1]}\nsame = [0]")
    ip.run_cell_magic("step", "grow", "tally['a'].append(2)\nprint(same)")
    assert ip.user_ns["tally"] == {"a": [1, 2]}


def test_a_large_value_a_step_only_reads_is_not_saved_again(ip, workdir, monkeypatch):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "import numpy as np\ngrid = np.zeros((200, 200))")
    encoded: list[str] = []
    encode = artifacts.encode
    monkeypatch.setattr(artifacts, "encode", lambda n, v: encoded.append(n) or encode(n, v))
    ip.run_cell_magic("step", "look", "peak = grid.max()")
    assert encoded == ["peak"]  # its fingerprint says grid is as saved: not even encoded
    ip.run_cell_magic("step", "poke", "grid[0, 0] = 7.0")
    run = ip.magics_manager.registry["StepstoneMagics"].session.run
    assert "grid" in run.records["make"].outputs
    assert "grid" not in run.records["look"].outputs  # read, left as it was
    assert "grid" in run.records["poke"].outputs  # changed in place: saved as it is now
    ip.user_ns.pop("grid")
    ip.run_line_magic("resume", "--run names")
    for name, cell in [("make", "import numpy as np\ngrid = np.zeros((200, 200))"),
                       ("look", "peak = grid.max()"), ("poke", "grid[0, 0] = 7.0")]:  # fmt: skip
        ip.run_cell_magic("step", name, cell)
    assert ip.user_ns["grid"][0, 0] == 7.0


def test_resume_says_what_each_verified_step_gives_back(ip, workdir, capsys):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "define", DEFINE)
    ip.run_cell_magic("step", "nothing", "pass")
    capsys.readouterr()
    _new_kernel(ip)
    out = capsys.readouterr().out
    assert "skipped cells give back (with their imports, defs and classes):" in out
    assert (
        "  define: counts, last, order, pair, rate, scale, tally; not conn (sqlite3.Connection)"
        in out
    )
    assert "nothing:" not in out


def test_a_frame_with_a_freq_changed_in_place_comes_back_changed(ip, workdir):
    make = (
        "import pandas as pd\n"
        "d = pd.DataFrame({'v': [1.0, 2.0]}, pd.date_range('2026-01-01', periods=2, freq='D'))"
    )
    _run_then_resume(ip, {"make": make, "double": "d['v'] = d['v'] * 2"}, ("d",))
    assert ip.user_ns["d"]["v"].tolist() == [2.0, 4.0] and ip.user_ns["d"].index.freq == "D"


def test_containers_of_frames_and_object_arrays_come_back_exact():
    frame = _frames()[0]
    value = {"daily": frame, "parts": [frame.iloc[:2], np.array([1, "a"], dtype=object)]}
    fmt, back = round_trip(value)
    assert fmt == "pickle" and list(back) == ["daily", "parts"]
    pd.testing.assert_frame_equal(back["daily"], frame, check_freq=True)
    assert back["parts"][1].tolist() == [1, "a"]


def test_a_value_changed_in_place_that_cannot_be_saved_is_not_given_back_stale(ip, capsys):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "bag = [1]")
    ip.run_cell_magic("step", "grow", "import threading\nbag.append(threading.Lock())")
    assert "will not survive a resume: bag (list)" in capsys.readouterr().out
    ip.user_ns.pop("bag")
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "bag = [1]")
    assert ip.user_ns["bag"] == [1]
    ip.run_cell_magic("step", "grow", "import threading\nbag.append(threading.Lock())")
    assert "bag" not in ip.user_ns  # [1] is what it was before `grow`: not what grow left
    capsys.readouterr()
    ip.run_cell("bag")
    assert "'bag' was made by step 'grow'" in capsys.readouterr().out


def test_an_expr_check_loads_only_the_values_it_reads(ip, workdir):
    setup = "class Item:\n    def __init__(self, n):\n        self.n = n"
    build = "items = [Item(1), Item(2)]\ncount = len(items)"
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "setup", setup)
    ip.run_cell_magic("step", "build --check 'expr:count == 2'", build)
    for name in ("Item", "items", "count"):
        ip.user_ns.pop(name)
    ip.run_line_magic("resume", "--run names")  # Item is not defined yet: items cannot load
    run = ip.magics_manager.registry["StepstoneMagics"].session.run
    assert run.status().steps[1].state == "verified"
    ip.run_cell_magic("step", "setup", setup)
    ip.run_cell_magic("step", "build --check 'expr:count == 2'", build)
    assert [i.n for i in ip.user_ns["items"]] == [1, 2]


# -- found by review: each failed before its fix ------------------------------------


def test_a_plain_cells_value_is_not_given_back_from_an_earlier_session(ip, workdir):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell("threshold = 5")
    ip.run_cell_magic("step", "a", "hits = [x for x in range(10) if x > threshold]")
    ip.run_cell("threshold = 7")  # a new session, the setting edited
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "a", "hits = [x for x in range(10) if x > threshold]")
    assert ip.user_ns["threshold"] == 7


def test_a_value_a_notebook_function_changes_comes_back_changed(ip, workdir):
    cells = {"a": "rows = []\ndef record(x):\n    rows.append(x)", "b": "record(1)\nrecord(2)"}
    _run_then_resume(ip, cells, ("rows",))
    assert ip.user_ns["rows"] == [1, 2]


def test_cycles_long_ints_and_frames_with_array_attrs_are_saved():
    root: dict[str, Any] = {"kids": []}
    root["kids"].append({"parent": root})
    fmt, back = round_trip(root)
    assert fmt == "pickle" and back["kids"][0]["parent"] is back
    assert round_trip(math.factorial(2000)) == ("pickle", math.factorial(2000))
    frame = pd.DataFrame({"a": [1, 2]})
    frame.attrs["weights"] = np.array([0.5, 0.5])
    assert round_trip(frame)[1].attrs["weights"].tolist() == [0.5, 0.5]


def test_a_rebound_definition_is_not_made_again_as_its_first_self(ip, workdir, capsys):
    cell = (
        "from json import dumps\ncalls = []\n"
        "def logged(f):\n    return lambda *a: calls.append(1) or f(*a)\n"
        "dumps = logged(dumps)"
    )
    _run_then_resume(ip, {"wrap": cell}, ("dumps", "calls", "logged"))
    import json

    assert ip.user_ns["dumps"] is not json.dumps  # the wrapper, not json.dumps unwrapped
    ip.run_cell("out = dumps(1)")
    # saved by value, it reads the notebook's globals again: the restored `calls`
    assert ip.user_ns["out"] == "1" and ip.user_ns["calls"] == [1]


def test_in_a_notebook_a_class_body_del_and_query_text_count_as_reads(ip, workdir, monkeypatch):
    body = (
        "from pathlib import Path\nROOT = Path('/data')\n"
        "class Cfg:\n    out = ROOT / 'out'\ncutoff = 1\nscratch = 2"
    )
    later = (
        "import pandas as pd\n"
        "print(Cfg.out, pd.DataFrame({'v': [1, 2]}).query('v > @cutoff'))\ndel scratch"
    )
    path = _notebook_of(workdir, "%load_ext stepstone\n%resume", f"%%step make\n{body}", later)
    run = _in_notebook(ip, monkeypatch, path)
    ip.run_cell_magic("step", "make", body)
    assert {"ROOT", "cutoff", "scratch"} <= set(run.records["make"].outputs)
    for name in ("Path", "ROOT", "Cfg", "cutoff", "scratch"):
        ip.user_ns.pop(name)
    _in_notebook(ip, monkeypatch, path)
    ip.run_cell_magic("step", "make", body)
    assert str(ip.user_ns["Cfg"].out) == "/data/out"


@pytest.mark.parametrize(
    "change",
    [
        "s.name = 'new'",
        "cat['k'] = cat['k'].cat.as_ordered()",
        "wide.columns = [*wide.columns[:-1], 'renamed']",
    ],
    ids=["series-name", "categorical-order", "wide-columns"],
)
def test_a_fingerprint_sees_what_a_step_changed_in_place(change: str):
    from stepstone.notebook.namespace import fingerprint

    scope: dict[str, Any] = {"pd": pd, "np": np}
    exec(
        "s = pd.Series([1, 2], name='old')\n"
        "cat = pd.DataFrame({'k': pd.Categorical(['a', 'b'])})\n"
        "wide = pd.DataFrame(np.zeros((2, 200)), columns=[f'c{i}' for i in range(200)])",
        scope,
    )
    before = {n: fingerprint(scope[n]) for n in ("s", "cat", "wide")}
    exec(change, scope)
    assert any(fingerprint(scope[n]) != before[n] for n in before)


def test_values_that_name_the_cells_own_functions_and_classes_come_back(ip, workdir):
    cell = (
        "def add(x, y):\n    return x + y\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n"
        "ops = {'add': add}\nbox = Box(3)"
    )
    _run_then_resume(ip, {"a": cell}, ("add", "Box", "ops", "box"))
    run = ip.magics_manager.registry["StepstoneMagics"].session.run
    assert run.records["a"].attempt == 1  # skipped, not run again
    assert ip.user_ns["ops"]["add"](1, 2) == 3 and ip.user_ns["box"].v == 3
    assert type(ip.user_ns["box"]) is ip.user_ns["Box"]


def test_a_value_a_step_read_and_left_as_saved_is_not_loaded_back_to_check(ip, monkeypatch):
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "make", "pairs = [(i, str(i)) for i in range(1000)]")
    decoded: list[str] = []
    decode = artifacts.decode
    monkeypatch.setattr(artifacts, "decode", lambda f, d: decoded.append(f) or decode(f, d))
    ip.run_cell_magic("step", "look", "n = len(pairs)")
    assert decoded == []  # the sha256 of its bytes says it is as saved
    ip.run_cell_magic("step", "grow", "pairs.append((-1, 'x'))")
    assert decoded == ["pyjson"]  # changed: saved again, with its round-trip check


def test_another_users_pickles_are_withheld_not_rerun_and_trust_gives_them_back(
    ip, workdir, monkeypatch, capsys
):
    from conftest import stepstone_cli

    cell = "from fractions import Fraction\ntags = Fraction(1, 3)\nshape = (3, {'eu'})\ncount = 2"
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "tag", cell)
    for name in ("tags", "shape", "count", "Fraction"):
        ip.user_ns.pop(name)
    monkeypatch.setenv("STEPSTONE_CONFIG", str(workdir / "another-user"))
    capsys.readouterr()
    ip.run_line_magic("resume", "--run names")
    shown = capsys.readouterr().out
    assert "  tag: count, shape\n" in shown  # not the withheld pickle
    assert "(tag: tags)" in shown  # a tuple of a set is tagged JSON: it loads for anyone
    assert "not given back here (tag: tags)" in shown and "stepstone trust --repo" in shown
    ip.run_cell_magic("step", "tag", cell)
    out = capsys.readouterr().out
    assert "skipped, verified" in out  # the step stands: the run does not start over
    assert "not restored tags (a pickle from a store you do not trust)" in out
    assert ip.user_ns["count"] == 2 and ip.user_ns["shape"] == (3, {"eu"})
    assert "tags" not in ip.user_ns
    ip.run_cell("tags")
    assert "run `stepstone trust` (once)" in capsys.readouterr().out
    other = {"STEPSTONE_CONFIG": str(workdir / "another-user")}
    assert stepstone_cli("trust", cwd=workdir, **other).returncode == 0
    ip.run_line_magic("resume", "--run names")
    ip.run_cell_magic("step", "tag", cell)
    assert ip.user_ns["tags"] == ip.user_ns["Fraction"](1, 3)


Pair = namedtuple("Pair", "x y")  # a subclass of tuple: not tagged JSON


def test_pythons_containers_are_tagged_json_and_subclasses_stay_exact_through_pickle():
    value = {("a", 1): [{1, 2}, frozenset({b"x"}), 1j], "p": (1.5, float("inf"))}
    fmt, back = round_trip(value)
    assert fmt == "pyjson" and same(back, value)
    assert round_trip(Pair(1, 2)) == ("pickle", Pair(1, 2))
    assert b"__reduce__" not in artifacts.encode("v", value)[1]  # plain JSON text


@given(
    hpd.data_frames(
        [
            hpd.column("f", dtype=float),
            hpd.column("i", dtype=int),
            hpd.column("s", elements=st.text(max_size=4)),
            hpd.column("b", dtype=bool),
        ],
        index=hpd.range_indexes(max_size=6) | hpd.indexes(dtype="datetime64[ns]", max_size=6),
    ),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_frames_come_back_exact_in_whatever_format_keeps_them(frame: pd.DataFrame, attrs):
    frame.attrs.update(attrs)
    _, back = round_trip(frame)
    pd.testing.assert_frame_equal(back, frame, check_freq=True, check_exact=True)
    assert type(back.index) is type(frame.index) and back.attrs == frame.attrs


@given(
    st.lists(hnp.arrays(hnp.integer_dtypes(), hnp.array_shapes(max_dims=2, max_side=3)), max_size=3)
)
@settings(max_examples=60, deadline=None)
def test_arrays_inside_containers_come_back_exact(arrays: list[np.ndarray]):
    value = {"arrays": arrays, "pair": tuple(arrays[:2])}
    _, back = round_trip(value)
    assert same(back, value)


def test_a_numeric_frames_fingerprint_follows_its_cells_index_and_dtypes():
    frame = pd.DataFrame({"a": np.arange(5.0), "b": np.arange(5)})
    first = namespace.fingerprint(frame)
    assert namespace.fingerprint(frame.copy()) == first
    changed = frame.copy()
    changed.iloc[2, 1] = 7
    assert namespace.fingerprint(changed) != first
    assert namespace.fingerprint(frame.set_axis(range(1, 6))) != first
    assert namespace.fingerprint(frame.astype({"b": "int32"})) != first
    assert namespace.fingerprint(frame.rename(columns={"a": "c"})) != first


@pytest.mark.parametrize(
    "column, other",
    [
        (["a", "b", None], "z"),  # pandas' str (Arrow-backed)
        (pd.Categorical(["x", "y", "x"], categories=["y", "x", "w"]), "w"),
        (pd.array([1, None, 3], dtype="Int64"), 9),
        (pd.date_range("2024-01-01", periods=3, tz="Europe/Paris"), pd.Timestamp("2020", tz="UTC")),
        (pd.array([1, None, 3], dtype="int64[pyarrow]"), 9),
        ([1, "mixed", None], "z"),  # object: pandas' own hash
    ],
)
def test_a_frames_fingerprint_follows_every_kind_of_column_and_index(column, other):
    frame = pd.DataFrame({"c": column, "n": np.arange(3)}, index=pd.Index(["p", "q", "r"]))
    first = namespace.fingerprint(frame)
    assert first is not None and namespace.fingerprint(frame.copy()) == first
    changed = frame.copy()
    changed.iloc[1, 0] = other
    assert namespace.fingerprint(changed) != first
    assert namespace.fingerprint(frame.set_axis(["p", "q", "s"])) != first
    multi = frame.set_index(["n"], append=True)
    assert namespace.fingerprint(multi) != namespace.fingerprint(multi.rename(index={"r": "t"}))


def test_iterators_and_groupings_come_back_where_they_were():
    left, right = [1, 2, 3], ["a", "b", "c"]
    pairs = zip(left, right, strict=True)
    next(pairs)
    fmt, back = round_trip(pairs)
    assert fmt == "pickle" and list(back) == [(2, "b"), (3, "c")]
    assert list(pairs) == [(2, "b"), (3, "c")]  # saving it did not move it
    done = zip(left, right, strict=True)
    list(done)
    assert list(round_trip(done)[1]) == []  # an iterator used up stays used up
    frame = pd.DataFrame({"key": ["x", "y", "x"], "v": [1.0, 2.0, 4.0]})
    for grouped in (frame.groupby("key")["v"], frame.groupby(["key"], sort=False)):
        fmt, back = round_trip(grouped)
        assert fmt == "pickle" and back.sum().equals(grouped.sum())
