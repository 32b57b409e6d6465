"""The notebook's names, read without going through IPython's `_i<N>` of every cell."""

from __future__ import annotations

import contextlib
import io
import os
import threading
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell

from stepstone.kernel.processstate import Watch
from stepstone.kernel.usernames import MARKS, UserNames

NAMES = st.sampled_from(["a", "b", "c", "df", "_x", "_i7", "Out", "_"])
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("bind"), NAMES),
        st.tuples(st.just("delete"), NAMES),
        st.tuples(st.just("rebind_after_delete"), NAMES),
        st.tuples(st.just("read"), st.none()),
        st.tuples(st.just("clear"), st.none()),
        st.tuples(st.just("replace"), st.none()),
        st.tuples(st.just("copy"), st.none()),
        st.tuples(st.just("put_back"), st.none()),
    ),
    max_size=60,
)


def full_scan(ns: dict[str, Any]) -> list[str]:
    return [n for n in ns if not n.startswith("_")]


@settings(max_examples=300, deadline=None)
@given(ACTIONS)
def test_the_names_read_equal_a_full_scan_after_any_binds_and_deletes(
    actions: list[tuple[str, str | None]],
) -> None:
    ns: dict[str, Any] = {"__name__": "__main__"}
    names = UserNames()
    copy: dict[str, Any] = {}
    for counter, (action, name) in enumerate(actions, 1):
        if action == "bind":
            ns[name] = counter  # type: ignore[index]
        elif action == "delete":
            ns.pop(name, None)  # type: ignore[arg-type]
        elif action == "rebind_after_delete":
            ns.pop(name, None)  # type: ignore[arg-type]
            ns[f"_i{counter}"] = "cell"  # IPython's name for the cell, in between
            ns[name] = counter  # type: ignore[index]
        elif action == "clear":  # %reset
            ns.clear()
        elif action == "replace":  # a new kernel namespace
            ns = dict(ns)
        elif action == "copy":
            copy = dict(ns)
        elif action == "put_back":  # globals().clear(); globals().update(copy)
            ns.clear()
            ns.update(copy)
        else:
            assert names.of(ns) == full_scan(ns)
    assert names.of(ns) == full_scan(ns)


def test_the_mark_is_hidden_from_who_and_steps_read_names_bound_again(tmp_path: Path) -> None:
    InteractiveShell.clear_instance()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "stepstone")
    quiet = contextlib.redirect_stdout(io.StringIO())
    try:
        with quiet:
            ip.run_line_magic("resume", f"--run names --repo {tmp_path / 'store'}")
            ip.run_cell("rows = [1, 2]\nalias = rows", store_history=True)
            ip.run_cell("%%step first\ntotal = sum(rows)", store_history=True)
            ip.run_cell("del alias\nalias = rows", store_history=True)  # after the mark now
            ip.run_cell("%%step second\nrows.append(3)", store_history=True)
        assert any(m in ip.user_ns and m in ip.user_ns_hidden for m in MARKS)
        assert ip.run_line_magic("who_ls", "") == ["alias", "rows", "total"]
        # `alias`, deleted and bound again after the first step read the names, comes last
        session = ip.magics_manager.registry["StepstoneMagics"].session
        mine = [n for n in session.names.of(ip.user_ns) if n not in ip.user_ns_hidden]
        assert mine == ["rows", "total", "alias"]
        ip.run_line_magic("reset", "-f")
        assert [n for n in session.names.of(ip.user_ns) if n not in ip.user_ns_hidden] == []
    finally:
        ip.magics_manager.registry["StepstoneMagics"].close()
        InteractiveShell.clear_instance()


def test_a_name_another_thread_binds_while_names_are_read_is_read_next_time() -> None:
    ns: dict[str, Any] = {"__name__": "__main__"}
    names = UserNames()
    readings = 0
    stop = threading.Event()

    def bind() -> None:
        i = 0
        while readings < 20 and i < 300_000:
            ns[f"t{i}"] = i
            i += 1
        stop.set()

    worker = threading.Thread(target=bind)
    worker.start()
    while not stop.is_set():
        names.of(ns)
        readings += 1
    worker.join()
    assert readings >= 2
    assert names.of(ns) == full_scan(ns)  # none missed for good


def test_a_copy_of_the_namespace_put_back_is_read_whole() -> None:
    ns: dict[str, Any] = {"__name__": "__main__", "a": 1}
    names = UserNames()
    assert names.of(ns) == ["a"]
    copy = dict(ns)  # holds the mark as it was
    ns["b"] = 2
    assert names.of(ns) == ["a", "b"]
    ns.clear()
    ns.update(copy)
    ns["c"] = 3
    assert names.of(ns) == full_scan(ns) == ["a", "c"]
    ns.clear()  # %reset -f, then the copy put back before the next reading
    ns.update(copy)
    assert names.of(ns) == full_scan(ns) == ["a"]


def test_os_environ_replaced_by_a_cell_changes_only_what_it_changed() -> None:
    watch = Watch()
    saved = os.environ
    try:
        os.environ = dict(os.environ)  # type: ignore[assignment]  # noqa: B003 (what the cell did)
        os.environ["STEPSTONE_TEST_NEW"] = "1"
        kept, left = watch.changed()
    finally:
        os.environ = saved  # noqa: B003
    assert kept == {"environ": {"STEPSTONE_TEST_NEW": "1"}} and left == []
