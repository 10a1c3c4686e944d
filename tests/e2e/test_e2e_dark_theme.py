"""A notebook's plots in JupyterLab's dark theme: axes and labels stay visible, and the pictures are sharp.

JupyterLab is started with its dark theme set (a settings file, as a learner's choice in Settings -> Theme
would write), notebook 01's solution is run with Run -> Run All Cells, and each plot the page shows is
screenshotted and measured: the page around it is dark, the plot's own background is opaque white, and it
holds dark strokes (axes, ticks, labels); its image has twice the pixels of its size on the page. The
notebook's explorer (a widget that redraws its plot) is held to the same.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from harness import Lab, local_pages
from test_e2e_browser import click_run_all, save_screenshot, wait_until_idle, wait_until_ready

pytestmark = pytest.mark.browser

NOTEBOOK = "solutions/01_dot_product_toy.ipynb"
DARK = {"@jupyterlab/apputils-extension/themes.jupyterlab-settings": {"theme": "JupyterLab Dark"}}
IMAGES = ".jp-OutputArea-output img"  # plots, and the pictures inside the explorer widget


def _luminance(rgb) -> float:
    r, g, b = rgb[:3]
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.fixture(scope="module")
def dark_lab(tmp_path_factory, chromium_path):
    server = Lab(tmp_path_factory.mktemp("dark-lab"), settings=DARK)
    yield server
    server.stop()


def test_plots_are_legible_and_sharp_in_the_dark_theme(dark_lab, browser, screenshots):
    from PIL import Image

    make, close = local_pages(browser, (dark_lab.base,), timeout_ms=90_000)
    page = make()
    try:
        page.goto(dark_lab.url(NOTEBOOK))
        wait_until_ready(page)
        assert page.evaluate("() => document.body.dataset.jpThemeLight") == "false", "the dark theme is not on"
        click_run_all(page)
        wait_until_idle(page)
        save_screenshot(page, screenshots / "dark-theme__01_dot_product_toy.jpg")
        images = page.locator(IMAGES)
        assert images.count() >= 1, f"{NOTEBOOK} showed no plot"
        page_bg = page.evaluate("() => getComputedStyle(document.querySelector('.jp-Notebook')).backgroundColor")
        page_rgb = [int(x) for x in page_bg[page_bg.index("(") + 1 : page_bg.index(")")].split(",")[:3]]
        assert _luminance(page_rgb) < 0.35, f"the notebook's background is not dark: {page_bg}"
        assert page.locator(".widget-output img").count() >= 1, "the explorer drew no picture"
        for i in range(images.count()):
            img = images.nth(i)
            img.scroll_into_view_if_needed()
            natural, shown = img.evaluate("e => [e.naturalWidth, e.getBoundingClientRect().width]")
            assert natural >= 1.9 * shown, f"plot {i}: {natural} pixels shown {shown} wide, not a 2x image"
            shot = Image.open(io.BytesIO(img.screenshot())).convert("RGB")
            w, h = shot.size
            corners = [shot.getpixel(p) for p in ((1, 1), (w - 2, 1), (1, h - 2), (w - 2, h - 2))]
            assert all(_luminance(c) > 0.9 for c in corners), f"plot {i}: its background is not white: {corners}"
            pixels = np.asarray(shot, dtype=float) / 255
            dark = int(((pixels @ np.array([0.2126, 0.7152, 0.0722])) < 0.3).sum())
            assert dark > 0.002 * w * h, f"plot {i}: almost no dark strokes ({dark} of {w * h} pixels): axes unseen"
        assert not page.network, f"the page tried to reach the network: {sorted(set(page.network))}"
    finally:
        close()
        dark_lab.shutdown_kernels()
