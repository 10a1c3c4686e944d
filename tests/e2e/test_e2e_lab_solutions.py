"""`python3 course.py lab` as a learner starts it: JupyterLab opens notebook 00, asks nothing about Jupyter's news,
and a solution opens from its file browser (issue #29: `lab` used to serve notebooks/ alone, so solutions/ could
not be reached from JupyterLab).

The command runs literally, with JupyterLab's own options after `--` (a local port and token) and the browser it
would open recorded through $BROWSER; Chromium then follows that very address. JupyterLab's user settings and
workspaces go to a scratch folder, so only `lab`'s own defaults apply. Every request to another host is blocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request

import pytest
from harness import LOCALHOST, ROOT, free_port, jupyter_env, local_pages

pytestmark = pytest.mark.browser

SOLUTION = "03_masking.ipynb"


@pytest.fixture
def lab_as_started(tmp_path, chromium_path):
    """(the address `course.py lab` opened in the browser, the server's base URL): the command run literally."""
    port, token = free_port(), os.urandom(16).hex()
    opened = tmp_path / "opened.txt"
    record = tmp_path / "browser.sh"  # what $BROWSER runs: it notes the address instead of opening a window
    record.write_text(f'#!/bin/sh\necho "$1" > {opened}\n', encoding="utf-8")
    record.chmod(0o755)
    jupyter = tmp_path / "jupyter"
    # one setting of the learner's own, unrelated to what is tested: render every cell (JupyterLab 4 otherwise
    # renders only those in view, and the verdicts checked below are at the end of the notebook)
    tracker = jupyter / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}', encoding="utf-8")
    env = {
        **jupyter_env(jupyter),
        "BROWSER": f"{record} %s",
        "JUPYTERLAB_SETTINGS_DIR": str(jupyter / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(jupyter / "workspaces"),
    }
    command = [
        "python3",  # as the README says, whichever Python 3.10+ is on PATH: course.py runs Jupyter from .venv/
        "course.py",
        "lab",
        "--",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--ServerApp.shutdown_no_activity_timeout=600",
    ]
    log = open(tmp_path / "lab.log", "w", encoding="utf-8")
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (opened.exists() and opened.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("`course.py lab` opened no browser:\n" + (tmp_path / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield opened.read_text().strip(), f"http://127.0.0.1:{port}", token, tmp_path / "lab.log"
    finally:
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/shutdown", method="POST", headers={"Authorization": f"token {token}"}
            )
            urllib.request.urlopen(req, timeout=10).close()
            proc.wait(timeout=30)
        except Exception:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        log.close()


def test_lab_opens_notebook_00_without_the_news_question_and_a_solution_opens_from_its_file_browser(
    lab_as_started, browser, screenshots
):
    address, base, token, log = lab_as_started
    said = log.read_text(encoding="utf-8")
    assert "[course] starting JupyterLab on the course folder at notebook 00 (solutions/ is beside notebooks/)" in said
    make, close = local_pages(browser, ("file:", *LOCALHOST), timeout_ms=90_000)
    page = make()
    shot = screenshots / "lab__solution_opened.jpg"
    try:
        page.goto(address)  # the page `lab` opened (a file that forwards to JupyterLab with the token)
        page.wait_for_url(f"{base}/lab/tree/notebooks/00_setup_check.ipynb*")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-Notebook')].some(e => e.innerText.includes('00 Setup check'))"
        )
        page.wait_for_timeout(3000)  # JupyterLab asks about news a moment after it has restored its layout
        assert page.get_by_text("official Jupyter news").count() == 0, "JupyterLab asked about Jupyter's news"
        # the file browser: up to the course folder, into solutions/, open a solution as a learner would
        if not page.locator(".jp-FileBrowser").is_visible():
            page.get_by_role("tab", name="File Browser").click()
        page.locator(".jp-FileBrowser .jp-BreadCrumbs-home").click()
        items = page.locator(".jp-FileBrowser .jp-DirListing-item")
        page.wait_for_selector(".jp-FileBrowser .jp-DirListing-item[title*='solutions']")
        names = items.locator(".jp-DirListing-itemText").all_inner_texts()
        assert {"notebooks", "solutions"} <= set(names), names
        page.locator(".jp-FileBrowser .jp-DirListing-item", has_text="solutions").dblclick()
        page.locator(".jp-FileBrowser .jp-DirListing-item", has_text=SOLUTION).dblclick()
        page.wait_for_url(f"{base}/lab/tree/solutions/{SOLUTION}*")
        solution = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]"
            ".some(e => /Exercise 03\\.1 \\(.*\\): passed\\./.test(e.innerText))"
        )
        assert "YOUR CODE HERE" not in solution.inner_text()
        assert page.network == [], f"the page tried to reach the network (blocked): {sorted(set(page.network))}"
    finally:
        page.screenshot(path=str(shot), type="jpeg", quality=80)
        close()
