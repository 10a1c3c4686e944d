"""Build the notebooks from their one source of truth in ``course_source/``.

Each ``course_source/NN_topic.py`` is a notebook in the "percent" format (``# %%`` starts a code
cell, ``# %% [markdown]`` a markdown cell, ``tags=[...]`` sets cell tags). Exercise solutions sit
between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` lines. From each source this writes

- ``solutions/NN_topic.ipynb``: everything, marker lines removed (for instructors and the stuck);
- ``notebooks/NN_topic.ipynb``: the learner copy, each solution replaced by a stub that raises
  ``NotAttempted`` (imported with ``check``), which the exercise check reports as "not attempted".

Both are executed so they open with their outputs, and written atomically. A learner copy in which someone has
answered an exercise is moved aside to ``backup-NAME-DATE.ipynb`` first, so a rebuild never loses a learner's work.
``--check`` rebuilds in memory and fails if the committed notebooks' cells differ from their source (CI runs it).

Usage: ``python -m course_tools.build [--check] [--no-execute] [NAME ...]``;
``python -m course_tools.build --repository https://github.com/OWNER/NAME [--no-execute]`` points every hosted link
at another GitHub repository and rebuilds every notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import nbformat

from course_utils._files import atomic_path, clean_stale_tmp, move_aside

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR, LEARNER_DIR, SOLUTION_DIR = ROOT / "course_source", ROOT / "notebooks", ROOT / "solutions"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotAttempted("replace this line with your code")'  # the learner copy's body of an exercise
_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")


def parse_source(text: str) -> list[dict]:
    """Cells of a percent-format source: dicts with ``cell_type``, ``source`` and ``tags``."""
    cells: list[dict] = []
    current: dict | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            current = {
                "cell_type": "markdown" if m["md"] else "code",
                "lines": [],
                "tags": json.loads(m["tags"]) if m["tags"] else [],
            }
            cells.append(current)
        elif line.startswith("# %%"):
            raise ValueError(f"line {lineno}: malformed cell header {line!r}")
        elif current is None:
            if line.strip():
                raise ValueError(f"line {lineno}: text before the first '# %%' cell header")
        elif current["cell_type"] == "markdown":
            if line and not line.startswith("#"):
                raise ValueError(f"line {lineno}: markdown lines must start with '#', got {line!r}")
            current["lines"].append(line[2:] if line.startswith("# ") else line[1:])
        else:
            current["lines"].append(line)
    for c in cells:
        c["source"] = "\n".join(c.pop("lines")).strip("\n")
    return cells


def _solution_blocks(source: str, learner: bool) -> str:
    out, inside, indent = [], False, ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError("nested '### BEGIN SOLUTION'")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            if learner:
                out += [f"{indent}# YOUR CODE HERE", f"{indent}{STUB}"]
        elif stripped == END:
            if not inside:
                raise ValueError("'### END SOLUTION' without a BEGIN")
            inside = False
        elif not (inside and learner):
            out.append(line)
    if inside:
        raise ValueError("'### BEGIN SOLUTION' without an END")
    return "\n".join(out)


# The course's public repository: every hosted-notebook (Colab) link, the setup cell's clone below, the README's
# course map and the static site point at it. `python3 course.py build --repository https://github.com/OWNER/NAME`
# rewrites this line and the README's links (tests/test_hosted.py compares them), then rebuilds the notebooks.
REPOSITORY = "https://github.com/attention-step-by-step/attention-step-by-step"
REPOSITORY_ENV = "COURSE_REPO_URL"  # overrides REPOSITORY in the setup cell, e.g. for a fork or a local mirror
# Colab opens a notebook from a GitHub repository only: https://github.com/OWNER/NAME, as GitHub spells names.
_GITHUB_REPOSITORY = re.compile(r"https://github\.com/[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")


def colab_url(rel_path: str) -> str:
    """The link that opens the notebook at ``rel_path`` (e.g. ``notebooks/03_masking.ipynb``) in Google Colab."""
    owner_repo = REPOSITORY.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/main/{rel_path}"


def check_repository(url: str) -> str:
    """``url`` as REPOSITORY holds it (a trailing ``/`` or ``.git`` left out), or ValueError in one line."""
    if not isinstance(url, str):
        raise TypeError(f"the repository must be a str such as https://github.com/OWNER/NAME, got {type(url).__name__}")
    text = url.strip().removesuffix("/").removesuffix(".git")
    if not _GITHUB_REPOSITORY.fullmatch(text):
        raise ValueError(
            f"--repository wants a GitHub repository's address, https://github.com/OWNER/NAME (Colab opens "
            f"notebooks from GitHub only), got {url!r}"
        )
    return text


def set_repository(url: str) -> list[Path]:
    """Point REPOSITORY (in this file) and the README's hosted links at the GitHub repository ``url``; the notebooks
    follow when rebuilt, the site when made again. Returns the files changed."""
    global REPOSITORY
    new = check_repository(url).removeprefix("https://github.com/")
    old = REPOSITORY.removeprefix("https://github.com/")
    swaps = [  # the address itself (not a longer name it begins), and the Colab links, which hold OWNER/NAME/
        (re.compile(re.escape(f"https://github.com/{old}") + r"(?![A-Za-z0-9._-])"), f"https://github.com/{new}"),
        (
            re.compile(re.escape(f"https://colab.research.google.com/github/{old}/")),
            f"https://colab.research.google.com/github/{new}/",
        ),
    ]
    changed = []
    for path in (Path(__file__).resolve(), ROOT / "README.md"):
        before = path.read_text(encoding="utf-8")
        text = before
        for pattern, replacement in swaps:
            text = pattern.sub(lambda m, r=replacement: r, text)
        if text != before:
            with atomic_path(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
            changed.append(path)
    REPOSITORY = f"https://github.com/{new}"
    return changed


# The first code cell of every notebook. On a hosted service (Colab and the like) the course is not installed:
# it clones the repository and installs course_utils with pip, which keeps the host's torch when it meets the
# course's floor and never touches JupyterLab or the host's kernel; elsewhere it finds course_utils and does
# nothing. In a course folder whose kernel lacks the course (the wrong kernel chosen) it installs nothing and
# says which kernel to pick. A folder left by a killed clone is moved aside, never deleted. A failure is one
# line (SystemExit), not a traceback. A plain text link (not a badge image) opens it, so that no page of the
# course loads a remote image. On Colab, setup_notebook switches on the widget manager ipywidgets 8 needs.
# It cannot call the course (not installed yet where it matters), so its code is in the cell, collapsed to one
# line: its title (HOSTED_TITLE). JupyterLab and Jupyter Notebook 7 honour ``jupyter.source_hidden``, Colab
# shows a ``#@title`` cell with ``cellView: form`` as its title alone; the static site leaves the cell out.
HOSTED_LINK = (
    "**On a hosted notebook service** (no install; a free GPU for notebook 10): "
    "[open this notebook in Google Colab]({url}), then run its cells from the top. "
    "There the sliders and bertviz views work as they do in JupyterLab."
)
HOSTED_ID = "hosted-setup"
HOSTED_TITLE = "#@title Course setup for hosted notebooks (Colab): installs the course there; elsewhere it does nothing"
HOSTED_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}}
HOSTED_SETUP = (
    HOSTED_TITLE
    + """
import importlib.util


def _set_up_hosted_course(home="attention-step-by-step"):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    for folder in [Path.cwd(), *Path.cwd().parents]:  # a notebook anywhere inside a course folder
        if (folder / "course.py").is_file():
            raise SystemExit(f"this kernel ({{sys.executable}}) cannot import the course of {{folder}}: pick the "
                             "kernel of its .venv, or start JupyterLab there with `python3 course.py lab`; "
                             "nothing was installed")
    repo = os.environ.get("{env}") or "{repository}"
    home = os.path.abspath(home)
    if os.path.isdir(home) and not os.path.isfile(os.path.join(home, "pyproject.toml")):
        aside = f"{{home}}-incomplete-{{time.strftime('%Y%m%d-%H%M%S')}}"
        os.rename(home, aside)  # a clone cut short: kept, not deleted
        print(f"moved an incomplete earlier download aside to {{aside}}")
    source = f"the copy already in {{home}}" if os.path.isdir(home) else repo
    steps = [] if os.path.isdir(home) else [("download", ["git", "clone", "--quiet", "--depth", "1", repo, home])]
    for what, cmd in steps + [("install", [sys.executable, "-m", "pip", "install", "--quiet", "-e", home])]:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as err:
            raise SystemExit(f"could not {{what}} the course: {{cmd[0]}}: {{err.strerror}}") from None
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip() or "no message").splitlines()[-1]
            raise SystemExit(f"could not {{what}} the course from {{source}}: {{said}}")
    sys.path.insert(0, home)  # this kernel started before the install: show it the package
    import torch

    print(f"installed course_utils from {{source}} into {{home}}, with this host's torch {{torch.__version__}}")


if importlib.util.find_spec("course_utils") is None:
    _set_up_hosted_course()"""
)


def hosted_cells(rel_path: str) -> tuple[str, nbformat.NotebookNode]:
    """The line added to the title cell and the setup cell put first among the code cells of ``rel_path``:
    its source collapsed to its title line (``HOSTED_METADATA``), with the id ``hosted-setup``."""
    cell = nbformat.v4.new_code_cell(HOSTED_SETUP.format(env=REPOSITORY_ENV, repository=REPOSITORY))
    cell["id"] = HOSTED_ID
    cell.metadata.update(json.loads(json.dumps(HOSTED_METADATA)))  # a copy: a notebook may change its own
    return HOSTED_LINK.format(url=colab_url(rel_path)), cell


def make_notebook(cells: list[dict], learner: bool, name: str | None = None) -> nbformat.NotebookNode:
    """A notebook (unexecuted) of the learner or the solution version.

    ``name`` (the source's stem, e.g. ``03_masking``) adds the hosted-notebook link to the title cell and the
    hosted setup cell before the first code cell, as every built notebook has; without it, neither.
    """
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    if name is not None:
        link, setup = hosted_cells(f"{'notebooks' if learner else 'solutions'}/{name}.ipynb")
    for i, c in enumerate(cells):
        if name is not None and c["cell_type"] == "code" and setup not in nb.cells:
            nb.cells.append(setup)
        if c["cell_type"] == "markdown":
            cell = nbformat.v4.new_markdown_cell(c["source"])
        else:
            cell = nbformat.v4.new_code_cell(_solution_blocks(c["source"], learner))
        if c["tags"]:
            cell.metadata["tags"] = list(c["tags"])
        cell["id"] = f"cell-{i:03d}"  # stable ids keep diffs small when the notebook is rebuilt
        if name is not None and i == 0 and cell.cell_type == "markdown":
            cell.source = f"{cell.source}\n\n{link}"
        nb.cells.append(cell)
    return nb


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel of the current environment, as nbval will (notebook 10 at its CI size,
    trained afresh in a temporary runs folder, never resumed from a run left in runs/)."""
    import tempfile

    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="course-build-runs-") as runs:
        # The kernel inherits these, whatever the author's shell has: committed outputs come from notebook 10's
        # quick run, trained afresh, with 1x images (a learner's running notebook gets 2x).
        fixed = {"COURSE_GPT_SIZE": "ci", "COURSE_SMALL_FIGURES": "1", "COURSE_RUNS_DIR": runs}
        saved = {name: os.environ.get(name) for name in fixed}
        os.environ.update(fixed)
        try:
            client = NotebookClient(
                nb,
                timeout=timeout,
                kernel_name="python3",
                record_timing=False,
                resources={"metadata": {"path": str(cwd)}},
            )
            client.execute()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    nb.metadata.pop("widgets", None)  # widget state is large and changes every run
    places = {str(ROOT): "<the course folder>", runs: "<a temporary folder>"}  # the build machine's, not the learner's
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [_without(places, out) for out in _merge_streams(cell.outputs)]
    return nb


def _without(places: dict[str, str], out: dict) -> dict:
    """One output with the build machine's folders (notebook 00's report names them) said in words."""

    def said(text: str) -> str:
        for where, words in places.items():
            text = text.replace(where, words)
        return text

    if isinstance(out.get("text"), str):
        out["text"] = said(out["text"])
    for kind, value in out.get("data", {}).items():
        if kind.startswith("text/") and isinstance(value, str):
            out["data"][kind] = said(value)
    return out


def _merge_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) outputs into one, as Jupyter shows them: text streamed a character
    at a time (notebook 10's samples) would otherwise be stored as hundreds of outputs."""
    merged: list = []
    for out in outputs:
        if (
            out.get("output_type") == "stream"
            and merged
            and merged[-1].get("output_type") == "stream"
            and merged[-1].get("name") == out.get("name")
        ):
            merged[-1]["text"] += out["text"]
        else:
            merged.append(out)
    return merged


def _cell_signature(nb: nbformat.NotebookNode) -> list[tuple]:
    return [(c.cell_type, c.source, tuple(c.get("metadata", {}).get("tags", []))) for c in nb.cells]


def sources(names: list[str] | None = None) -> list[Path]:
    found = sorted(SOURCE_DIR.glob("[0-9][0-9]_*.py"))
    if names:
        found = [p for p in found if p.stem in names or p.stem[:2] in names]
    return found


_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](\d\d\.\d+)["']""")
_STUB_LINES = (STUB, "raise NotImplementedError")  # the second: learner copies built before the NotAttempted stub


def learner_work(path: Path) -> list[str]:
    """The exercises a learner has answered in the notebook at ``path`` (its stub replaced), or [] if none.

    A notebook that cannot be read counts as work too (``["unreadable"]``): it is kept rather than overwritten.
    """
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return ["unreadable"]
    answered = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        m = _CHECK_CALL.search(cell.source)
        if m and not any(stub in cell.source for stub in _STUB_LINES):
            answered.append(m.group(1))
    return answered


def write_notebook(nb: nbformat.NotebookNode, target: Path, learner: bool) -> None:
    """Write ``nb`` to ``target`` atomically; a learner copy holding someone's answers is first moved aside."""
    target.parent.mkdir(exist_ok=True)
    clean_stale_tmp(target.parent, target.name)
    if learner and target.exists():
        answered = learner_work(target)
        if answered:
            kept = move_aside(target)
            print(
                f"  {target.relative_to(ROOT)} holds answers ({', '.join(answered)}): kept as {kept.name}", flush=True
            )
    with atomic_path(target) as tmp:
        nbformat.write(nb, tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook stems or numbers (default: all)")
    parser.add_argument("--check", action="store_true", help="fail if committed notebooks differ from source")
    parser.add_argument("--no-execute", action="store_true", help="write notebooks without running them")
    parser.add_argument(
        "--repository",
        metavar="URL",
        help=f"point every hosted (Colab) link, the setup cell's clone, the README's course map and the site at the "
        f"GitHub repository URL (https://github.com/OWNER/NAME; now {REPOSITORY}), then rebuild every notebook",
    )
    args = parser.parse_args(argv)
    if args.repository is not None:
        try:
            check_repository(args.repository)
            if args.check or args.names:
                raise ValueError(
                    "--repository rewrites the links and rebuilds every notebook: give it without --check or names"
                )
        except ValueError as e:
            print(f"course build: {e}", file=sys.stderr)
            return 2
        for path in set_repository(args.repository):
            print(f"{path.relative_to(ROOT)}: hosted links now point at {REPOSITORY}", flush=True)
        print(f"rebuilding every notebook with links to {REPOSITORY}; then make the site again (`course.py site`)")
    problems = []
    for src in sources(args.names):
        cells = parse_source(src.read_text(encoding="utf-8"))
        for learner, folder in ((True, LEARNER_DIR), (False, SOLUTION_DIR)):
            target = folder / f"{src.stem}.ipynb"
            nb = make_notebook(cells, learner, name=src.stem)
            if args.check:
                if not target.exists():
                    problems.append(f"{target.relative_to(ROOT)} is missing")
                elif _cell_signature(nbformat.read(target, as_version=4)) != _cell_signature(nb):
                    problems.append(f"{target.relative_to(ROOT)} differs from {src.relative_to(ROOT)}")
                continue
            print(f"building {target.relative_to(ROOT)}" + ("" if args.no_execute else " (executing)"), flush=True)
            if not args.no_execute:
                nb = execute(nb, folder)
            write_notebook(nb, target, learner)
    if args.check:
        if problems:
            print("Notebooks out of sync with course_source/ (run `python3 course.py build`):")
            print("\n".join(f"  {p}" for p in problems))
            return 1
        print(f"notebooks in sync with course_source/ ({len(sources(args.names))} sources)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
