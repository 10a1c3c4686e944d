"""The class table of ``python3 course.py check --summary FOLDER``, opened from file:// in headless Chromium.

Reports of three learners (and a file that is not one) are written to a folder, the summary is made from it
as the instructor makes it, and its HTML page is opened with every request other than ``file:`` aborted: the
page must ask for nothing else (no CDN, no font, no script), show one row per learner and one column per
exercise with each verdict (passed, the named mistake, not attempted, not run, not checked), and stay legible
in the light and the dark colour scheme (each verdict's text against its background at a contrast of 4.5:1 or
more, the page's background dark in dark mode). Screenshots go to ``reports/screenshots/class-summary-*.png``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import local_pages
from test_grade import write_report  # the one way the tests write a learner's report

from course_tools import grade
from course_utils.exercises import get_exercise

pytestmark = pytest.mark.browser

CLASS = {  # learner -> {exercise: status}; an exercise missing from a report is "not checked"
    "ana": {"01.1": "passed", "01.2": "failed", "03.1": "passed"},
    "bo": {"01.1": "not attempted", "01.2": "not run"},
    "cy": {"01.1": "failed", "01.2": "passed", "03.1": "not attempted"},
}

READ_TABLE = """() => {
    const table = document.querySelector('#class-summary');
    const keys = [...table.querySelectorAll('thead th[data-key]')].map(th => th.dataset.key);
    const rows = {};
    for (const tr of table.querySelectorAll('tbody tr')) {
        rows[tr.dataset.learner] = Object.fromEntries([...tr.querySelectorAll('td[data-key]')]
            .map(td => [td.dataset.key, [td.dataset.verdict, td.textContent.trim()]]));
    }
    return {keys, rows, learners: [...table.querySelectorAll('tbody th')].map(th => th.textContent.trim())};
}"""

COLOURS = """() => {
    const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const out = {page: [rgb(getComputedStyle(document.body).backgroundColor),
                        rgb(getComputedStyle(document.body).color)]};
    for (const v of ['passed', 'failed', 'not-attempted', 'not-run']) {
        const td = document.querySelector(`td[data-verdict="${v}"]`);
        const bg = getComputedStyle(td).backgroundColor;
        out[v] = [bg.startsWith('rgba(0, 0, 0, 0)') ? out.page[0] : rgb(bg), rgb(getComputedStyle(td).color)];
    }
    return out;
}"""


def _luminance(rgb) -> float:
    def channel(c):
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a, b) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture
def class_folder(tmp_path) -> Path:
    folder = tmp_path / "usb" / "class"
    for n, (learner, statuses) in enumerate(CLASS.items()):
        write_report(folder, learner, statuses, f"2026-11-26T09:0{n}:00+00:00")
    (folder / "settings.json").write_text('{"not": "a report"}', encoding="utf-8")
    return folder


def _expected(keys: list[str]) -> dict:
    want = {}
    for learner, statuses in CLASS.items():
        want[learner] = {}
        for key in keys:
            status = statuses.get(key)
            if status is None:
                want[learner][key] = ["not-checked", "not checked"]
            elif status == "failed":
                want[learner][key] = ["failed", get_exercise(key).mistakes[0].name]
            else:
                want[learner][key] = [status.replace(" ", "-"), status]
    return want


def test_the_class_table_reads_offline_in_light_and_dark(browser, class_folder, screenshots, capsys):
    assert grade.main(["--summary", str(class_folder)]) == 0
    assert "skipped settings.json: not an exercise report" in capsys.readouterr().err
    make, close = local_pages(browser, ("file:",))
    try:
        page = make()
        page.goto((class_folder / "class-summary.html").as_uri())
        got = page.evaluate(READ_TABLE)
        assert got["keys"] == ["01.1", "01.2", "03.1"]
        assert got["learners"] == ["ana", "bo", "cy"]
        assert got["rows"] == _expected(got["keys"])
        footer = page.locator("#class-summary tfoot td").all_inner_texts()
        assert footer[-3:] == ["1 of 3", "1 of 3", "1 of 3"], footer
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            colours = page.evaluate(COLOURS)
            background = _luminance(colours["page"][0])
            assert (background > 0.8) if scheme == "light" else (background < 0.05), (scheme, colours["page"])
            for verdict, (bg, fg) in colours.items():
                assert _contrast(bg, fg) >= 4.5, f"{scheme}: {verdict} text {fg} on {bg} is hard to read"
            page.screenshot(path=str(screenshots / f"class-summary-{scheme}.png"), full_page=True)
        assert page.network == [], f"the page tried to reach the network: {page.network}"
        assert page.js_errors == [] and page.websockets == []
    finally:
        close()
