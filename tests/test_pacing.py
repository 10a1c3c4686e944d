"""Notebooks a class can finish: each within the size limit, and every stated time given by one rule."""

from __future__ import annotations

import re

import pytest

from course_tools import pacing
from course_tools.pacing import MAX_CODE_CELLS, MAX_WORDS, READING_RATE, Pace, pace, sources

ROOT = pacing.ROOT
PACES = {p.name: p for p in map(pace, sources())}
_TIME_LINE = re.compile(r"\*\*Time(?:\*\*:|:\*\*) about (\d+) minutes")


def _number(name: str) -> str:
    return name[:2]


def test_the_rule_is_reading_time_plus_exercise_minutes_rounded_up_to_five():
    assert Pace("x", words=0, code_cells=0, exercises=(), exercise_minutes=0).minutes == 0
    assert Pace("x", words=1, code_cells=0, exercises=(), exercise_minutes=0).minutes == 5
    assert Pace("x", words=READING_RATE * 10, code_cells=0, exercises=(), exercise_minutes=10).minutes == 20
    assert Pace("x", words=READING_RATE * 10 + 1, code_cells=0, exercises=(), exercise_minutes=10).minutes == 25


def test_pace_counts_prose_words_code_cells_and_exercises(tmp_path):
    source = tmp_path / "99_example.py"
    source.write_text(
        "# %% [markdown]\n# # 99 A title\n#\n# three more words\n\n# %%\nx = 1\n\n"
        '# %% tags=["raises-exception"]\ncheck("01.1", f)\n\n# %% [markdown]\n# two words\n',
        encoding="utf-8",
    )
    p = pace(source)
    assert (p.words, p.code_cells, p.exercises) == (8, 2, ("01.1",))
    assert p.exercise_minutes == pacing.all_exercises()["01.1"].minutes


@pytest.mark.parametrize("name", sorted(PACES))
def test_each_notebook_fits_a_class(name):
    p = PACES[name]
    assert p.words <= MAX_WORDS, f"{name}: {p.words} words of prose, at most {MAX_WORDS}"
    assert p.code_cells <= MAX_CODE_CELLS, f"{name}: {p.code_cells} code cells, at most {MAX_CODE_CELLS}"


def test_notebook_00_is_exempt_from_the_time_line_only_and_the_rule_says_why():
    """00 has no "**Time**" line (pacing's docstring says why); the tables state its time like any other's."""
    assert 'Notebook 00 alone has no "**Time**" line' in pacing.__doc__
    assert not _TIME_LINE.findall((ROOT / "course_source" / "00_setup_check.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(n for n in PACES if not n.startswith("00_")))  # see the test above
def test_each_notebook_states_the_time_of_the_rule(name):
    text = (ROOT / "course_source" / f"{name}.py").read_text(encoding="utf-8")
    found = _TIME_LINE.findall(text)
    assert found, f"{name}: no '**Time**: about N minutes' line"
    assert int(found[0]) == PACES[name].minutes, f"{name} says {found[0]} minutes, the rule gives {PACES[name].minutes}"


def _table_minutes(text: str, row_start: str) -> dict[str, int]:
    """Notebook number -> the first 'N min' of each table row that starts with ``row_start`` and a number."""
    found = {}
    for line in text.splitlines():
        m = re.match(re.escape(row_start) + r"\s*\[?(\d\d)[ _]", line)
        if m and (t := re.search(r"(\d+) min", line)):
            found[m.group(1)] = int(t.group(1))
    return found


@pytest.mark.parametrize(
    "where, row_start",
    [("README.md", "|"), ("course_source/00_setup_check.py", "# |"), ("docs/INSTRUCTOR_GUIDE.md", "|")],
)
def test_every_table_of_the_course_states_the_rules_times(where, row_start):
    """Every notebook, 00 included (the README and the guide said 2 min where the rule gives 10), except in notebook
    00's own table, which lists the notebooks after it."""
    stated = _table_minutes((ROOT / where).read_text(encoding="utf-8"), row_start)
    own = where.startswith("course_source/00_")
    expected = {_number(n): p.minutes for n, p in PACES.items() if not (own and n.startswith("00_"))}
    assert stated == expected, f"{where} states other times than the rule (python -m course_tools.pacing)"


def test_pacing_help_prints_help_and_does_nothing_else(capsys):
    with pytest.raises(SystemExit) as e:
        pacing.main(["--help"])
    assert e.value.code == 0 and "words a minute" in capsys.readouterr().out
