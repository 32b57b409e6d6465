"""A small notebook job for hand-off tests: files, a restored value and a blind effect.

Every cell that runs appends its step name to `executions.log`, and the effect
posts to a loopback receiver's blind endpoint (no keys, no lookup: a second
send is a second request), so a test sees exactly what ran again.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

LOG = "with open('executions.log', 'a') as f:\n    f.write({name!r} + '\\n')\n"

POST = (
    "import json, os, urllib.request\n"
    "def post(key):\n"
    "    body = json.dumps({'ref': key}).encode()\n"
    "    request = urllib.request.Request(os.environ['RECEIVER'] + '/blind', data=body)\n"
    "    with urllib.request.urlopen(request, timeout=60) as response:\n"
    "        return json.load(response)\n"
)


def step_cell(name: str, body: str, options: str = "", *, label: str | None = None) -> str:
    """A `%%step` cell that logs its execution (as `label`, default its name), then runs
    `body`."""
    return f"%%step {name}{options}\n" + LOG.format(name=label or name) + body


def write_job(
    folder: Path,
    *,
    notify_name: str = "notify",
    notify_options: str = "",
    notify_body: str = "",
    effect_args: str = "'announce', post",
    extra_cells: tuple[str, ...] = (),
) -> Path:
    """`job.ipynb` in `folder`: make a file, sum it into a restored value, announce it.
    The announcing step logs itself as `notify` whatever its name, so renaming it alone
    leaves its source as it was."""
    cells = [
        new_markdown_cell("# Hand-off job"),
        new_code_cell("%load_ext stepstone\n%resume"),
        new_code_cell(
            step_cell(
                "make",
                "import pathlib\npathlib.Path('data').mkdir(exist_ok=True)\n"
                "pathlib.Path('data/numbers.json').write_text('[1, 2, 3]')",
                " --check file:data/numbers.json",
            )
        ),
        new_code_cell(
            step_cell(
                "total",
                "import json\ntotal = sum(json.load(open('data/numbers.json')))",
                " --out total",
            )
        ),
        new_code_cell(
            step_cell(
                notify_name,
                POST + f"import stepstone\nreceipt = stepstone.effect({effect_args})\n"
                "assert total == 6" + notify_body,
                notify_options,
                label="notify",
            )
        ),
        *(new_code_cell(source) for source in extra_cells),
    ]
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


def executions(folder: Path) -> list[str]:
    """The steps whose cells ran in `folder`, in order."""
    log = folder / "executions.log"
    return log.read_text().split() if log.exists() else []
