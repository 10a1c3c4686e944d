"""The two packages' layout (issue #11): the learner's ``course_utils`` never needs the authors' ``course_tools``.

``course_tools`` (build, grade, reset, room, site, vendoring, corpus making) imports ``course_utils``; the other
way round only ``data.load_corpus`` reaches for ``course_tools.corpus``, lazily, when the corpus is missing.
"""

import pkgutil
import subprocess
import sys
from pathlib import Path

import course_utils

ROOT = Path(__file__).resolve().parent.parent


def test_every_learner_module_imports_without_the_tools_package():
    modules = sorted(m.name for m in pkgutil.walk_packages(course_utils.__path__, "course_utils."))
    assert "course_utils.attention_view" in modules and "course_utils.exercises.tiny_gpt" in modules
    code = (
        "import importlib, sys\n"
        "sys.modules['course_tools'] = None  # any import of it now raises ImportError\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('ok', len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


def test_the_attention_views_render_without_the_tools_package():
    code = (
        "import sys\n"
        "sys.modules['course_tools'] = None\n"
        "import torch\n"
        "from course_utils.attention_view import head_view\n"
        "html = head_view([torch.full((1, 2, 3, 3), 1 / 3)], ['a', 'b', 'c'])\n"
        "print('d3' in html.data)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
