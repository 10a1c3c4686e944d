"""No code cell holds a markdown heading: a missing ``# %% [markdown]`` marker in a source pulls the heading
below it into the code cell above, where it renders as a comment in the code, not as a section (issue #13).

Checked twice: on the cells the build parses from every ``course_source/NN_*.py``, and on the code cells of
every built notebook (learner copy and solution), so that a notebook built before a source was fixed fails too.
A heading line in a code cell is ``# `` followed by one to six ``#`` and a space: ``# ## 5. Sampling``.
"""

import json
import re
from pathlib import Path

import pytest

from course_tools.build import parse_source

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "course_source").glob("[0-9][0-9]_*.py"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")
)
HEADING = re.compile(r"^# #{1,6} ", re.MULTILINE)


def headings_in_code(cells: list[tuple[str, str]]) -> list[str]:
    """``cell N: <heading line>`` for every heading line inside a code cell of ``cells`` ((type, source) pairs)."""
    found = []
    for n, (kind, source) in enumerate(cells, 1):
        if kind == "code":
            found += [f"cell {n}: {line}" for line in source.splitlines() if HEADING.match(line)]
    return found


def test_the_pattern_tells_a_heading_from_a_comment():
    cells = [
        ("code", "import torch\n\n# ## 1. The bill\n# a comment\n#   # indented\n# #no space"),
        ("markdown", "## 1. The bill"),
        ("code", "x = 1  # ## not at the start"),
    ]
    assert headings_in_code(cells) == ["cell 1: # ## 1. The bill"]


def test_every_source_is_checked():
    assert len(SOURCES) == 14, [p.name for p in SOURCES]
    assert len(NOTEBOOKS) == 28, [str(p.relative_to(ROOT)) for p in NOTEBOOKS]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_no_heading_in_a_code_cell_of_a_source(path):
    cells = [(c["cell_type"], c["source"]) for c in parse_source(path.read_text(encoding="utf-8"))]
    found = headings_in_code(cells)
    assert not found, f"{path.name}: a heading inside a code cell (add '# %% [markdown]' above it): " + "; ".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_heading_in_a_code_cell_of_a_built_notebook(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [
        (c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for c in nb["cells"]
    ]
    found = headings_in_code(cells)
    assert not found, f"{path.parent.name}/{path.name}: a heading inside a code cell: " + "; ".join(found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_figures_are_plain_1x_images(path):
    """The build draws figures at 1x (COURSE_SMALL_FIGURES); a learner's running notebook gets 2x ("retina").

    A 2x figure leaking into a committed notebook doubles its size and nbval would not notice (it skips images):
    retina output carries width/height metadata and twice the pixels of its figure at 72 dpi.
    """
    import base64
    import struct

    for n, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], 1):
        for out in cell.get("outputs", []):
            if "image/png" not in out.get("data", {}):
                continue
            png = base64.b64decode(out["data"]["image/png"])
            width, height = struct.unpack(">II", png[16:24])
            assert "image/png" not in out.get("metadata", {}), f"cell {n}: a retina (2x) figure was committed"
            assert width <= 1100 and height <= 1100, f"cell {n}: a {width}x{height} figure is larger than 1x"
