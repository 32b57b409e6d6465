"""The Jupyter server's routes for the lab extension, under `BASE/stepstone/`:

    GET  run?path=NOTEBOOK            the notebook's run as `view.shown` reads it
    POST action {path, action, ...}   one of the panel's actions (`view.act`)

`NOTEBOOK` is the notebook's path in the server's contents (as JupyterLab names it). A
refusal answers 409 with its name and message, as `stepstone` prints it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..errors import InvalidInput, StepstoneError
from . import view


class _RunHandler(APIHandler):
    def _notebook(self, path: str) -> Path:
        root = Path(self.settings["server_root_dir"]).expanduser().resolve()
        notebook = (root / path.lstrip("/")).resolve()
        if root != notebook and root not in notebook.parents:
            raise web.HTTPError(403, "the notebook is outside the server's root folder")
        return notebook

    async def _answer(self, work: Any) -> None:
        try:
            found = await asyncio.to_thread(work)
        except StepstoneError as exc:
            self.set_status(409 if not isinstance(exc, InvalidInput) else 400)
            self.finish(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            return
        self.finish(json.dumps(found, default=str))

    @web.authenticated
    async def get(self) -> None:
        notebook = self._notebook(self.get_argument("path"))
        await self._answer(lambda: view.shown(notebook))

    @web.authenticated
    async def post(self) -> None:
        given = self.get_json_body() or {}
        notebook = self._notebook(str(given.get("path", "")))
        action = str(given.get("action", ""))
        await self._answer(lambda: view.act(notebook, action, given))


def register(server_app: Any) -> None:
    """Add the routes to the running server."""
    app = server_app.web_app
    base = url_path_join(app.settings["base_url"], "stepstone")
    app.add_handlers(
        ".*$",
        [(url_path_join(base, "run"), _RunHandler), (url_path_join(base, "action"), _RunHandler)],
    )
