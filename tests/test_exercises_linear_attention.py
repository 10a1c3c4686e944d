"""Exercises 13.1-13.3: catalogued mistakes written another way are named on every seed; the right answers of
``exercise_answers_linear_attention`` pass and its wrong ones fail (also run from tests/test_exercises.py's tables)."""

from __future__ import annotations

import dataclasses

import pytest
from exercise_answers_linear_attention import NAMED
from mutants import ROOT, compile_function, solutions

from course_utils.exercises import all_exercises
from course_utils.exercises._engine import FAILED, PASSED, run_check

EXERCISES = all_exercises()


@pytest.mark.parametrize("key, fn, name", NAMED, ids=[fn.__name__ for _, fn, _ in NAMED])
def test_mistakes_written_another_way_are_named_on_every_seed(key, fn, name):
    for seed in range(5):
        res = run_check(EXERCISES[key], fn, seed=seed)
        assert res.status == FAILED and res.mistake == name, f"seed {seed}: {res.message}"


# Mutants of the notebook's reference wrong only at one edge of the statement, as tests/test_mutations.py's
# EDGE_MUTANTS: each must fail on the fixed cases alone, and pass on the fixed cases without that edge.
EDGE_MUTANTS = [
    (
        "13.1",
        "out_t = (q_t[..., None, :] @ new_state)[..., 0, :]",
        "out_t = (q_t[..., None, :] @ new_state).squeeze(-2).squeeze(-1)",
        "Dv == 1",
    ),
    (
        "13.1",
        "new_state = gate_t[..., None, None] * state",
        "new_state = gate_t.clamp(max=0.999)[..., None, None] * state",
        "every gate 1 (nothing forgotten)",
    ),
    (
        "13.2",
        "stored = (k_t[..., None, :] @ state)[..., 0, :]",
        "stored = (k_t[..., None, :] @ state).squeeze()",
        "Dv == 1",
    ),
    # gates near 0: a guard against log 0 that clamps the gate, right wherever every gate is above 0.02
    (
        "13.1",
        "new_state = gate_t[..., None, None] * state",
        "new_state = gate_t.clamp(min=0.02)[..., None, None] * state",
        "gates near 0 (every gate below 1e-3)",
    ),
    # D == 1: a squeeze of the key or query's last axis, a no-op for every D but 1
    ("13.1", "k_t[..., :, None] * v_t[..., None, :]", "k_t.squeeze(-1)[..., :, None] * v_t[..., None, :]", "D == 1"),
    (
        "13.2",
        "beta_t[..., None, None] * k_t[..., :, None]",
        "beta_t[..., None, None] * k_t.squeeze(-1)[..., :, None]",
        "D == 1",
    ),
    ("13.3", "(q @ state)", "(q.squeeze(-1) @ state)", "D == 1"),
]


@pytest.mark.skipif(not (ROOT / "course_source").is_dir(), reason="needs course_source/ (the author's copy)")
@pytest.mark.parametrize("key, line, mutant, edge", EDGE_MUTANTS, ids=[f"{m[0]}-{m[3]}" for m in EDGE_MUTANTS])
def test_edge_mutants_fail_on_the_fixed_cases_alone(key, line, mutant, edge):
    sol, ex = solutions()[key], EXERCISES[key]
    assert sol.source.count(line) == 1, f"{key}: the reference no longer has the line {line!r}"
    fn = compile_function(sol, sol.source.replace(line, mutant))
    cases = ex.cases()
    with_edge = [c for c in cases if ex.edges[edge](*c[0], **c[1])]
    without = [c for c in cases if not ex.edges[edge](*c[0], **c[1])]
    assert with_edge and without
    assert run_check(dataclasses.replace(ex, draw=None), fn).status == FAILED
    res = run_check(dataclasses.replace(ex, cases=lambda: without, draw=None), fn)
    assert res.status == PASSED, f"{key}: the mutant {mutant!r} is wrong without {edge!r} too: {res.message}"
