"""CONTRIBUTING.md and the pre-commit hooks it tells authors to install."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".pre-commit-config.yaml"


def test_the_pre_commit_configuration_is_valid():
    pytest.importorskip("pre_commit", reason="pre-commit is in the author set (python3 course.py test)")
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_hook_runs_a_program_of_the_course_venv_with_the_lock_s_versions():
    hooks = [h for repo in yaml.safe_load(CONFIG.read_text())["repos"] for h in repo["hooks"]]
    assert {h["id"] for h in hooks} >= {"ruff", "notebooks-in-sync"}
    for hook in hooks:
        program = hook["entry"].split()[0]
        assert program.startswith(".venv/bin/"), f"{hook['id']}: {program} is not the course venv's"
        if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve():
            assert (ROOT / program).exists(), f"{hook['id']}: {program} is missing from .venv"


def test_contributing_walks_through_adding_a_notebook_and_its_skeleton():
    text = " ".join((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split())
    for piece in (
        "course_source/NN_topic.py",
        "course_utils/exercises/<topic>.py",
        "tests/test_<topic>.py",
        "README row",
        "Instructor guide",
        "The notebook skeleton",
        "python3 course.py build NN",
        "it imports `course_utils`, never the other way round",  # tests/test_layout.py holds the code to it
    ):
        assert piece in text, f"CONTRIBUTING.md lost {piece!r}"
    assert "../shared" not in (ROOT / "course_source" / "AUTHORING.md").read_text(encoding="utf-8")


def test_the_guides_describe_the_two_packages_and_each_tool_has_one_home():
    """A learner's package holds no tool; each tool module is named in the README's layout and CONTRIBUTING's
    table of where things live, so a reader finds it from either."""
    tools = sorted(p.stem for p in (ROOT / "course_tools").glob("*.py") if not p.stem.startswith("_"))
    assert {"build", "grade", "reset", "room", "site", "vendor_js", "corpus"} <= set(tools)
    assert not {p.stem for p in (ROOT / "course_utils").glob("*.py")} & set(tools)
    assert not (ROOT / "course_utils" / "static" / "katex").exists() and (ROOT / "course_tools" / "static").is_dir()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :].split("\n## ")[0]
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    where = contributing[contributing.index("## Where things live") :].split("\n## ")[0]
    assert "course_utils/" in layout and "course_tools/" in layout
    for name in tools:
        assert re.search(rf"\b{name}\b", layout), f"README's layout does not name course_tools.{name}"
        assert re.search(rf"\b{name}\b", where), f"CONTRIBUTING's table does not name course_tools.{name}"


def test_the_formatter_and_the_line_length_are_enforced_where_the_guide_says():
    """Issue #11: a formatter and a line length the code follows, checked by `course.py test` and pre-commit."""
    import tomllib

    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert ruff["line-length"] == 120 and "E501" not in ruff["lint"]["ignore"]
    assert ruff["format"]["exclude"] == ["course_source/*", "*.ipynb", "*.md"]
    hooks = {h["id"]: h for repo in yaml.safe_load(CONFIG.read_text())["repos"] for h in repo["hooks"]}
    assert hooks["ruff-format"]["entry"] == ".venv/bin/ruff format --check"
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_cli", ROOT / "course.py")
    course = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course)  # defines the commands; runs nothing
    steps, _ = course.test_plan([], {None: "AVX512"})
    lint = [" ".join(step.args) for step in steps if step.group == 1]
    expected = (
        "course_utils course_tools tests tools benchmarks course_source notebooks solutions course.py conftest.py"
    )
    assert lint == [f"-m ruff check {expected}", f"-m ruff format --check {expected}"], lint
    assert "120 characters" in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


# --- the guides name what is there (issue #20: sentences that outlived a move) ----------------------------

GUIDES = ("README.md", "CONTRIBUTING.md", "course_source/AUTHORING.md")
PACKAGES = ("course_utils", "course_tools")
_DOTTED = re.compile(r"\b((?:course_utils|course_tools)(?:\.[A-Za-z_]\w*)+)")
_SHORT = re.compile(r"`([a-z_]+)\.([A-Za-z_]\w*)`")  # `data.load_corpus`: a course_utils module's name


def _resolve(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or a module and attributes inside it, that exist today."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef)))]
    return "\n".join(ast.get_docstring(n) or "" for n in nodes)


def _named(text: str) -> set[str]:
    modules = {p.stem for p in (ROOT / "course_utils").glob("*.py")}
    short = {f"course_utils.{m}.{name}" for m, name in _SHORT.findall(text) if m in modules}
    return {name.rstrip(".") for name in _DOTTED.findall(text)} | short


def test_every_module_and_name_the_guides_and_docstrings_give_still_exists():
    """`course_utils.environment.best_device` after best_device moved, `attention_view` reading
    `course_tools.vendor_js`'s list after it stopped: a dotted name in a guide or a docstring must resolve."""
    texts = {guide: (ROOT / guide).read_text(encoding="utf-8") for guide in GUIDES}
    for path in sorted((ROOT / "course_utils").rglob("*.py")):
        texts[str(path.relative_to(ROOT))] = _docstrings(path)
    stale = sorted(f"{where}: {name}" for where, text in texts.items() for name in _named(text) if not _resolve(name))
    assert not stale, "names that no longer exist:\n" + "\n".join(stale)
    for guide in GUIDES:  # files named by path: course_utils/_validate.py, tools/check_share.py, tests/test_x.py
        for path in re.findall(r"\b((?:course_utils|course_tools|tools|tests)/[\w/]+\.py)\b", texts[guide]):
            assert (ROOT / path).is_file(), f"{guide} names {path}, which is not there"
        for name in re.findall(r"`(test_\w+\.py)`", texts[guide]):
            assert (ROOT / "tests" / name).is_file(), f"{guide} names tests/{name}, which is not there"


def test_the_package_docstring_names_every_module_a_learner_can_open():
    """The map a learner reads first (``help(course_utils)``): every module of the package, private ones too."""
    import course_utils

    doc = course_utils.__doc__
    modules = doc[doc.index("Modules, in reading order") :]
    names = {p.stem for p in (ROOT / "course_utils").glob("*.py") if p.stem != "__init__"} | {"exercises"}
    missing = sorted(name for name in names if f"``{name}``" not in modules)
    assert not missing, f"course_utils/__init__.py's module list lacks {missing}"
