"""The exercise checks are strong enough: every mutant of every reference solution fails its check.

The mutants come from the reference solutions in the notebook sources (``tests/mutants.py`` says how):
an axis changed, a transpose dropped, a scale dropped or doubled, an off-by-one, an in-place variant,
a dtype changed, a comparison flipped, max/min or sum/mean swapped, a softmax dropped, operands swapped. Each is run
through ``run_check`` (fixed cases and cases drawn from a pinned seed). A mutant that passes means the cases are too
weak, unless it is listed in ``EQUIVALENT`` with the reason it computes the same thing as the solution.
The mutation score per exercise is printed at the end of the test run (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
from mutants import ROOT, SCORE_PROPERTY, compile_function, mutants, solutions

from course_utils.exercises import all_exercises
from course_utils.exercises._engine import FAILED, PASSED, References, run_check
from course_utils.exercises._engine.domain import Domain

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not (ROOT / "course_source").is_dir(), reason="needs course_source/ (the author's copy)"),
]

SEED = 20261123  # the drawn cases are pinned, so a mutant's verdict is the same on every run
EXERCISES = all_exercises()
SOLUTIONS = solutions() if (ROOT / "course_source").is_dir() else {}

# Mutants that compute exactly what the solution computes, for every input the exercise allows.
# Key: (exercise, the mutated line as tests/mutants.py describes it). Value: why it is equivalent.
EQUIVALENT: dict[tuple[str, str], str] = {
    (
        "06.1",
        "omega = 10000.0 ** (-torch.arange(0, C - 1, 2, dtype=torch.float64) / C)",
    ): "C is even (the encoding pairs channels), so arange(0, C - 1, 2) and arange(0, C, 2) are the same C / 2 numbers",
    (
        "06.2",
        "theta = 10000.0 ** (-torch.arange(0, D - 1, 2, dtype=torch.float64) / D)",
    ): "D is even (RoPE rotates pairs), so arange(0, D - 1, 2) and arange(0, D, 2) are the same D / 2 numbers",
    (
        "08.4",
        "for j0 in range(0, S + 1, kv_tile):",
    ): "the extra pass comes only when kv_tile divides S, at j0 = S, where the key tile is empty: its products are "
    "(..., Tq, 0) and (..., 0, D) tensors, which add zeros to dq and assign nothing to dk and dv",
    (
        "08.4",
        "for i0 in range(0, T + 1, q_tile):",
    ): "the extra pass comes only when q_tile divides T, at i0 = T, where the query tile is empty: it adds an "
    "empty (..., 0, Sk) product to dk_t and dv_t and writes nothing to dq",
    (
        "09.1",
        "kept = probs * (2 * keep)",
    ): "the kept probabilities are divided by their own sum on the next line, so a factor of 2 (exact in "
    "floating point) cancels bit for bit",
    (
        "09.1",
        "keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs <= top_p",
    ): "< and <= differ only when the mass before a token equals top_p exactly, and there float rounding "
    "decides: p0 + p1 summed in another order (a Python loop, float64, HF's shifted cumsum) lands a few "
    "ulps either side of the reference's float32 cumsum, so no case can check that edge without failing "
    "correct answers (exact binary fractions need tied probabilities, whose order the sort may break "
    "either way)",
    (
        "10.3",
        "p = (warmup_steps - step) / (max_steps - warmup_steps)",
    ): "it only negates p, and cos is even: math.cos(math.pi * -p) == math.cos(math.pi * p) (libm reduces |x|)",
    (
        "10.3",
        "p = (step - warmup_steps) / (warmup_steps - max_steps)",
    ): "it only negates p, and cos is even: math.cos(math.pi * -p) == math.cos(math.pi * p) (libm reduces |x|)",
    (
        "10.3",
        "if step > max_steps:",
    ): "at step == max_steps the cosine branch gives p = 1 and min_lr + 0.5 * (1 + cos(pi)) * (...) = min_lr "
    "exactly (math.cos(math.pi) is exactly -1.0), which is what the step >= max_steps branch returns",
}


# Mutants wrong only at an edge of the statement (issue #21), written by hand: each must fail on the fixed cases
# alone, because some fixed case holds that edge. Key: exercise -> (the line of the reference, its mutant, the edge
# of Exercise.edges that catches it).
EDGE_MUTANTS: dict[str, list[tuple[str, str, str]]] = {
    "01.1": [("return weights @ values", "return (weights[None] @ values).squeeze()", "Dv == 1")],
    "01.2": [("return weights @ v", "return (weights @ v).squeeze(-1)", "Dv == 1")],
    "02.2": [("return weights @ v, weights", "return (weights @ v).squeeze(-1), weights", "Dv == 1")],
    "02.4": [
        (
            "return -torch.special.xlogy(weights, weights).sum(dim=-1)",
            "return -torch.special.xlogy(weights, weights).sum(dim=-1).squeeze()",
            "T == 1",
        )
    ],
    "03.3": [
        (
            "return torch.arange(S)[None, :] < lengths[:, None]",
            "m = torch.ones(len(lengths), S, dtype=torch.bool)\n"
            "    for b, L in enumerate(lengths.tolist()):\n"
            "        m[b, -(S - L):] = False\n"
            "    return m",
            "a sequence of full length (L == S)",
        )
    ],
    "03.4": [
        (
            "allowed = ~attn_mask",
            "allowed = ~attn_mask.view(1, 1, attn_mask.shape[0], attn_mask.shape[0])",
            "T != S",
        )
    ],
    "04.1": [
        (
            "return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)",
            "return x.view(B, T, num_heads, C // num_heads).transpose(1, 2).squeeze(1)",
            "H == 1",
        )
    ],
    "04.3": [
        (
            'return torch.einsum("bhid,bhjd->bhij", q, k)',
            'return torch.einsum("bhid,bhjd->bhij", q, k).squeeze(1)',
            "H == 1",
        )
    ],
    "05.2": [
        (
            "return torch.arange(S)[None, :] >= lengths[:, None]",
            "return torch.ones(S, S, dtype=torch.bool).triu(1)[lengths - 1]",
            "an empty sequence (length 0)",
        )
    ],
    "05.3": [
        (
            "return (~mask).repeat_interleave(num_heads, dim=0)",
            "return (~mask).repeat_interleave(num_heads, dim=0).squeeze(1)",
            "T == 1",
        )
    ],
    "05.4": [("return weights.mean(dim=1)", "return weights.mean(dim=1).squeeze(1)", "T == 1")],
    "06.2": [
        (
            "angles = positions.double()[:, None] * theta",
            "angles = (positions[0] + torch.arange(x.shape[-2])).double()[:, None] * theta",
            "positions not consecutive",
        ),
        (
            "angles = positions.double()[:, None] * theta",
            "angles = (positions % 100_000).double()[:, None] * theta",  # a table of angles too short
            "large positions (10^6)",
        ),
    ],
    "07.2": [
        (
            "return k.repeat_interleave(num_heads // k.shape[1], dim=1)",
            "return k.repeat_interleave(num_heads // k.shape[1], dim=1).squeeze(2)",
            "S == 1",
        )
    ],
    "07.3": [
        (
            "weights = torch.softmax(k, dim=-2)",
            "weights = torch.softmax(k.clamp(max=88.0), dim=-2)",  # 'clamped so exp cannot overflow'
            "a key logit above 88",
        )
    ],
    "08.1": [
        (
            "a1, a2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)",
            'a1 = torch.exp(m1.masked_fill(m1 == float("-inf"), 0.0) - m_safe)\n'
            '    a2 = torch.exp(m2.masked_fill(m2 == float("-inf"), 0.0) - m_safe)',
            "an empty block beside one whose maximum is below -88",
        )
    ],
    "09.1": [
        (
            "sorted_probs, order = probs.sort(dim=-1, descending=True)",
            "sorted_probs, order = probs.sort(dim=min(1, probs.dim() - 1), descending=True)",
            "two leading axes or more",
        )
    ],
    "09.2": [
        (
            "cache[:, :, length:length + T] = new",
            "cache[:, :, length:] = 0.0\n    cache[:, :, length:length + T] = new",
            "an earlier sequence's keys after the new ones (to be left as they are)",
        )
    ],
    "10.1": [("window = data[idx]", "window = data[idx].long()", "ids of a dtype other than int64")],
    "10.2": [
        (
            "torch.bincount(train_ids, minlength=vocab_size)",
            "torch.bincount(train_ids, minlength=int(max(train_ids.max(), val_ids.max())) + 1)",
            "a character in neither text (vocab_size > the largest id + 1)",
        )
    ],
    "10.3": [
        (
            "return min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)",
            "return float(min_lr + 0.5 * (1 + torch.cos(torch.tensor(math.pi * p))) * (max_lr - min_lr))",
            "a rate below 1e-4 of max_lr (the end of a long decay to 0)",
        )
    ],
    "11.1": [
        (
            "return weights * v.norm(dim=-1).unsqueeze(-2)",
            "return (weights * v.norm(dim=-1).unsqueeze(-2)).squeeze(-2)",
            "T == 1",
        )
    ],
    "13.1": [
        (
            "out_t = (q_t[..., None, :] @ new_state)[..., 0, :]",
            "out_t = (q_t[..., None, :] @ new_state).squeeze(-2).squeeze(-1)",
            "Dv == 1",
        ),
        (
            "new_state = gate_t[..., None, None] * state",
            "new_state = gate_t.clamp(max=0.999)[..., None, None] * state",
            "every gate 1 (nothing forgotten)",
        ),
        # gates near 0: a guard against log 0 that clamps the gate, right wherever every gate is above 0.02
        (
            "new_state = gate_t[..., None, None] * state",
            "new_state = gate_t.clamp(min=0.02)[..., None, None] * state",
            "gates near 0 (every gate below 1e-3)",
        ),
        # D == 1: a squeeze of the key or query's last axis, a no-op for every D but 1
        ("k_t[..., :, None] * v_t[..., None, :]", "k_t.squeeze(-1)[..., :, None] * v_t[..., None, :]", "D == 1"),
    ],
    "13.2": [
        (
            "stored = (k_t[..., None, :] @ state)[..., 0, :]",
            "stored = (k_t[..., None, :] @ state).squeeze()",
            "Dv == 1",
        ),
        (
            "beta_t[..., None, None] * k_t[..., :, None]",
            "beta_t[..., None, None] * k_t.squeeze(-1)[..., :, None]",
            "D == 1",
        ),
    ],
    "13.3": [("(q @ state)", "(q.squeeze(-1) @ state)", "D == 1")],
    "13.4": [("return out, state, normaliser", "return out.squeeze(-1), state, normaliser", "Dv == 1")],
}


# The case a few of them fail on, as the verdict describes it.
CASE_SAID = {
    ("01.1", "Dv == 1"): "values float32 (5, 1)",
    ("03.3", "a sequence of full length (L == S)"): "lengths int64 (4,), S=5",
    ("03.4", "T != S"): "attn_mask bool (2, 5)",
}


@pytest.mark.parametrize(
    "key,line,mutant,edge",
    [(key, *m) for key, ms in EDGE_MUTANTS.items() for m in ms],
    ids=[f"{key}-{m[2]}" for key, ms in EDGE_MUTANTS.items() for m in ms],
)
def test_edge_mutants_fail_on_the_fixed_cases_alone(key, line, mutant, edge):
    sol, ex = SOLUTIONS[key], EXERCISES[key]
    assert sol.source.count(line) == 1, f"{key}: the reference no longer has the line {line!r}"
    assert edge in ex.edges, f"{key}: {edge!r} is not an edge of its statement ({sorted(ex.edges)})"
    fn = compile_function(sol, sol.source.replace(line, mutant))
    cases = ex.fixed_cases()
    with_edge = [c for c in cases if ex.edges[edge](*c[0], **c[1])]
    without = [c for c in cases if not ex.edges[edge](*c[0], **c[1])]
    assert with_edge, f"{key}: no fixed case holds {edge!r}"
    res = run_check(dataclasses.replace(ex, draw=None), fn)
    assert res.status == FAILED, f"{key}: the mutant {mutant!r} passes the fixed cases"
    assert re.search(rf"fixed case \d+ \([^;]*{re.escape(edge)}", res.message), res.message  # the case's edges named
    assert CASE_SAID.get((key, edge), "") in res.message, res.message
    if without:  # the edge is what catches it: the mutant is right on every fixed case without the edge
        res = run_check(dataclasses.replace(ex, cases=lambda: without, draw=None, domain=Domain()), fn)
        assert res.status == PASSED, f"{key}: the mutant {mutant!r} is wrong without {edge!r} too: {res.message}"


def _returns_tensors(key: str) -> bool:
    ex = EXERCISES[key]
    args, kwargs = ex.cases()[0]
    out = ex.solution(*args, **kwargs)
    return not isinstance(out, (int, float))


@pytest.mark.parametrize("key", sorted(EXERCISES))
def test_every_exercise_has_its_reference_solution_in_the_notebook_source(key):
    assert key in SOLUTIONS, f'no `def` with {key}\'s ### BEGIN SOLUTION block, checked as check("{key}", ...)'


@pytest.mark.parametrize("key", sorted(SOLUTIONS))
def test_every_mutant_of_the_reference_fails_its_check(key, record_property):
    sol, ex = SOLUTIONS[key], EXERCISES[key]
    start = time.perf_counter()
    refs = References(ex)  # the solution's and the mistakes' runs of the cases, made once for every mutant
    reference = run_check(ex, compile_function(sol, sol.source), seed=SEED, references=refs)
    assert reference.status == PASSED, f"the notebook's own solution of {key} fails its check: {reference.message}"
    killed, survived, equivalent = [], [], []
    for m in mutants(sol, returns_tensors=_returns_tensors(key)):
        res = run_check(ex, compile_function(sol, m.source), seed=SEED, references=refs)
        if res.status != PASSED:
            killed.append(m)
        elif (key, m.description) in EQUIVALENT:
            equivalent.append(m)
        else:
            survived.append(m)
    # the score travels on the test's report (so it reaches the summary from a pytest-xdist worker too)
    record_property(
        SCORE_PROPERTY, [key, len(killed), len(killed) + len(survived), len(equivalent), time.perf_counter() - start]
    )
    assert killed, f"{key}: no mutant at all was made from the solution, so the score proves nothing"
    assert not survived, f"{key}: {len(survived)} mutants pass the check:\n" + "\n".join(
        f"  [{m.operator}] {m.description}" for m in survived
    )


def test_the_equivalent_mutants_are_still_made_and_still_pass():
    """An entry of EQUIVALENT that no longer names a surviving mutant is stale: remove it."""
    for (key, line), reason in EQUIVALENT.items():
        sol = SOLUTIONS[key]
        found = [m for m in mutants(sol, returns_tensors=_returns_tensors(key)) if m.description == line]
        assert found, f"{key}: the equivalent mutant {line!r} is no longer made ({reason})"
        res = run_check(EXERCISES[key], compile_function(sol, found[0].source), seed=SEED)
        assert res.status == PASSED, f"{key}: {line!r} is listed as equivalent but fails: {res.message}"


def test_the_operators_each_make_mutants_somewhere():
    made = {m.operator for key, sol in SOLUTIONS.items() for m in mutants(sol, _returns_tensors(key))}
    assert made >= {
        "dim",
        "transpose",
        "scale",
        "off-by-one",
        "in-place",
        "dtype",
        "compare",
        "max/min",
        "sum/mean",
        "tril/triu",
        "sign",
        "polarity",
        "dropped call",
        "operands swapped",
    }, made
