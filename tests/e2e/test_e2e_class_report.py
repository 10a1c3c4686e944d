"""The class table of ``python3 course.py check --summary FOLDER``, opened from file:// in headless Chromium.

A class of eight learners over every exercise of the course (and a file that is not a report) is written to a
folder, the summary is made from it as the instructor makes it, and its HTML page is opened with every request
other than ``file:`` aborted (no CDN, no font, no script). The page is a compact grid (issue 29 item 4) above
"what to re-teach" (item 5), legible in both colour schemes. Screenshots go to
``reports/screenshots/class-summary-*.png``.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from harness import assert_offline, local_pages, with_wcag
from test_grade import write_report  # the one way the tests write a learner's report

from course_tools import grade
from course_utils.exercises import all_exercises, get_exercise

pytestmark = pytest.mark.browser

LEARNERS = ["Ada Lovelace", "bo", "Chidi Okonkwo", "José Núñez", "李雷", "Marie-Ève Tremblay", "sam", "Yusuf"]
STATUSES = ["passed"] * 5 + ["failed"] * 2 + ["not attempted", "not run"]
KEYS = sorted(all_exercises(), key=lambda k: tuple(map(int, k.split("."))))  # every exercise, in course order


def _class() -> dict[str, dict[str, str]]:
    """learner -> {exercise: status}, drawn once from a fixed seed; the last learner has not reached 08-11 (those
        are "not checked"), and three learners make 01.2's first mistake, two 02.1's (other exercises fail more often:
    the draw of seed 29 gives one failed by more than three)."""
    rng = random.Random(29)
    out = {}
    for n, learner in enumerate(LEARNERS):
        mine = {k: rng.choice(STATUSES) for k in KEYS if n < len(LEARNERS) - 1 or k < "08"}
        mine["01.2"] = "failed" if n < 3 else "passed"
        mine["02.1"] = "failed" if n in (3, 4) else "passed"
        out[learner] = mine
    return out


CLASS = _class()

READ_GRID = """() => {
    const table = document.querySelector('#class-summary');
    const keys = [...table.querySelectorAll('thead th[data-key]')].map(th => th.dataset.key);
    const groups = [...table.querySelectorAll('thead th.notebook')].map(th => [th.textContent.trim(), th.colSpan]);
    const rows = {};
    for (const tr of table.querySelectorAll('tbody tr')) {
        rows[tr.dataset.learner] = Object.fromEntries([...tr.querySelectorAll('td[data-key]')]
            .map(td => [td.dataset.key, [td.dataset.verdict, td.title]]));
    }
    const reteach = [...document.querySelectorAll('#reteach tbody tr')]
        .map(tr => [tr.dataset.key, tr.dataset.mistake, Number(tr.dataset.learners)]);
    return {keys, groups, rows, reteach,
            learners: [...table.querySelectorAll('tbody th')].map(th => th.textContent.trim())};
}"""

GEOMETRY = """() => {
    const keys = [...document.querySelectorAll('#class-summary thead th[data-key]')];
    const cell = document.querySelector('#class-summary td[data-key]').getBoundingClientRect();
    return {right: Math.max(...keys.map(th => th.getBoundingClientRect().right)),
            width: window.innerWidth, cell: [cell.width, cell.height],
            metaWidth: [...document.querySelectorAll('#class-summary thead th.meta')]
                .reduce((s, th) => s + th.getBoundingClientRect().width, 0)};
}"""

# The page's text contrast and luminance; each verdict's cell: its text's contrast, its colour's against the page.
COLOURS = with_wcag("""
    const page = lum(background(document.body)), out = {page: [contrast(document.body), page]};
    for (const v of ['passed', 'failed', 'not-attempted', 'not-run']) {
        const td = document.querySelector(`td[data-verdict="${v}"]`);
        out[v] = [contrast(td), ratio(lum(background(td)), page)];
    }
    return out;""")


@pytest.fixture
def class_folder(tmp_path) -> Path:
    folder = tmp_path / "usb" / "class"
    for n, (learner, statuses) in enumerate(CLASS.items()):
        write_report(folder, learner, statuses, f"2026-11-26T09:0{n}:00+00:00", name=f"report-{n}.json")
    (folder / "settings.json").write_text('{"not": "a report"}', encoding="utf-8")
    return folder


def _expected_reteach() -> list[tuple[str, str, int]]:
    counts = Counter(
        (key, get_exercise(key).mistakes[0].name)
        for statuses in CLASS.values()
        for key, status in statuses.items()
        if status == "failed"
    )
    order = sorted(counts.items(), key=lambda kv: (-kv[1], KEYS.index(kv[0][0])))
    return [(key, name, n) for (key, name), n in order]


def test_the_class_grid_reads_offline_in_light_and_dark(browser, class_folder, screenshots, capsys):
    assert grade.main(["--summary", str(class_folder)]) == 0
    assert "skipped settings.json: not an exercise report" in capsys.readouterr().err
    make, close = local_pages(browser, ("file:",), viewport=(1280, 800))
    try:
        page = make()
        page.goto((class_folder / "class-summary.html").as_uri())
        got = page.evaluate(READ_GRID)
        assert got["keys"] == KEYS
        by_notebook = Counter(k[:2] for k in KEYS)  # in the order first seen: course order
        assert got["groups"] == [[nb, n] for nb, n in by_notebook.items()]  # one heading per notebook, over its own
        assert got["learners"] == sorted(LEARNERS, key=str.casefold)
        for learner, statuses in CLASS.items():
            for key in KEYS:
                verdict, tip = got["rows"][learner][key]
                status = statuses.get(key, "not checked")
                assert verdict == status.replace(" ", "-"), (learner, key)
                assert tip.startswith(f"{learner}, {key} {get_exercise(key).title}: ")
                if status == "failed":  # the mistake on hover
                    assert tip.endswith(f": failed: {get_exercise(key).mistakes[0].name}"), tip
        # what to re-teach: each named mistake and how many made it, most first
        assert [tuple(r) for r in got["reteach"]] == _expected_reteach()
        assert ["01.2", get_exercise("01.2").mistakes[0].name, 3] in got["reteach"]
        most, where = got["reteach"][0][2], got["reteach"][0][0]
        checked = sum(where in statuses for statuses in CLASS.values())  # "of M": the learners who checked it
        assert (
            most > 3 and page.locator("#reteach td.count").first.inner_text() == f"{most} of {checked} who checked it"
        )
        # compact: every exercise column in view at 1280 pixels, the metadata narrow
        geometry = page.evaluate(GEOMETRY)
        assert geometry["right"] <= geometry["width"], geometry
        assert geometry["metaWidth"] < 0.15 * 1280, geometry
        # hovering a failed cell shows its mistake (the browser's tooltip is the cell's title)
        failed = page.locator('tr[data-learner="Ada Lovelace"] td[data-key="01.2"]')
        failed.hover()
        assert failed.get_attribute("title").endswith(get_exercise("01.2").mistakes[0].name)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            colours = page.evaluate(COLOURS)
            background = colours["page"][1]
            assert (background > 0.8) if scheme == "light" else (background < 0.05), (scheme, colours["page"])
            for verdict, (text, _) in colours.items():
                assert text >= 4.5, f"{scheme}: {verdict} text has a contrast of {text:.2f}: hard to read"
            for verdict in ("passed", "failed", "not-run"):  # a coloured cell stands out from the page
                assert colours[verdict][1] >= 1.5, (scheme, verdict, colours)
            page.screenshot(path=str(screenshots / f"class-summary-{scheme}.png"), full_page=True)
        # narrower than the grid: it scrolls sideways and the names stay in view
        page.set_viewport_size({"width": 700, "height": 800})
        page.locator(".wrap").evaluate("el => el.scrollLeft = el.scrollWidth")
        name_box = page.locator("#class-summary tbody th").first.bounding_box()
        assert 0 <= name_box["x"] < 30, name_box
        assert_offline(page)
    finally:
        close()
