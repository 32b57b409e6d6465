"""stepstone in a real Jupyter server, as JupyterLab and a person use it. The quickstart
notebook, with one slow step (`pause`) added after `make-data`, is run; its kernel is
restarted in the middle of a run; the run after the restart skips what was confirmed
before it and runs the rest. First through the server's REST and kernel WebSocket APIs
(the requests JupyterLab makes), then in JupyterLab itself in headless Chromium, where a
person sees the `%resume` table and each step cell's card (screenshot: with
STEPSTONE_SCREENSHOT=1, docs/jupyterlab.png). The server's log is kept in the test's
tmp folder (`jupyter/server.log`), with the browser's screenshots."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat
import pytest
from browser import browser as headless_browser
from browser import chromium
from conftest import clean_env
from conftest import stepstone_cli as cli

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "quickstart.ipynb"
STEPS = ("make-data", "pause", "summarise", "report")
PAUSE = (
    "%%step pause --check file:data/pause.txt\n"
    "# A slow step: the tests restart the kernel while it sleeps.\n"
    "import pathlib, time\n"
    'print("pausing for 6 s", flush=True)\n'
    "time.sleep(6)\n"
    'pathlib.Path("data/pause.txt").write_text("paused\\n")'
)
SKIPPED = "skipped — evidence verified"
LAB_SETTINGS = {  # JupyterLab's user settings for the browser test
    # no news or update toast over the notebook
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    # every cell in the page, laid out, even when scrolled out of view
    "notebook-extension/tracker": {"windowingMode": "none"},
}


def _notebook_with_a_pause(folder: Path) -> Path:
    """A copy of the quickstart in `folder`, with the slow step `pause` after `make-data`."""
    folder.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    at = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("%%step make-data"))
    notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(PAUSE))
    nbformat.validate(notebook)
    path = folder / NOTEBOOK
    nbformat.write(notebook, path)
    return path


def _needs(module: str) -> None:
    """Skip without `module` here; in CI (where `pip install -e .[test]` brings it), fail."""
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is needed (pip install -e '.[test]')")
        pytest.skip(f"no {module} here (pip install -e '.[test]')")


def _step_name(source: str) -> str | None:
    """The step a cell's source is (`%%step NAME ...`), or None."""
    first = source.splitlines()[0] if source else ""
    return first.split()[1] if first.startswith("%%step ") else None


def _all_verified(folder: Path) -> dict[str, Any]:
    """`stepstone status --json` in `folder`, once it says every step is verified."""
    done = cli("status", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["run"] == "quickstart"
    states = {s["name"]: s["state"] for s in status["steps"]}
    assert states == dict.fromkeys(STEPS, "verified"), states
    return status


# -- a Jupyter server on loopback ----------------------------------------------------


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT/
    token: str
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}


@contextmanager
def _jupyter(root: Path, home: Path, app: str) -> Iterator[Server]:
    """A Jupyter server (`app`: jupyter_server or jupyterlab) serving `root` on a free
    loopback port with token auth, its own Jupyter folders under `home`, opening no
    browser; its output goes to `home/server.log`. Stopped, with its kernels, after."""
    home.mkdir(parents=True, exist_ok=True)
    runtime = home / "runtime"
    for plugin, values in LAB_SETTINGS.items():
        settings = home / "lab-settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(values))
    env = clean_env(
        JUPYTER_RUNTIME_DIR=str(runtime),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "lab-workspaces"),
        IPYTHONDIR=str(home / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
    )
    token = secrets.token_hex(24)
    log = home / "server.log"
    command = [
        sys.executable,
        "-m",
        app,
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=0",  # the system picks a free one; read back from the info file
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        *(["--allow-root"] if os.geteuid() == 0 else []),  # CI's containers run as root
    ]
    with log.open("w") as out:
        server = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its kernels in its process group, stopped with it
        )
    try:
        info = runtime / f"jpserver-{server.pid}.json"
        deadline = time.monotonic() + 60
        while not info.is_file() or not info.read_text().strip():
            assert server.poll() is None, f"the server stopped: {log.read_text()}"
            assert time.monotonic() < deadline, f"no server after 60 s: {log.read_text()}"
            time.sleep(0.1)
        url = f"http://127.0.0.1:{json.loads(info.read_text())['port']}/"
        found = Server(url, token, log)
        _wait_until_up(found, server)
        yield found
    finally:
        _stop(server)


def _wait_until_up(server: Server, process: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"the server stopped: {server.log.read_text()}"
        try:
            if httpx.get(server.url + "api/status", headers=server.headers).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"server not up: {server.log.read_text()}"
        time.sleep(0.1)


def _stop(server: subprocess.Popen[bytes]) -> None:
    """Stop the server (it shuts its kernels down), then anything left in its group."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGKILL)  # a kernel the server left behind


# -- the REST and kernel WebSocket APIs, as JupyterLab uses them ----------------------


@dataclass
class Executed:
    """What one execute_request brought back: the reply and the iopub outputs."""

    reply: dict[str, Any]
    outputs: list[dict[str, Any]]  # iopub messages: display_data, stream, error, ...

    def shown(self) -> list[dict[str, Any]]:
        """The outputs as a front end shows them: an `update_display_data` replaces the
        data of the output of its display id (a step's card, shown as the cell starts,
        is updated so when it ends)."""
        shown: list[dict[str, Any]] = []
        for o in self.outputs:
            display = (o["content"].get("transient") or {}).get("display_id")
            if o["msg_type"] == "update_display_data":
                for earlier in shown:
                    if (earlier["content"].get("transient") or {}).get("display_id") == display:
                        earlier["content"] = {**earlier["content"], "data": o["content"]["data"]}
                continue
            shown.append(dict(o))
        return shown

    def html(self) -> str:
        return "".join(
            o["content"]["data"].get("text/html", "")
            for o in self.shown()
            if o["msg_type"] in ("display_data", "execute_result")
        )

    def text(self) -> str:
        return "".join(
            o["content"]["text"]
            if o["msg_type"] == "stream"
            else o["content"].get("data", {}).get("text/plain", "")
            for o in self.shown()
        )


class Channels:
    """A kernel's channels over the server's WebSocket (Jupyter messaging v5, the JSON
    form: each message a JSON text frame that names its channel)."""

    def __init__(self, server: Server, kernel: str) -> None:
        self.server, self.kernel = server, kernel
        self.session = uuid.uuid4().hex
        self.connection: Any = None

    async def connect(self) -> None:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = self.server.url.replace("http://", "ws://", 1)
        request = HTTPRequest(
            f"{url}api/kernels/{self.kernel}/channels?session_id={self.session}",
            headers=self.server.headers,
        )
        self.connection = await asyncio.wait_for(websocket_connect(request), 30)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    async def send(self, msg_type: str, content: dict[str, Any], channel: str = "shell") -> str:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "session": self.session,
            "username": "stepstone-test",
            "date": datetime.now(timezone.utc).isoformat(),
            "version": "5.3",
        }
        message = {
            "header": header,
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": channel,
            "buffers": [],
        }
        await self.connection.write_message(json.dumps(message))
        return msg_id

    async def receive(self, timeout: float) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.connection.read_message(), timeout)
        assert raw is not None, "the kernel's WebSocket closed"
        return json.loads(raw)

    async def execute(
        self, code: str, *, timeout: float = 60, until: str | None = None
    ) -> Executed:
        """Run `code`; wait for its reply and for the kernel to go idle after it (or,
        with `until`, only until a stream output contains that text)."""
        msg_id = await self.send(
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        found = Executed({}, [])
        idle = False
        deadline = time.monotonic() + timeout
        while not (found.reply and idle):
            message = await self.receive(max(deadline - time.monotonic(), 0.01))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message["msg_type"]
            if message["channel"] == "shell" and kind == "execute_reply":
                found.reply = message["content"]
            elif kind == "status":
                idle = message["content"]["execution_state"] == "idle"
            elif message["channel"] == "iopub" and kind != "execute_input":
                found.outputs.append(message)
                if until is not None and kind == "stream" and until in found.text():
                    return found
        return found

    async def wait_ready(self, timeout: float = 60) -> None:
        """Ask for kernel_info until the kernel answers (after a start or a restart)."""
        deadline = time.monotonic() + timeout
        while True:
            msg_id = await self.send("kernel_info_request", {})
            try:
                while True:
                    left = min(deadline - time.monotonic(), 2.0)
                    assert left > 0, "the kernel did not answer kernel_info"
                    message = await self.receive(left)
                    if (
                        message["msg_type"] == "kernel_info_reply"
                        and message["parent_header"].get("msg_id") == msg_id
                    ):
                        return
            except asyncio.TimeoutError:
                continue


def _code_cells(model: dict[str, Any]) -> list[str]:
    """The sources of a notebook's code cells, from `GET /api/contents/PATH` (content=1)."""
    cells = model["content"]["cells"]
    return [
        c["source"] if isinstance(c["source"], str) else "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code"
    ]


def _cell_name(source: str) -> str:
    """A code cell's name in the tests: its step, `resume` for the `%resume` cell, or
    its source."""
    return _step_name(source) or ("resume" if "%resume" in source else source)


@dataclass
class RestRun:
    """What the REST test saw: the kernel's notebook variables, the run the restart
    cut short (by cell name, up to `pause`), and the run after it."""

    session: str  # JPY_SESSION_NAME | __session__, as a cell printed them
    cut: dict[str, Executed]
    after: dict[str, Executed]


async def _open_session(api: Any) -> tuple[str, str]:
    """What JupyterLab does when it opens the notebook: a session for its path and file
    name (the server gives the kernel JPY_SESSION_NAME, its folder + name); the
    session's id and its kernel's."""
    made = await api.post(
        "api/sessions",
        json={
            "path": NOTEBOOK,
            "name": NOTEBOOK,
            "type": "notebook",
            "kernel": {"name": "python3"},
        },
    )
    assert made.status_code == 201, made.text
    return made.json()["id"], made.json()["kernel"]["id"]


async def _rest_scenario(server: Server, folder: Path) -> RestRun:
    import httpx

    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60) as api:
        _, kernel = await _open_session(api)
        model = await api.get(f"api/contents/{NOTEBOOK}", params={"content": 1, "type": "notebook"})
        assert model.status_code == 200, model.text
        cells = _code_cells(model.json())
        assert [_step_name(c) for c in cells if _step_name(c)] == list(STEPS)

        channels = Channels(server, kernel)
        await channels.connect()
        try:
            await channels.wait_ready()
            session = await channels.execute(
                "import os; print(os.environ.get('JPY_SESSION_NAME'), '|', __session__)"
            )
            cut: dict[str, Executed] = {}
            for source in cells:
                name = _cell_name(source)
                if name == "pause":  # restart the kernel while it sleeps
                    cut[name] = await channels.execute(source, until="pausing for 6 s")
                    break
                cut[name] = await channels.execute(source)
                assert cut[name].reply["status"] == "ok", (source, cut[name].text())
            restarted = await api.post(f"api/kernels/{kernel}/restart")
            assert restarted.status_code == 200, restarted.text
            assert not (folder / "data" / "pause.txt").exists(), "pause ended before the restart"
        finally:
            channels.close()

        channels = Channels(server, kernel)  # a new connection, as after a reconnect
        await channels.connect()
        try:
            await channels.wait_ready()
            after: dict[str, Executed] = {}
            for source in cells:  # every cell in order, stopping at an error as Run All does
                name = _cell_name(source)
                after[name] = await channels.execute(source)
                assert after[name].reply["status"] == "ok", (source, after[name].text())
        finally:
            channels.close()
        return RestRun(session.text().strip(), cut, after)


def test_a_kernel_restarted_mid_run_resumes_over_the_rest_and_websocket_apis(tmp_path: Path):
    _needs("jupyter_server")
    folder = tmp_path / "notebooks"
    _notebook_with_a_pause(folder)
    started = time.monotonic()
    with _jupyter(folder, tmp_path / "jupyter", "jupyter_server") as server:
        seen = asyncio.run(_rest_scenario(server, folder))

    # the kernel knows its notebook through the session the server made
    env, _, namespace = seen.session.partition(" | ")
    assert env == namespace == str(folder / NOTEBOOK), seen.session
    assert "run quickstart</b> (notebook plan)" in seen.cut["resume"].html()
    assert "ran — confirmed" in seen.cut["make-data"].html()
    assert "pausing for 6 s" in seen.cut["pause"].text()

    # after the restart: the table says make-data holds, and its cell is skipped
    table = seen.after["resume"].html()
    assert "<table>" in table and "run quickstart</b> (notebook plan)" in table, table
    states = {row[1]: row[2] for row in _table_rows(table) if len(row) == 4}
    assert states["make-data"] == "verified" and states["pause"] != "verified", table
    made = seen.after["make-data"].html()
    assert 'class="stepstone-outcome stepstone-skipped"' in made and SKIPPED in made, made
    for name in ("pause", "summarise", "report"):
        html = seen.after[name].html()
        assert "stepstone-outcome" in html and "stepstone-skipped" not in html, (name, html)
        assert "ran — confirmed" in html or "ran again — confirmed" in html, (name, html)
    # the last cell reads values the skipped step gave back to the kernel
    last = list(seen.after.values())[-1]
    assert "90 ['ACME', 'GLOBEX', 'INITECH']" in last.text(), last.outputs
    assert (folder / "data" / "pause.txt").read_text() == "paused\n"
    _all_verified(folder)
    assert time.monotonic() - started < 60


def _table_rows(html: str) -> list[list[str]]:
    """The cells' texts of each row of the first HTML table in `html`."""
    import re

    table = html[html.index("<table") : html.index("</table>")]
    return [
        re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]


async def _resume_after_a_rename(server: Server) -> Executed:
    """Start a kernel for quickstart.ipynb, rename the notebook to prices.ipynb as
    JupyterLab does (the file, then the session's path and name), run `%resume`."""
    import httpx

    async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=60) as api:
        session, kernel = await _open_session(api)
        moved = await api.patch(f"api/contents/{NOTEBOOK}", json={"path": "prices.ipynb"})
        assert moved.status_code == 200, moved.text
        renamed = await api.patch(
            f"api/sessions/{session}", json={"path": "prices.ipynb", "name": "prices.ipynb"}
        )
        assert renamed.status_code == 200, renamed.text
        channels = Channels(server, kernel)
        await channels.connect()
        try:
            await channels.wait_ready()
            return await channels.execute("%load_ext stepstone\n%resume")
        finally:
            channels.close()


def test_resume_in_a_notebook_renamed_after_its_kernel_started(tmp_path: Path):
    _needs("jupyter_server")
    folder = tmp_path / "notebooks"
    _notebook_with_a_pause(folder)
    with _jupyter(folder, tmp_path / "jupyter", "jupyter_server") as server:
        resumed = asyncio.run(_resume_after_a_rename(server))
    # the kernel was told quickstart.ipynb when it started, and nothing since: %resume
    # says that notebook is gone and how to start a kernel that knows the new name
    assert resumed.reply["status"] == "error", resumed.outputs
    said = resumed.reply["evalue"]
    assert f"{NOTEBOOK}, which is not there any more" in said, said
    assert "Shut Down Kernel" in said and "not started by" not in said, said


# -- JupyterLab in headless Chromium ---------------------------------------------------


# What the page shows of each code cell: its prompt ("[3]:", "[*]:", "[ ]:"), its
# outputs' HTML and text, and the classes of its stepstone cards.
CELLS_JS = """
return Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Cell.jp-CodeCell'))
  .map(cell => {
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    const outputs = cell.querySelector('.jp-OutputArea');
    return {
      prompt: prompt ? prompt.textContent.trim() : '',
      html: outputs ? outputs.innerHTML : '',
      text: outputs ? outputs.textContent : '',
      badge: (cell.querySelector(':scope > .stepstone-state') || {dataset: {}}).dataset.state,
      cards: Array.from(cell.querySelectorAll('.stepstone-outcome'))
        .map(card => card.className),
      rows: Array.from(cell.querySelectorAll('.jp-OutputArea table tr'))
        .map(row => Array.from(row.cells).map(c => c.textContent.trim())),
      aligns: Array.from(cell.querySelectorAll('.jp-OutputArea table td'))
        .map(c => getComputedStyle(c).textAlign),
    };
  });
"""
SCROLL_TO_TOP_JS = """
for (const panel of document.querySelectorAll('.jp-NotebookPanel .jp-WindowedPanel-outer')) {
  panel.scrollTop = 0;
}
"""
IN_VIEW_JS = """
const box = arguments[0].getBoundingClientRect();
return box.top >= 0 && box.bottom <= window.innerHeight && box.height > 0;
"""


def _cells(browser: Any) -> list[dict[str, Any]]:
    return browser.execute_script(CELLS_JS)


def _by_step(cells: list[dict[str, Any]], sources: list[str]) -> dict[str, dict[str, Any]]:
    """The code cells by step name (the `%resume` cell as `resume`)."""
    found = {}
    for source, cell in zip(sources, cells, strict=True):
        name = _step_name(source) or ("resume" if "%resume" in source else None)
        if name:
            found[name] = cell
    return found


def _status(browser: Any) -> str:
    """The kernel's state as the notebook's toolbar shows it (idle, busy, restarting...)."""
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator")
    return (found[0].get_attribute("data-status") or "") if found else ""


def _menu(browser: Any, menu: str, command: str) -> None:
    """Open the menu bar's `menu` and click the item for `command`."""
    from selenium.common.exceptions import ElementClickInterceptedException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)
    items = browser.find_elements(By.CSS_SELECTOR, "#jp-menu-panel .lm-MenuBar-item")
    (item,) = [i for i in items if i.text.strip() == menu]
    # on a busy machine a notification or a closing dialog may still cover the menu bar:
    # wait until nothing does (an event), not for a time; each second it still does,
    # Escape (what a person would press to be rid of a dialog or a stray menu)
    covering: list[str] = []

    def uncovered(b: Any) -> bool:
        if _clicked(item, ElementClickInterceptedException, covering):
            return True
        if len(covering) % 5 == 0:
            b.switch_to.active_element.send_keys(Keys.ESCAPE)
        return False

    try:
        WebDriverWait(browser, 60, poll_frequency=0.2).until(uncovered)
    except TimeoutException:
        raise AssertionError(
            f"the {menu} menu stayed covered for 60 s: {covering[-1] if covering else ''}"
        ) from None
    entry = wait.until(
        ec.element_to_be_clickable(
            (By.CSS_SELECTOR, f'.lm-Menu .lm-Menu-item[data-command="{command}"]')
        )
    )
    entry.click()
    wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, ".lm-Menu")))


def _clicked(element: Any, covered: type[Exception], said: list[str]) -> bool:
    """Click `element`; False when another element covers it now (what the browser said
    of it appended to `said`)."""
    try:
        element.click()
    except covered as exc:
        said.append(str(exc.msg or exc).splitlines()[0])
        return False
    return True


def _until(browser: Any, condition: Any, what: str, timeout: float = 60) -> Any:
    """Wait for `condition(browser)`; on a timeout, fail saying `what` did not happen and
    what the page showed then (the cells' prompts, the kernel's state)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, timeout, poll_frequency=0.2).until(condition)
    except TimeoutException:
        prompts = [c["prompt"] for c in _cells(browser)]
        raise AssertionError(
            f"{what} (after {timeout} s; prompts {prompts}, kernel {_status(browser)!r})"
        ) from None


def _run_all(browser: Any) -> None:
    """Run All from the Run menu, and wait until a cell has started. On a loaded machine
    the kernel may show idle before it takes requests: when no cell starts within 30 s,
    nothing ran, so Run All is asked once more."""
    for _ in range(2):
        _menu(browser, "Run", "runmenu:run-all")
        try:
            _until(
                browser,
                lambda b: any(c["prompt"] != "[ ]:" for c in _cells(b)) or _status(b) == "busy",
                "no cell started",
                timeout=30,
            )
            return
        except AssertionError:
            continue
    raise AssertionError("Run All started no cell, asked twice")


def _wait_for_a_whole_run(browser: Any, count: int) -> None:
    """Wait until the `count` code cells show execution counts 1, 2, ... in order (the
    run after a restart, or the first: not an earlier run's) and the kernel is idle."""
    wanted = [f"[{i}]:" for i in range(1, count + 1)]
    _until(
        browser,
        lambda b: [c["prompt"] for c in _cells(b)] == wanted and _status(b) == "idle",
        "Run All did not finish",
        timeout=180,  # a loaded machine: the cells take their time, each one at a time
    )


def test_a_person_restarts_the_kernel_mid_run_in_jupyterlab(tmp_path: Path):
    chromium()  # skip early without a browser
    _needs("jupyterlab")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    folder = tmp_path / "notebooks"
    notebook = _notebook_with_a_pause(folder)
    sources = [
        c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"
    ]
    started = time.monotonic()
    with _jupyter(folder, tmp_path / "jupyter", "jupyterlab") as server:
        browser = headless_browser("1400,1800")
        try:
            browser.get(f"{server.url}lab/tree/{NOTEBOOK}?token={server.token}")
            _until(
                browser,
                lambda b: len(_cells(b)) == len(sources) and _status(b) == "idle",
                "the notebook did not open with an idle kernel",
            )
            # room for the notebook: fold the file browser away (click its open tab)
            browser.find_element(
                By.CSS_SELECTOR, ".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current"
            ).click()

            # 1. Run All: every step runs and is confirmed
            _run_all(browser)
            _wait_for_a_whole_run(browser, len(sources))
            steps = _by_step(_cells(browser), sources)
            for name in STEPS:
                assert "ran — confirmed" in steps[name]["text"], (name, steps[name]["text"])
            browser.save_screenshot(str(tmp_path / "1-first-run.png"))

            # 2. pause's file goes, so the next Run All runs pause again: restart the
            # kernel from the Kernel menu while it sleeps
            (folder / "data" / "pause.txt").unlink()
            _menu(browser, "Run", "runmenu:run-all")

            def pausing(b: Any) -> bool:
                now = _by_step(_cells(b), sources)
                return (
                    "stepstone-skipped" in " ".join(now["make-data"]["cards"])
                    and "pausing for 6 s" in now["pause"]["text"]
                    and all("stepstone-running" in c for c in now["pause"]["cards"])
                    # the lab extension's badge: the cell this kernel runs now
                    and now["pause"]["badge"] == "running"
                    and now["make-data"]["badge"] == "verified"
                )

            _until(browser, pausing, "pause did not start")
            browser.save_screenshot(str(tmp_path / "2-pausing.png"))
            _menu(browser, "Kernel", "kernelmenu:restart")
            dialog = _until(
                browser,
                ec.element_to_be_clickable((By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept")),
                "no dialog to confirm the restart",
            )
            assert "Restart" in dialog.text
            dialog.click()
            _until(
                browser,
                ec.invisibility_of_element_located((By.CSS_SELECTOR, ".jp-Dialog")),
                "the restart dialog stayed",
            )
            _until(
                browser,
                lambda b: _status(b) == "idle" and "[*]:" not in [c["prompt"] for c in _cells(b)],
                "the kernel did not come back idle after the restart",
            )
            browser.save_screenshot(str(tmp_path / "3-restarted.png"))
            assert not (folder / "data" / "pause.txt").exists(), "pause ended before the restart"

            # 3. Run All after the restart: what was confirmed is skipped, the rest runs
            _run_all(browser)
            _wait_for_a_whole_run(browser, len(sources))
            cells = _cells(browser)
            steps = _by_step(cells, sources)

            # the %resume cell's table: every step, make-data verified, pause not
            rows = {r[1]: r for r in steps["resume"]["rows"] if len(r) == 4 and r[0] != "#"}
            assert list(rows) == list(STEPS), steps["resume"]["rows"]
            assert rows["make-data"][2] == "verified", rows
            assert rows["pause"][2] != "verified", rows
            assert "run quickstart" in steps["resume"]["text"]
            assert set(steps["resume"]["aligns"]) == {"left"}, steps["resume"]["aligns"]
            # make-data's card: skipped, its evidence verified; the others ran
            assert steps["make-data"]["cards"] == ["stepstone-outcome stepstone-skipped"]
            assert SKIPPED in steps["make-data"]["text"], steps["make-data"]["text"]
            assert "file:data/prices.csv" in steps["make-data"]["text"]
            for name in ("pause", "summarise", "report"):
                (card,) = steps[name]["cards"]
                assert "stepstone-skipped" not in card, (name, card)
                said = steps[name]["text"]
                assert "ran — confirmed" in said or "ran again — confirmed" in said, (name, said)
            # after the restart, each step cell's badge: verified, from the store
            _until(
                browser,
                lambda b: (
                    [_by_step(_cells(b), sources)[n]["badge"] for n in STEPS]
                    == ["verified"] * len(STEPS)
                ),
                "the badges did not show every step verified after the run",
            )
            # the last cell reads values the skipped step gave back to the kernel
            assert "90 ['ACME', 'GLOBEX', 'INITECH']" in cells[-1]["text"], cells[-1]

            # what the screenshot shows: the top of the notebook, with the table and
            # the skipped card in the window
            browser.execute_script(SCROLL_TO_TOP_JS)
            skipped = browser.find_element(By.CSS_SELECTOR, ".stepstone-outcome.stepstone-skipped")
            table = browser.find_element(By.CSS_SELECTOR, ".jp-OutputArea table")
            for shown in (skipped, table):
                assert shown.is_displayed() and browser.execute_script(IN_VIEW_JS, shown)
            shot = tmp_path / "4-after-restart.png"
            assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 50_000
        except BaseException:
            browser.save_screenshot(str(tmp_path / "failed.png"))  # what the page showed
            raise
        finally:
            browser.quit()

    assert (folder / "data" / "pause.txt").read_text() == "paused\n"
    _all_verified(folder)
    assert time.monotonic() - started < 120
    if os.environ.get("STEPSTONE_SCREENSHOT") == "1":
        shutil.copy(shot, ROOT / "docs" / "jupyterlab.png")


# -- the lab extension: each step cell's state, and the panel ---------------------------

BADGES_JS = """
return Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Cell')).map(cell => {
  const badge = cell.querySelector(':scope > .stepstone-state');
  return badge ? [badge.dataset.step, badge.dataset.state, badge.title] : null;
});
"""


def _badges(browser: Any) -> dict[str, tuple[str, str]]:
    """Each step cell's badge: its step's state and the reason shown on hover."""
    found = [b for b in browser.execute_script(BADGES_JS) if b]
    return {step: (state, title) for step, state, title in found}


def _states(browser: Any) -> dict[str, str]:
    return {step: state for step, (state, _) in _badges(browser).items()}


def _open_lab(browser: Any, server: Server, cells: int) -> None:
    browser.get(f"{server.url}lab/tree/{NOTEBOOK}?token={server.token}")
    _until(
        browser,
        lambda b: len(browser.execute_script(BADGES_JS)) == cells and _status(b) == "idle",
        "the notebook did not open with an idle kernel",
    )


def test_after_a_headless_run_each_step_cell_shows_verified_and_the_panel_answers(
    tmp_path: Path,
):
    chromium()
    _needs("jupyterlab")
    from selenium.webdriver.common.by import By

    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, folder / NOTEBOOK)
    done = cli("run", NOTEBOOK, cwd=folder)
    assert done.returncode == 0, done.stderr
    cells = len(nbformat.read(folder / NOTEBOOK, as_version=4).cells)
    shown = ("make-data", "summarise", "report")
    with _jupyter(folder, tmp_path / "jupyter", "jupyterlab") as server:
        browser = headless_browser("1400,1000")
        try:
            _open_lab(browser, server, cells)
            # each step cell, and only those, carries its state
            _until(
                browser,
                lambda b: _states(b) == dict.fromkeys(shown, "verified"),
                "no verified badge on each step cell",
            )
            assert _badges(browser)["make-data"][1].startswith("make-data: verified")
            # the panel, from the left bar: the plan, the decision, the open unknown
            browser.find_element(
                By.CSS_SELECTOR, '.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="stepstone-panel"]'
            ).click()
            panel = _until(
                browser,
                lambda b: (
                    b.find_element(By.ID, "stepstone-panel").is_displayed()
                    and len(b.find_elements(By.CSS_SELECTOR, "#stepstone-panel tr[data-step]")) == 3
                    and b.find_element(By.ID, "stepstone-panel")
                ),
                "the panel did not list the plan",
            )
            rows = panel.find_elements(By.CSS_SELECTOR, "tr[data-step]")
            assert [r.get_attribute("data-step") for r in rows] == list(shown)
            for row in rows:
                badge = row.find_element(By.CSS_SELECTOR, ".stepstone-state")
                assert badge.get_attribute("data-state") == "verified"
            decision = panel.find_element(By.CSS_SELECTOR, 'li[data-key="threshold"]')
            assert "threshold = 105" in decision.text
            assert "run quickstart" in panel.text
            # answer the open unknown from the panel: recorded as the CLI records it
            unknown = panel.find_element(By.CSS_SELECTOR, 'li[data-unknown="U1"]')
            assert unknown.get_attribute("data-state") == "open"
            assert "EUR or USD" in unknown.text
            typed = unknown.find_element(By.CSS_SELECTOR, 'input[aria-label="answer"]')
            typed.send_keys("US")
            time.sleep(4)  # longer than the panel's refresh: what is typed stays
            typed.send_keys("D")
            assert typed.get_attribute("value") == "USD"
            unknown.find_element(By.CSS_SELECTOR, 'input[aria-label="why"]').send_keys(
                "the feed's docs\n"  # Enter answers
            )
            _until(
                browser,
                lambda b: b.find_elements(
                    By.CSS_SELECTOR, '#stepstone-panel li[data-unknown="U1"][data-state="resolved"]'
                ),
                "the answer did not show in the panel",
            )
            assert "USD (the feed's docs)" in browser.find_element(By.ID, "stepstone-panel").text
            # revise the decision from the panel: the open notebook's %decide line follows
            panel = browser.find_element(By.ID, "stepstone-panel")
            decision = panel.find_element(By.CSS_SELECTOR, 'li[data-key="threshold"]')
            decision.find_element(By.CSS_SELECTOR, 'input[aria-label="new value"]').send_keys("110")
            decision.find_element(By.CSS_SELECTOR, 'input[aria-label="why"]').send_keys(
                "more movers\n"
            )
            _until(
                browser,
                lambda b: (
                    _states(b).get("report") == "stale"
                    and "threshold = 110" in b.find_element(By.ID, "stepstone-panel").text
                ),
                "the revision did not show",
            )
            assert "threshold changed 105 → 110" in _badges(browser)["report"][1]
            assert "105 — mean of the feed" in browser.find_element(By.ID, "stepstone-panel").text
            _until(
                browser,
                lambda b: "%decide threshold=110" in b.find_element(By.TAG_NAME, "body").text,
                "the open notebook's %decide line did not follow the revision",
            )
            # re-run asks why, as `stepstone rerun --why` does
            panel = browser.find_element(By.ID, "stepstone-panel")
            panel.find_element(
                By.CSS_SELECTOR, 'tr[data-step="summarise"] .stepstone-rerun'
            ).click()
            asked = _until(
                browser,
                lambda b: b.find_elements(By.CSS_SELECTOR, ".jp-Dialog input"),
                "re-run asked no reason",
            )
            asked[0].send_keys("new prices")
            browser.find_element(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept").click()
            _until(
                browser,
                lambda b: _states(b).get("summarise") == "stale",
                "summarise not stale after re-run",
            )
            assert "new prices" in _badges(browser)["summarise"][1]
            shot = tmp_path / "panel.png"
            assert browser.save_screenshot(str(shot))
        except BaseException:
            browser.save_screenshot(str(tmp_path / "failed.png"))
            raise
        finally:
            browser.quit()
    status = json.loads(cli("status", "--json", cwd=folder).stdout)
    (u1,) = status["unknowns"]
    assert (u1["state"], u1["answer"], u1["why"]) == ("resolved", "USD", "the feed's docs")
    said = cli("log", "--json", cwd=folder)
    assert [e["via"] for e in json.loads(said.stdout)[:3]] == ["jupyterlab"] * 3
    assert status["decisions"][0]["value"] == "110"
    if os.environ.get("STEPSTONE_SCREENSHOT") == "1":
        shutil.copy(shot, ROOT / "docs" / "jupyterlab-panel.png")


def _all_verified_of(folder: Path, steps: tuple[str, ...]) -> dict[str, Any]:
    done = cli("status", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert {s["name"]: s["state"] for s in status["steps"]} == dict.fromkeys(steps, "verified")
    return status


def test_the_badges_follow_a_headless_run_live(tmp_path: Path):
    chromium()
    _needs("jupyterlab")
    folder = tmp_path / "notebooks"
    notebook = _notebook_with_a_pause(folder)
    done = cli("run", NOTEBOOK, cwd=folder)
    assert done.returncode == 0, done.stderr
    (folder / "data" / "pause.txt").unlink()  # pause runs again at the next run
    cells = len(nbformat.read(notebook, as_version=4).cells)
    with _jupyter(folder, tmp_path / "jupyter", "jupyterlab") as server:
        browser = headless_browser("1400,1000")
        run = None
        try:
            _open_lab(browser, server, cells)
            _until(
                browser,
                lambda b: _states(b).get("pause") == "stale",
                "pause, whose file is gone, not shown stale",
            )
            assert "data/pause.txt" in _badges(browser)["pause"][1], _badges(browser)
            assert _states(browser)["make-data"] == "verified"
            said = tmp_path / "run.log"
            with said.open("w") as out:
                run = subprocess.Popen(
                    [sys.executable, "-m", "stepstone", "run", NOTEBOOK],
                    cwd=folder,
                    env=clean_env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            _until(
                browser,
                lambda b: (
                    _states(b).get("pause") == "running"
                    and _states(b).get("make-data") == "skipped"
                ),
                "the badges did not show pause running after make-data was skipped",
            )
            assert run.wait(timeout=120) == 0, said.read_text()
            _until(
                browser,
                lambda b: set(_states(b).values()) == {"verified"} and len(_states(b)) == 4,
                "the badges did not come back verified after the run",
            )
        except BaseException:
            browser.save_screenshot(str(tmp_path / "failed.png"))
            raise
        finally:
            browser.quit()
            if run is not None and run.poll() is None:
                run.kill()


def test_the_server_extension_reads_and_steers_the_run_as_the_command_line_does(
    tmp_path: Path,
):
    import httpx

    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, folder / NOTEBOOK)
    (tmp_path / "outside.ipynb").write_text("{}")
    assert cli("run", NOTEBOOK, cwd=folder).returncode == 0
    with _jupyter(folder, tmp_path / "jupyter", "jupyter_server") as server:
        api = f"{server.url}stepstone/"

        def read() -> dict[str, Any]:
            got = httpx.get(api + "run", params={"path": NOTEBOOK}, headers=server.headers)
            assert got.status_code == 200, got.text
            return dict(got.json())

        def act(**given: Any) -> httpx.Response:
            body = json.dumps({"path": NOTEBOOK, **given})
            return httpx.post(api + "action", content=body, headers=server.headers)

        shown = read()
        steps = {c["step"]: c["state"] for c in shown["cells"] if c["step"]}
        assert steps == dict.fromkeys(("make-data", "summarise", "report"), "verified")
        assert shown["run"] == "quickstart"
        assert [d["key"] for d in shown["decisions"]] == ["threshold"]
        assert shown["decisions"][0]["history"][0]["value"] == "105"
        # a refusal: the command line's words, and nothing recorded
        refused = act(action="decide", key="treshold", value="90", why="typo", revise=True)
        assert refused.status_code == 400
        said = cli("decide", "treshold", "90", "--why", "typo", "--revise", cwd=folder)
        assert said.returncode == 2
        assert refused.json()["message"] in said.stderr
        assert refused.json()["error"] == "InvalidInput"
        # a revision: the reader runs again, as `stepstone decide --revise` says
        revised = act(action="decide", key="threshold", value="90", why="more movers")
        assert revised.status_code == 200, revised.text
        assert revised.json()["runs_again"] == ["report"]
        shown = read()
        states = {c["step"]: (c["state"], c["reason"]) for c in shown["cells"] if c["step"]}
        assert states["report"][0] == "stale" and "threshold" in states["report"][1], states
        assert [h["value"] for h in shown["decisions"][0]["history"]] == ["105", "90"]
        assert shown["timeline"][0]["via"] == "jupyterlab"
        # an empty answer is refused, here as on the command line
        empty = act(action="answer", unknown="U1", text=" ")
        assert empty.status_code == 400 and "is empty" in empty.json()["message"]
        assert cli("answer", "U1", "", cwd=folder).returncode == 2
        # a path outside the server's folder is not read
        outside = httpx.get(
            api + "run", params={"path": "../outside.ipynb"}, headers=server.headers
        )
        assert outside.status_code == 403
        assert httpx.get(api + "run", params={"path": NOTEBOOK}).status_code == 403  # no token


def test_each_cell_of_a_cells_run_carries_its_state(tmp_path: Path):
    import httpx

    folder = tmp_path / "notebooks"
    folder.mkdir()
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    book.cells = [
        nbformat.v4.new_markdown_cell("# plain cells, each a step"),
        nbformat.v4.new_code_cell("x = 2"),
        nbformat.v4.new_code_cell("print(x * 21)"),
    ]
    nbformat.write(book, str(folder / "plain.ipynb"))
    done = cli("run", "plain.ipynb", cwd=folder)
    assert done.returncode == 0, done.stderr
    with _jupyter(folder, tmp_path / "jupyter", "jupyter_server") as server:
        got = httpx.get(
            f"{server.url}stepstone/run", params={"path": "plain.ipynb"}, headers=server.headers
        )
    assert got.status_code == 200, got.text
    cells = got.json()["cells"]
    assert [(c["step"], c["state"]) for c in cells] == [
        (None, None),
        ("cell-1", "verified"),
        ("cell-2", "verified"),
    ]
