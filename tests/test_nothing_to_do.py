"""Issue 51: a run with nothing to do costs nothing. When every step of a notebook run
in --cells mode verifies, `stepstone run` writes the executed notebook from the records
without starting a kernel, and it is the notebook a kernel's run would have written.
Proof that no kernel starts: the later runs' `python3` kernel (JUPYTER_PATH) leaves a
file when it starts, and the runs that need a kernel leave it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import stepstone_cli
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

pytestmark = pytest.mark.kernel

CELLS = [
    new_markdown_cell("# Report"),
    new_code_cell("n = 3", metadata={"tags": ["parameters"]}),
    new_code_cell("rows = [i * n for i in range(4)]\nprint('rows', rows)"),
    new_code_cell(""),
    new_code_cell("import sys\nprint('a warning', file=sys.stderr)\nsum(rows)"),
    new_code_cell(
        "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n"
        "print('after')\n{'total': sum(rows)}"
    ),
    new_code_cell("total = sum(rows)\nopen('total.txt', 'w').write(str(total))"),
]


def _notebook(folder: Path, cells: list = CELLS) -> Path:  # type: ignore[type-arg]
    book = new_notebook(cells=[nbformat.from_dict(dict(c)) for c in cells])
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "report.ipynb"
    nbformat.write(book, str(path))
    return path


def _marking_kernel(folder: Path) -> dict[str, str]:
    """An environment whose `python3` kernel (this Python's ipykernel) leaves the file
    `kernel-started` in `folder` when it starts."""
    spec = folder / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    mark = folder / "kernel-started"
    start = (
        f"import pathlib; pathlib.Path({str(mark)!r}).touch(); "
        "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    )
    argv = [sys.executable, "-c", start, "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "Python 3", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    return {"JUPYTER_PATH": str(folder / "jupyter")}


def _kernel_started(folder: Path) -> bool:
    mark = folder / "kernel-started"
    started = mark.exists()
    mark.unlink(missing_ok=True)
    return started


def _as_compared(path: Path) -> dict[str, object]:
    """An executed notebook without what differs from run to run: times, the words of
    stepstone's cards, the id of the cell that holds the parameters (new each run, as
    papermill's)."""
    book = json.loads(path.read_text())
    for cell in book["cells"]:
        if "injected-parameters" in cell["metadata"].get("tags", []):
            cell.pop("id")
        cell["metadata"].pop("execution", None)
        said = cell["metadata"].pop("papermill", None)
        cell["metadata"]["status"] = said and said["status"]
        cell["metadata"].pop("stepstone", None)
    said = book["metadata"].pop("papermill")
    book["metadata"]["papermill"] = {k: said[k] for k in ("parameters", "exception")}
    return book


@pytest.mark.parametrize("parameters", [[], ["-p", "n", "5"]], ids=["defaults", "given"])
def test_a_run_with_nothing_to_do_writes_the_kernels_notebook_without_a_kernel(
    tmp_path: Path, parameters: list[str]
):
    nb = _notebook(tmp_path)
    first = stepstone_cli("run", str(nb), "out.ipynb", *parameters, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "out.ipynb").unlink()  # no earlier output to answer from: a kernel skips all
    kernel = stepstone_cli("run", str(nb), "out.ipynb", *parameters, cwd=tmp_path)
    assert kernel.returncode == 0 and "no kernel" not in kernel.stderr, kernel.stderr
    by_kernel = _as_compared(tmp_path / "out.ipynb")
    marking = _marking_kernel(tmp_path)
    answered = stepstone_cli("run", str(nb), "out.ipynb", *parameters, cwd=tmp_path, **marking)
    assert answered.returncode == 0, answered.stderr
    assert "no kernel was started" in answered.stderr and not _kernel_started(tmp_path)
    assert _as_compared(tmp_path / "out.ipynb") == by_kernel
    printed = [o for c in by_kernel["cells"] for o in c.get("outputs", [])]  # type: ignore[attr-defined]
    assert {o["output_type"] for o in printed} == {"stream", "display_data", "execute_result"}
    # an edited cell must run: the kernel starts
    book = nbformat.read(str(nb), as_version=4)
    book.cells[2].source += "\nprint('edited')"
    nbformat.write(book, str(nb))
    edited = stepstone_cli("run", str(nb), "out.ipynb", *parameters, cwd=tmp_path, **marking)
    assert edited.returncode == 0, edited.stderr
    assert "no kernel was started" not in edited.stderr and _kernel_started(tmp_path)


NEEDS_A_KERNEL = {
    "a plain cell of line magics": [new_code_cell("%env LEVEL=3"), new_code_cell("print(1)")],
    "a value it could not save": [
        new_code_cell("numbers = (i for i in range(3))"),
        new_code_cell("print('made')"),
    ],
    "a parameters cell that computes": [
        new_code_cell("import os\nn = len(os.listdir('.'))", metadata={"tags": ["parameters"]}),
        new_code_cell("print(n)"),
    ],
}


@pytest.mark.parametrize("case", sorted(NEEDS_A_KERNEL))
def test_a_run_a_kernel_would_not_skip_whole_starts_one(tmp_path: Path, case: str):
    nb = _notebook(tmp_path, NEEDS_A_KERNEL[case])
    first = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path, **_marking_kernel(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "no kernel was started" not in again.stderr and _kernel_started(tmp_path)


def test_a_changed_input_file_is_not_answered_from_the_records(tmp_path: Path):
    (tmp_path / "data.csv").write_text("1\n2\n")
    nb = _notebook(tmp_path, [new_code_cell("print(sum(map(int, open('data.csv'))))")])
    first = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "data.csv").write_text("1\n2\n3\n")
    again = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert again.returncode == 0 and "no kernel was started" not in again.stderr
    book = json.loads((tmp_path / "out.ipynb").read_text())
    assert book["cells"][0]["outputs"][0]["text"] == ["6\n"]


def test_a_module_the_cells_import_that_is_gone_is_not_answered_from_the_records(
    tmp_path: Path,
):
    (tmp_path / "mymod.py").write_text("X = 41\n")
    nb = _notebook(tmp_path, [new_code_cell("import mymod\nprint(mymod.X + 1)")])
    first = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "mymod.py").unlink()  # a fresh run fails: ModuleNotFoundError
    again = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert again.returncode != 0 and "no kernel was started" not in again.stderr


def test_an_output_notebook_only_prepared_is_not_taken_for_a_kernels(tmp_path: Path):
    nb = _notebook(tmp_path, [new_code_cell("print(1)")])
    assert stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path).returncode == 0
    prepared = stepstone_cli("run", str(nb), "out.ipynb", "--prepare-only", cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    again = stepstone_cli("run", str(nb), "out.ipynb", cwd=tmp_path)
    assert again.returncode == 0 and "no kernel was started" not in again.stderr
    book = json.loads((tmp_path / "out.ipynb").read_text())
    assert book["metadata"]["language_info"]["name"] == "python"
