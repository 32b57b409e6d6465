"""`stepstone verify --replay`: the oracle of docs/reliability.md as a feature. The run's
notebook runs again, plainly (nbclient, as papermill runs it), in a scratch folder that
holds the run's folder as it is now without the files its steps wrote, with the
parameters the run was made with; then what each step's record says it displayed and
the files the steps wrote are compared with what the fresh run displayed and wrote.
The certificate says the run reproduces, or lists each difference.

A run with effects is not replayed: a fresh run would send them again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..rules.dependencies import file_digest
from ..settings import NOTEBOOK_ENV, child_environment
from .notebook import CARD, hash_seed
from .notebook_plan import read_notebook, step_cells
from .parameters import inject

RECORD = "replayed.json"  # where the last certificate goes in the run's tree
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass
class Certificate:
    """What a replay found: equal, or the differences, in words."""

    run: str
    notebook: str
    steps: int = 0  # step cells compared
    files: int = 0  # files the steps wrote, compared
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return not self.differences

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "notebook": self.notebook,
            "equal": self.equal,
            "steps": self.steps,
            "files": self.files,
            "differences": self.differences,
            "seconds": round(self.seconds, 1),
        }

    def lines(self) -> list[str]:
        head = (
            f"run {self.run} reproduces: a fresh run of {self.notebook} displayed what its "
            f"{self.steps} steps recorded and wrote its {self.files} files alike"
            if self.equal
            else f"run {self.run} does not reproduce ({len(self.differences)} differences "
            f"from a fresh run of {self.notebook}):"
        )
        return [head, *(f"  - {d}" for d in self.differences)]


def _shown(outputs: list[dict[str, Any]]) -> list[Any]:
    """Outputs as compared: a stream's text, an error's name, a value's text and whether
    it has an image (pixels differ by renderer), addresses taken out."""
    found: list[Any] = []
    for out in outputs:
        kind = out.get("output_type") or out.get("msg_type")
        content = out.get("content", out)
        if CARD in (content.get("metadata") or {}):
            continue  # stepstone's own card: not the cell's output
        if kind == "stream":
            text = "".join(content.get("text", ""))
            if found and found[-1][0] == "stream" and found[-1][1] == content.get("name"):
                found[-1] = ("stream", content.get("name"), found[-1][2] + text)
            else:
                found.append(("stream", content.get("name"), text))
        elif kind == "error":
            found.append(("error", content.get("ename")))
        elif kind in ("execute_result", "display_data"):
            data = content.get("data", {})
            plain = "".join(data.get("text/plain", ""))
            if plain.startswith("<Figure size"):
                plain = "<Figure>"
            found.append(("value", _ADDRESS.sub(" at 0x", plain), "image/png" in data))
    return found


def _copy_inputs(workdir: Path, scratch: Path, written: set[str], notebook: str) -> None:
    """The run's folder into `scratch`, without hidden files, notebooks other than the
    run's own, and the files its steps wrote (the fresh run makes them)."""
    for folder, subfolders, files in os.walk(workdir):
        subfolders[:] = [s for s in subfolders if not s.startswith(".") and s != "__pycache__"]
        here = Path(folder)
        for name in files:
            rel = (here / name).relative_to(workdir).as_posix()
            if name.startswith(".") or rel in written:
                continue
            if name.endswith(".ipynb") and rel != notebook:
                continue
            target = scratch / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(here / name, target)


def replay(view: Any, workdir: Path, *, timeout: float | None = None) -> Certificate:
    """Run `view`'s notebook fresh in a scratch folder and compare (see the module)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    info = view.info
    if not info.notebook:
        raise InvalidInput(
            f"run {view.id} has no notebook to replay (a Python-API run): verify --replay "
            f"re-runs a notebook's run"
        )
    if view.effects:
        raise InvalidInput(
            f"run {view.id} has {len(view.effects)} effects, which a fresh run would send "
            f"again: verify --replay replays runs without effects"
        )
    started = time.monotonic()
    cert = Certificate(view.id, info.notebook)
    records = view.records
    written = set(records.table.writers())
    scratch = Path(tempfile.mkdtemp(prefix="stepstone-replay-"))
    try:
        _copy_inputs(workdir, scratch, written, info.notebook)
        path = scratch / info.notebook
        nb = read_notebook(path)
        if info.parameters:
            inject(nb, json.loads(info.parameters))
        env = {k: v for k, v in child_environment().items() if not k.startswith("STEPSTONE_")}
        env.setdefault("PYTHONHASHSEED", hash_seed(view.id))
        env[NOTEBOOK_ENV] = str(path)  # a notebook with `%resume` runs it on a store of its own
        kernel = (nb.metadata.get("kernelspec") or {}).get("name") or "python3"
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name=kernel,
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute(env=env)
        except CellExecutionError as exc:
            said = [line for line in str(exc).strip().splitlines() if line.strip("- ")]
            cert.differences.append(
                f"the fresh run failed: {said[-1] if said else type(exc).__name__}"
            )
        for _, parts, cell in step_cells(nb, cells=info.cells):
            if parts is None:
                continue
            name = parts[0].split()[0]
            record = records.get(name)
            if record is None or record.status != "confirmed":
                continue
            cert.steps += 1
            kept = view.kernel_part(record).get("displayed")
            if kept is None:
                continue  # what it displayed was not kept (too large): not compared
            ours = _shown([o for o in kept if o.get("msg_type") != "clear_output"])
            fresh = _shown(cell.get("outputs", []))
            if ours != fresh:
                cert.differences.append(
                    f"step {name} displayed {_said(ours)}; the fresh run {_said(fresh)}"
                )
        for rel in sorted(written):
            here, there = file_digest(workdir / rel), file_digest(scratch / rel)
            if here is None and there is None:
                continue
            cert.files += 1
            if here != there:
                gone = "is not there" if here is None else "differs from the fresh run's"
                made = "" if there is not None else " (the fresh run did not write it)"
                cert.differences.append(f"the file {rel} {gone}{made}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cert.seconds = time.monotonic() - started
    return cert


def _said(shown: list[Any]) -> str:
    text = "; ".join(f"{s[1]}: {s[2]!r}" if s[0] == "stream" else f"{s[0]} {s[1]!r}" for s in shown)
    return text[:300] or "nothing"
