"""The static site of course_tools.site, opened from file:// in headless Chromium with no network.

The site is built once (every solved notebook, found on disk). The pages may load ``file:`` and ``data:`` URLs
and nothing else (conftest's offline_page). Each page is checked as a reader would see it, its bertviz views
with bertviz_checks.py, shared with the JupyterLab test of notebook 11. Screenshots go to
``reports/screenshots/site-*.png``.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import nbformat
import pytest
from bertviz_checks import assert_head_view_rendered
from harness import ROOT, assert_offline, with_wcag

from course_tools.site import build_site

pytestmark = pytest.mark.browser

NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.DOTALL)
# Issue 29 item 8: notebooks 08 and 11 wrote their formulas as code (0 KaTeX on their pages).
MIN_KATEX = {"08_fast_attention": 20, "11_inside_the_gpt": 10}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once per test run: under pytest-xdist (two workers in `course.py test`, each running some
    of these tests) the first worker builds it into the run's temporary folder, the parent of every worker's own,
    and the other reads what it built. Each worker built it before: about 10 CPU-seconds (nbconvert) each."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build_site(tmp_path_factory.mktemp("site") / "site")
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent
    record = shared / "e2e-site.pickle"
    with FileLock(str(shared / "e2e-site.lock")):
        if not record.exists():
            record.write_bytes(pickle.dumps(build_site(shared / "e2e-site")))
        return pickle.loads(record.read_bytes())


def _expected(nb_path: Path) -> dict:
    """What the page of a notebook must show, counted from the notebook itself."""
    nb = nbformat.read(nb_path, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    data = [o.get("data", {}) for o in outputs]
    html_out = "".join("".join(d["text/html"]) for d in data if "text/html" in d)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    markdown = re.sub(r"```.*?```|`[^`\n]*`", "", markdown, flags=re.DOTALL)  # code is not math
    return {
        "images": sum("image/png" in d or "image/jpeg" in d or "image/svg+xml" in d for d in data),
        "math": len(MATH.findall(markdown)),
        "head_views": html_out.count('data-course-view="head"'),
        "model_views": html_out.count('data-course-view="model"'),
        "widgets": sum("application/vnd.jupyter.widget-view+json" in d for d in data),
    }


KATEX_FONT_LOADED = """() => [...document.fonts].some(f =>
    f.family.replace(/["']/g, '') === 'KaTeX_Main' && f.status === 'loaded')"""
READ_PAGE = """() => {
    const imgs = [...document.querySelectorAll('img')];
    const md = [...document.querySelectorAll('.jp-MarkdownCell .jp-RenderedMarkdown')];
    const leftover = md.map(e => { const c = e.cloneNode(true);
        c.querySelectorAll('.katex, code, pre').forEach(x => x.remove()); return c.textContent; })
        .join('\\n').match(/\\$[^$\\n]+\\$/g) || [];
    return {
        images: imgs.length,
        broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 60)),
        katex: document.querySelectorAll('.jp-MarkdownCell .katex').length,
        katex_errors: document.querySelectorAll('.katex-error').length,
        leftover_math: leftover,
        math_state: document.body.dataset.courseMath || null,
        widget_notes: document.querySelectorAll('[data-course-widget]').length,
        toc: [...document.querySelectorAll('.course-site-toc a[href^="#"]')].map(a => a.getAttribute('href')),
        missing_targets: [...document.querySelectorAll('.course-site-toc a[href^="#"]')]
            .filter(a => !document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1))))
            .map(a => a.getAttribute('href')),
    };
}"""


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_page_reads_offline(site, offline_page, screenshots, nb_path):
    expected = _expected(nb_path)
    page = offline_page()
    page.goto((site.out / f"{nb_path.stem}.html").as_uri())
    page.wait_for_function("() => document.body.dataset.courseMath === 'rendered'")
    if expected["math"]:  # KaTeX's fonts come from assets/katex/fonts/ (the page uses KaTeX_Main: wait for it)
        page.wait_for_function(KATEX_FONT_LOADED, timeout=15_000)
    got = page.evaluate(READ_PAGE)
    assert got["broken"] == [], f"images that did not load: {got['broken']}"
    assert got["images"] >= expected["images"], (got["images"], expected)
    assert got["katex_errors"] == 0 and got["leftover_math"] == [], got
    assert got["katex"] >= max(expected["math"], MIN_KATEX.get(nb_path.stem, 0)), (
        f"{expected['math']} math expressions in the notebook, {got['katex']} typeset"
    )
    assert got["widget_notes"] == expected["widgets"], (got["widget_notes"], expected["widgets"])
    assert got["toc"] and got["missing_targets"] == [], got["missing_targets"]
    # its neighbours in course order, above and below (test_index_lists_every_notebook_... clicks them)
    pages, i = [f"{p.stem}.html" for p in NOTEBOOKS], NOTEBOOKS.index(nb_path)
    hrefs = "as => [...new Set(as.map(a => a.getAttribute('href')))]"
    assert page.eval_on_selector_all(".course-site-prev", hrefs) == pages[max(i - 1, 0) : i]
    assert page.eval_on_selector_all(".course-site-next", hrefs) == pages[i + 1 : i + 2]
    # issue 29 item 7: a copy button on every code cell, and a visible "Open in Colab" button at the top, to
    # the learner copy (test_code_cells_copy clicks one)
    colab = page.locator("a.course-site-colab")
    assert colab.is_visible() and colab.inner_text().strip().endswith("Open in Colab")
    assert colab.get_attribute("href").endswith(f"/notebooks/{nb_path.name}"), colab.get_attribute("href")
    box = colab.bounding_box()
    assert box["y"] < 200 and box["width"] > 80, box  # at the top, a button, not a word
    code = [c for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code" and c.source.strip()]
    assert page.locator("button.course-site-copy").count() >= len(code) - 1  # (the hosted cell left out)
    if expected["head_views"]:
        assert_head_view_rendered(page, count=expected["head_views"])  # it waits for every view's SVG
        page.locator('[data-course-view="head"]').first.screenshot(
            path=str(screenshots / f"site-{nb_path.stem}-head-view.png")
        )
    if expected["model_views"]:
        page.wait_for_selector('[data-course-view="model"] svg rect.attn_background')
        drawn = page.locator('[data-course-view="model"]').count()
        assert drawn == expected["model_views"]
    if expected["widgets"]:  # the note in place of a widget, with the cell above it
        note = page.locator("[data-course-widget]").first
        note.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / f"site-{nb_path.stem}-widget.png"))
    if expected["math"]:
        page.locator(".jp-MarkdownCell .katex-display, .jp-MarkdownCell .katex").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / f"site-{nb_path.stem}-math.png"))
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshots / f"site-{nb_path.stem}.png"))
    assert_offline(page)


def test_index_lists_every_notebook_and_the_pages_chain_in_order(site, offline_page, screenshots):
    """From the index, a reader reaches the first notebook, the next and back by clicking. Every page's previous
    and next links are read in course order by test_every_page_reads_offline, which opens each page anyway: walking
    the whole chain here loaded every page, KaTeX and bertviz views included, a second time."""
    page = offline_page()
    page.goto(site.index.as_uri())
    listed = page.eval_on_selector_all(".course-site-notebooks a", "as => as.map(a => a.getAttribute('href'))")
    assert listed == [f"{p.stem}.html" for p in NOTEBOOKS]
    page.screenshot(path=str(screenshots / "site-index.png"), full_page=True)

    def follow(selector: str) -> str:
        link = page.locator(selector).first
        target = link.get_attribute("href")
        link.click()
        page.wait_for_url(f"**/{target}")
        return page.evaluate("() => document.body.dataset.coursePage")

    assert [follow(".course-site-notebooks a"), follow(".course-site-next")] == listed[:2]
    assert follow(".course-site-prev") == listed[0]  # and back
    assert follow(".course-site-index") == "index.html"
    assert_offline(page)


# What a reader sees in each colour scheme: every colour pair below is read from the page as Chromium drew it.
READ_COLOURS = with_wcag("""
    const worst = sel => { const els = [...document.querySelectorAll(sel)].filter(e => e.textContent.trim());
        return els.length ? Math.min(...els.map(contrast)) : null; };
    return {
        page: lum(background(document.body)),
        prose: worst('.jp-RenderedMarkdown p, .course-site-index-page p'),
        headings: worst('.jp-RenderedMarkdown h1, .jp-RenderedMarkdown h2, .course-site-index-page h1'),
        links: worst('.course-site-toc a, .course-site-pager a, .course-site-notebooks a'),
        code: worst('.jp-InputArea .highlight pre'),
        code_tokens: worst('.jp-InputArea .highlight span'),
        printed: worst('.jp-RenderedText pre'),
        notes: worst('.course-site-widget p'),
        math: worst('.jp-RenderedMarkdown .katex'),
        figures: [...document.querySelectorAll('.jp-OutputArea-output img')].map(i => lum(background(i))),
    };
""")


def _showcase() -> Path:
    """A notebook whose page has prose, math, code, printed output, figures and a widget note."""
    for nb_path in NOTEBOOKS:
        e = _expected(nb_path)
        if e["widgets"] and e["images"] and e["math"]:
            return nb_path
    pytest.skip("no solved notebook has a widget, a figure and math")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_follow_the_readers_colour_scheme(site, offline_page, screenshots, scheme):
    """Before, a browser set to dark showed the same white pages; now the site follows it (prefers-color-scheme),
    every text stays readable (WCAG's contrast of 4.5 for text, 3 for syntax colours), and figures, drawn on
    white, sit on a light panel. Issue 29 item 9: the bertviz views, drawn for a light page, sat on a white panel
    as wide as the page."""
    nb_path = _showcase()
    page = offline_page()
    page.emulate_media(color_scheme=scheme)
    for target in (site.out / f"{nb_path.stem}.html", site.index):
        page.goto(target.as_uri())
        page.wait_for_function("() => document.body.dataset.courseMath === 'rendered'")
        got = page.evaluate(READ_COLOURS)
        where = f"{target.name} ({scheme})"
        assert (got["page"] < 0.05) if scheme == "dark" else (got["page"] > 0.9), (where, got["page"])
        for what in ("prose", "headings", "links", "code", "printed", "notes", "math"):
            if got[what] is not None:
                assert got[what] >= 4.5, f"{where}: {what} has a contrast of {got[what]:.2f} (4.5 wanted)"
        if got["code_tokens"] is not None:
            assert got["code_tokens"] >= 3, f"{where}: a syntax colour has a contrast of {got['code_tokens']:.2f}"
        assert all(lum > 0.9 for lum in got["figures"]), f"{where}: a figure without its light panel"
        if target != site.index:
            assert got["prose"] and got["code"] and got["notes"] and got["figures"], (where, got)
            page.locator("[data-course-widget]").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / f"site-{scheme}-{target.stem}.png"))
    if scheme == "dark":  # a bertviz view sits on a panel of its own width
        page.goto((site.out / "11_inside_the_gpt.html").as_uri())
        view = page.locator('[data-course-view="head"]').first
        view.scroll_into_view_if_needed()
        page.wait_for_selector('[data-course-view="head"] svg')
        box, main = view.bounding_box(), page.locator("main").bounding_box()
        drawn = view.evaluate(
            "v => Math.max(...[...v.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width))"
        )
        assert box["width"] < 0.9 * main["width"], (box, main)
        assert box["width"] >= drawn, (box, drawn)  # the panel holds the whole picture
        page.screenshot(path=str(screenshots / "site-dark-bertviz.png"))
    assert_offline(page)


# ------------------------------------------------------------------------------------ search, copy, Colab, math


def test_search_finds_logsumexp_on_notebook_08_offline(site, offline_page, screenshots):
    """Issue 29 item 7: search from a maintained library (MiniSearch, vendored from npm with its sha256), in the
    browser with the network blocked: "logsumexp" lands on notebook 08, at the section that says it. A tester
    typed one letter, "?" and "--": the results stayed empty, saying nothing. Each gets a line."""
    page = offline_page()
    page.goto(site.index.as_uri())
    assert page.evaluate("() => typeof MiniSearch") == "function"
    box = page.locator("#course-site-search")
    for query in ("q", "?", "--", "(.)", "x."):
        box.fill(query)
        page.wait_for_selector(".course-site-no-results")
        said = page.eval_on_selector_all("#course-site-results li", "ls => ls.map(l => l.textContent)")
        assert said == ["Type at least 2 letters or digits to search."], (query, said)
    box.fill("qk")  # two letters search as before
    page.wait_for_selector("#course-site-results[data-count]")
    box.fill("")
    assert page.eval_on_selector_all("#course-site-results li", "ls => ls.length") == 0
    box.fill("logsumexp")
    page.wait_for_selector("#course-site-results[data-count] a.course-site-result")
    hrefs = page.eval_on_selector_all("#course-site-results a.course-site-result", "as => as.map(a => a.href)")
    assert hrefs and all("/08_fast_attention.html#" in h for h in hrefs), hrefs
    page.screenshot(path=str(screenshots / "site-search-index.png"))
    box.press("Enter")
    page.wait_for_url("**/08_fast_attention.html#*")
    anchor = page.evaluate("() => decodeURIComponent(location.hash.slice(1))")
    heading = page.locator(f'[id="{anchor}"]')
    assert heading.count() == 1
    section = page.evaluate(
        """(id) => { const start = document.getElementById(id); let text = start.textContent, el = start;
        const cell = el.closest('.jp-Cell'); let c = cell; for (let i = 0; i < 30 && c; i++, c = c.nextElementSibling) {
            if (i && c.querySelector('h1, h2, h3')) break; text += c.textContent; } return text; }""",
        anchor,
    )
    assert "logsumexp" in section.lower(), anchor
    # on a notebook page, the box in the contents column finds across the course, several words at once
    page.locator("#course-site-search").fill("causal mask")
    page.wait_for_selector("#course-site-results[data-count] a.course-site-result")
    pages = page.eval_on_selector_all(".course-site-result-page", "ps => ps.map(p => p.textContent)")
    assert any(p.startswith("03") for p in pages), pages
    page.locator("#course-site-search").fill("logsumexp")
    page.wait_for_selector("#course-site-results a.course-site-result[href*='08_fast_attention']")
    page.screenshot(path=str(screenshots / "site-search-08.png"))
    page.locator("#course-site-search").fill("zqxjvw")
    page.wait_for_selector(".course-site-no-results")
    said = page.eval_on_selector_all("#course-site-results li", "ls => ls.map(l => l.textContent)")
    assert said == ["Nothing found for \u201czqxjvw\u201d."], said
    assert_offline(page)


def test_code_cells_copy(site, offline_page, screenshots):
    """Issue 29 item 7: a code cell's copy button copies the cell's code."""
    page = offline_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto((site.out / "02_scaled_attention.html").as_uri())
    button = page.locator("button.course-site-copy").nth(1)
    button.scroll_into_view_if_needed()
    expected = button.evaluate("b => b.parentElement.querySelector('pre').textContent.replace(/\\n$/, '')")
    button.click()
    page.wait_for_selector("button.course-site-copy[data-copied]")
    assert button.get_attribute("data-copied") == "yes"
    assert page.evaluate("() => navigator.clipboard.readText()") == expected
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshots / "site-colab-and-copy.png"))
    assert_offline(page)
