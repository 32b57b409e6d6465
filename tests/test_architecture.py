"""The shape of the source, read from the source: no import cycle (counting every
import, lazy and TYPE_CHECKING ones too), the run layer and below importing no
presentation, small modules and classes, pygit2 only inside the store, trailers spelled
only by the commit message."""

from __future__ import annotations

import ast
from pathlib import Path

import stepstone

SRC = Path(stepstone.__file__).parent
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


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


PRESENTATION = ("stepstone.render", "stepstone.report", "stepstone.brief", "stepstone.magics")
PRESENTATION += ("stepstone.cli", "stepstone.mcpserver", "stepstone.kernelsession")
LOWER = ("stepstone.run", "stepstone.store", "stepstone.remote", "stepstone.effect")
LOWER += ("stepstone.status", "stepstone.verdicts", "stepstone.models", "stepstone.namespace")


def test_the_run_layer_and_below_import_no_presentation():
    graph = _graph()
    crossing = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith(LOWER)
        for target in targets
        if target.startswith(PRESENTATION)
    }
    assert not crossing


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


def test_no_module_is_over_500_lines():
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long


def test_no_class_is_over_300_lines():
    long = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{name}.{node.name}"] = lines
    assert not long


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
        if name == "stepstone.message":
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


def test_the_core_does_not_import_ipython():
    core = [
        name
        for name, path in _modules().items()
        if name not in ("stepstone.magics", "stepstone.inputs")
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
