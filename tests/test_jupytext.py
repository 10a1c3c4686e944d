"""Authors edit course_source/NN_topic.py as notebooks through jupytext (pyproject.toml's [tool.jupytext]):
what jupytext reads from every source are the cells the course's build makes of it (type, source, tags), and
what it writes back on a save is read by the build into the same cells again.

The build drops a cell's leading and trailing blank lines (``parse_source``: ``.strip("\\n")``); jupytext
keeps a blank ``#`` line at the edge of a markdown cell. Both render the same, so sources are compared with
the build's rule applied to jupytext's cells too; every other difference fails.
"""

from pathlib import Path

import pytest

from course_tools.build import parse_source

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the author set: `python3 course.py test` installs it")
from jupytext.config import load_jupytext_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "course_source").glob("[0-9][0-9]_*.py"))
# Constructs where jupytext's defaults and the build part ways: a comment that looks like a magic or a shell
# command (jupytext would uncomment it), tags, a markdown cell with blank '#' lines and a '#'-only line.
TRICKY = """\
# %% [markdown]
# # A title
#
# Some *text*.

# %% tags=["some-tag", "other"]
x = 1
# %timeit x
# !ls

# %% [markdown]
#
# ## A section after a blank line
#

# %%
def f(y):
    ### BEGIN SOLUTION
    return y + 1
    ### END SOLUTION
"""


def config():
    found = load_jupytext_config(str(ROOT / "course_source" / "00_setup_check.py"))
    assert found is not None, "jupytext finds no configuration for course_source/ ([tool.jupytext] in pyproject.toml)"
    return found


def cells_of(nb) -> list[dict]:
    """A jupytext notebook's cells as the build describes cells (its blank-line rule applied)."""
    return [
        {"cell_type": c.cell_type, "source": c.source.strip("\n"), "tags": list(c.metadata.get("tags", []))}
        for c in nb.cells
    ]


def build_cells(text: str) -> list[dict]:
    return [{"cell_type": c["cell_type"], "source": c["source"], "tags": list(c["tags"])} for c in parse_source(text)]


def first_difference(ours: list[dict], theirs: list[dict]) -> str:
    if len(ours) != len(theirs):
        return f"the build makes {len(ours)} cells, jupytext {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"cell {i + 1}: the build reads {a!r}\n  jupytext reads {b!r}"
    return ""


def test_the_configuration_is_found_for_the_sources_and_says_percent_format():
    c = config()
    assert c.preferred_jupytext_formats_save == "py:percent"
    assert c.notebook_metadata_filter == "-all" and c.cell_metadata_filter == "tags,-all"
    assert c.comment_magics is False


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_jupytext_reads_every_source_into_the_cells_the_build_makes(source):
    text = source.read_text(encoding="utf-8")
    nb = jupytext.read(source, config=config())
    problem = first_difference(build_cells(text), cells_of(nb))
    assert not problem, f"{source.name}: {problem}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_a_save_through_jupytext_keeps_what_the_build_reads(source):
    text = source.read_text(encoding="utf-8")
    saved = jupytext.writes(jupytext.read(source, config=config()), fmt="py:percent", config=config())
    assert not saved.startswith("# ---"), f"{source.name}: a save would add a metadata header"
    problem = first_difference(build_cells(text), build_cells(saved))
    assert not problem, f"{source.name}, after a save through jupytext: {problem}"


def test_the_configuration_is_what_makes_the_tricky_constructs_agree():
    ours = build_cells(TRICKY)
    assert [c["tags"] for c in ours] == [[], ["some-tag", "other"], [], []]
    assert "# %timeit x\n# !ls" in ours[1]["source"]
    with_config = jupytext.reads(TRICKY, fmt="py:percent", config=config())
    assert not first_difference(ours, cells_of(with_config))
    assert not first_difference(ours, build_cells(jupytext.writes(with_config, fmt="py:percent", config=config())))
    # jupytext's defaults would turn the commented magic into a real one: the configuration is needed
    assert first_difference(ours, cells_of(jupytext.reads(TRICKY, fmt="py:percent")))
