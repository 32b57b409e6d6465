"""Step cells edited from outside a kernel (`edit_step`): an older notebook is upgraded
as Jupyter upgrades it, edits at once are both kept, and a notebook saved meanwhile is
not overwritten."""

from __future__ import annotations

import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from stepstone.errors import InvalidInput
from stepstone.notebook import editing


def _notebook(path: Path, minor: int = 5) -> Path:
    book = new_notebook(cells=[new_code_cell("%%step a\nx = 1"), new_code_cell("%%step b\ny = 2")])
    if minor < 5:
        book.nbformat_minor = minor
        for cell in book.cells:
            del cell["id"]
    nbformat.write(book, str(path))
    return path


def test_a_step_is_inserted_into_an_nbformat_4_4_notebook_as_jupyter_would_save_it(
    tmp_path: Path,
):
    path = _notebook(tmp_path / "old.ipynb", minor=4)
    done = editing.edit(path, "%%step c\nz = 3", after="a")
    assert done == {"action": "inserted", "step": "c", "index": 2}
    book = nbformat.read(str(path), as_version=4)
    nbformat.validate(book)
    assert book.nbformat_minor == 5 and all(cell.get("id") for cell in book.cells)
    assert [c.source.split()[1] for c in book.cells] == ["a", "c", "b"]


def test_two_edits_at_once_are_both_kept(tmp_path: Path):
    path = _notebook(tmp_path / "nb.ipynb")
    threads = [
        threading.Thread(
            target=editing.edit, args=(path, f"%%step {n}\nv = 0"), kwargs={"after": a}
        )
        for n, a in (("c", "a"), ("d", "b"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = [c.source.split()[1] for c in nbformat.read(str(path), as_version=4).cells]
    assert sorted(names) == ["a", "b", "c", "d"]


def test_a_notebook_saved_while_it_is_edited_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = _notebook(tmp_path / "nb.ipynb")
    real = editing.read_notebook

    def read_then_saved_by_jupyter(where: Path, **kwargs):
        found = real(where, **kwargs)
        saved = nbformat.read(str(where), as_version=4)
        saved.cells[1].source = "%%step b\ny = 20"
        nbformat.write(saved, str(where))
        return found

    monkeypatch.setattr(editing, "read_notebook", read_then_saved_by_jupyter)
    with pytest.raises(InvalidInput, match="changed while it was edited"):
        editing.edit(path, "x = 5", step="a")
    assert "y = 20" in path.read_text() and "x = 5" not in path.read_text()
