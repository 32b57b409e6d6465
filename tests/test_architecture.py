"""The shape of the source, read from the source: no import cycle (counting every
import, lazy and TYPE_CHECKING ones too), no module importing one from a higher layer
(`LAYERS`, the order docs/architecture.md draws), every package saying what it owns,
pygit2 only inside the store and its errors (READ_ERRORS, GitError) named only there,
IPython only inside the kernel package, trailers spelled only by the commit message,
the environment read only by settings.py, commits to a run made only by the ledger."""

from __future__ import annotations

import ast
from pathlib import Path

import stepstone

SRC = Path(stepstone.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ["stepstone", *path.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The stepstone modules `name` imports: every import, lazy ones and those under
    `if TYPE_CHECKING:` included (a type named is a dependency too)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("stepstone"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("stepstone"):
                continue
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            found.update(subs)
            if len(subs) < len(node.names):
                found.add(target)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    done: set[str] = set()
    for start in graph:
        on_path = {start}
        iters = {start: iter(sorted(graph[start]))}
        path = [start]
        while path:
            node = path[-1]
            nxt = next(iters[node], None)
            if nxt is None:
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            iters[nxt] = iter(sorted(graph[nxt]))
    return None


def test_the_import_graph_has_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


# The layers, lowest first: a module imports only from its own layer or those below
# it. Each is the packages (or top-level modules) it holds; "stepstone" is the package's
# own `__init__` (the API) alone, its doors beside it (`__main__`, and the aliases kept
# for paths users type: `stepstone.atomic` from docs/effects.md, `stepstone.tagged` from
# the load hint of `stepstone outputs`).
LAYERS: list[tuple[str, ...]] = [
    ("stepstone.errors", "stepstone.settings", "stepstone.faults"),  # errors, env, fault points
    ("stepstone.model",),
    ("stepstone.store",),
    ("stepstone.values",),
    ("stepstone.rules",),
    ("stepstone.effects",),
    ("stepstone.remote",),
    ("stepstone.run",),
    ("stepstone.notebook",),
    ("stepstone.present",),
    ("stepstone.agent",),
    ("stepstone.kernel",),
    ("stepstone.cli", "stepstone.lab"),  # the doors: the command line, the JupyterLab server
    ("stepstone", "stepstone.__main__", "stepstone.atomic", "stepstone.tagged"),
]


def _layer(name: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        for top in layer:
            if name == top or (top != "stepstone" and name.startswith(top + ".")):
                return i
    return None


def _upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Each import of a module from a higher layer, as (importer, imported)."""
    return {
        (name, target)
        for name, targets in graph.items()
        for target in targets
        if (_layer(target) or 0) > (_layer(name) or 0)
    }


def test_every_module_is_in_a_layer():
    assert [name for name in _modules() if _layer(name) is None] == []


def test_no_module_imports_one_from_a_higher_layer():
    assert _upward(_graph()) == set()


def test_the_layer_check_finds_an_import_from_above():
    graph = {
        "stepstone.model.models": {"stepstone.run.view", "stepstone.errors"},
        "stepstone.cli.commands": {"stepstone.store"},
    }
    assert _upward(graph) == {("stepstone.model.models", "stepstone.run.view")}


def test_every_package_says_what_it_owns():
    silent = [
        name
        for name, path in _modules().items()
        if path.name == "__init__.py"
        and not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    ]
    assert silent == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_a_lazy_import_counts_and_a_type_checking_one_too(tmp_path: Path):
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .store import GitStore\n"
        "def f():\n    from . import remote\n"
    )
    module = tmp_path / "m.py"
    module.write_text(source)
    known = {"stepstone.store": module, "stepstone.remote": module, "stepstone.m": module}
    assert _imports("stepstone.m", module, known) == {"stepstone.remote", "stepstone.store"}


def test_pygit2_is_imported_only_inside_the_store():
    outside = [
        name
        for name, path in _modules().items()
        if not name.startswith("stepstone.store")
        and any(
            (isinstance(n, ast.Import) and any(a.name.startswith("pygit2") for a in n.names))
            or (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("pygit2"))
            for n in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert not outside


def _names_store_errors(source: str) -> bool:
    """Whether `source` names what the store raises inside only: pygit2's `GitError`, or
    the store's `READ_ERRORS` (which holds it)."""
    hidden = {"READ_ERRORS", "GitError"}
    return any(
        (isinstance(n, ast.Name) and n.id in hidden)
        or (isinstance(n, ast.Attribute) and n.attr in hidden)
        or (isinstance(n, ast.alias) and n.name in hidden)
        for n in ast.walk(ast.parse(source))
    )


def test_nothing_outside_the_store_sees_its_git_errors():
    seen = [
        name
        for name, path in _modules().items()
        if not name.startswith("stepstone.store") and _names_store_errors(path.read_text())
    ]
    assert seen == []


def test_the_store_error_check_finds_a_name():
    assert _names_store_errors("from ..store import READ_ERRORS\n")
    assert _names_store_errors("try:\n    pass\nexcept pygit2.GitError:\n    pass\n")
    assert _names_store_errors("except_ = (StepstoneError, *store.READ_ERRORS)\n")
    assert not _names_store_errors("from ..errors import StoreError\n")


def _commits_to_a_run(source: str) -> bool:
    """Whether `source` calls the store's writer's `commit` (`store.writer.commit(...)`)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "commit"
        and isinstance(n.func.value, ast.Attribute)
        and n.func.value.attr == "writer"
        for n in ast.walk(ast.parse(source))
    )


def test_only_the_ledger_commits_to_a_run():
    writers = [
        name
        for name, path in _modules().items()
        if not name.startswith("stepstone.store") and _commits_to_a_run(path.read_text())
    ]
    assert writers == ["stepstone.run.ledger"]
    assert _commits_to_a_run("snap = state.store.writer.commit(run, snap, {}, 'm', author='a')")


def test_records_are_appended_and_only_a_hand_edit_or_a_pull_writes_them_as_bytes():
    verbatim = sorted(
        name
        for name, path in _modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and any(
            k.arg == "verbatim" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords
        )
    )
    # a hand edit (facade), the records a renamed step's plan moves, a pull's carried
    # effects; the ledger's own append
    assert verbatim == [
        "stepstone.run.facade",
        "stepstone.run.ledger",
        "stepstone.run.planning",
        "stepstone.run.planning",
        "stepstone.run.pulling",
    ]


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def test_only_the_commit_message_spells_a_trailer():
    spelled = {}
    for name, path in _modules().items():
        if name == "stepstone.model.message":
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        found = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and "Stepstone-" in n.value
            and id(n) not in docs
        ]
        if found:
            spelled[name] = found
    assert not spelled


def test_ipython_is_imported_only_inside_the_kernel_package():
    core = [
        name
        for name, path in _modules().items()
        if not name.startswith("stepstone.kernel.")
        and "IPython"
        in {
            (n.module or "").split(".")[0]
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom)
        }
        | {
            a.name.split(".")[0]
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Import)
            for a in n.names
        }
    ]
    assert not core


# Modules that may touch os.environ besides settings.py, the one reader of the
# environment, each with why:
ENVIRON_ALLOWED = {
    # the kernel's process state: a user cell's changes to os.environ are part of what
    # a step changed, noted before it and put back after a failed attempt; not settings
    "stepstone.kernel.processstate",
}
_ENVIRON_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _environ_uses(source: str) -> list[int]:
    """The lines where `source` names os.environ or os.getenv (or their kin), under
    any name it imported `os` as, or imported from `os` directly."""
    tree = ast.parse(source)
    aliases = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name == "os"
    }
    return sorted(
        n.lineno
        for n in ast.walk(tree)
        if (
            isinstance(n, ast.Attribute)
            and n.attr in _ENVIRON_NAMES
            and isinstance(n.value, ast.Name)
            and n.value.id in aliases
        )
        or (
            isinstance(n, ast.ImportFrom)
            and n.module == "os"
            and any(a.name in _ENVIRON_NAMES for a in n.names)
        )
    )


def test_only_settings_reads_the_environment():
    readers = {
        name: lines
        for name, path in _modules().items()
        if name != "stepstone.settings" and name not in ENVIRON_ALLOWED
        if (lines := _environ_uses(path.read_text()))
    }
    assert readers == {}


def test_the_environment_check_finds_a_read():
    assert _environ_uses("import os\nx = os.environ.get('A')\n") == [2]
    assert _environ_uses("import os as o\nx = o.getenv('A')\n") == [2]
    assert _environ_uses("from os import environ\n") == [1]
    assert _environ_uses("import os\nx = os.path.join('a')\n") == []
