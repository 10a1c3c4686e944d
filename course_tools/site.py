"""The course as a static site: every solved notebook as an HTML page, read with no server and no network.

    python -m course_tools.site OUT [--force] [--solutions DIR]      (python3 course.py site OUT)

Contract. :func:`build_site` renders every ``solutions/NN_topic.ipynb`` (found on disk, in course order) with
nbconvert's JupyterLab template and the course's own blocks (``static/site/course_page.html.j2``) into OUT:

- ``index.html``: the notebooks in course order, each with its title, first paragraph and time;
- ``NN_topic.html``: the notebook with its saved outputs (plots embedded as ``data:`` images, the bertviz
  views of notebook 11 with their libraries inlined by ``attention_view``), a table of contents of its
  headings, links to the previous and next notebooks; a link to ``NN_other.ipynb`` in the markdown points to
  ``NN_other.html``; ``# NBVAL_...`` comment lines are left out of the code; the "open in Colab" link of its
  first cell opens the learner copy (``notebooks/NN_topic.ipynb``, exercises to do), not the solved notebook;
- ``assets/``: require.js (``course_utils/static/vendor``), KaTeX (``static/katex``, for the markdown's
  ``$...$``), the site's stylesheet and script, with the licences. Every page loads only these, by relative
  paths: no request leaves the page (``tests/e2e/test_e2e_site.py`` checks it in Chromium with the network
  blocked).

An interactive widget cannot work without a kernel; its place shows a note naming every control it has (read
from the code that made it: the explorer of ``course_utils.widgets`` or the ``interact`` call its cell makes) and
saying that they move in JupyterLab. Outputs the notebook saved next to it (a plot) stay. The hosted-setup cell
(``build.HOSTED_ID``), which only a hosted notebook service needs, is left out of the pages.

Pages follow the reader's colour scheme: in a browser set to dark (``prefers-color-scheme: dark``) they take
JupyterLab's dark theme (nbconvert's ``theme-dark.css``, copied into ``assets/``) and the site's own dark colours;
figures, drawn on white, sit on a light panel.

Nothing is lost: OUT must be new, an empty folder, or a site this command made before (``.course-site.json``
records what it wrote; a page changed since then is first moved aside as ``backup-NAME-DATE``). Another
existing OUT, or one inside the course folder, is refused unless ``force``; then an existing OUT is first
moved aside, whole. OUT is never allowed inside a folder of the course's sources (``notebooks/``,
``solutions/``, ``course_utils/``, ``course_tools/``, ...). Every file is written atomically. ValueError for a
bad OUT, FileNotFoundError when there are no solved notebooks, before anything is written.

The site shows the solutions: it is for reading before or after a workshop, not for doing the exercises.
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from course_tools._output import SOURCE_FOLDERS, Ledger, Output, free_output, make_output_folder
from course_tools.build import HOSTED_ID, colab_url
from course_tools.vendor_js import KATEX, MINISEARCH, PACKAGES, VENDOR_DIR, check, check_bundle
from course_utils._files import clean_stale_tmp, move_aside

__all__ = ["build_site", "Site", "SOLUTIONS", "COURSE_TITLE", "main"]

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
TEMPLATES = Path(__file__).resolve().parent / "static" / "site"
COURSE_TITLE = "Attention, Step by Step"
SITE_MARK = ".course-site.json"  # in a site folder: what build_site wrote there, with checksums
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
_OUTPUT = Output(  # the words of the site's refusals (course_tools._output.free_output)
    "the site",
    noun="folder",
    folders=SOURCE_FOLDERS,
    in_folder="'s sources",
    holds_course="give {what} a new {noun} outside it, e.g. {example}",
    link="site refuses links so that it never writes outside the folder it is given",
    other_folder="a folder that is not a site made by this command",
    example="attention-site",
    mark=SITE_MARK,
)


@dataclass
class Site:
    """What :func:`build_site` wrote: the folder, the notebook pages in order, notes, and the time it took."""

    out: Path
    pages: list[Path]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def index(self) -> Path:
        return self.out / "index.html"


@dataclass(frozen=True)
class _Page:
    notebook: str  # 03_masking.ipynb
    page: str  # 03_masking.html
    title: str  # 03 Masking: deciding which keys each query may see (text: the <title>, the pager)
    title_html: str  # the same with its markdown rendered (`code` in a title)
    time: str  # about 45 minutes ("" when the notebook does not say)
    summary_html: str  # the first paragraph, rendered


# ------------------------------------------------------------------------------------------------ the output


def _free_output(out: str | Path, force: bool) -> tuple[Path, bool]:
    """``out`` made absolute, and whether what is there must be moved aside first (ValueError: refused)."""
    if isinstance(out, bool) or not isinstance(out, (str, Path)):
        raise TypeError(f"out must be a folder path (str or Path), got {type(out).__name__}")
    if str(out).strip() == "":
        raise ValueError("out must name a folder for the site, got an empty path")
    return free_output(out, force, _OUTPUT)


# ------------------------------------------------------------------------------------------------ the pages


def _notebooks(solutions: Path) -> list[Path]:
    if not solutions.is_dir():
        raise FileNotFoundError(
            f"no folder {solutions}: the site is made from the solved notebooks; build them "
            f"with `python3 course.py build` (authors) or use the instructor build"
        )
    found = sorted(solutions.glob(NOTEBOOK_GLOB))
    if not found:
        raise FileNotFoundError(
            f"no solved notebooks ({NOTEBOOK_GLOB}) in {solutions}; build them with `python3 course.py build`"
        )
    return found


_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
# "**Time**: about 30 minutes." or "**Time:** about 35 minutes." -> "about 30 minutes"
_TIME = re.compile(r"\*\*Time:?\*\*:?\s*(.+?)\s*(?:\.(?:\s|$)|\*\*|$)", re.MULTILINE)


def _inline_markdown(text: str) -> str:
    """One line of markdown as HTML without the paragraph around it (a title with `code` in it)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    rendered = markdown2html_mistune(text).strip()
    return rendered[3:-4] if rendered.startswith("<p>") and rendered.endswith("</p>") else rendered


def _describe(nb, path: Path) -> tuple[str, str, str, str]:
    """A notebook's title as text and as HTML (its first ``# `` heading), its time (``**Time**: ...``) and its
    first paragraph (HTML), read from the markdown before its first code cell."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    intro = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            break
        if cell.cell_type == "markdown":
            intro.append(cell.source)
    first = intro[0] if intro else ""
    heading = _HEADING.search(first)
    title = heading.group(1) if heading else path.stem.replace("_", " ")
    title_html = _inline_markdown(title)
    found = _TIME.search("\n\n".join(intro))
    when = found.group(1).strip() if found else ""
    rest = first[heading.end() :] if heading else first
    paragraph = next((block.strip() for block in re.split(r"\n\s*\n", rest) if block.strip()), "")
    plain = html.unescape(re.sub(r"<[^>]+>", "", title_html))
    return plain, title_html, when, markdown2html_mistune(paragraph) if paragraph else ""


def _widget_note(output: dict, notebook: str) -> str:
    """What a page shows in place of an interactive widget: its controls, and where they move."""
    text = output.get("data", {}).get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else str(text)
    where = f"<code>notebooks/{html.escape(notebook)}</code>"
    if re.search(r"\d+%\|", text):  # tqdm's progress bar
        return f"<p>A progress bar: it moves while the cell runs in JupyterLab ({where}).</p>"
    controls = output.get("metadata", {}).get(CONTROLS_KEY)  # set by _for_reading from the code that made it
    if not controls:  # a widget made otherwise: the labels its saved text shows (cut at 110 characters)
        controls = list(dict.fromkeys(re.findall(r"description='([^']*)'", text)))
    named = f" ({', '.join(html.escape(c) for c in controls)})" if controls else ""
    return (
        f"<p><strong>Interactive in JupyterLab</strong>: open {where} to move the controls{named} "
        "and watch the output change.</p>"
    )


CONTROLS_KEY = "course_site_controls"  # in a widget output's metadata, on the page's copy of the notebook only


def explorer_controls() -> dict[str, list[str]]:
    """Every explorer of ``course_utils.widgets`` (a function named ``*_explorer``) and its controls' labels, in
    the order it makes them: the ``description=`` of each widget it builds, read from its source (no widget is
    made, so the explorers that need a trained model are read too)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("course_utils.widgets")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_explorer"):
            labels = [
                kw.value
                for call in ast.walk(node)
                if isinstance(call, ast.Call)
                for kw in call.keywords
                if kw.arg == "description" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
            ]
            labels.sort(key=lambda c: (c.lineno, c.col_offset))
            found[node.name] = list(dict.fromkeys(c.value for c in labels))
    return found


def _described(call) -> list[str]:
    """The labels of the controls an ``interact(f, name=widget, ...)`` call makes: each widget's ``description``,
    or the keyword's name, which ipywidgets shows when the widget has none."""
    import ast

    labels = []
    for kw in call.keywords:
        if kw.arg is None:
            continue
        given = [
            k.value.value
            for k in (kw.value.keywords if isinstance(kw.value, ast.Call) else [])
            if k.arg == "description" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
        ]
        labels.append(given[0] if given else kw.arg)
    return labels


def _label_widgets(cell, explorers: dict[str, list[str]]) -> None:
    """Give each widget output of a code cell the labels of all its controls, read from the cell's code: an
    explorer of course_utils.widgets (``Explorer(...)`` outputs) or an ``interact`` call (``interactive(...)``)."""
    import ast

    try:
        tree = ast.parse(cell.source)
    except SyntaxError:  # IPython syntax (a magic): the note names what the saved text shows
        return
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call)), key=lambda c: (c.lineno, c.col_offset)
    )
    made: dict[str, list[list[str]]] = {"Explorer(": [], "interactive(": []}
    for call in calls:
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
        if name in explorers:
            made["Explorer("].append(explorers[name])
        elif name == "interact":
            made["interactive("].append(_described(call))
    for start, labels in made.items():
        views = [
            o
            for o in cell.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
            and "".join(o["data"].get("text/plain", "")).startswith(start)
        ]
        for output, names in zip(views, labels):
            output.setdefault("metadata", {})[CONTROLS_KEY] = names


def _exporter():
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab", template_file="course_page.html.j2", extra_template_paths=[str(TEMPLATES)]
    )
    exporter.register_filter("course_widget_note", _widget_note)
    return exporter


def _for_reading(nb, name: str):
    """A copy of the notebook ``name`` (``03_masking.ipynb``) without its hosted-setup cell and the lines that only
    talk to nbval (``# NBVAL_IGNORE_OUTPUT``), its widgets' outputs labelled with their controls (``CONTROLS_KEY``),
    and with its "open in Colab" link sent to the learner copy
    (``notebooks/03_masking.ipynb``) instead of the solved one: the page shows the solutions, Colab the exercises."""
    solved, learner = colab_url(f"solutions/{name}"), colab_url(f"notebooks/{name}")
    nb = copy.deepcopy(nb)
    hosted = [c for c in nb.cells if c.get("id") == HOSTED_ID]  # setup for hosted notebooks only: left out
    nb.cells = [c for c in nb.cells if c not in hosted]
    if any(c.get("execution_count") for c in hosted):  # and the cells after it numbered from 1, as the page shows
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.get("execution_count"):
                cell.execution_count -= 1
                for out in cell.get("outputs", []):
                    if out.get("execution_count"):
                        out["execution_count"] -= 1
    explorers = explorer_controls()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            opens = f"[open this notebook in Google Colab]({solved})"
            says = f"[open this notebook in Google Colab, its exercises unsolved]({learner})"
            cell.source = cell.source.replace(opens, says).replace(solved, learner)
        if cell.cell_type == "code":
            _label_widgets(cell, explorers)
            lines = cell.source.split("\n")
            kept = [ln for ln in lines if not ln.strip().startswith("# NBVAL_")]
            cell.source = "\n".join(kept)
    return nb


_NOTEBOOK_LINK = re.compile(
    r'href="(?![a-zA-Z][a-zA-Z0-9+.-]*:)(?:\./|\.\./)*(?:(?:notebooks|solutions)/)?'
    r'(\d\d_[^"/#?]+)\.ipynb(#[^"]*)?"'
)
_COLAB_SOLVED = re.compile(r"https://colab\.research\.google\.com/[^\s\"'<>]*/solutions/")
_TOC_HEADING = re.compile(
    r'<h([1-6]) id="([^"]*)"[^>]*>(.*?)<a class="anchor-link" href="#[^"]*">[^<]*</a>\s*</h\1>', re.DOTALL
)


def _link_notebooks(page: str, known: set[str], where: str, notes: list[str]) -> str:
    """``href="03_masking.ipynb#x"`` (also ``../notebooks/...``) -> ``href="03_masking.html#x"``."""

    def swap(m: re.Match) -> str:
        if m.group(1) in known:
            return f'href="{m.group(1)}.html{m.group(2) or ""}"'
        notes.append(f"{where} links to {m.group(1)}.ipynb, which is not in solutions/: the link is left as it is")
        return m.group(0)

    return _NOTEBOOK_LINK.sub(swap, page)


def _toc(page: str) -> str:
    """A nested list of the page's markdown headings below the title (h2, h3), linking to their anchors."""
    items = [
        (int(level), ident, re.sub(r"<[^>]+>", "", inner).strip())
        for level, ident, inner in _TOC_HEADING.findall(page)
        if level in ("2", "3")
    ]
    if not items:
        return ""
    out, depth = ['<ol class="course-site-contents">'], 2
    for i, (level, ident, text) in enumerate(items):
        if level > depth:
            out.append("<ol>")
        elif level < depth:
            out.append("</li></ol></li>")
        elif i:
            out.append("</li>")
        depth = level
        out.append(f'<li><a href="#{ident}">{text}</a>')
    out.append("</li>" + ("</ol></li>" if depth == 3 else "") + "</ol>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ the search

SEARCH_INDEX = "assets/search-documents.js"  # the documents MiniSearch indexes in the reader's browser
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_PAGE_HEADING = re.compile(r'<h[1-6] id="([^"]*)"[^>]*>.*?<a class="anchor-link"', re.DOTALL)


def _plain_markdown(text: str) -> str:
    """Markdown as the words a reader searches for: links' text kept, their addresses, emphasis stars, code ticks
    and math dollars dropped (with no space left before the punctuation after them), tables' rules dropped, TeX
    commands as their words ("\\log \\ell" -> "log ell", braces and wrappers such as "\\text" dropped)."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)  # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](address) -> text
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\\(?:text|operatorname|boldsymbol|mathrm|left|right)\b|\\[,;!]", "", text)  # TeX's wrappers
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text)  # \log -> log, \ell -> ell
    text = re.sub(r"(?<=[(\[])[*`$]+|[*`$]+(?=[,.;:!?)\]])", "", text)  # "`mask`," -> "mask,", not "mask ,"
    text = re.sub(r"[*`$#>|{}]+", " ", text)
    text = re.sub(r"(?<!\S):?-{2,}:?(?!\S)", " ", text)  # a table's "|---|:--:|" rule, once its bars are gone
    return " ".join(text.split())


def search_documents(nb, page: _Page, body: str) -> list[dict]:
    """One document per section of a notebook's page, for the site's search: the page, the anchor of the section's
    heading (read from the page, in order, so that a result opens the very heading), the notebook's title, the
    heading, and the section's words (its markdown made plain, and its code, so that a function's name is found).
    The text before the first heading is the page's own document (anchor "")."""
    anchors = iter(html.unescape(a) for a in _PAGE_HEADING.findall(body[body.find("<main>") :]))
    docs = [{"heading": page.title, "anchor": "", "words": []}]
    for cell in nb.cells:
        if cell.cell_type == "code":
            docs[-1]["words"].append(cell.source)
            continue
        if cell.cell_type != "markdown":
            continue
        fenced = False
        for line in cell.source.splitlines():
            fenced = fenced != line.lstrip().startswith("```")
            heading = None if fenced else _MD_HEADING.match(line)
            if heading:
                title = re.sub(r"[`*]+", "", heading.group(2)).strip()
                docs.append({"heading": title, "anchor": next(anchors, ""), "words": []})
            else:
                docs[-1]["words"].append(_plain_markdown(line))
    out = []
    for n, d in enumerate(docs):
        words = " ".join(" ".join(d["words"]).split())
        if n and d["anchor"] == "":  # more headings in the notebook than on the page: keep to the page
            d["anchor"] = docs[n - 1]["anchor"]
        if words or n:
            out.append(
                {
                    "id": f"{page.page}#{d['anchor']}",
                    "page": page.page,
                    "anchor": d["anchor"],
                    "title": page.title,
                    "heading": d["heading"],
                    "text": words,
                }
            )
    return out


def _search_script(docs: list[dict]) -> bytes:
    """The documents as a script that sets ``window.COURSE_SEARCH_DOCUMENTS`` (a page opened from file:// may load a
    script, but not fetch a JSON file)."""
    payload = json.dumps(docs, ensure_ascii=True, separators=(",", ":"))
    return (
        "// The site's search documents, written by course_tools/site.py; assets/site.js indexes them with "
        f"MiniSearch.\nwindow.COURSE_SEARCH_DOCUMENTS = {payload};\n"
    ).encode("utf-8")


# ------------------------------------------------------------------------------------------------ the assets


def _assets() -> dict[str, bytes]:
    """The files of ``assets/``, checked against the SOURCES.json they were vendored with."""
    problems = check(VENDOR_DIR) + check_bundle(KATEX) + check_bundle(MINISEARCH)
    if problems:
        raise RuntimeError(
            "the vendored JavaScript does not match its SOURCES.json, so the site would load "
            f"unknown code: {'; '.join(problems)} (run: python -m course_tools.vendor_js --check)"
        )
    require = next(p for p in PACKAGES if p.name == "requirejs")
    files = {
        "assets/require.js": (VENDOR_DIR / require.vendored_as).read_bytes(),
        f"assets/{require.license_as}": (VENDOR_DIR / require.license_as).read_bytes(),
    }
    sources = json.loads((KATEX.folder / "SOURCES.json").read_text(encoding="utf-8"))
    for name in [*sources["files"], "LICENSE"]:
        files[f"assets/katex/{name}"] = (KATEX.folder / name).read_bytes()
    # Only the woff2 fonts are vendored (every browser of the last years reads them): the stylesheet's
    # fallbacks to .woff and .ttf files, which the site does not have, are left out.
    css = files["assets/katex/katex.min.css"].decode("utf-8")
    css, n = re.subn(r',url\(fonts/[^)]+\.(?:woff|ttf)\) format\("(?:woff|truetype)"\)', "", css)
    if n == 0 or re.search(r"\.(?:woff|ttf)\)", css):
        raise RuntimeError(
            "KaTeX's stylesheet does not name its fonts as expected (woff2, woff, ttf): "
            f"is {KATEX.name}@{KATEX.version} vendored?"
        )
    files["assets/katex/katex.min.css"] = css.encode("utf-8")
    files["assets/minisearch/index.js"] = (MINISEARCH.folder / "index.js").read_bytes()
    files["assets/minisearch/LICENSE"] = (MINISEARCH.folder / "LICENSE").read_bytes()
    for name in ("site.css", "site.js"):
        files[f"assets/{name}"] = (TEMPLATES / name).read_bytes()
    files[f"assets/{DARK_THEME}"] = _dark_theme()
    return files


DARK_THEME = "jupyterlab-theme-dark.css"  # loaded by every page only when the reader's browser is set to dark


def _dark_theme() -> bytes:
    """JupyterLab's dark theme as nbconvert ships it beside the light one the pages inline (its CSS variables)."""
    from jupyter_core.paths import jupyter_path

    for folder in jupyter_path("nbconvert", "templates", "lab"):
        path = Path(folder) / "static" / "theme-dark.css"
        if path.is_file():
            return path.read_bytes()
    raise RuntimeError(
        "nbconvert's JupyterLab dark theme (templates/lab/static/theme-dark.css) is not installed: is nbconvert "
        "installed whole? (python3 course.py test installs the author set)"
    )


# ------------------------------------------------------------------------------------------------ building


def build_site(
    out: str | Path,
    solutions: str | Path | None = None,
    *,
    force: bool = False,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> Site:
    """Render every solved notebook in ``solutions`` (default: the course's) into the folder ``out``.

    Returns a :class:`Site` (the pages in course order, notes such as files kept aside, the seconds taken).
    See the module's docstring for what ``out`` may be and what ``force`` does; nothing is written when it is
    refused, or when there is no solved notebook. ``progress``, when given, is called with a line before each page.
    """
    import nbformat
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    start = time.perf_counter()
    notebooks = _notebooks(Path(SOLUTIONS if solutions is None else solutions).expanduser())
    out, replace = _free_output(out, force)
    plain = Path(os.path.normpath(out))  # "a/b/../site" said as "a/site", unless a link made ".." mean elsewhere
    out = plain if plain.resolve() == out.resolve() else out.resolve()
    assets = _assets()
    notes: list[str] = []
    if replace:
        notes.append(f"the existing {out} is kept, whole, as {move_aside(out, now)}")
    make_output_folder(out, "the site")
    for folder in sorted({out, *((out / rel).parent for rel in assets)}):
        clean_stale_tmp(folder)  # temporary files of a killed build
    ledger = Ledger(out, SITE_MARK, now, "the site was built", {"made_by": "python3 course.py site"})
    for rel, data in assets.items():
        ledger.write(rel, data)

    read = [(path, nbformat.read(path, as_version=4)) for path in notebooks]
    pages = []
    for path, nb in read:
        title, title_html, when, summary = _describe(nb, path)
        pages.append(_Page(path.name, f"{path.stem}.html", title, title_html, when, summary))
    known = {path.stem for path, _ in read}
    exporter = _exporter()
    documents: list[dict] = []
    for i, ((path, nb), page) in enumerate(zip(read, pages)):
        if progress is not None:  # a page takes a second or two: ten notebooks would be 6-20 s of silence
            progress(f"page {i + 1} of {len(read)}: {page.page}")
        if not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            notes.append(
                f"{path.name} has no saved outputs: its page shows the code only "
                f"(run `python3 course.py build {path.name[:2]}`)"
            )
        site = {
            "notebook": page.notebook,
            "page": page.page,
            "title_html": page.title_html,
            "course_title": COURSE_TITLE,
            "prev": pages[i - 1] if i > 0 else None,
            "next": pages[i + 1] if i + 1 < len(pages) else None,
            "colab": colab_url(f"notebooks/{path.name}"),
        }
        body, _ = exporter.from_notebook_node(
            _for_reading(nb, path.name), resources={"metadata": {"name": page.title}, "site": site}
        )
        if _COLAB_SOLVED.search(body):
            notes.append(
                f"{page.page} still links to a solved notebook on Colab (not through the course's own "
                f"'open in Colab' link, which goes to notebooks/{path.name}): a reader gets the solutions"
            )
        body = _link_notebooks(body, known, page.page, notes)
        body = body.replace("<!--course-site-toc-->", _toc(body), 1)
        ledger.write(page.page, body.encode("utf-8"))
        documents += search_documents(_for_reading(nb, path.name), page, body)
    ledger.write(SEARCH_INDEX, _search_script(documents))

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]))
    from markupsafe import Markup

    index = env.get_template("course_index.html.j2").render(
        course_title=COURSE_TITLE,
        pages=[dict(p.__dict__, summary_html=Markup(p.summary_html), title_html=Markup(p.title_html)) for p in pages],
    )
    ledger.write("index.html", index.encode("utf-8"))
    stale = sorted(
        f
        for f in ledger.files
        if f.endswith(".html") and f != "index.html" and f not in {p.page for p in pages} and (out / f).is_file()
    )
    if stale:
        notes.append(f"left in place from an earlier build (no solved notebook for them now): {', '.join(stale)}")
    ledger.save()
    return Site(out, [out / p.page for p in pages], ledger.notes + notes, time.perf_counter() - start)


# --------------------------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_tools.site", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="a new folder for the site (or one this command made before)")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help=f"the solved notebooks (default {SOLUTIONS})")
    parser.add_argument(
        "--force",
        action="store_true",
        help="use OUT even if it exists (it is first moved aside to backup-OUT-DATE) or lies in the course folder",
    )
    args = parser.parse_args(argv)
    try:
        site = build_site(args.out, args.solutions, force=args.force, progress=lambda line: print(line, flush=True))
    except (ValueError, FileNotFoundError) as e:
        print(f"course site: {e}", file=sys.stderr)
        return 2
    for note in site.notes:
        print(note)
    print(
        f"wrote {len(site.pages)} notebooks and the index to {site.out} in {site.seconds:.0f} s; "
        f"open {site.index} in a browser (no server needed)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
