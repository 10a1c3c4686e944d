"""course_tools.site: the course as a static site, checked without a browser (tests/e2e/test_e2e_site.py opens it).

The course's own site is built once for the module (every solved notebook, found on disk); the behaviour of the
builder (links, widgets, titles, refusing an output, rebuilding) is checked on two small notebooks made here.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import re
import shlex
import shutil
import subprocess
import sys
import zlib
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_tools import build, vendor_js
from course_tools import site as site_mod
from course_tools.build import colab_url
from course_tools.site import SITE_MARK, build_site, main

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
# Tags whose src/href the browser loads by itself (a reader's click on <a href> is not a request of the page).
LOADED = {(tag, "src") for tag in ("script", "img", "iframe", "source", "video", "audio", "embed", "track", "input")}
LOADED |= {("link", "href"), ("object", "data")} | {(t, a) for t in ("image", "use") for a in ("href", "xlink:href")}


class _Refs(HTMLParser):
    """Every (tag, attribute, value) that names a URL, and every element id, of one page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs: list[tuple[str, str, str]] = []
        self.ids: list[str] = []
        self.toc: list[str] = []
        self._in_toc = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "nav" and "course-site-toc" in (a.get("class") or ""):
            self._in_toc = 1
        elif tag == "nav" and self._in_toc:
            self._in_toc += 1
        for name in ("src", "href", "data", "xlink:href", "poster"):
            if a.get(name) is not None:
                self.refs.append((tag, name, a[name]))
                if self._in_toc and tag == "a" and name == "href" and a[name].startswith("#"):
                    self.toc.append(a[name])

    def handle_endtag(self, tag):
        if tag == "nav" and self._in_toc:
            self._in_toc -= 1


def _parse(path: Path) -> _Refs:
    p = _Refs()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def course_site(tmp_path_factory):
    return build_site(tmp_path_factory.mktemp("site") / "site")


@pytest.fixture(scope="module")
def pages(course_site):
    """Each notebook's page of the course's site and its HTML, in course order."""
    return {page: page.read_text(encoding="utf-8") for page in course_site.pages}


# ------------------------------------------------------------------------------------------ the course's site


def test_every_solved_notebook_has_a_page_in_course_order(course_site):
    assert NOTEBOOKS, "no solved notebooks in solutions/"
    assert course_site.pages == [course_site.out / f"{p.stem}.html" for p in NOTEBOOKS]
    for page in [course_site.index, *course_site.pages]:
        assert page.is_file() and page.stat().st_size > 0, page
    assert not list(course_site.out.rglob("*.tmp")), "a temporary file of an atomic write was left behind"
    assert course_site.seconds > 0


def test_the_index_lists_every_notebook_in_order_with_title_and_time(course_site):
    text = course_site.index.read_text(encoding="utf-8")
    listed = re.findall(r'<li data-course-notebook="([^"]+)">\s*<h2><a href="([^"]+)">', text)
    assert listed == [(p.name, f"{p.stem}.html") for p in NOTEBOOKS]
    for nb_path in NOTEBOOKS:
        first = next(c.source for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "markdown")
        number = nb_path.name[:2]
        assert re.search(rf'<a href="{nb_path.stem}.html">{number} ', text), f"no title for {nb_path.name}"
        time = re.search(r"\*\*Time:?\*\*:?\s*(about \d+ minutes)", first)
        if time:  # every notebook that states its time has it on the index
            block = text.split(f'data-course-notebook="{nb_path.name}"')[1].split("</li>")[0]
            assert f"Time: {time.group(1)}" in block, nb_path.name


def test_no_page_loads_anything_from_the_network(course_site):
    """Scripts, styles, images, frames and fonts come from the site itself; only links a reader clicks go out."""
    pages = [course_site.index, *course_site.pages]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for tag, attr, value in _parse(page).refs:
            scheme = urlparse(value).scheme
            if (tag, attr) in LOADED:
                assert scheme in ("", "data") and not value.startswith("//"), f"{page.name}: <{tag} {attr}={value}>"
        for host in ("cdnjs.cloudflare.com", "cdn.jsdelivr.net", "unpkg.com", "fonts.googleapis.com"):
            assert host not in text, f"{page.name} names {host}"
        assert "MathJax.Hub" not in text and "embed-amd.js" not in text, page.name
        styles = re.findall(r"<style[^>]*>(.*?)</style>", text, flags=re.DOTALL)
        for css in styles:
            for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css) + re.findall(r"@import\s+['\"]([^'\"]+)", css):
                assert urlparse(url).scheme in ("", "data"), f"{page.name}: a style loads {url}"
    for css in course_site.out.rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8")):
            assert urlparse(url).scheme in ("", "data"), f"{css.name} loads {url}"
            if not url.startswith("data:"):
                assert (css.parent / url.split("#")[0].split("?")[0]).is_file(), f"{css.name}: {url} is missing"


def test_every_local_link_and_anchor_resolves(course_site):
    pages = [course_site.index, *course_site.pages]
    parsed = {p.name: _parse(p) for p in pages}
    for page in pages:
        for tag, attr, value in parsed[page.name].refs:
            url = urlparse(value)
            if url.scheme or value.startswith("//"):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            assert target.is_file(), f"{page.name}: <{tag} {attr}={value}> points to a missing file"
            if url.fragment and target.suffix == ".html":
                assert unquote(url.fragment) in parsed[target.name].ids, f"{page.name}: {value}: no such anchor"


def test_each_page_has_a_table_of_contents_of_its_headings(pages):
    for page, text in pages.items():
        p = _parse(page)
        h2 = re.findall(r'<h2 id="([^"]+)">.*?<a class="anchor-link"', text)
        assert p.toc, f"{page.name} has no table of contents"
        assert [unquote(t[1:]) for t in p.toc if t[1:] in h2] == h2, f"{page.name}: the contents miss a heading"
        assert all(unquote(t[1:]) in p.ids for t in p.toc), page.name
        assert len(set(h2)) == len(h2), f"{page.name}: two headings share an anchor"


def test_pages_chain_previous_and_next_in_course_order(pages):
    names = [p.name for p in pages]
    for i, (page, text) in enumerate(pages.items()):
        prev = re.findall(r'class="course-site-prev" href="([^"]+)"', text)
        nxt = re.findall(r'class="course-site-next" href="([^"]+)"', text)
        assert set(prev) == ({names[i - 1]} if i > 0 else set()), page.name
        assert set(nxt) == ({names[i + 1]} if i + 1 < len(names) else set()), page.name


def test_outputs_images_widgets_and_bertviz_views_are_on_the_pages(pages):
    for nb_path, (page, text) in zip(NOTEBOOKS, pages.items(), strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        data = [o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        pngs = sum("image/png" in d for d in data)
        assert text.count('src="data:image/png;base64,') >= pngs, page.name
        widgets = sum("application/vnd.jupyter.widget-view+json" in d for d in data)
        assert text.count('data-course-widget="note"') == widgets, page.name
        assert not re.search(r"<pre>[^<]*(?:Int|Float)Slider\(value=", text), f"{page.name}: a widget's repr"
        views = sum("".join(d["text/html"]).count('data-course-view="head"') for d in data if "text/html" in d)
        assert text.count('data-course-view="head"') == views, page.name
        assert "# NBVAL_" not in text, page.name
        assert "assets/katex/katex.min.js" in text and "assets/require.js" in text


def test_the_hosted_setup_cell_is_not_on_the_pages(pages):
    """It sets the course up on a hosted notebook service; a reader of the site has nothing to set up."""
    code = build.hosted_cells("notebooks/01_dot_product_toy.ipynb")[1].source
    for page, text in pages.items():
        assert "_set_up_hosted_course" not in text and build.HOSTED_ID not in text, page.name
        assert html.escape(code.splitlines()[0][len("#@title ") :]) not in text, page.name


def test_without_the_hosted_setup_cell_the_page_numbers_its_cells_from_one(tmp_path, small_solutions):
    nb = nbformat.read(small_solutions / "01_first.ipynb", as_version=4)
    _, setup = build.hosted_cells("notebooks/01_first.ipynb")
    setup.execution_count = 1
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.execution_count += 1
    nb.cells.insert(1, setup)
    nbformat.write(nb, small_solutions / "01_first.ipynb")
    page = (build_site(tmp_path / "site", small_solutions).out / "01_first.html").read_text(encoding="utf-8")
    assert "_set_up_hosted_course" not in page and "#@title" not in page
    prompts = re.findall(r'jp-InputPrompt jp-InputArea-prompt">In\xa0\[(\d+)\]:', page)
    assert prompts == ["1", "2", "3"], prompts


def _called_explorers(source: str, explorers: dict) -> list[str]:
    return [name for name in re.findall(r"\b(\w+_explorer)\(", source) if name in explorers]


def test_every_widget_note_names_every_control(pages):
    """Before, a note named only the controls the widget's saved text showed before it was cut at 110 characters:
    01 said "angle" without "length", 02 lacked "scale", 03 "length" and "fill"."""
    explorers = site_mod.explorer_controls()
    assert explorers["lookup_explorer"] == ["angle", "length"]
    assert explorers["entropy_explorer"] == ["head_dim D", "scale"]
    assert explorers["mask_explorer"] == ["mask", "length", "fill"]
    seen = 0
    for nb_path, (page, text) in zip(NOTEBOOKS, pages.items(), strict=True):
        nb = nbformat.read(nb_path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            for name in _called_explorers(cell.source, explorers):
                named = ", ".join(html.escape(label) for label in explorers[name])
                assert f"to move the controls ({named}) and watch" in text, (page.name, name)
                seen += 1
    assert seen >= 4, "the explorers of notebooks 01 to 04 were not found"


def test_the_labels_read_from_the_explorers_code_are_those_of_the_widgets_they_make():
    import torch

    from course_utils import widgets
    from course_utils.induction import AttentionOnlyTransformer, InductionConfig
    from course_utils.multihead import MultiHeadAttention

    torch.manual_seed(0)
    layers = {"two": MultiHeadAttention(8, 2), "four": MultiHeadAttention(8, 4)}
    made = {
        "lookup_explorer": widgets.lookup_explorer(),
        "entropy_explorer": widgets.entropy_explorer(),
        "mask_explorer": widgets.mask_explorer(),
        "head_explorer": widgets.head_explorer(layers, torch.randn(1, 4, 8), list("abcd")),
        "induction_explorer": widgets.induction_explorer(
            AttentionOnlyTransformer(InductionConfig(vocab_size=7, seq_len=3, embed_dim=8, num_heads=2)),
            torch.tensor([[1, 2, 3, 1, 2, 3]]),
        ),
    }
    read = site_mod.explorer_controls()
    assert set(made) < set(read) and "gpt_attention_explorer" in read
    for name, explorer in made.items():
        assert read[name] == [c.description for c in explorer.controls.values()], name


def test_an_interact_cell_has_all_its_controls_named(tmp_path, small_solutions):
    nb = nbformat.read(small_solutions / "01_first.ipynb", as_version=4)
    widget = {
        "application/vnd.jupyter.widget-view+json": {"model_id": "xyz", "version_major": 2, "version_minor": 0},
        "text/plain": "interactive(children=(FloatSlider(value=1.0, description='temperature', max=3.0, min=0.1), "
        "IntSlider(value=8, …",  # cut at 110 characters, as ipywidgets does
    }
    nb.cells.append(
        new_code_cell(
            "_ = widgets.interact(show, temperature=widgets.FloatSlider(value=1.0),\n"
            "                     top_k=widgets.IntSlider(value=8, description='top k'), top_p=0.5)",
            execution_count=4,
            outputs=[new_output("display_data", data=widget)],
        )
    )
    nbformat.write(nb, small_solutions / "01_first.ipynb")
    page = (build_site(tmp_path / "site", small_solutions).out / "01_first.html").read_text(encoding="utf-8")
    assert "to move the controls (temperature, top k, top_p) and watch" in page
    assert "to move the controls (n, mask)" in page  # a cell whose code says nothing: the saved text's labels


def test_pages_follow_the_readers_colour_scheme(course_site, pages):
    """A browser set to dark gets JupyterLab's dark theme and the site's dark colours (tests/e2e/test_e2e_site.py
    looks at the colours in Chromium); figures keep a light panel."""
    dark = course_site.out / "assets" / site_mod.DARK_THEME
    assert "--jp-layout-color0: #111" in dark.read_text(encoding="utf-8")
    for page, text in pages.items():
        links = [
            dict(re.findall(r'(\w+)="([^"]*)"', tag)) for tag in re.findall(r"<link [^>]*>", text) if "dark" in tag
        ]
        assert links == [
            {"href": f"assets/{site_mod.DARK_THEME}", "media": "(prefers-color-scheme: dark)", "rel": "stylesheet"}
        ], (page.name, links)
        where = text.index(f'href="assets/{site_mod.DARK_THEME}"')
        assert where > text.index("--jp-layout-color0"), f"{page.name}: the light theme comes after the dark one"
        assert re.search(r'<meta (?=[^>]*name="color-scheme")(?=[^>]*content="light dark")', text), page.name
    assert '<meta name="color-scheme" content="light dark">' in course_site.index.read_text(encoding="utf-8")
    css = (course_site.out / "assets" / "site.css").read_text(encoding="utf-8")
    assert "@media (prefers-color-scheme: dark)" in css
    plain = css.split("@media (prefers-color-scheme: dark)")[0] + css.split("@media (max-width")[1]
    assert not re.findall(r"(?<![-\w])(?:color|background|border[\w-]*):[^;]*#[0-9a-f]{3,6}", plain), (
        "a fixed colour outside the variables: it would not follow the colour scheme"
    )


def test_open_in_colab_opens_the_learner_copy_not_the_solutions(course_site, pages):
    """A learner reading the site before a workshop follows a page's Colab link to the exercises, not to the
    solved notebook the page shows (every solved notebook links to itself on Colab)."""
    for page, text in pages.items():
        links = re.findall(r'href="(https://colab\.research\.google\.com/[^"]*)"', text)
        # the button at the top of the page, above the notebook, and the link of its first cell
        assert links == [colab_url(f"notebooks/{page.stem}.ipynb")] * 2, (page.name, links)
        assert text.index('<a class="course-site-colab" href=') < text.index("<main>"), page.name
        assert "open this notebook in Google Colab, its exercises unsolved</a>" in text
    assert not any("colab" in n.lower() for n in course_site.notes)


def test_the_markdown_math_is_left_for_katex(pages):
    """nbconvert keeps ``$...$`` as text; KaTeX typesets it in the browser (the e2e test sees it typeset)."""
    with_math = 0
    for nb_path, (page, text) in zip(NOTEBOOKS, pages.items(), strict=True):
        markdown = "\n".join(c.source for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "markdown")
        found = re.findall(r"\$\$.+?\$\$|\$[^$\n`]+\$", markdown, flags=re.DOTALL)
        if found:
            with_math += 1
            missing = [m for m in found if html.escape(m, quote=False) not in text]
            assert missing == [], f"{page.name}: math not kept as written: {missing[:3]}"
    assert with_math >= 1, "no notebook has $...$ math: this test checks nothing"


def test_the_vendored_katex_matches_its_sources(tmp_path):
    assert vendor_js.check_bundle() == []
    copy = tmp_path / "katex"
    shutil.copytree(vendor_js.KATEX_DIR, copy)
    (copy / "katex.min.js").write_text("alert(1)", encoding="utf-8")
    (copy / "fonts" / "KaTeX_Main-Regular.woff2").unlink()
    problems = vendor_js.check_bundle(folder=copy)
    assert any(re.match(r"katex\.min\.js \(katex@[\d.]+\) has sha256 [0-9a-f]{64}", p) for p in problems)
    assert any("fonts/KaTeX_Main-Regular.woff2" in p and "is missing" in p for p in problems)


@pytest.mark.parametrize(
    ("bundle", "changed", "said"),
    [
        ("KATEX", "contrib/auto-render.min.js", r"contrib/auto-render\.min\.js \(katex@[\d.]+\) has sha256"),
        ("MINISEARCH", "index.js", r"index\.js \(minisearch@[\d.]+\) has sha256"),
    ],
)
def test_a_changed_vendored_file_stops_the_build(bundle, changed, said, tmp_path, monkeypatch, small_solutions):
    copy = tmp_path / "vendored"
    shutil.copytree(getattr(vendor_js, bundle).folder, copy)
    (copy / changed).write_text("/* changed */", encoding="utf-8")
    monkeypatch.setattr(site_mod, bundle, dataclasses.replace(getattr(vendor_js, bundle), folder=copy))
    with pytest.raises(RuntimeError, match=said):
        build_site(tmp_path / "site", small_solutions)
    assert not (tmp_path / "site").exists()


# ------------------------------------------------------------------------------------------ the builder


def _png() -> str:
    """A 1x1 PNG, base64 (as a notebook stores an image output)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    raw = chunk(b"IHDR", (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0]))
    raw += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + raw).decode()


def _notebook(title: str, body: str, link: str) -> nbformat.NotebookNode:
    widget = {
        "application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0},
        "text/plain": "interactive(children=(IntSlider(value=3, description='n', max=10), "
        "Dropdown(description='mask', options=('a', 'b')), Output()))",
    }
    progress = {
        "application/vnd.jupyter.widget-view+json": {"model_id": "def", "version_major": 2, "version_minor": 0},
        "text/plain": "  0%|          | 0/400 [00:00<?, ?it/s]",
    }
    return new_notebook(
        cells=[
            new_markdown_cell(f"# {title}\n\n{body}\n\n**Time:** about 5 minutes. **Runs on:** a CPU."),
            new_code_cell(
                "# NBVAL_IGNORE_OUTPUT\nprint('hello')",
                execution_count=1,
                outputs=[new_output("stream", name="stdout", text="hello\n")],
            ),
            new_markdown_cell(
                f"## Part one\n\nThe score is $q \\cdot k$. See [the other one]({link}).\n\n"
                "### A detail\n\ntext\n\n## Part two\n\nmore"
            ),
            new_code_cell(
                "plot()",
                execution_count=2,
                outputs=[new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"})],
            ),
            new_code_cell(
                "explore()",
                execution_count=3,
                outputs=[new_output("display_data", data=widget), new_output("display_data", data=progress)],
            ),
        ]
    )


@pytest.fixture
def small_solutions(tmp_path) -> Path:
    folder = tmp_path / "solutions"
    folder.mkdir()
    nbformat.write(
        _notebook("01 First `steps`", "The first notebook.", "02_second.ipynb#Part-two"), folder / "01_first.ipynb"
    )
    nbformat.write(
        _notebook("02 Second", "The second notebook.", "../notebooks/01_first.ipynb"), folder / "02_second.ipynb"
    )
    nbformat.write(_notebook("x", "not a course notebook", "x.ipynb"), folder / "backup-01_first-2026.ipynb")
    return folder


def test_links_between_notebooks_point_to_their_pages(tmp_path, small_solutions):
    site = build_site(tmp_path / "site", small_solutions)
    assert [p.name for p in site.pages] == ["01_first.html", "02_second.html"]
    first = (site.out / "01_first.html").read_text(encoding="utf-8")
    second = (site.out / "02_second.html").read_text(encoding="utf-8")
    colab = r'<p class="course-site-actions">.*?</p>'  # the Colab button opens notebooks/01_first.ipynb there
    local = re.sub(rf"<code>.*?</code>|{colab}", "", first, flags=re.DOTALL)
    assert 'href="02_second.html#Part-two"' in first and ".ipynb" not in local
    assert 'href="01_first.html"' in second
    assert 'id="Part-two"' in second


def test_a_link_to_a_notebook_not_in_the_site_is_reported(tmp_path, small_solutions):
    (small_solutions / "02_second.ipynb").unlink()
    site = build_site(tmp_path / "site", small_solutions)
    assert any("01_first.html links to 02_second.ipynb, which is not in solutions/" in n for n in site.notes)


def test_the_colab_link_goes_to_the_learner_copy_and_another_to_solutions_is_reported(tmp_path, small_solutions):
    nb = nbformat.read(small_solutions / "01_first.ipynb", as_version=4)
    nb.cells[0].source += f"\n\n[open this notebook in Google Colab]({colab_url('solutions/01_first.ipynb')})"
    nb.cells[2].source += f"\n\n[the solved one]({colab_url('solutions/02_second.ipynb')})"
    nbformat.write(nb, small_solutions / "01_first.ipynb")
    site = build_site(tmp_path / "site", small_solutions)
    page = (site.out / "01_first.html").read_text(encoding="utf-8")
    assert f'href="{colab_url("notebooks/01_first.ipynb")}"' in page
    assert colab_url("solutions/01_first.ipynb") not in page
    assert [n for n in site.notes if "Colab" in n] == [
        "01_first.html still links to a solved notebook on Colab (not through the course's own 'open in Colab' "
        "link, which goes to notebooks/01_first.ipynb): a reader gets the solutions"
    ]


def test_titles_times_contents_and_widget_notes(tmp_path, small_solutions):
    site = build_site(tmp_path / "site", small_solutions)
    index = site.index.read_text(encoding="utf-8")
    assert '<a href="01_first.html">01 First <code>steps</code></a>' in index
    assert index.count("Time: about 5 minutes") == 2
    assert "<p>The first notebook.</p>" in index
    page = (site.out / "01_first.html").read_text(encoding="utf-8")
    assert "<title>01 First steps</title>" in page
    toc = page.split('<ol class="course-site-contents">')[1].split("</nav>")[0]
    assert re.findall(r'href="#([^"]+)"', toc) == ["Part-one", "A-detail", "Part-two"]
    assert "<ol>" in toc  # the h3 is nested under its h2
    assert (
        "<strong>Interactive in JupyterLab</strong>: open <code>notebooks/01_first.ipynb</code> to move the "
        "controls (n, mask)"
    ) in page
    assert "A progress bar: it moves while the cell runs in JupyterLab" in page
    assert "IntSlider(value=3" not in page and "# NBVAL_IGNORE_OUTPUT" not in page
    assert page.count('src="data:image/png;base64,') == 1
    assert r"$q \cdot k$" in page


# What `course.py site OUT` refuses before any page is written: one line, exit code 2. {root} is the course, {tmp} a
# new folder, {file} a file in it, {small} two solved notebooks; an OUT inside the course's sources is refused even
# with --force. Below a file or in /sys, /proc it used to end in a traceback.
SITE_REFUSED = [
    *(
        (f"{{root}}/{inside}/site-test --force", r"is inside \w+/, a folder of the course's sources.*--force does not")
        for inside in ("notebooks", "solutions", "course_utils", "course_tools", "notebooks/site")
    ),
    ("{root_parent} --force", r"holds the course folder .* itself"),
    ("{root}/site-test-folder", r"is inside the course folder .*add --force"),
    ("{tmp}/site --solutions {tmp}/missing", r"no folder .*missing: the site is made from the solved notebooks"),
    ("{tmp}/site --solutions {tmp}/empty", r"no solved notebooks \(\[0-9\]\[0-9\]_\*\.ipynb\) in"),
    (
        "{file}/site",
        r"^course site: cannot write the site to {file}/site: {file} is a file, not a folder; give the site a path "
        r"in a folder you can write to, e\.g\. {home}/site\n$",
    ),
    *(
        (
            f"{system}/site",
            rf"^course site: cannot write the site to {system}/site: the system .* in {system} \(.*\); "
            r"give the site a path in a folder you can write to, e\.g\. .*\n$",
        )
        for system in ("/sys", "/proc")
    ),
]


@pytest.mark.parametrize(("args", "said"), SITE_REFUSED)
def test_a_site_is_refused_in_one_line_before_anything_is_written(args, said, tmp_path, small_solutions, capsys):
    system = next((d for d in ("/sys", "/proc") if args.startswith(f"{d}/")), None)
    if system and not (sys.platform.startswith("linux") and Path(system).is_dir()):
        pytest.skip(f"no {system} here")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("a learner's notes", encoding="utf-8")
    where = {"root": ROOT, "root_parent": ROOT.parent, "tmp": tmp_path, "file": tmp_path / "notes.txt"}
    where.update(home=Path.home(), small=small_solutions)
    before = {p: sorted(p.iterdir()) for p in (ROOT, ROOT / "notebooks", tmp_path)}
    words = args.format(**where).split()
    assert main(words if "--solutions" in words else [*words, "--solutions", str(small_solutions)]) == 2
    said = said.format(**{k: re.escape(str(v)) for k, v in where.items()})
    assert re.search(said, capsys.readouterr().err, re.DOTALL), said
    assert {p: sorted(p.iterdir()) for p in before} == before
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "a learner's notes"


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match=r"out must be a folder path \(str or Path\), got NoneType"):
        build_site(None)
    with pytest.raises(ValueError, match=r"out must name a folder for the site, got an empty path"):
        build_site("")


def test_an_existing_folder_needs_force_and_is_moved_aside_whole(tmp_path, small_solutions):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("a learner's notes", encoding="utf-8")
    with pytest.raises(ValueError, match=r"already exists \(a folder that is not a site made by this command\)"):
        build_site(out, small_solutions)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "a learner's notes"
    site = build_site(out, small_solutions, force=True, now=datetime(2026, 1, 2, 3, 4, 5))
    backup = tmp_path / "backup-out-20260102-030405"
    assert (backup / "notes.txt").read_text(encoding="utf-8") == "a learner's notes"
    assert any(str(backup) in n for n in site.notes)
    assert (out / "index.html").is_file() and not (out / "notes.txt").exists()
    file = tmp_path / "a-file"
    file.write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match=r"already exists \(a file\)"):
        build_site(file, small_solutions)


def test_an_empty_folder_and_a_site_made_before_need_no_force(tmp_path, small_solutions):
    out = tmp_path / "site"
    out.mkdir()
    build_site(out, small_solutions)
    assert (out / SITE_MARK).is_file()
    edited = out / "01_first.html"
    edited.write_text("my notes on this page", encoding="utf-8")
    site = build_site(out, small_solutions, now=datetime(2026, 1, 2, 3, 4, 5))  # a rebuild: no --force
    kept = out / "backup-01_first-20260102-030405.html"
    assert kept.read_text(encoding="utf-8") == "my notes on this page"
    assert any("01_first.html was changed since the site was built: kept as" in n for n in site.notes)
    assert "course-site-toc" in edited.read_text(encoding="utf-8")
    assert not any("02_second" in n for n in site.notes)  # an unchanged page is simply replaced
    (small_solutions / "02_second.ipynb").unlink()
    site = build_site(out, small_solutions)
    assert any("left in place from an earlier build" in n and "02_second.html" in n for n in site.notes)
    assert (out / "02_second.html").is_file()


def test_the_command_course_py_prints_pastes_back_whole(tmp_path):
    """`[course] $ ...` names the command as a shell reads it: a path with spaces and letters beyond ASCII is
    quoted (it broke into three arguments when pasted). An existing folder: refused before any page is made."""
    out = tmp_path / "s12 dir" / "sité ü"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "course.py", "site", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and "already exists" in proc.stderr, proc.stdout + proc.stderr
    shown = next(ln for ln in proc.stdout.splitlines() if ln.startswith("[course] $ "))
    assert shlex.split(shown.removeprefix("[course] $ "))[-3:] == ["-m", "course_tools.site", str(out)], shown


def test_a_link_to_a_site_is_refused_as_a_link(tmp_path, small_solutions):
    """OUT a symbolic link to a site made before: refused, saying it is a link (it said "a folder that is not a
    site made by this command"); --force moves the link aside, and the site it points to is left as it is."""
    made = build_site(tmp_path / "site", small_solutions).out
    link = tmp_path / "link"
    link.symlink_to(made)
    shown = re.escape(str(made))
    with pytest.raises(
        ValueError,
        match=rf"link is a symbolic link \(to {shown}\); site refuses links so that it "
        rf"never writes outside the folder it is given: give the folder itself "
        rf"\({shown}\) or a new one, or add --force",
    ):
        build_site(link, small_solutions)
    before = {p: p.read_bytes() for p in made.rglob("*") if p.is_file()}
    build_site(link, small_solutions, force=True, now=datetime(2026, 1, 2, 3, 4, 5))
    assert (tmp_path / "backup-link-20260102-030405").is_symlink() and not link.is_symlink()
    assert (link / "index.html").is_file()
    assert {p: p.read_bytes() for p in made.rglob("*") if p.is_file()} == before


def test_the_toc_nests_third_level_headings():
    page = (
        '<h2 id="a">A<a class="anchor-link" href="#a">¶</a></h2><h3 id="b">B <code>x</code>'
        '<a class="anchor-link" href="#b">¶</a></h3><h2 id="c">C<a class="anchor-link" href="#c">¶</a></h2>'
        '<h3 id="d">D<a class="anchor-link" href="#d">¶</a></h3>'
    )
    toc = site_mod._toc(page)
    assert re.sub(r"\s+", "", toc) == (
        '<olclass="course-site-contents"><li><ahref="#a">A</a><ol><li>'
        '<ahref="#b">Bx</a></li></ol></li><li><ahref="#c">C</a><ol><li>'
        '<ahref="#d">D</a></li></ol></li></ol>'
    )
    assert site_mod._toc("<p>no headings</p>") == ""


def test_a_rebuild_removes_the_temporary_files_of_a_killed_build(tmp_path, small_solutions):
    out = tmp_path / "site"
    build_site(out, small_solutions)
    dead = 4194305  # above Linux's largest pid: no such process
    stale = [out / f".index.html.{dead}-abc.tmp", out / "assets" / "katex" / "fonts" / f".x.woff2.{dead}-abc.tmp"]
    for f in stale:
        f.write_bytes(b"half a file")
    build_site(out, small_solutions)
    assert not any(f.exists() for f in stale)


# ------------------------------------------------------------------------------------- search, Colab, the path


def _search_documents(site) -> list[dict]:
    text = (site.out / site_mod.SEARCH_INDEX).read_text(encoding="utf-8")
    assert text.count("window.COURSE_SEARCH_DOCUMENTS = ") == 1
    return json.loads(text[text.index("= ") + 2 : text.rindex(";")])


def test_the_search_documents_cover_every_page_and_open_their_headings(course_site):
    """Issue 29 item 7: one document per section of every notebook, each opening a heading that is on its page;
    the words a reader searches for are in them (a function's name from the code, "logsumexp" only on 08)."""
    docs = _search_documents(course_site)
    assert {d["page"] for d in docs} == {p.name for p in course_site.pages}
    assert len({d["id"] for d in docs}) == len(docs)
    ids = {p.name: set(_parse(p).ids) for p in course_site.pages}
    for d in docs:
        assert d["anchor"] == "" or d["anchor"] in ids[d["page"]], d["id"]
        assert d["id"] == f"{d['page']}#{d['anchor']}" and d["title"] and d["heading"]
    toc_count = {p.name: len(_parse(p).toc) for p in course_site.pages}
    for page, n in toc_count.items():  # every heading of the contents column is a document of its own
        assert sum(d["page"] == page and d["anchor"] != "" for d in docs) >= n, page
    found = {d["page"] for d in docs if "logsumexp" in d["text"].lower()}
    assert found == {"08_fast_attention.html"}
    assert any("tiled_attention" in d["text"] for d in docs if d["page"] == "08_fast_attention.html")
    assert not any("$" in d["text"] or "\\boldsymbol" in d["text"] for d in docs)  # math as words, not TeX
    assert not any(re.search(r"(?<!\S)-{3,}(?!\S)", d["text"]) for d in docs)  # no table rule left: "used by --- --"


@pytest.mark.parametrize(
    "markdown, words",
    [
        ("a `KeyError` if it does `not`, then", "a KeyError if it does not, then"),  # was "does not , then"
        ("the mask (`True`) is **kept**.", "the mask (True) is kept."),
        ("| meaning | used by |\n|---|:--:|\n| block | `nn.MultiheadAttention` |", "meaning used by"),
        ("run `course.py check --learner NAME`", "run course.py check --learner NAME"),
    ],
)
def test_search_words_leave_no_space_before_punctuation_or_table_rules(markdown, words):
    """A tester's excerpts read "does , not" and "used by --- --": what removed code ticks and table bars left."""
    got = " ".join(site_mod._plain_markdown(line) for line in markdown.splitlines())
    assert got.startswith(words), got
    assert "---" not in got and " ," not in got and " ." not in got


def test_the_search_library_is_minisearch_vendored_from_npm_with_its_sha256(course_site, pages):
    """Not a hand-written index: MiniSearch, fetched from the npm registry by vendor_js (sha512 checked), each
    file's sha256 and the licence recorded; the site copies the checked files."""
    from course_utils._files import sha256_bytes

    record = json.loads((vendor_js.MINISEARCH.folder / "SOURCES.json").read_text(encoding="utf-8"))
    assert record["package"] == "minisearch" and record["tarball"].startswith("https://registry.npmjs.org/")
    assert record["integrity"].startswith("sha512-") and set(record["files"]) == {"index.js"}
    assert record["license_sha256"] == sha256_bytes((vendor_js.MINISEARCH.folder / "LICENSE").read_bytes())
    assert vendor_js.check_bundle(vendor_js.MINISEARCH) == []
    assert vendor_js.MINISEARCH in vendor_js.SITE_BUNDLES
    shipped = course_site.out / "assets" / "minisearch"
    assert (shipped / "index.js").read_bytes() == (vendor_js.MINISEARCH.folder / "index.js").read_bytes()
    licence = (shipped / "LICENSE").read_text(encoding="utf-8")
    assert "Permission is hereby granted, free of charge" in licence and "Luca Ongaro" in licence  # MIT
    for page, text in pages.items():  # loaded before require.js, which would make its UMD wrapper an AMD module
        assert text.index('src="assets/minisearch/index.js"') < text.index('src="assets/require.js"'), page.name
        assert 'id="course-site-search"' in text


def test_the_command_prints_the_sites_path_normalised(tmp_path, small_solutions, capsys):
    """Issue 29 item 15: `python3 course.py site a/b/../site` printed the path with its "..", tried literally."""
    (tmp_path / "b").mkdir()
    assert main([f"{tmp_path}/b/../site", "--solutions", str(small_solutions)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(
        rf"wrote 2 notebooks and the index to {re.escape(str(tmp_path / 'site'))} in \d+ s; "
        rf"open {re.escape(str(tmp_path / 'site' / 'index.html'))} in a browser \(no server needed\)",
        out.strip().splitlines()[-1],
    ), out
    assert (tmp_path / "site" / "index.html").is_file() and not (tmp_path / "b" / "site").exists()
    # issue 29 item 15: a page takes a second or two, so each one is announced before it is rendered
    pages = [line for line in out.splitlines() if line.startswith("page ")]
    assert pages == ["page 1 of 2: 01_first.html", "page 2 of 2: 02_second.html"], out


def test_vendor_js_site_check_names_both_bundles(capsys):
    """`python -m course_tools.vendor_js --site --check`, offline: KaTeX and MiniSearch each match SOURCES.json."""
    assert vendor_js.main(["--site", "--check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("@")[0] for line in lines] == ["ok: katex", "ok: minisearch"], lines
