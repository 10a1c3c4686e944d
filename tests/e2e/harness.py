"""Helpers for the browser tests: find Chromium, start JupyterLab on a scratch copy of the notebooks."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("notebooks", "solutions")  # learner copies, then complete notebooks
# In the scratch folder JupyterLab serves: the solutions as committed, outputs kept (the browser test checks that
# they render; the copies in solutions/ there have their outputs cleared, for tests that run them).
SAVED_SOLUTIONS = "solutions-as-saved"

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# JupyterLab settings for the test: no news or update checks (they would reach the network), start the
# notebook's kernel without asking, and render every cell (JupyterLab 4 otherwise only renders the cells in
# view, and the checks below read the whole notebook from the page).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "autoStartDefaultKernel": True,
        "windowingMode": "none",
    },
}


def course_notebooks() -> list[Path]:
    """Every notebook of the course, found on disk: a new notebook is tested without editing this file."""
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]


def find_chromium() -> str | None:
    named = os.environ.get("COURSE_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next(filter(None, map(shutil.which, names)), None)  # the first on PATH


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jupyter_env(folder: Path) -> dict[str, str]:
    """The environment with Jupyter's configuration, runtime files and IPython's profile under ``folder``: none of
    the user's own settings applies."""
    return dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(folder / "config"),
        JUPYTER_RUNTIME_DIR=str(folder / "runtime"),
        IPYTHONDIR=str(folder / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
    )


class Lab:
    """A JupyterLab server on 127.0.0.1 serving a scratch copy of the course's notebooks."""

    def __init__(self, home: Path):
        self.home, self.token = home, os.urandom(16).hex()
        for folder in (*FOLDERS, SAVED_SOLUTIONS):
            (home / folder).mkdir(parents=True)
        for nb_path in course_notebooks():  # outputs cleared: everything the page shows comes from this run
            if nb_path.parent.name == "solutions":
                shutil.copy(nb_path, home / SAVED_SOLUTIONS / nb_path.name)
            nb = nbformat.read(nb_path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
            nb.metadata.pop("widgets", None)
            nbformat.write(nb, home / nb_path.parent.name / nb_path.name)
        for rel, data in LAB_SETTINGS.items():
            f = home / ".lab" / "settings" / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(data), encoding="utf-8")
        self.log_path = home / ".lab" / "server.log"
        for attempt in range(3):  # a port found free can be taken before the server binds it (tests run side by side)
            if self._start(free_port()) or attempt == 2:
                break
        if self.proc.poll() is not None:
            raise RuntimeError("JupyterLab did not start:\n" + self.log_path.read_text()[-3000:])

    def _start(self, port: int) -> bool:
        """Start JupyterLab on ``port`` and wait until it answers. False when the port was taken meanwhile (try
        another); True otherwise, also when the server stopped for another reason (``__init__`` then says why)."""
        home = self.home
        self.port, self.base = port, f"http://127.0.0.1:{port}"
        env = jupyter_env(home / ".lab")
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",  # never another port than the one this class polls
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={home}",
            f"--LabApp.user_settings_dir={home / '.lab' / 'settings'}",
            f"--LabApp.workspaces_dir={home / '.lab' / 'workspaces'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.news_url=None",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, for open_in_the_same_page
            "--ServerApp.shutdown_no_activity_timeout=900",
        ]  # gone by itself if the test run was killed
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                self.api("GET", "/api/status")
                return True
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None:
                    self._log.close()
                    return "is not available" not in self.log_path.read_text()
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("JupyterLab did not start:\n" + self.log_path.read_text()[-3000:]) from None
                time.sleep(0.3)

    def api(self, method: str, path: str):
        req = urllib.request.Request(self.base + path, method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def url(self, rel: str) -> str:
        """The notebook opened alone, in a workspace of its own (pages side by side do not share a layout)."""
        workspace = "".join(c if c.isalnum() else "-" for c in rel)
        return f"{self.base}/lab/workspaces/{workspace}/tree/{rel}?reset&token={self.token}"

    def open_in_the_same_page(self, page, rel: str) -> None:
        """Open the notebook ``rel`` in the JupyterLab ``page`` shows, in place of what it shows (closed unsaved).
        Opening a solution in a page of its own loaded a second JupyterLab: 11-13 CPU-seconds in all, this 4."""
        page.evaluate(
            """async rel => { [...jupyterapp.shell.widgets('main')].forEach(w => w.dispose());
            await jupyterapp.commands.execute('docmanager:open', {path: rel, factory: 'Notebook'}); }""",
            rel,
        )

    def shutdown_kernels(self) -> None:
        for s in self.api("GET", "/api/sessions") or []:
            self.api("DELETE", f"/api/sessions/{s['id']}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def save_screenshot(page, path) -> None:
    """The whole notebook in one tall image: grow the window to the notebook's height, scroll to the top."""
    page.keyboard.press("Escape")
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('.jp-WindowedPanel-outer, "
        ".jp-Notebook')].map(e => e.scrollHeight), 900)"
    )
    page.set_viewport_size({"width": 1280, "height": min(int(height) + 200, 30_000)})
    page.evaluate("() => document.querySelectorAll('.jp-WindowedPanel-outer').forEach(e => { e.scrollTop = 0; })")
    page.wait_for_timeout(300)
    page.screenshot(path=str(path), type="jpeg", quality=80)
    page.set_viewport_size({"width": 1280, "height": 900})


def with_wcag(body: str) -> str:
    """A function for page.evaluate whose ``body`` may use WCAG 2's relative luminance (lum) and contrast ratio
    (ratio, and contrast of an element's text), read from colours as Chromium drew them; an element's background
    is the first opaque one among it and its ancestors."""
    return "() => {" + WCAG_JS + body + "}"


WCAG_JS = """
    const rgba = s => { const m = s.match(/[\\d.]+/g).map(Number); return m.length === 3 ? [...m, 1] : m; };
    const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
    const background = el => { for (; el; el = el.parentElement) {
        const c = rgba(getComputedStyle(el).backgroundColor); if (c[3] > 0) return c; } return [255, 255, 255, 1]; };
    const ratio = (a, b) => (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const contrast = el => ratio(lum(rgba(getComputedStyle(el).color)), lum(background(el)));"""

# What a page of the test's JupyterLab (any port on this machine) may load.
LOCALHOST = ("http://127.0.0.1:", "http://localhost:")


def local_pages(browser, allowed: tuple[str, ...], viewport: tuple[int, int] = (1280, 900), timeout_ms: int = 30_000):
    """``(make, close)``: ``make()`` opens a page, in a browser context of its own (JupyterLab pages sharing one
    storage race for window names), that may load only URLs starting with one of ``allowed`` (e.g.
    ``("file:",)``); every other request is aborted and listed in ``page.network``. ``page.js_errors`` collects
    uncaught JavaScript errors and ``page.websockets`` the sockets opened. ``close()`` closes every context made."""
    contexts = []

    def make():
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        network: list[str] = []

        def only_allowed(route):
            if route.request.url.startswith(allowed):
                route.continue_()
            else:
                network.append(route.request.url)
                route.abort()

        context.route("**/*", only_allowed)
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        page.network, page.js_errors, page.websockets = network, [], []
        page.on("pageerror", lambda e: page.js_errors.append(str(e)))
        page.on("websocket", lambda ws: page.websockets.append(ws.url))
        return page

    def close():
        for context in contexts:
            context.close()

    return make, close


def assert_offline(page) -> None:
    """A page of ``local_pages`` asked for nothing outside what it may load, opened no socket, threw no error."""
    assert page.network == [], f"the page tried to reach the network: {page.network}"
    assert page.websockets == [], page.websockets
    assert page.js_errors == [], page.js_errors
