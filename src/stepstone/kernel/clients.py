"""Which notebook file a kernel runs, found the way each Jupyter client tells it.

- `stepstone run`: `STEPSTONE_NOTEBOOK`, set for its kernel.
- JupyterLab, Notebook 7 and anything on jupyter_server's sessions: `__session__`
  (ipykernel) or `JPY_SESSION_NAME`, the notebook's path relative to the server's root
  (the kernel runs in the notebook's folder).
- VS Code: `__vsc_ipynb_file__` in the kernel's namespace.
- `jupyter nbconvert --execute`, `papermill` and `jupyter execute`: their command line,
  the kernel's parent process (Linux's /proc); papermill's input is its first notebook.

`docs/clients.md` says the same, with each client's limits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..settings import Settings

ENGINES = ("nbconvert", "papermill", "jupyter-execute", "jupyter-nbclient")
UNKNOWN = (
    "cannot tell which notebook this kernel runs (it was not started by stepstone run, "
    "JupyterLab, Notebook 7, VS Code, nbconvert or papermill): write %resume --run ID "
    "(the plan then grows as cells run), or run it with `stepstone run NOTEBOOK.ipynb`"
)


GONE = (
    "this kernel was started for {name}, which is not there any more (renamed or moved "
    "since the kernel started?). A client tells a kernel its notebook only when the kernel "
    "starts, and a restart keeps what it was told: shut the kernel down and start a new "
    "one (JupyterLab: Kernel > Shut Down Kernel, then Select Kernel), or write "
    "%resume --run ID"
)


def _named(namespace: Mapping[str, Any], settings: Settings | None) -> tuple[object, ...]:
    given = settings or Settings.from_env()
    return (
        given.notebook,
        namespace.get("__session__"),
        given.jupyter_session,
        namespace.get("__vsc_ipynb_file__"),
    )


def notebook_of(namespace: Mapping[str, Any], *, settings: Settings | None = None) -> Path | None:
    """The notebook this kernel runs, or None when no client said (`settings`: those of
    the environment when None)."""
    for candidate in _named(namespace, settings):
        found = _existing(candidate)
        if found is not None:
            return found
    return engine_notebook()


def unknown_notebook(namespace: Mapping[str, Any], *, settings: Settings | None = None) -> str:
    """Why `notebook_of` found nothing, and what to do: the notebook a client named is
    gone (renamed or moved after the kernel started), or no client named one."""
    for candidate in _named(namespace, settings):
        if candidate and str(candidate).endswith(".ipynb"):
            return GONE.format(name=candidate)
    return UNKNOWN


def _existing(candidate: object) -> Path | None:
    """`candidate` as a notebook file: as it is, or relative to a server's root that
    holds the folder the kernel runs in."""
    if not candidate or not str(candidate).endswith(".ipynb"):
        return None
    path = Path(str(candidate))
    if path.is_file():
        return path.absolute()
    here = Path.cwd()
    folders = path.parent.parts
    if not path.is_absolute() and here.parts[len(here.parts) - len(folders) :] == folders:
        inside = here / path.name
        if inside.is_file():
            return inside
    return None


def engine_notebook(pid: int | None = None) -> Path | None:
    """The notebook an executing engine's command line names (nbconvert, papermill,
    `jupyter execute`): the kernel's parent, read from /proc; None elsewhere."""
    parent = pid if pid is not None else os.getppid()
    try:
        args = Path(f"/proc/{parent}/cmdline").read_bytes().decode().split("\0")
        cwd = Path(os.readlink(f"/proc/{parent}/cwd"))
    except (OSError, UnicodeDecodeError):
        return None
    if not any(engine in arg for arg in args[:3] for engine in ENGINES):
        return None
    named = [cwd / arg for arg in args[1:] if arg.endswith(".ipynb")]
    found = [path for path in named if path.is_file()]
    if any("papermill" in arg for arg in args[:3]):
        found = found[:1] if named and found and found[0] == named[0] else []
    return found[0].resolve() if len(found) == 1 else None
