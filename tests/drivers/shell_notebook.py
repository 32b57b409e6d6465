"""Run a notebook's code cells in a real IPython shell, top to bottom, as a kernel would.

`python shell_notebook.py NOTEBOOK.ipynb`: the shell is told its notebook the way
`stepstone run` tells its kernel (`STEPSTONE_NOTEBOOK`). The first cell that raises
stops the run: its exception's type and message go to stderr and the exit code is 1.
The random-kill soak of everything (tests/test_soak_everything.py) drives notebooks
with it: a kernel costs seconds to start, a shell a fraction of one.
"""

import json
import os
import sys
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell


def main(notebook: Path) -> int:
    os.environ["STEPSTONE_NOTEBOOK"] = str(notebook.resolve())
    cells = json.loads(notebook.read_text())["cells"]
    shell = InteractiveShell.instance()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source = cell["source"]
        code = "".join(source) if isinstance(source, list) else source
        result = shell.run_cell(code)  # type: ignore[no-untyped-call]
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            print(f"{type(error).__name__}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
