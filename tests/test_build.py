"""The notebooks come from one source: learner copies hold stubs, solutions hold answers, both in sync."""

import re
from pathlib import Path

import nbformat
import pytest

from course_tools import build

ROOT = Path(__file__).resolve().parent.parent
SOURCES = build.sources()

SOURCE = """# %% [markdown]
# # Title
# Some *prose*.

# %% tags=["keep"]
def f(x):
    y = x + 1
    ### BEGIN SOLUTION
    return y * 2
    ### END SOLUTION

check("01.1", f)
"""


def test_parse_source_cells_and_tags():
    cells = build.parse_source(SOURCE)
    assert [c["cell_type"] for c in cells] == ["markdown", "code"]
    assert cells[0]["source"] == "# Title\nSome *prose*."
    assert cells[1]["tags"] == ["keep"]


def test_learner_copy_replaces_the_solution_with_a_stub_at_its_indent():
    cells = build.parse_source(SOURCE)
    learner = build.make_notebook(cells, learner=True).cells[1].source
    solution = build.make_notebook(cells, learner=False).cells[1].source
    assert f"    # YOUR CODE HERE\n    {build.STUB}" in learner
    assert "y * 2" not in learner and "y * 2" in solution
    assert "SOLUTION" not in learner and "SOLUTION" not in solution
    assert "    y = x + 1" in learner and 'check("01.1", f)' in learner


@pytest.mark.parametrize(
    "bad,match",
    [
        ("x = 1\n# %%\n", "text before the first"),
        ("# %% [markdown]\nnot a comment\n", "markdown lines must start with"),
        ("# %%\n### BEGIN SOLUTION\n", "without an END"),
        ("# %%\n### END SOLUTION\n", "without a BEGIN"),
        ("# %%\n### BEGIN SOLUTION\n### BEGIN SOLUTION\n", "nested"),
        ("# %%junk\n", "malformed cell header"),
    ],
)
def test_malformed_sources_are_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        build.make_notebook(build.parse_source(bad), learner=True)


def out_of_sync(said: str) -> str:
    """What the sync test says when a notebook differs from what `build` writes: both causes, each with its fix,
    and the learner copies that hold answers (the second cause, found rather than guessed)."""
    answered = [p for p in sorted(build.LEARNER_DIR.glob("[0-9][0-9]_*.ipynb")) if build.learner_work(p)]
    differ = set(re.findall(r"^\s*(\S+) differs from ", said, re.MULTILINE))
    edited = sorted(n for n in differ if n.startswith("notebooks/") and "solutions/" + n.split("/", 1)[1] not in differ)
    if answered:
        found = "answers in: " + ", ".join(
            f"{p.relative_to(build.ROOT)} ({', '.join(build.learner_work(p))})" for p in answered
        )
    elif edited:  # a changed source changes the solution too: a learner copy that alone differs was edited
        found = f"{', '.join(edited)}: only the learner copy differs, its solution matches, so it is most likely (2)"
    else:
        found = "no learner copy holds answers, so it is most likely (1)"
    return (
        f"{said.rstrip()}\n"
        "A committed notebook differs from what `python3 course.py build` writes. Two causes:\n"
        "  (1) course_source/NN_topic.py changed and the notebooks were not rebuilt: `python3 course.py build NN`;\n"
        "  (2) a notebook in notebooks/ was edited, e.g. you tried its exercises in your clone: put it back with\n"
        "      `python3 course.py reset notebooks/NN_topic.ipynb` (your file is kept beside it as a backup) or\n"
        f"      `git checkout -- notebooks/NN_topic.ipynb`.\n({found})"
    )


def test_committed_notebooks_are_in_sync_with_their_source(capsys):
    assert SOURCES, "no notebook sources found"
    rc = build.main(["--check"])
    assert rc == 0, out_of_sync(capsys.readouterr().out)


@pytest.fixture
def demo(tmp_path, monkeypatch, capsys):
    """A course of one notebook, 01_demo from SOURCE, in tmp_path (build's folders point there), built without
    running it: its source and its learner copy."""
    source = tmp_path / "course_source" / "01_demo.py"
    source.parent.mkdir()
    source.write_text(SOURCE, encoding="utf-8")
    for name, folder in (("ROOT", ""), ("SOURCE_DIR", "course_source"), ("LEARNER_DIR", "notebooks")):
        monkeypatch.setattr(build, name, tmp_path / folder)
    monkeypatch.setattr(build, "SOLUTION_DIR", tmp_path / "solutions")
    assert build.main(["--no-execute"]) == 0
    capsys.readouterr()
    return source, tmp_path / "notebooks" / "01_demo.ipynb"


def edit_the_check_cell(path: Path, old: str, new: str) -> None:
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "check(" in c.source)
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, path)


def test_the_out_of_sync_message_names_both_causes_and_the_notebook_with_answers(demo, capsys):
    """A maintainer who tried an exercise in their clone was told only to rebuild from course_source/ (#29):
    the message names both causes, each fix, and here the notebook that holds the answer."""
    edit_the_check_cell(demo[1], f"    # YOUR CODE HERE\n    {build.STUB}", "    return y * 2")
    assert build.main(["--check"]) == 1
    said = out_of_sync(capsys.readouterr().out)
    assert "notebooks/01_demo.ipynb differs from course_source/01_demo.py" in said
    assert "(1) course_source/NN_topic.py changed" in said and "`python3 course.py build NN`" in said
    assert "(2) a notebook in notebooks/ was edited" in said and "python3 course.py reset notebooks/NN_topic" in said
    assert said.endswith("(answers in: notebooks/01_demo.ipynb (01.1))")


def test_a_learner_copy_edited_without_removing_its_stub_is_blamed_as_edited(demo, capsys):
    """An answer written above the stub line (or any other edit of notebooks/) holds no 'answer' by the stub test,
    and the message concluded 'most likely (1)', a changed source; the solution matching its source says (2)."""
    source, learner = demo
    edit_the_check_cell(learner, f"    {build.STUB}", f"    return y * 2\n    {build.STUB}")
    assert build.learner_work(learner) == []  # the stub is still there
    assert build.main(["--check"]) == 1
    said = out_of_sync(capsys.readouterr().out)
    assert "most likely (1)" not in said, said
    assert said.endswith(
        "(notebooks/01_demo.ipynb: only the learner copy differs, its solution matches, so it is most likely (2))"
    )
    source.write_text(SOURCE.replace("y * 2", "y * 3"), encoding="utf-8")  # a source change
    assert build.main(["--check"]) == 1
    said = out_of_sync(capsys.readouterr().out)
    assert "solutions/01_demo.ipynb differs" in said and said.endswith("so it is most likely (1))"), said


@pytest.mark.parametrize("src", [s for s in SOURCES if not s.stem.startswith("00")], ids=lambda p: p.stem)
def test_learner_copy_shows_not_attempted_and_solution_shows_passed(src):
    """What a learner sees on opening each notebook: every check says 'not attempted', no tracebacks."""
    learner = nbformat.read(ROOT / "notebooks" / f"{src.stem}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / f"{src.stem}.ipynb", as_version=4)
    exercise_cells = [
        i
        for i, c in enumerate(learner.cells)
        if c.cell_type == "code" and "YOUR CODE HERE" in c.source and "check(" in c.source
    ]
    assert len(exercise_cells) >= 3, f"{src.stem} has {len(exercise_cells)} exercise cells"
    for nb, word in ((learner, "not attempted"), (solution, "passed")):
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.output_type == "error"], "a committed notebook shows a traceback"
        reprs = [o for o in outputs if "CheckResult(" in str(o.get("data", {}).get("text/plain", ""))]
        assert not reprs, "a check's return value is displayed under its verdict line"
        for i in exercise_cells:
            text = "".join(o.get("text", "") for o in nb.cells[i].outputs if o.output_type == "stream")
            assert f"): {word}." in text, f"{src.stem} cell {i}: {text!r}"


def test_streamed_text_is_stored_as_one_output():
    from course_tools.build import _merge_streams

    outs = [nbformat.v4.new_output("stream", name="stdout", text=c) for c in "abc"]
    outs += [
        nbformat.v4.new_output("stream", name="stderr", text="!"),
        nbformat.v4.new_output("stream", name="stdout", text="d"),
    ]
    merged = _merge_streams(outs)
    assert [(o["name"], o["text"]) for o in merged] == [("stdout", "abc"), ("stderr", "!"), ("stdout", "d")]


def test_no_committed_output_names_the_build_machines_folders():
    """Notebook 00's report named the author's course folder and the build's temporary runs folder; a learner read
    them as their own. The build says them in words."""
    texts = {p: p.read_text(encoding="utf-8") for d in ("notebooks", "solutions") for p in (ROOT / d).glob("*.ipynb")}
    named = [p.name for p, text in texts.items() if str(ROOT) in text or "course-build-runs-" in text]
    assert not named, named
    assert "importable from <the course folder>" in texts[ROOT / "notebooks" / "00_setup_check.ipynb"]


def test_rebuild_keeps_a_learner_notebook_with_answers_aside(demo, capsys):
    """`course.py build` on a tree where a learner answered an exercise: the answers survive in a backup."""
    learner = demo[1]
    assert build.learner_work(learner) == []
    assert build.main(["--no-execute"]) == 0  # an untouched learner copy is simply rebuilt
    assert sorted(p.name for p in learner.parent.iterdir()) == ["01_demo.ipynb"]
    edit_the_check_cell(learner, build.STUB, "return y * 3  # my answer")
    assert build.learner_work(learner) == ["01.1"]
    assert build.main(["--no-execute"]) == 0
    backups = sorted(learner.parent.glob("backup-01_demo-*.ipynb"))
    assert len(backups) == 1, sorted(p.name for p in learner.parent.iterdir())
    assert build.learner_work(backups[0]) == ["01.1"]
    assert build.learner_work(learner) == []  # the rebuilt copy holds the stub again
    assert "holds answers (01.1): kept as backup-01_demo-" in capsys.readouterr().out
    assert not list(learner.parent.glob(".*.tmp"))


@pytest.fixture
def course_copy(tmp_path):
    """What the build reads and writes, copied (without caches): a run there leaves this checkout alone."""
    import shutil

    copy = tmp_path / "course"
    for folder in ("course_source", "course_tools", "course_utils", "notebooks", "solutions"):
        shutil.copytree(
            ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "backup-*", ".*.tmp")
        )
    shutil.copy2(ROOT / "README.md", copy / "README.md")
    return copy


def _in(copy, *args, timeout=600):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, *args], cwd=copy, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_build_repository_points_every_hosted_link_at_another_repository(course_copy, tmp_path):
    """Every Colab link pointed at one address written in build.py; `build --repository URL` now moves all of
    them (each notebook's title link and setup cell, the README's course map, the site) and rebuilds."""
    # The address the links point at now: the course's own, or an instructor's after they ran this command (the
    # test must pass in their copy too, so it pins no address).
    old = build.REPOSITORY.removeprefix("https://github.com/")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "links point" in readme and build.REPOSITORY in readme and "build --repository" in readme
    owner = "other-school" if old == "my-school/attention-course" else "my-school"
    copy, new = course_copy, f"https://github.com/{owner}/attention-course"
    done = _in(copy, "-m", "course_tools.build", "--repository", new + ".git", "--no-execute")
    assert done.returncode == 0, done.stderr
    assert f"hosted links now point at {new}" in done.stdout
    notebooks = sorted((copy / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
        (copy / "solutions").glob("[0-9][0-9]_*.ipynb")
    )
    assert len(notebooks) == 2 * len(SOURCES)
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        rel = f"{path.parent.name}/{path.name}"
        link = f"https://colab.research.google.com/github/{owner}/attention-course/blob/main/{rel}"
        assert link in nb.cells[0].source, rel
        setup = next(c for c in nb.cells if c.get("id") == build.HOSTED_ID)
        assert f'"{new}"' in setup.source, rel
    for path in [*notebooks, copy / "README.md", copy / "course_tools" / "build.py"]:
        assert old not in path.read_text(encoding="utf-8"), f"{path.relative_to(copy)} keeps the old address"
    readme = (copy / "README.md").read_text(encoding="utf-8")
    for path in sorted((copy / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"github/{owner}/attention-course/blob/main/notebooks/{path.name})" in readme, path.name
    assert f"use the GitHub repository {new} (" in " ".join(readme.split())  # where they point now
    one = tmp_path / "solved"  # the site, made again from one rebuilt notebook
    one.mkdir()
    (one / notebooks[-1].name).write_bytes(notebooks[-1].read_bytes())
    site = tmp_path / "site"
    made = _in(copy, "-c", f"from course_tools.site import build_site; build_site({str(site)!r}, {str(one)!r})")
    assert made.returncode == 0, made.stderr
    page = (site / notebooks[-1].with_suffix(".html").name).read_text(encoding="utf-8")
    assert f"github/{owner}/attention-course/blob/main/notebooks/{notebooks[-1].name}" in page
    assert old not in page


REFUSED_URL = (
    "--repository wants a GitHub repository's address, https://github.com/OWNER/NAME (Colab opens notebooks from "
    "GitHub only), got {!r}"
)


@pytest.mark.parametrize(
    "url",
    [
        "http://github.com/a/b",
        "https://gitlab.com/a/b",
        "https://github.com/a",
        "https://github.com/a/b/tree/main",
        "github.com/a/b",
        "https://github.com/a/..",
        "https://github.com/-a/b",
    ],
)
def test_build_repository_refuses_an_address_colab_cannot_open(url):
    with pytest.raises(ValueError, match=f"^{re.escape(REFUSED_URL.format(url))}$"):
        build.check_repository(url)


def test_build_repository_refused_run_literally_is_one_line_and_changes_nothing(course_copy):
    before = {p: p.read_bytes() for p in [course_copy / "README.md", course_copy / "course_tools" / "build.py"]}
    url = "https://gitlab.com/a/b"
    done = _in(course_copy, "-m", "course_tools.build", "--repository", url, "--no-execute", timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"course build: {REFUSED_URL.format(url)}\n"
    assert {p: p.read_bytes() for p in before} == before
