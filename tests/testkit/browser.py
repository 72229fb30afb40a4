"""Helpers of tests/notebooks/test_browser.py: a JupyterLab server and a Chromium per test process, a copy of a
notebook per test, and a Playwright page that works that notebook as a person does (Run All, a
slider moved with the keyboard).

Every wait here is a hang guard (minutes), never a statement about speed: the tests assert what
the notebooks promise, however slow the machine. Playwright is imported by the tests, not here,
so this module imports without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# flags for a closed network: no background connections, no component updates, no GPU
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1400, "height": 1500}
# s: the longest any single wait may take before the test calls it a hang (never a speed bound)
HANG = float(os.environ.get("QAE_LAB_BROWSER_HANG", "900"))
STDERR = "application/vnd.jupyter.stderr"  # JupyterLab renders stderr streams and errors (tracebacks) with it


def artifacts_dir() -> Path:
    """``$QAE_LAB_ARTIFACTS`` (default ``<repo>/.artifacts``), created."""
    out = Path(os.environ.get("QAE_LAB_ARTIFACTS", REPO / ".artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, poll: float = 0.5):
    """``predicate()``'s first truthy value; AssertionError after ``timeout`` s (a hang guard)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"no {what} after {timeout:.0f} s (a hang guard, not a speed limit)")


def slide_to(page, slider, target: str, timeout: float) -> None:
    """Move the ipywidgets slider ``slider`` (a locator) until its readout reads ``target``, as a person does: focus
    the handle, press one arrow key, look at the readout. A press the page drops (the slider re-drawn by a message
    from the kernel takes the focus with it) is pressed again on a fresh focus; a press that lands late and passes
    the target is pressed back. Each look waits twice as long as the last (from 1 s) before pressing again, so a
    slow page slows the moves down instead of failing them; ``timeout`` is the hang guard."""
    readout = slider.locator(".widget-readout")
    deadline, patience = time.monotonic() + timeout, 1.0
    while time.monotonic() < deadline:
        now = readout.inner_text().strip()
        if now == target:
            return
        slider.locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight" if float(now) < float(target) else "ArrowLeft")
        look = time.monotonic() + patience
        while time.monotonic() < min(look, deadline) and readout.inner_text().strip() == now:
            time.sleep(0.1)
        if readout.inner_text().strip() == now:
            patience *= 2  # nothing moved: the press was lost or the page is slow; look longer next time
    raise AssertionError(f"no readout {target} after {timeout:.0f} s (a hang guard, not a speed limit)")


class LabServer:
    """One JupyterLab server on 127.0.0.1 with token auth, serving ``<base>/lab``: started once per test
    process and shared by its browser tests (each opens its own copy of a notebook: :meth:`notebook`).

    A notebook's kernel gets the environment its test asks for through a kernelspec of its own
    (``<base>/jupyter/kernels/qae-<hash>/kernel.json``, named in the copy's metadata): the server's
    environment plus the test's. Config, settings and workspaces live under ``base`` (no news or
    update pop-ups).
    """

    def __init__(self, base: Path):
        self.root, self.kernels = base / "lab", base / "jupyter" / "kernels"
        self.root.mkdir(parents=True)
        self.kernels.mkdir(parents=True)
        # notebooks 05 and 06 look for data/reference_runs upwards from their folder
        # (qae_lab.analysis.compare.find_reference_runs): one link for every copy, however qae_lab is installed
        (self.root / "data").symlink_to(REPO / "data", target_is_directory=True)
        self.token, port = secrets.token_hex(16), free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_PATH": str(base / "jupyter"),
            "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        }
        env.pop("QAE_LAB_HEADLESS", None)  # somebody (the browser) is at these notebooks: nothing may block
        notes = base / "settings" / "@jupyterlab" / "apputils-extension"  # no news / update pop-ups
        notes.mkdir(parents=True)
        (notes / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            "--ServerApp.terminals_enabled=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        self.log = base / "jupyter.log"
        self._log = self.log.open("w")
        self.process = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.root)
        self.opened = 0
        try:
            wait_until(self._up, HANG, "JupyterLab answering")
        except BaseException:
            self.close()
            raise

    def _api(self, method: str, path: str):
        request = urllib.request.Request(
            f"{self.url}/api/{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def _up(self) -> bool:
        try:
            self._api("GET", "status")
            return True
        except OSError:
            if self.process.poll() is not None:
                raise AssertionError("JupyterLab exited:\n" + self.log.read_text()[-3000:]) from None
            return False

    def kernelspec(self, env: dict[str, str]) -> dict[str, str]:
        """A Python kernelspec whose kernels run with ``env`` added to the server's environment, written
        once; returns what a notebook's ``metadata.kernelspec`` names it by."""
        name = "qae-" + hashlib.sha1(json.dumps(env, sort_keys=True).encode()).hexdigest()[:12]
        named = {"name": name, "display_name": f"Python 3 ({name})", "language": "python"}
        spec = self.kernels / name / "kernel.json"
        if not spec.exists():
            spec.parent.mkdir()
            argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            spec.write_text(
                json.dumps({"argv": argv, "display_name": named["display_name"], "language": "python", "env": env})
            )
        return named

    @contextmanager
    def notebook(self, notebook: str, env: dict[str, str]):
        """A copy of ``notebooks/<notebook>`` in a folder of its own (what it writes, such as notebook
        04's ``runs/``, stays there), set to open with a kernel that has ``env``. Yields
        ``{"path", "root", "log", "kernel"}``: the copy's path under the server's root, its folder, the
        server's log, the kernelspec's name. On leaving, every kernel of the server is shut down."""
        self.opened += 1
        root = self.root / f"{self.opened:02d}-{notebook[:2]}"
        root.mkdir()
        nb = json.loads((REPO / "notebooks" / notebook).read_text())
        spec = self.kernelspec(env)
        nb.setdefault("metadata", {})["kernelspec"] = spec
        (root / notebook).write_text(json.dumps(nb))
        try:
            yield {"path": f"{root.name}/{notebook}", "root": root, "log": self.log, "kernel": spec["name"]}
        finally:
            self.shutdown_kernels()

    def shutdown_kernels(self) -> None:
        """Shut down every kernel the server runs (its notebooks' sessions included); wait until they are gone."""
        for session in self._api("GET", "sessions"):
            self._api("DELETE", f"sessions/{session['id']}")
        for kernel in self._api("GET", "kernels"):
            self._api("DELETE", f"kernels/{kernel['id']}")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
        self._log.close()


@contextmanager
def chromium():
    """A headless Chromium (Debian's chromium, driven by Playwright); pages from :func:`new_page`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class LabApp:
    """JupyterLab open in a headless Chromium page, shared by a test process's browser tests: the app
    loads once, and each test opens its notebook in it (:meth:`open`) as a person opens a file, then
    closes it. A test that fails leaves the page behind: the next one loads the app afresh.
    """

    def __init__(self, browser, server: LabServer):
        self.browser, self.server, self.context, self.page, self.loads = browser, server, None, None, 0

    def _load(self) -> None:
        self.context = self.browser.new_context(viewport=VIEWPORT)
        page = self.context.new_page()
        page.set_default_timeout(HANG * 1000)
        self.loads += 1  # a fresh workspace: nothing of an earlier load is restored
        page.goto(f"{self.server.url}/lab/workspaces/tests{self.loads}?token={self.server.token}")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.serviceManager.isReady"
            " && document.querySelector('.jp-DirListing')"
        )
        # the figure reader and the cell finders, as a page script; the file browser closed: a wider notebook
        page.add_script_tag(content=f"window.__qaeFigure = {_JS_FIGURE};\n{_JS_CELL_FINDERS}")
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        self.page = page

    def _drop(self) -> None:
        if self.context is not None:
            self.context.close()
        self.context = self.page = None

    @contextmanager
    def open(self, notebook: str, env: dict[str, str], screenshot: str):
        """Open a fresh copy of ``notebooks/<notebook>`` whose kernel has ``env`` (:meth:`LabServer.notebook`);
        yields ``(Notebook, {"path", "root", "log", "kernel"})``. On an exception inside:
        ``<artifacts>/<screenshot>_failure.png``, then the exception."""
        with self.server.notebook(notebook, env) as opened:
            if self.page is None:
                self._load()
            done = False
            try:
                nb = Notebook(self.page, opened["path"], notebook, opened["kernel"])
                yield nb, opened
                done = True
            except BaseException:
                try:
                    self.page.screenshot(path=str(artifacts_dir() / f"{screenshot}_failure.png"))
                except Exception as err:  # noqa: BLE001 (the page itself may be what failed: keep the first error)
                    print(f"no failure screenshot: {err}", file=sys.stderr)
                raise
            finally:
                if done:  # the notebook's kernel shut down and its panel closed (no "save changes?" question)
                    self.page.evaluate("() => window.__nb.sessionContext.shutdown().then(() => window.__nb.dispose())")
                else:
                    self._drop()

    def close(self) -> None:
        self._drop()


# ------------------------------------------------------------------ JavaScript run in the page
# ``window.__nb`` is the NotebookPanel under test (kept: the current widget may change focus).

# the cell whose source holds marker (undefined if none), and its index (-1): how the tests name a cell
_JS_CELL_FINDERS = """window.__qaeCellIndex = m => window.__nb.content.widgets.findIndex(
    c => c.model.sharedModel.getSource().includes(m));
window.__qaeCell = m => window.__nb.content.widgets[window.__qaeCellIndex(m)];"""

_JS_KERNEL_IDLE = """() => { const s = window.__nb && window.__nb.sessionContext.session;
    return !!(s && s.kernel && s.kernel.status === 'idle'); }"""

# Run All has ended: the kernel is idle, no cell waits ([*]) and every code cell ran, or one
# failed (Run All stops at an error, leaving the cells below it unrun).
_JS_RUN_ALL_DONE = """() => {
    const s = window.__nb.sessionContext.session;
    if (!s || !s.kernel || s.kernel.status !== 'idle') return false;
    const code = window.__nb.content.widgets.filter(c => c.model.type === 'code');
    if (code.some(c => ((c.node.querySelector('.jp-InputArea-prompt') || {}).textContent || '').includes('*')))
        return false;
    const failed = code.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
    return failed || code.every(c => c.model.executionCount !== null);
}"""

# every error shown: outputs rendered as stderr (stderr streams, tracebacks), anywhere on the page
# (cell outputs, Output widgets such as a live run's message area), and the cells' error / stderr
# outputs in the notebook model (the same, read where the notebook keeps them)
_JS_ERRORS = """() => {
    const cells = window.__nb.content.widgets;
    const where = el => { const c = el.closest('.jp-Cell'); const i = cells.findIndex(w => w.node === c);
                          return i < 0 ? 'outside the notebook' : `cell ${i}`; };
    const shown = [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="STDERR"]')]
        .map(el => `${where(el)} shows stderr/error output:\\n${el.textContent.slice(0, 3000)}`);
    const kept = [];
    cells.forEach((c, i) => { if (c.model.type !== 'code') return;
        for (const o of c.model.outputs.toJSON()) {
            if (o.output_type === 'error')
                kept.push(`cell ${i} has an error output: ${o.ename}: ${o.evalue}\\n${(o.traceback || []).join('\\n')
                    .replace(/\\u001b\\[[0-9;]*m/g, '').slice(-3000)}`);
            else if (o.output_type === 'stream' && o.name === 'stderr')
                kept.push(`cell ${i} has stderr output: ${[].concat(o.text).join('').slice(0, 3000)}`);
        } });
    return [...shown, ...kept];
}""".replace("STDERR", STDERR)

# a plotly figure as drawn: its main svg's size, the trace elements in its plot area, its title
_JS_FIGURE = """el => {
    const svg = el.querySelector('svg.main-svg');
    // marks in the plot area: lines, markers, fills and bars with a shape, heatmap images with a size, table text
    const shaped = e => (e.getAttribute('d') || '').replace(/[MZ0,.\\s]/g, '') !== '';
    const sized = e => +e.getAttribute('width') > 0 && +e.getAttribute('height') > 0;
    const drawn = [...el.querySelectorAll('.scatterlayer .trace path, .barlayer .trace path')].filter(shaped).length
                  + [...el.querySelectorAll('.heatmaplayer image')].filter(sized).length
                  + [...el.querySelectorAll('.table .cell-text')].filter(e => e.textContent).length;  // a table
    const title = ((el.querySelector('.gtitle') || {}).textContent || '');
    const c = el.closest('.jp-Cell'); const cell = window.__nb.content.widgets.findIndex(w => w.node === c);
    return {cell, title, traces: (el.data || []).length, drawn,
            width: svg ? +svg.getAttribute('width') : 0, height: svg ? +svg.getAttribute('height') : 0};
}"""

_JS_FIGURES = "() => [...document.querySelectorAll('.js-plotly-plot')].map(window.__qaeFigure)"

# a fingerprint of the figure under a control: its title and its traces' data
_JS_FINGERPRINT = """(id) => {
    const view = document.querySelector(`[data-qae-view="${id}"]`);
    const el = view && view.querySelector('.js-plotly-plot');
    if (!el || !el.data) return null;
    const s = JSON.stringify([(el.querySelector('.gtitle') || {}).textContent || '', el.data.map(
        t => [t.name, t.type, t.x, t.y, t.z, t.text])]);
    let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return `${h}:${s.length}:${((el.querySelector('.gtitle') || {}).textContent || '')}`;
}"""

# find the control labelled ``label`` in the cell whose source holds ``marker``; tag it and the
# box it sits in (widgets.interactive: a VBox of [HBox of controls, figure]) with data attributes
_JS_TAG_CONTROL = """([marker, label, id]) => {
    const cell = window.__qaeCell(marker);
    if (!cell) return `no cell holds ${marker}`;
    const controls = [...cell.node.querySelectorAll('.widget-slider, .widget-dropdown, .widget-toggle-buttons')];
    const control = controls.find(c => (c.querySelector('.widget-label') || {}).textContent === label);
    if (!control) return `no control labelled ${label} in that cell; labels: ${controls.map(
        c => (c.querySelector('.widget-label') || {}).textContent)}`;
    control.setAttribute('data-qae-control', id);
    control.parentElement.parentElement.setAttribute('data-qae-view', id);
    return '';
}"""

# run code in the notebook's kernel; its stdout, and the error it raised
_JS_EXECUTE = """async (code) => {
    const kernel = window.__nb.sessionContext.session.kernel;
    const future = kernel.requestExecute({code, store_history: false});
    let out = '', err = '';
    future.onIOPub = msg => {
        const t = msg.header.msg_type;
        if (t === 'stream') (msg.content.name === 'stdout' ? (out += msg.content.text) : (err += msg.content.text));
        else if (t === 'error') err += `${msg.content.ename}: ${msg.content.evalue}`;
    };
    await future.done;
    return {out, err};
}"""

_JS_HEADINGS = """() => [...document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown h2')].map(
    (h, i) => { h.setAttribute('data-qae-heading', i); return h.textContent.replace('¶', '').trim(); })"""


class Notebook:
    """The notebook open in a JupyterLab page, worked as a person works it."""

    def __init__(self, page, path: str, name: str, kernel: str):
        """Open ``path`` (under the server's root) in the JupyterLab app on ``page``, as File > Open does;
        wait until its kernel is idle, and check that it is the kernelspec ``kernel`` named in its metadata."""
        self.page, self.name = page, name
        page.evaluate(
            "async (p) => { await window.jupyterapp.serviceManager.kernelspecs.refreshSpecs();"
            " await window.jupyterapp.commands.execute('docmanager:open', {path: p}); }",
            path,
        )
        page.wait_for_function(
            "(p) => { const w = window.jupyterapp.shell.currentWidget;"
            " return w && w.context && w.context.path === p && w.sessionContext"
            " && w.node.querySelector('.jp-Notebook .jp-Cell'); }",
            arg=path,
        )
        page.evaluate("() => { window.__nb = window.jupyterapp.shell.currentWidget; }")
        page.wait_for_function(_JS_KERNEL_IDLE)  # the kernel is up before Run All
        running = page.evaluate("() => window.__nb.sessionContext.session.kernel.name")
        assert running == kernel, f"{name}: opened with the kernel {running!r}, not its own {kernel!r}"

    def run_all(self) -> None:
        """Run > Run All Cells, then wait until it has ended (every cell ran, or one failed)."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        self.page.wait_for_function(
            "() => window.__nb.content.widgets.some(c => c.model.type === 'code' && c.model.executionCount !== null)",
            timeout=HANG * 1000,
        )
        # twice in a row, a second apart: an idle kernel between two queued cells is not the end
        for _ in range(2):
            self.page.wait_for_function(_JS_RUN_ALL_DONE, timeout=HANG * 1000, polling=500)
            time.sleep(1)

    def scroll_to(self, marker: str) -> None:
        """Scroll the outputs of the cell whose source holds ``marker`` to the top (Run All leaves the
        notebook at its last cell; off-screen cells are not laid out, so a person scrolls up)."""
        found = self.page.evaluate(
            "(m) => { const c = window.__qaeCell(m);"
            " if (!c) return false; (c.node.querySelector('.jp-Cell-outputArea') || c.node)"
            ".scrollIntoView({block: 'start'}); return true; }",
            marker,
        )
        assert found, f"{self.name}: no cell holds {marker!r}"
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def run_cell(self, marker: str) -> None:
        """Select the cell whose source holds ``marker`` and run it (Shift+Enter's command); wait until it ran."""
        before = self.page.evaluate(
            "(m) => { const nb = window.__nb.content; const i = window.__qaeCellIndex(m); if (i < 0) return null;"
            " nb.activeCellIndex = i; const n = nb.widgets[i].model.executionCount;"
            " window.jupyterapp.commands.execute('notebook:run-cell'); return n; }",
            marker,
        )
        assert before is not None or self.page.evaluate("(m) => window.__qaeCellIndex(m) >= 0", marker), (
            f"{self.name}: no cell holds {marker!r}"
        )
        self.page.wait_for_function(
            "([m, n]) => { const c = window.__qaeCell(m); return c.model.executionCount !== n"
            " && !((c.node.querySelector('.jp-InputArea-prompt') || {}).textContent || '').includes('*'); }",
            arg=[marker, before],
            timeout=HANG * 1000,
        )

    def save(self) -> None:
        """File > Save: the notebook, with its outputs, written to its file."""
        self.page.evaluate("() => window.__nb.context.save()")

    def errors(self) -> list[str]:
        """Every stderr or error output, on the page and in the notebook model."""
        return self.page.evaluate(_JS_ERRORS)

    def figures(self) -> list[dict]:
        """Every plotly figure on the page: cell, title, traces (in its data), drawn (trace elements
        in its plot area), width and height of its main svg."""
        return self.page.evaluate(_JS_FIGURES)

    def cell_text(self, marker: str) -> str:
        """The text of the outputs of the cell whose source holds ``marker``."""
        return self.page.evaluate(
            "(m) => { const c = window.__qaeCell(m);"
            " return c ? c.model.outputs.toJSON().map(o => [].concat(o.text || (o.data || {})['text/plain'] || '')"
            ".join('')).join('') : null; }",
            marker,
        )

    def execute(self, code: str) -> str:
        """Run ``code`` in the notebook's kernel (as a person running a scratch cell); its stdout."""
        result = self.page.evaluate(_JS_EXECUTE, code)
        assert not result["err"], f"{code!r} in the kernel failed: {result['err']}"
        return result["out"]

    def kernel_json(self, expression: str):
        """The value of a Python ``expression`` in the kernel, passed as JSON."""
        out = self.execute(f"import json as _j; print(_j.dumps({expression}))")
        return json.loads(out)

    def control(self, marker: str, label: str) -> Control:
        """The control labelled ``label`` in the cell whose source holds ``marker``."""
        cid = secrets.token_hex(4)
        problem = self.page.evaluate(_JS_TAG_CONTROL, [marker, label, cid])
        assert not problem, f"{self.name}: {problem}"
        return Control(self, cid, label)

    def screenshot_sections(self, prefix: str, suffix: str = "") -> list[Path]:
        """One screenshot per ``## `` section: its heading scrolled to the top of the notebook.
        Saved as ``<artifacts>/<prefix>_<number or slug><suffix>.png``."""
        out, saved = artifacts_dir(), []
        for i, heading in enumerate(self.page.evaluate(_JS_HEADINGS)):
            number = re.match(r"(\d+)\s*·", heading)
            name = number.group(1) if number else re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")[:40]
            self.page.evaluate(
                "(i) => document.querySelector(`[data-qae-heading=\"${i}\"]`).scrollIntoView({block: 'start'})", i
            )
            self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            time.sleep(0.25)  # plotly re-lays out a figure scrolled into view
            path = out / f"{prefix}_{name}{suffix}.png"
            self.page.screenshot(path=str(path))
            saved.append(path)
        return saved


class Control:
    """One ipywidgets control above a figure (:func:`qae_lab.lab.widgets.interactive`)."""

    def __init__(self, notebook: Notebook, cid: str, label: str):
        self.notebook, self.id, self.label = notebook, cid, label
        self.locator = notebook.page.locator(f'[data-qae-control="{cid}"]')

    def fingerprint(self) -> str | None:
        """The figure under this control: a hash of its title and traces' data (None: not drawn)."""
        return self.notebook.page.evaluate(_JS_FINGERPRINT, self.id)

    def figure(self) -> dict:
        """The figure under this control, as :meth:`Notebook.figures` describes one."""
        return self.notebook.page.evaluate(
            '(id) => window.__qaeFigure(document.querySelector(`[data-qae-view="${id}"]`)'
            ".querySelector('.js-plotly-plot'))",
            self.id,
        )

    def press(self, key: str, times: int = 1) -> None:
        """Focus the slider's handle and press ``key`` (a person's keyboard move)."""
        self.locator.scroll_into_view_if_needed()
        self.locator.locator(".noUi-handle").focus()
        for _ in range(times):
            self.notebook.page.keyboard.press(key)

    def select(self, index: int) -> None:
        """Choose the dropdown's option ``index``."""
        self.locator.scroll_into_view_if_needed()
        self.locator.locator("select").select_option(index=index)

    def readout(self) -> str:
        return self.locator.locator(".widget-readout").inner_text()
