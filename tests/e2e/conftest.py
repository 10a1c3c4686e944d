"""The course in a real browser: JupyterLab started by the test, driven by Debian's Chromium via Playwright.

Nothing here reaches the network: JupyterLab listens on 127.0.0.1 with a token, and the browser aborts every
request to any other host (and the tests fail if one was made). The browser is the system's Chromium
(``apt-get install chromium``), never one downloaded by ``playwright install``.

Without Chromium or Playwright these tests skip with the reason; with ``COURSE_REQUIRE_BROWSER=1`` (CI sets
it) they fail instead. ``COURSE_CHROMIUM`` names another Chromium binary. Screenshots of every executed
notebook go to ``reports/screenshots/`` (``COURSE_SCREENSHOTS`` to change it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness import CHROMIUM_ARGS, LOCALHOST, ROOT, Lab, find_chromium, local_pages

SCREENSHOTS = Path(os.environ.get("COURSE_SCREENSHOTS", ROOT / "reports" / "screenshots"))


def _unavailable(reason: str):
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"COURSE_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        _unavailable(
            "no Chromium found (on Debian/Ubuntu: `sudo apt-get install chromium`; "
            "or set COURSE_CHROMIUM to a Chromium binary)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable(
            "the Python package playwright is not installed (`python3 course.py test` installs it: the author set)"
        )
    return path


@pytest.fixture(scope="session")
def lab(tmp_path_factory, chromium_path):
    server = Lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in Chromium (deselect with -m 'not browser')")


def pytest_collection_modifyitems(config, items):
    """The notebooks in JupyterLab first, the last notebooks first among them (10 and 11 train and load models);
    then the short tests, in their usual order. `course.py test` spreads these tests over two pytest-xdist workers
    one at a time (``--maxschedchunk=1``): starting with the long ones leaves the short ones to even out the end."""

    def notebook_stem(item) -> str | None:
        if item.path.name != "test_e2e_browser.py" or item.path.parent != Path(__file__).parent:
            return None
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("stem") if callspec else None

    notebooks = sorted((i for i in items if notebook_stem(i)), key=notebook_stem, reverse=True)
    if notebooks:
        chosen = set(map(id, notebooks))
        items[:] = notebooks + [i for i in items if id(i) not in chosen]


@pytest.fixture(scope="session")
def lab_page(browser, lab):
    """One page of the test's JupyterLab for every notebook a worker opens (Lab.open_in_the_same_page), that may
    talk to it and nothing else (harness.local_pages): a page of its own per notebook loaded a JupyterLab each,
    7.5-9.5 CPU-seconds before the notebook showed."""
    make, close = local_pages(browser, LOCALHOST, timeout_ms=90_000)
    yield make()
    close()


@pytest.fixture
def jupyterlab_page(lab_page, lab):
    """The worker's JupyterLab page, with no JavaScript error or blocked request from an earlier test; kernels are
    shut down when the test ends."""
    lab_page.js_errors.clear()
    lab_page.network.clear()
    yield lab_page
    lab.shutdown_kernels()


@pytest.fixture
def offline_page(browser):
    """Make pages that may load file: and data: URLs only (harness.local_pages)."""
    make, close = local_pages(browser, ("file:", "data:"))
    yield make
    close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
