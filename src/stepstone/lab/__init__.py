"""stepstone in JupyterLab: the prebuilt lab extension shipped in this package
(`labextension/`, built from `labextension/` at the project's root) and the Jupyter
server extension it talks to (`handlers.py`). `pip install stepstone` enables both;
`jupyter lab` shows each step cell's state and the panel (docs/jupyterlab.md)."""

from __future__ import annotations

from typing import Any


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "stepstone-labextension"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "stepstone.lab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from .handlers import register

    register(server_app)
