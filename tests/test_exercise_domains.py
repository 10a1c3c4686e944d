"""Every exercise's fixed cases hold every edge its statement allows (issue #21).

Each Exercise states its domain in one form, ``edges``: the edges its statement allows, each with a predicate
over a case's arguments. A wrong answer that is wrong only at an edge must fail on a fixed case, so the verdict
a notebook prints does not depend on what a draw happens to hold.
"""

from __future__ import annotations

import pytest

from course_utils.exercises import all_exercises

EXERCISES = all_exercises()


@pytest.mark.parametrize("key", sorted(EXERCISES, key=lambda k: tuple(map(int, k.split(".")))))
def test_each_statements_edges_are_held_by_some_fixed_case(key):
    ex = EXERCISES[key]
    assert ex.edges, f"{key}: no edges stated (Exercise.edges): say which inputs its statement allows"
    cases = ex.cases()
    missing = [name for name, holds in ex.edges.items() if not any(holds(*args, **kwargs) for args, kwargs in cases)]
    assert not missing, f"{key}: no fixed case holds the edge(s) {missing} that its statement allows"
