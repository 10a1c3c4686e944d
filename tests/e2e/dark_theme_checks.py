"""A notebook's plots in JupyterLab's dark theme: axes and labels stay visible, and the pictures are sharp.

test_e2e_browser.py runs these checks on notebook 01 (DARK_THEME_NOTEBOOK there) once its learner copy has run in
the browser (a JupyterLab of its own in the dark theme, running notebook 01 again, cost a tenth of the browser
tests' CPU). The theme is a user setting of the test's JupyterLab, shared by the pages that come after: it is
switched back to JupyterLab Light at the end.
"""

from __future__ import annotations

import io

import numpy as np
from harness import save_screenshot

IMAGES = ".jp-OutputArea-output img"  # plots, and the pictures inside the explorer widget
THEME_IS_LIGHT = "() => document.body.dataset.jpThemeLight"


def _luminance(rgb):
    """Luminance (0-1, not gamma-corrected) of one colour or of every pixel of an image array."""
    return np.asarray(rgb, dtype=float)[..., :3] @ np.array([0.2126, 0.7152, 0.0722]) / 255


def choose_theme(page, theme: str) -> None:
    """Settings -> Theme -> ``theme`` from the menu bar, then wait until the page shows it."""
    page.keyboard.press("Escape")
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.locator(".lm-Menu").get_by_text("Theme", exact=True).click()  # a submenu (no role of its own)
    page.locator(".lm-Menu").get_by_text(theme, exact=True).click()
    light = "false" if "Dark" in theme else "true"
    page.wait_for_function(f"() => ({THEME_IS_LIGHT})() === {light!r}")


def assert_plots_legible_in_the_dark_theme(page, shot) -> None:
    """On a notebook page that has run: switch to the dark theme, measure every plot, switch back to light."""
    from PIL import Image

    choose_theme(page, "JupyterLab Dark")
    try:
        assert page.evaluate(THEME_IS_LIGHT) == "false", "the dark theme is not on"
        save_screenshot(page, shot)
        images = page.locator(IMAGES)
        assert images.count() >= 1, "the notebook showed no plot"
        page_bg = page.evaluate("() => getComputedStyle(document.querySelector('.jp-Notebook')).backgroundColor")
        page_rgb = [int(x) for x in page_bg[page_bg.index("(") + 1 : page_bg.index(")")].split(",")[:3]]
        assert _luminance(page_rgb) < 0.35, f"the notebook's background is not dark: {page_bg}"
        assert page.locator(".widget-output img").count() >= 1, "the explorer drew no picture"
        for i in range(images.count()):
            img = images.nth(i)
            img.scroll_into_view_if_needed()
            natural, shown = img.evaluate("e => [e.naturalWidth, e.getBoundingClientRect().width]")
            assert natural >= 1.9 * shown, f"plot {i}: {natural} pixels shown {shown} wide, not a 2x image"
            pic = Image.open(io.BytesIO(img.screenshot())).convert("RGB")
            w, h = pic.size
            corners = [pic.getpixel(p) for p in ((1, 1), (w - 2, 1), (1, h - 2), (w - 2, h - 2))]
            assert all(_luminance(c) > 0.9 for c in corners), f"plot {i}: its background is not white: {corners}"
            dark = int((_luminance(pic) < 0.3).sum())
            assert dark > 0.002 * w * h, f"plot {i}: almost no dark strokes ({dark} of {w * h} pixels): axes unseen"
    finally:
        choose_theme(page, "JupyterLab Light")
