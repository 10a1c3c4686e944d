"""Every notebook of the course, opened in JupyterLab in a real browser, run top to bottom, offline.

For each notebook (found on disk: a new one needs no change here), its learner copy is run in its own
kernel with Run -> Run All Cells, as a learner would, and its page checked (check_outputs, check_explorer, the
bertviz views); its solution is then opened as committed in the same JupyterLab page (a page of its own loaded a
second JupyterLab: 11-13 CPU-seconds against 4), and must show every exercise "passed". Each worker opens every
notebook in one JupyterLab page (conftest's lab_page). Screenshots
go to reports/screenshots/. Notebook 01's plots are then measured in the dark theme (dark_theme_checks.py).

The solution is not run again here: its cells are the learner copy's but for the exercises' answers, the
learner copy's run covers the browser's part (widgets, explorers, bertviz views), and nbval runs every solution
and compares each of its outputs with the committed ones (`course.py test`). Running it here as well was a sixth
execution of each notebook in `course.py test`, about a sixth of the suite's CPU time.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from bertviz_checks import assert_head_view_rendered
from dark_theme_checks import assert_plots_legible_in_the_dark_theme
from harness import ROOT, SAVED_SOLUTIONS, course_notebooks, save_screenshot

from course_utils.exercises import all_exercises

pytestmark = pytest.mark.browser  # leave these out with: python3 course.py test -m "not browser"

# Whose plots are also checked in JupyterLab's dark theme once its learner copy has run: 4 figures and an explorer.
DARK_THEME_NOTEBOOK = "01_dot_product_toy"
RUN_TIMEOUT_MS = 600_000  # per notebook; each takes well under a minute on a 2-core CPU

# The prompts of code cells whose source shows; a cell whose source is collapsed (the one-line hosted-setup cell)
# shows a placeholder with an empty prompt instead, and is counted apart (HIDDEN_CODE).
CODE_PROMPTS = "[...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea .jp-InputPrompt')]"
HIDDEN_CODE = ".jp-Notebook .jp-CodeCell .jp-InputPlaceholder"
RUN_STARTED = f"() => {{ const first = {CODE_PROMPTS}[0]; return first && first.textContent.trim() !== '[ ]:'; }}"
RUN_FINISHED = f"""() => {{
    const prompts = {CODE_PROMPTS}.map(e => e.textContent.trim());
    const kernel = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return kernel && kernel.dataset.status === 'idle' && prompts.length > 0 && !prompts.some(t => t.includes('*'));
}}"""
ERROR_OUTPUTS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']"
STDERR_OUTPUTS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
# Text a learner must never see: a traceback, a widget that failed to render or shows as its text repr.
BAD_TEXT = re.compile(
    r"Traceback \(most recent call last\)|Error displaying widget|"
    r"\b(?:interactive|VBox|HBox|Output)\(children=|"
    r"\b(?:IntSlider|FloatSlider|Dropdown|ToggleButtons|Checkbox)\(value="
)
# An explorer: a widget box in an output with a control and an Output that shows a picture (ipywidgets'
# `interact`, or course_utils.widgets.Explorer).
EXPLORER = (
    ".jp-OutputArea-output > .jupyter-widgets:has(.widget-output)"
    ":has(.widget-slider, .widget-dropdown, .widget-toggle-buttons, .widget-checkbox)"
)
EXPLORER_SHOWS = """e => { const o = e.querySelector('.widget-output');
    return o.innerText + [...o.querySelectorAll('img')].map(i => i.src).join('|'); }"""


def rel(nb_path) -> str:
    return f"{nb_path.parent.name}/{nb_path.name}"


def wait_until_idle(page) -> None:
    page.wait_for_function(RUN_FINISHED, timeout=RUN_TIMEOUT_MS, polling=500)


def outputs_text(page) -> str:
    return "\n".join(page.locator(".jp-Notebook .jp-OutputArea-output").all_inner_texts())


def change_first_control(explorer, page) -> str | None:
    """Change the first dropdown, slider, toggle or checkbox of an explorer, as a learner would."""
    dropdown = explorer.locator(".widget-dropdown select").first
    if dropdown.count():
        options = dropdown.locator("option").all_inner_texts()
        current = dropdown.evaluate("e => e.options[e.selectedIndex].text")
        other = next(o for o in options if o != current)
        dropdown.select_option(label=other)
        return f"dropdown set to {other!r}"
    slider = explorer.locator(".widget-slider .noUi-handle").first
    if slider.count():
        slider.focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        slider.blur()
        return "slider moved two steps right"
    toggle = explorer.locator(".widget-toggle-buttons button:not(.mod-active)").first
    if toggle.count():
        label = toggle.inner_text()
        toggle.click()
        return f"toggle {label!r} clicked"
    checkbox = explorer.locator(".widget-checkbox input").first
    if checkbox.count():
        checkbox.click()
        return "checkbox clicked"
    return None


def makes_widgets(nb_path) -> bool:
    """Whether the committed notebook has an explorer (an `interact`, or one of course_utils.widgets' explorers),
    so the page must render one and moving its control must change its picture. A progress bar alone (notebook
    10's training) is a widget but not an explorer."""
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return bool(re.search(r"\binteract\(|_explorer\(", code))


def shows_head_view(nb_path) -> bool:
    """Whether the committed notebook displays a bertviz head view of course_utils.attention_view."""
    return 'data-course-view=\\"head\\"' in nb_path.read_text(encoding="utf-8")


def failure(say: str, shot, check, *args) -> list[str]:
    """No problem when ``check(*args)`` passes (bertviz_checks.py, dark_theme_checks.py); else ``say`` and why."""
    try:
        check(*args)
    except AssertionError as err:
        return [f"{say}: {err} (see {shot})"]
    return []


def check_outputs(page, nb_path, shot, ran: bool = True) -> list[str]:
    """Everything wrong with a notebook's page, one sentence each: an executed one (``ran``), or one opened with
    its committed outputs (a solution), whose widgets have no kernel behind them and are not judged here."""
    problems = []
    prompts = page.evaluate(f"() => {CODE_PROMPTS}.map(e => e.textContent.trim())")
    not_run = [i for i, p in enumerate(prompts) if not re.fullmatch(r"\[\d+\]:", p)]
    if not_run and ran:
        problems.append(f"code cells {not_run} (0-based, counting those whose source shows) did not run")
    hidden = page.locator(HIDDEN_CODE).count()  # collapsed cells come first (the hosted-setup cell)
    counts = [int(p[1:-2]) for p in prompts if re.fullmatch(r"\[\d+\]:", p)]
    if ran and hidden and counts and min(counts) != hidden + 1:
        problems.append(f"the {hidden} collapsed code cell(s) at the top did not run first (first count {min(counts)})")
    for err in page.locator(ERROR_OUTPUTS).all_inner_texts():
        problems.append(f"error output:\n{err[:1500]}")
    for err in page.locator(STDERR_OUTPUTS).all_inner_texts():
        if re.search(r"error|warning|traceback", err, re.IGNORECASE):
            problems.append(f"error or warning on stderr:\n{err[:1500]}")
    text = outputs_text(page)
    bad = sorted(set(BAD_TEXT.findall(text)))
    if not ran:  # a saved widget view needs its kernel: JupyterLab says so, and the learner copy's run is judged
        bad = [b for b in bad if b.startswith("Traceback")]
    if bad:
        problems.append(f"the page shows {bad}")
    verdict = "not attempted" if nb_path.parent.name == "notebooks" else "passed"  # solutions/ or its saved copy
    keys = [k for k in all_exercises() if k.split(".")[0] == nb_path.name[:2]]
    missing = [k for k in keys if not re.search(rf"Exercise {re.escape(k)} \([^\n]*\): {verdict}\.", text)]
    if missing:
        problems.append(f"exercises {missing} do not show '{verdict}'")
    return [f"{rel(nb_path)}: {p} (see {shot})" for p in problems]


def check_explorer(page, nb_path, shot) -> list[str]:
    """Change the first control of the first explorer; the picture it shows must change, without errors."""
    where = rel(nb_path)
    explorers = page.locator(EXPLORER)
    if explorers.count() == 0:
        return [f"{where}: the notebook makes an explorer but none (controls above an Output) rendered (see {shot})"]
    explorer = explorers.first
    explorer.scroll_into_view_if_needed()
    before = explorer.evaluate(EXPLORER_SHOWS)
    action = change_first_control(explorer, page)
    if action is None:
        return [f"{where}: the first explorer has no slider, dropdown, toggle or checkbox"]
    try:
        page.wait_for_function(
            f"([before]) => ({EXPLORER_SHOWS})(document.querySelector({EXPLORER!r})) !== before",
            arg=[before],
            timeout=30_000,
        )
    except Exception:
        return [f"{where}: {action}, but the explorer's picture did not change (see {shot})"]
    wait_until_idle(page)
    after = shot.with_name(shot.stem + "__widget.png")
    explorer.screenshot(path=str(after))
    problems = []
    if page.locator(ERROR_OUTPUTS).count():
        problems.append(f"{where}: error output after {action} (see {after})")
    if BAD_TEXT.search(outputs_text(page)):
        problems.append(f"{where}: a widget failed after {action} (see {after})")
    return problems


@pytest.mark.parametrize("stem", sorted({p.stem for p in course_notebooks()}))
def test_notebook_runs_in_jupyterlab(stem, lab, jupyterlab_page, screenshots):
    learner = ROOT / "notebooks" / f"{stem}.ipynb"
    solution = ROOT / "solutions" / f"{stem}.ipynb"
    start = time.monotonic()
    problems = []
    page = jupyterlab_page
    # the learner copy is run, then its solution opened as committed in the same JupyterLab page: its verdicts
    # must show "passed"
    for nb, served in ((learner, "notebooks"), (solution, SAVED_SOLUTIONS)):
        if not nb.exists():
            continue
        ran = nb == learner
        if page.url == "about:blank":
            page.goto(lab.url(f"{served}/{nb.name}"))
        else:
            lab.open_in_the_same_page(page, f"{served}/{nb.name}")
        page.wait_for_selector(".jp-Notebook .jp-CodeCell")
        page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')")  # kernel started and connected
        if ran:  # Run -> Run All Cells from the menu bar, as a learner would
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            page.wait_for_function(RUN_STARTED)
            wait_until_idle(page)
        shot = screenshots / f"{nb.parent.name}__{nb.stem}.jpg"
        save_screenshot(page, shot)
        problems += check_outputs(page, nb, shot, ran=ran)
        if ran and shows_head_view(nb):  # bertviz drew its SVG, offline, with the heads and tokens it was given
            said = f"{rel(nb)}: the bertviz head view did not render"
            problems += failure(said, shot, assert_head_view_rendered, page)
        if ran and makes_widgets(nb):
            problems += check_explorer(page, nb, shot)
        if ran and stem == DARK_THEME_NOTEBOOK:
            dark = screenshots / f"dark-theme__{stem}.jpg"
            said = f"{rel(nb)} in JupyterLab Dark"
            problems += failure(said, dark, assert_plots_legible_in_the_dark_theme, page, dark)
        if page.js_errors:
            problems.append(f"{rel(nb)}: errors in the page's JavaScript: {page.js_errors}")
        if page.network:
            problems.append(f"{rel(nb)}: the page tried to reach the network (blocked): {sorted(set(page.network))}")
        page.js_errors.clear()  # said: the solution's own come next
        page.network.clear()
    print(f"{stem}: the learner copy run and its solution opened in the browser in {time.monotonic() - start:.1f} s")
    assert not problems, "\n\n".join(problems)
