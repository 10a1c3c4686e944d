"""The two packages' layout (issues #11 and #20): the learner's ``course_utils`` never imports the authors'
``course_tools``; no two modules import each other, however far round; the references a learner reads first
import nothing of the setup check, the widgets or the GPT.

``course_tools`` (build, grade, reset, room, site, vendoring, the corpus' command line) imports ``course_utils``,
never the other way round: the corpus' making, which ``data.load_corpus`` needs when the corpus is missing, is
``course_utils._corpus``. The import graph is read from the source (every ``import`` and ``from ... import``,
those inside functions too, which run as soon as the function does), so a lazy import cannot hide a circle.
"""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import course_utils

ROOT = Path(__file__).resolve().parent.parent


def test_every_learner_module_imports_and_the_attention_views_render_without_the_tools_package():
    """One interpreter, in which any import of course_tools raises ImportError: every learner module imports, and
    an attention view (the heaviest of them at run time) renders."""
    modules = sorted(m.name for m in pkgutil.walk_packages(course_utils.__path__, "course_utils."))
    assert "course_utils.attention_view" in modules and "course_utils.exercises.tiny_gpt" in modules
    code = (
        "import importlib, sys\n"
        "sys.modules['course_tools'] = None  # any import of it now raises ImportError\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "import torch\n"
        "from course_utils.attention_view import head_view\n"
        "html = head_view([torch.full((1, 2, 3, 3), 1 / 3)], ['a', 'b', 'c'])\n"
        "print('ok', 'd3' in html.data)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok True", done.stderr[-2000:]


# ------------------------------------------------------------------------------------------------ the import graph


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module of ``packages`` (folders under ``root``) -> every module name it imports, anywhere in its code.

    ``import a.b`` and ``from a.b import c`` name ``a``, ``a.b`` and ``a.b.c`` (Python runs each package on the
    way); relative imports are resolved. Names outside ``packages`` (torch, ipywidgets) are kept too. The packages
    a module is inside (``a`` and ``a.b`` for ``a.b.m``) are already in ``sys.modules`` before its first line runs,
    so passing through them on the way to a sibling (``import a.b.n`` in ``a.b.m``) imports nothing: they are left
    out. Naming one of them itself (``from a.b import f``, ``import a.b``) reads what its ``__init__`` defines,
    and counts.
    """
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]  # the package it is in
        named = set()  # what the imports name themselves
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tree.body = [n for n in tree.body if not _main_guard(n)]  # runs as the module __main__, never on import
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*here[: len(here) - node.level + 1], *([node.module] if node.module else [])])
                base = base if node.level else node.module
                named.add(base)
                named.update(f"{base}.{a.name}" for a in node.names)
        imported = set()
        for full in named:
            parts = full.split(".")
            imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        dotted = name.split(".")
        inside = {".".join(dotted[:i]) for i in range(1, len(dotted))} - named  # its packages, only passed through
        graph[name] = {m for m in imported - inside if m != name and (m in files or m.split(".")[0] not in packages)}
    return graph


def _main_guard(node: ast.stmt) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":`` (``python -m course_utils.train`` hands over there)."""
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and [getattr(c, "value", None) for c in test.comparators] == ["__main__"]
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each group of two or more modules that reach each other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v] & graph.keys()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module name that importing ``start`` imports, however far round."""
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT, ("course_utils", "course_tools"))


def test_the_graph_finds_a_circle_however_it_is_hidden(tmp_path):
    """The check below can fail: a circle through a lazy import, a relative one and a package's __init__."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")
    (pkg / "a.py").write_text("import os\n\ndef f():\n    from pkg.b import g\n")  # lazy
    (pkg / "b.py").write_text("from .sub.c import h\n")  # relative, through sub's __init__
    (pkg / "sub" / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import a\n")  # imports into the circle, is not in it
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"os", "pkg.b"} and graph["pkg.sub"] == {"pkg.sub.c"}  # pkg: only passed through
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"]]
    assert reached(graph, "pkg.d") >= {"os", "pkg.sub.c"}
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert circles(import_graph(tmp_path, ("pkg",))) == []
    (pkg / "e.py").write_text('import os\n\nif __name__ == "__main__":\n    from pkg.d import f\n')  # a script's
    (pkg / "d.py").write_text("from pkg import e\n")  # hand-over, run only as __main__: not a circle
    assert import_graph(tmp_path, ("pkg",))["pkg.e"] == {"os"} and circles(import_graph(tmp_path, ("pkg",))) == []


def test_a_package_and_the_modules_inside_it(tmp_path):
    """A package whose ``__init__`` imports its own private engine (``exercises`` and ``exercises._engine``): the
    engine passing through its package to a sibling is no circle; the engine reading a name of the package is."""
    eng = tmp_path / "pkg" / "ex" / "_engine"
    eng.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ex" / "__init__.py").write_text("from pkg.ex._engine import run\n")
    (eng / "__init__.py").write_text("from pkg.ex._engine.core import run\n")
    (eng / "compare.py").write_text("import os\n")
    (eng / "core.py").write_text("from .compare import os\n\ndef run():\n    import pkg.ex._engine.compare\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.ex._engine.core"] == {"pkg.ex._engine.compare"} and circles(graph) == []
    (eng / "compare.py").write_text("from pkg.ex import RETIRED\n")  # a name of the package's __init__
    assert circles(import_graph(tmp_path, ("pkg",))) == [
        ["pkg.ex", "pkg.ex._engine", "pkg.ex._engine.compare", "pkg.ex._engine.core"]
    ]


def test_no_two_modules_import_each_other(graph):
    assert "course_utils.data" in graph and "course_tools.room" in graph
    assert circles(graph) == [], "import circles (lazy imports inside functions count)"


def test_the_learner_package_never_imports_the_tools(graph):
    up = {m: sorted(d for d in deps if d.split(".")[0] == "course_tools") for m, deps in graph.items()}
    assert not {m: d for m, d in up.items() if m.startswith("course_utils") and d}


REFERENCES = ("attention", "masking", "multihead", "fast_attention", "block")
NOT_FOR_REFERENCES = (  # the setup check, the widgets and the GPT
    "course_utils.environment",
    "course_utils.widgets",
    "course_utils.plotting",
    "ipywidgets",
    "course_utils.gpt",
    "course_utils.train",
)


@pytest.mark.parametrize("name", REFERENCES)
def test_the_references_import_nothing_of_the_setup_check_the_widgets_or_the_gpt(graph, name):
    found = reached(graph, f"course_utils.{name}")
    assert "torch" in found  # the scan sees what the module imports
    assert not {m for m in found if m in NOT_FOR_REFERENCES or m.startswith(tuple(f + "." for f in NOT_FOR_REFERENCES))}


def private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``module: from X import _name`` for each private name taken from another module of ``packages``.

    A private module (``_validate``, ``_files``) is a shared home: its names are for the package. A private name
    of a public module (``attention._attend`` before #20) is that module's own business (HOUSE_STYLE).
    """
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                home = node.module.split(".")
                if home[0] not in packages or home[-1].startswith("_"):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(root)}: from {node.module} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import _kernel\nfrom pkg._shared import check\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg._shared import _helper\n")  # a private module's: allowed
    assert private_imports(tmp_path, ("pkg",)) == ["pkg/a.py: from pkg.b import _kernel"]
    assert private_imports(ROOT, ("course_utils", "course_tools")) == []
