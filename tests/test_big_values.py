"""Big arrays and frames: streamed into an uncompressed pack of their own, exact, read
back without zlib, and still plain Git objects that `git` reads, repacks and clones."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stepstone
from stepstone.store import GIT_OPTIONS, GitStore
from stepstone.store.packs import read_index
from stepstone.values import artifacts, bigvalues
from tests.conftest import fsck, git, restore_held, run_python

MB = 1 << 20


def _npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _stored_entries(store: Path) -> list[str]:
    """The packs whose single entry is a stored (uncompressed) blob, as `git verify-pack`
    lists them: their object ids."""
    found = []
    for index in sorted((store / "objects" / "pack").glob("*.idx")):
        lines = git("verify-pack", "-v", str(index), cwd=store).splitlines()
        objects = [line.split() for line in lines if line[:40].isalnum() and " blob " in line]
        # an uncompressed entry is a little larger than its content, never smaller
        found += [oid for oid, _, size, packed, *_ in objects if int(packed) > int(size) >= MB]
    return found


def _save_and_skip(workdir: Path, value_code: str) -> tuple[stepstone.StepResult, object]:
    code = f"""
import numpy as np, pandas as pd, stepstone
run = stepstone.open_run("big")
value = {value_code}
run.step("make", lambda: value)
"""
    run_python(code, cwd=workdir)
    with stepstone.open_run("big") as run:
        again = run.step("make", lambda: pytest.fail("a verified step ran again"))
    made = eval(value_code, {"np": np, "pd": pd})
    return again, made


@pytest.mark.slow
@pytest.mark.parametrize(
    "value_code",
    [
        "np.arange(3_000_000, dtype=np.float64).reshape(1000, 3000)",
        "np.asfortranarray(np.arange(3_000_000, dtype=np.int32).reshape(1500, 2000))",
        "np.arange(6_000_000, dtype=np.int64)[::2]",  # not contiguous
        "np.zeros((1200, 1200), dtype=[('a', '<f8'), ('b', '<i4')])",
    ],
)
def test_a_big_array_comes_back_equal_from_an_uncompressed_pack_git_reads(workdir, value_code):
    again, made = _save_and_skip(workdir, value_code)
    assert again.skipped
    art = again.record.outputs["return"]
    assert art.format == "npy" and art.size >= bigvalues.THRESHOLD
    value = again.value
    assert type(value) is np.ndarray and value.dtype == made.dtype
    assert value.shape == made.shape and np.array_equal(value, made)
    assert value.flags.f_contiguous == made.flags.f_contiguous or made.ndim < 2
    store = workdir / ".stepstone"
    # the same bytes np.save writes, so its sha256 is the small path's
    blob = git("rev-parse", f"big:{artifacts.path_for(art.sha256, 'npy')}", cwd=store)
    assert blob.strip() in _stored_entries(store)
    tree = git("rev-parse", "big^{tree}", cwd=store).strip()
    reader = GitStore(store).open_blob(tree, artifacts.path_for(art.sha256, "npy"))
    assert reader is not None and reader.size == art.size  # the path the skip took
    reader.close()
    fsck(store)


def test_the_saved_bytes_are_exactly_np_save_s(workdir):
    array = np.asfortranarray(np.random.default_rng(1).random((900, 1500)))
    with stepstone.open_run("big") as run:
        record = run.step("make", lambda: array).record
    art = record.outputs["return"]
    store = workdir / ".stepstone"
    raw = subprocess.run(
        ["git", "cat-file", "blob", f"big:{artifacts.path_for(art.sha256, 'npy')}"],
        cwd=store,
        capture_output=True,
        check=True,
    ).stdout
    assert raw == _npy_bytes(array)
    assert art.sha256 == artifacts.sha256(raw)


@pytest.mark.slow
def test_a_big_frame_is_arrow_and_one_arrow_cannot_prove_exact_is_parquet_or_pickle(workdir):
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"x": rng.random(800_000), "n": np.arange(800_000)})
    frame.attrs["source"] = "sensor"
    odd = frame.copy()
    odd.index = pd.Index([f"r{i}" for i in range(len(odd))], dtype=object).astype("category")
    with stepstone.open_run("big") as run:
        kept = run.step("frame", lambda: frame).record.outputs["return"]
        fallback = run.step("odd", lambda: odd).record.outputs["return"]
    assert kept.format == "arrow" and kept.size > MB
    assert fallback.format in ("pickle", "parquet")
    with stepstone.open_run("big") as reopened:
        back = reopened.step("frame", lambda: pytest.fail("ran again")).value
        back_odd = reopened.step("odd", lambda: pytest.fail("ran again")).value
    assert artifacts.same_value(back, frame)
    assert artifacts.same_value(back_odd, odd)
    assert _stored_entries(workdir / ".stepstone")


def test_a_big_value_repacked_by_git_gc_still_comes_back(workdir):
    array = np.random.default_rng(3).random(2_000_000)
    with stepstone.open_run("big") as run:
        run.step("make", lambda: array)
    store = workdir / ".stepstone"
    git("-c", "pack.compression=9", "repack", "-a", "-d", "-F", "-q", cwd=store)
    assert _stored_entries(store) == []  # recompressed: the libgit2 path reads it
    with stepstone.open_run("big") as run:
        again = run.step("make", lambda: pytest.fail("ran again"))
    assert np.array_equal(again.value, array)


def test_a_clone_carries_big_values_uncompressed_and_resumes_them(workdir, tmp_path):
    array = np.random.default_rng(4).random(2_000_000)
    with stepstone.open_run("big") as run:
        run.step("make", lambda: array)
    np.save(workdir / "expected.npy", array)
    other = tmp_path / "elsewhere"
    other.mkdir()
    git("clone", "--bare", "-q", str(workdir / ".stepstone"), str(other / ".stepstone"), cwd=other)
    assert _stored_entries(other / ".stepstone")  # the entry travelled as it was written
    code = f"""
import numpy as np, stepstone
again = stepstone.open_run("big").step("make", lambda: 1 / 0)
assert again.skipped and np.array_equal(again.value, np.load({str(workdir / "expected.npy")!r}))
print("restored")
"""
    assert "restored" in run_python(code, cwd=other).stdout


def test_an_npy_header_that_claims_more_than_its_blob_holds_is_refused_before_allocating(
    tmp_path,
):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**11,)}
    )
    content = header.getvalue() + bytes(800)  # a 800 GB array in 800 bytes
    store = GitStore(tmp_path / "store")
    sink = store.big_blobs.sink(len(content))
    sink.write(content)
    blob = sink.close()
    reader = store.big_blobs.reader(bytes.fromhex(blob.oid))
    assert reader is not None and reader.size == len(content)
    with pytest.raises(ValueError, match="holds 800 bytes"):
        bigvalues.load("npy", reader, reader.size)


def test_saving_a_big_array_holds_at_most_one_extra_copy_in_memory(workdir):
    code = """
import resource, numpy as np, stepstone
array = np.random.default_rng(5).random(12_500_000)  # 100 MB
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stepstone.open_run("big").step("make", lambda: array)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - base) * 1024 / array.nbytes)
"""
    extra = float(run_python(code, cwd=workdir).stdout.split()[-1])
    assert extra < 0.5, f"saving used {extra:.2f}x the array's size on top of it"


def test_stepstones_git_gc_does_not_delta_big_values(workdir):
    array = np.random.default_rng(7).random(2_000_000)
    changed = array.copy()
    changed[5] = 0.0
    with stepstone.open_run("big") as run:
        run.step("a", lambda: array)
        run.step("b", lambda: changed)
    store = workdir / ".stepstone"
    git(*GIT_OPTIONS, "gc", "-q", cwd=store)
    assert len(_stored_entries(store)) == 2
    fsck(store)


_NUMBER_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"]
_NUMBER_DTYPES += ["float32", "float64", "bool"]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(min_size=0, max_size=8),
            st.sampled_from(_NUMBER_DTYPES),
            st.integers(0, 2**31),
        ),
        min_size=0,
        max_size=5,
        unique_by=lambda c: c[0],
    ),
    st.integers(0, 40),
    st.integers(-5, 5),
    st.integers(1, 3),
)
def test_a_frame_called_plainly_parquet_comes_back_exact_from_parquet(columns, rows, start, step):
    rng = np.random.default_rng(rows)
    data = {}
    for name, dtype, seed in columns:
        values = np.random.default_rng(seed).integers(0, 100, rows)
        data[name] = values.astype(dtype) if dtype != "float64" else rng.random(rows)
    frame = pd.DataFrame(data, index=pd.RangeIndex(start, start + rows * step, step))
    if rows and "float32" in frame.dtypes.astype(str).tolist():
        frame.iloc[rows // 2, list(frame.dtypes.astype(str)).index("float32")] = np.nan
    if not bigvalues.plainly_parquet(frame):
        return
    out = io.BytesIO()
    frame.to_parquet(out, row_group_size=7)
    back = pd.read_parquet(io.BytesIO(out.getvalue()))
    assert type(back) is pd.DataFrame and artifacts.same_value(back, frame)
    _assert_loads_as_pandas_reads(out.getvalue())


def _assert_loads_as_pandas_reads(data: bytes) -> None:
    """stepstone's load of a stored Parquet value gives what `pd.read_parquet` gives:
    values, dtypes, column and index types, and a frame that can be changed in place."""
    loaded = bigvalues.load("parquet", io.BytesIO(data), len(data))
    expected = pd.read_parquet(io.BytesIO(data))
    pd.testing.assert_frame_equal(loaded, expected, check_exact=True)
    assert loaded.columns.dtype == expected.columns.dtype
    assert type(loaded.index) is type(expected.index)
    assert loaded.attrs == expected.attrs
    assert len(loaded._mgr.blocks) == len(expected._mgr.blocks)  # as consolidated
    if len(loaded) and len(loaded.columns):
        loaded.iloc[0, 0] = loaded.iloc[-1, 0]


def test_frames_read_a_column_at_a_time_or_plainly_load_as_pandas_reads_them():
    plain = pd.DataFrame({"x": np.arange(3.0), "n": np.arange(3), "b": [True, False, True]})
    named = plain.copy()
    named.attrs["unit"] = "m"
    for frame in [
        plain,
        plain[["x"]],
        plain.set_axis(["a", "b", "c"]),
        plain.rename_axis("row"),
        plain.astype({"x": "float16"}),
        plain.assign(s=["a", "b", "c"]),
        plain.assign(t=pd.to_datetime(["2026-01-01"] * 3)),
        plain.astype({"n": "Int64"}),
        named,
        plain.iloc[:0],
        plain.iloc[::-1].reset_index(drop=True).set_axis(pd.RangeIndex(9, -3, -4)),
        pd.concat([plain] * 40, ignore_index=True).astype({"n": "uint64", "x": "float32"}),
        pd.DataFrame(index=pd.RangeIndex(4)),
    ]:
        out = io.BytesIO()
        frame.to_parquet(out)
        _assert_loads_as_pandas_reads(out.getvalue())


@pytest.mark.slow
def test_restoring_a_big_frame_holds_little_more_than_the_frame(workdir):
    save = """
import numpy as np, pandas as pd, stepstone
rng = np.random.default_rng(6)
frame = pd.DataFrame({f"c{i}": rng.random(1_250_000) for i in range(8)})  # 80 MB
frame["n"] = np.arange(len(frame))
stepstone.open_run("big").step("make", lambda: frame)
"""
    held = restore_held(workdir, save)
    assert held < 1.6, f"restoring held {held:.2f}x the frame's size (the frame included)"


def test_frames_parquet_may_change_are_not_called_plain():
    plain = pd.DataFrame({"x": np.arange(3.0)})
    assert bigvalues.plainly_parquet(plain)
    assert not bigvalues.plainly_parquet(plain.set_axis(["a", "b", "c"]))
    assert not bigvalues.plainly_parquet(plain.astype("float16"))
    assert not bigvalues.plainly_parquet(plain.rename(columns={"x": 0}))
    named = plain.copy()
    named.attrs["unit"] = "m"
    assert not bigvalues.plainly_parquet(named)
    assert not bigvalues.plainly_parquet(plain.assign(s=["a", "b", "c"]))


def test_a_damaged_big_value_is_not_loaded_and_its_step_runs_again(workdir):
    array = np.random.default_rng(8).random(500_000)
    with stepstone.open_run("big") as run:
        art = run.step("make", lambda: array).record.outputs["return"]
    store = workdir / ".stepstone"
    oid = git("rev-parse", f"big:{artifacts.path_for(art.sha256, 'npy')}", cwd=store).strip()
    pack = next(
        index.with_suffix(".pack")
        for index in (store / "objects" / "pack").glob("*.idx")
        if any(o.hex() == oid for o, _, _ in read_index(index.read_bytes()))
    )
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit flip inside the array's bytes
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    ran = []
    with stepstone.open_run("big") as run:
        again = run.step("make", lambda: ran.append(1) or array)
    assert ran == [1] and not again.skipped


@pytest.mark.parametrize("rows", [10, 200_000])  # a small value, and one past the big road
def test_a_frame_given_back_on_skip_can_be_changed_in_place(workdir, rows):
    frame = pd.DataFrame({"a": np.arange(rows), "b": np.linspace(0, 1, rows)})
    with stepstone.open_run("frames") as run:
        run.step("make", lambda: frame)
    with stepstone.open_run("frames") as run:
        back = run.step("make", lambda: 1 / 0).value  # skipped: its frame is restored
    back.loc[0, "a"] = 5
    back["b"] *= 2
    assert back.loc[0, "a"] == 5 and back["b"].iloc[-1] == 2.0
