"""How long a notebook takes a learner, by one rule, and the size a notebook may reach.

The rule: a notebook's stated time is its prose read at ``READING_RATE`` words a minute, plus the minutes
of each of its exercises (``Exercise.minutes``), rounded up to a multiple of 5. The rate is slower than
ordinary reading because the prose sits between code cells that a learner runs and reads too. A notebook
holds at most ``MAX_WORDS`` words of prose and ``MAX_CODE_CELLS`` code cells, so that a class can finish it.

Every place that states a time (the notebook's own "**Time**" line, the README's course map, notebook 00's
course table and the instructor guide) gives this number, for every notebook, 00 included; ``tests/test_pacing.py``
keeps them so. Notebook 00 alone has no "**Time**" line: it is the setup check a learner runs before the course,
and its course table lists the notebooks after it, so its time is stated in the README's map and the guide.

Usage: ``python -m course_tools.pacing`` prints each notebook's words, code cells, exercises and time.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from pathlib import Path

from course_utils.exercises import all_exercises

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "course_source"
READING_RATE = 120  # words of prose a minute
MAX_WORDS = 3000
MAX_CODE_CELLS = 35
_CELL = re.compile(r"^# %%( \[markdown\])?.*$", re.MULTILINE)
_CHECK = re.compile(r"""check\(\s*["'](\d\d\.\d+)["']""")


@dataclass(frozen=True)
class Pace:
    """What the rule reads off one notebook source, and the time it gives."""

    name: str
    words: int
    code_cells: int
    exercises: tuple[str, ...]
    exercise_minutes: int

    @property
    def minutes(self) -> int:
        """Reading time plus the exercises' minutes, rounded up to a multiple of 5."""
        return 5 * math.ceil((self.words / READING_RATE + self.exercise_minutes) / 5)


def _cells(text: str) -> list[tuple[bool, str]]:
    """(is_markdown, body) for each cell of a percent-format source."""
    heads = list(_CELL.finditer(text))
    return [
        (bool(h.group(1)), text[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)])
        for i, h in enumerate(heads)
    ]


def pace(source: Path) -> Pace:
    """The pace of ``course_source/NN_topic.py``."""
    text = source.read_text(encoding="utf-8")
    cells = _cells(text)
    prose = (re.sub(r"^# ?(#+ )?", "", body, flags=re.MULTILINE) for md, body in cells if md)  # no heading marks
    words = sum(len(text.split()) for text in prose)
    code = [body for md, body in cells if not md]
    keys = tuple(dict.fromkeys(k for body in code for k in _CHECK.findall(body)))
    known = all_exercises()
    return Pace(source.stem, words, len(code), keys, sum(known[k].minutes for k in keys if k in known))


def sources() -> list[Path]:
    """The notebook sources, in course order."""
    return sorted(SOURCE_DIR.glob("[0-9][0-9]_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.pacing",
        allow_abbrev=False,
        description=f"Each notebook's prose words, code cells, exercises and stated time (prose at {READING_RATE} "
        f"words a minute plus each exercise's minutes, rounded up to 5); at most {MAX_WORDS} words and "
        f"{MAX_CODE_CELLS} code cells a notebook.",
    )
    parser.parse_args(argv)
    print(f"{'notebook':<28} {'words':>6} {'code cells':>10}  exercises (minutes)         time")
    for p in map(pace, sources()):
        flag = "  over the size limit" if p.words > MAX_WORDS or p.code_cells > MAX_CODE_CELLS else ""
        print(
            f"{p.name:<28} {p.words:>6} {p.code_cells:>10}  {', '.join(p.exercises) or '-':<20} "
            f"({p.exercise_minutes:>2}) {p.minutes:>4} min{flag}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
