"""Every exercise's domain is data (issue #30), and its fixed cases hold every value of every facet of it.

An Exercise states the inputs its statement allows once: ``domain`` (:mod:`course_utils.exercises._engine.domain`:
leading axes, integer dtypes, magnitudes, views) and ``edges`` (sizes that may be 1 or differ, ties, empty sequences).
A wrong answer that is wrong only at an edge must fail on a fixed case, so the verdict a notebook prints does not
depend on the draw; one wrong only outside the domain must pass. The generic wrappers below prove it for every
exercise at once: each wraps the exercise's own reference and misbehaves on one facet only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path

import pytest
import torch

from course_utils.exercises import all_exercises
from course_utils.exercises._engine import FAILED, PASSED, References, check_drawn, check_fixed, run_check
from course_utils.exercises._engine.domain import bind

EXERCISES = all_exercises()
ROOT = Path(__file__).resolve().parent.parent
KEYS = list(EXERCISES)


@pytest.mark.parametrize("key", KEYS)
def test_each_statements_edges_are_held_by_some_fixed_case(key):
    ex = EXERCISES[key]
    assert ex.edges, f"{key}: no edges stated (Exercise.edges): say which inputs its statement allows"
    cases = ex.fixed_cases()
    missing = [name for name, holds in ex.edges.items() if not any(holds(*args, **kwargs) for args, kwargs in cases)]
    assert not missing, f"{key}: no fixed case holds the edge(s) {missing} that its statement allows"


@pytest.mark.parametrize("key", KEYS)
def test_each_facet_value_of_the_domain_is_held_by_a_fixed_case(key):
    ex = EXERCISES[key]
    cases = [bind(ex.solution, *c) for c in ex.fixed_cases()]
    missing = [name for name, holds in ex.domain.facets().items() if not any(holds(a) for a in cases)]
    assert not missing, f"{key}: no fixed case holds {missing}, which its domain allows"


@pytest.mark.parametrize("key", KEYS)
def test_no_case_lies_outside_the_domain(key):
    ex = EXERCISES[key]
    cases = ex.fixed_cases() + [
        c for seed in range(5) for c in (ex.draw or (lambda g: []))(torch.Generator().manual_seed(seed))
    ]
    outside = [(i, why) for i, c in enumerate(cases) if (why := ex.domain.outside(bind(ex.solution, *c)))]
    assert not outside, f"{key}: cases outside the stated domain: {outside[:3]}"


def _statement(key: str) -> tuple[str, str]:
    """The heading line of exercise ``key`` in its notebook's source, and its statement as one line: the markdown,
    then the comment above the function in the cell below it (where the inputs' domain is said)."""
    source = next((ROOT / "course_source").glob(f"{key[:2]}_*.py")).read_text(encoding="utf-8").splitlines()
    head = re.compile(rf"^# (\*\*(Exercise )?{re.escape(key)}\b|#+ Exercise {re.escape(key)}\b)")
    start = next(i for i, line in enumerate(source) if head.match(line))
    end = next(i for i in range(start + 1, len(source)) if source[i].startswith("# %%"))
    define = next(i for i in range(end, len(source)) if source[i].startswith("def "))
    lines = source[start:end] + [line for line in source[end + 1 : define] if line.startswith("# ")]
    return source[start], " ".join(" ".join(line.lstrip("#") for line in lines).split())


@pytest.mark.parametrize("key", KEYS)
def test_the_statement_says_the_size_and_the_domain_as_the_check_has_them(key):
    ex = EXERCISES[key]
    heading, text = _statement(key)
    assert f"({ex.size()})" in heading, f"{key}: the heading does not say ({ex.size()}): {heading}"
    said = ex.domain.sentence()
    assert " ".join(said.split()) in text, f"{key}: the statement does not say its domain: {said!r}"


def test_the_statement_sentence_is_generated_from_the_domain():
    ex = EXERCISES["02.2"]
    said = ex.domain.sentence()
    assert "`q`, `k`, `v` may have 0 to 3 leading axes" in said, said


# ------------------------------------------------------------------------------------------ generic wrappers


def _spoil(out):
    """The answer spoiled: NaN in every float tensor; raises where there is none to spoil."""
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        return torch.full_like(out, float("nan"))
    if isinstance(out, float):
        return float("nan")
    if isinstance(out, (tuple, list)) and any(isinstance(o, torch.Tensor) and o.is_floating_point() for o in out):
        return type(out)(_spoil(o) if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)
    raise RuntimeError("wrong on this input")


def _wrap(ex, misbehaves):
    """The reference, except on a case where ``misbehaves(arguments)``: there it raises or answers NaN."""

    @functools.wraps(ex.solution)
    def answer(*args, **kwargs):
        a = bind(ex.solution, args, kwargs)
        out = ex.solution(*args, **kwargs)
        return _spoil(out) if misbehaves(a) else out

    answer.misbehaves = misbehaves  # the seed sweep runs it only on the seeds that draw such a case
    return answer


def _min_dims(ex):
    dims: dict[str, int] = {}
    for c in ex.fixed_cases():
        for n, v in bind(ex.solution, *c).items():
            if isinstance(v, torch.Tensor):
                dims[n] = min(dims.get(n, 99), v.dim())
    return dims


def _largest(x):
    finite = x[x.isfinite()]
    return float(finite.abs().max()) if finite.numel() else 0.0


def _wrappers(ex):
    """(name, wrapper, whether the domain allows the facet it misbehaves on) for one exercise."""
    d = ex.domain
    low = _min_dims(ex)
    out = [
        (
            "raises on more than two leading axes",
            lambda a: any(isinstance(v, torch.Tensor) and v.dim() >= low[n] + 3 for n, v in a.items()),
            d.leading and d.max_leading >= 3,
        ),
        (
            "raises on int32",
            lambda a: any(isinstance(v, torch.Tensor) and v.dtype == torch.int32 for v in a.values()),
            any(torch.int32 in ds for ds in d.ints.values()),
        ),
        (
            "raises on uint8",
            lambda a: any(isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in a.values()),
            any(torch.uint8 in ds for ds in d.ints.values()),
        ),
        (
            ".view semantics: breaks on a non-contiguous input",
            lambda a: any(
                isinstance(v, torch.Tensor) and not v.is_contiguous() and sum(s > 1 for s in v.shape) >= 2
                for v in a.values()
            ),
            d.views,
        ),
    ]
    out.append(("float32 inside where float64 is promised", None, bool(d.float64)))
    for name, m in d.magnitude.items():
        out.append(
            (f"NaN where {name} is past half its stated size", lambda a, n=name, m=m: _largest(a[n]) > m / 2, True)
        )
        out.append((f"NaN where {name} is past its stated size", lambda a, n=name, m=m: _largest(a[n]) > m, False))
    return [(n, _wrap(ex, f) if f else _float32_inside(ex), bool(allowed)) for n, f, allowed in out]


def _float32_inside(ex):
    """The reference computed in float32 and its result cast back to float64 where float64 came in."""

    def down(x):
        return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x

    def up(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    @functools.wraps(ex.solution)
    def answer(*args, **kwargs):
        wide = any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in [*args, *kwargs.values()])
        out = ex.solution(*map(down, args), **{k: down(v) for k, v in kwargs.items()})
        if not wide:
            return out
        return tuple(map(up, out)) if isinstance(out, tuple) else up(out)

    answer.misbehaves = lambda a: any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in a.values())

    return answer


@pytest.mark.parametrize("key", KEYS)
def test_generic_edge_only_answers_fail_where_the_domain_allows_their_facet_and_pass_where_it_does_not(key):
    ex = EXERCISES[key]
    table = []
    for name, answer, allowed in _wrappers(ex):
        res = run_check(ex, answer, seed=1)
        want = FAILED if allowed else PASSED
        table.append((name, "allowed" if allowed else "excluded", res.status, "ok" if res.status == want else "WRONG"))
    wrong = [row for row in table if row[-1] == "WRONG"]
    assert not wrong, f"{key}: " + "; ".join(f"{n} ({a}): {s}" for n, a, s, _ in wrong)


# ------------------------------------------------------------------------------------------ the holes of issue #30
# Answers wrong only on an input the statement allows and that no fixed case held, found by a sceptical reading;
# each must now fail on every seed, on a fixed case (so no verdict depends on the draw).


def _cross_unstable(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    B, T, C = x.shape
    S, H = memory.shape[1], num_heads
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3)
    q = (x @ wq.T + bq).reshape(B, T, H, C // H).transpose(1, 2)
    k = (memory @ wk.T + bk).reshape(B, S, H, C // H).transpose(1, 2)
    v = (memory @ wv.T + bv).reshape(B, S, H, C // H).transpose(1, 2)
    exps = torch.exp(q @ k.transpose(-2, -1) / (C // H) ** 0.5) * key_mask[:, None, None, :]
    out = (exps / exps.sum(dim=-1, keepdim=True) @ v).transpose(1, 2).reshape(B, T, C)
    return out @ out_weight.T + out_bias


def _padding_minus_one(lengths, S):
    return torch.arange(S) <= (lengths - 1)[:, None]  # uint8: 0 - 1 wraps to 255


def _key_padding_int64_only(lengths, S):
    if lengths.dtype != torch.int64:
        raise TypeError("expected int64 lengths")
    return torch.arange(S)[None, :] >= lengths[:, None]


def _masked_unsqueeze_1(scores, mask):
    if mask.dim() < scores.dim():
        mask = mask.unsqueeze(1)  # the missing axis put after the first, not in front
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _append_view(cache, length, new):
    B, H, T, D = new.shape
    cache[:, :, length : length + T] = new.view(B, H, T * D).view(B, H, T, D)
    return cache[:, :, : length + T]


def _weights_merged_view(scores, mask):
    """Merges the leading axes with .view: breaks on non-contiguous scores with two leading axes (a tester's)."""
    T, S = scores.shape[-2:]
    blocked = ~mask.expand_as(scores).reshape(-1, T, S)
    return torch.softmax(scores.view(-1, T, S).masked_fill(blocked, float("-inf")), -1).view(scores.shape)


def _append_through_reshape(cache, length, new):
    """Writes through .reshape, which copies a non-contiguous buffer: the caller's cache is never written."""
    B, H, capacity, D = cache.shape
    T = new.shape[2]
    flat = cache.reshape(B * H, capacity, D)
    flat[:, length : length + T] = new.reshape(B * H, T, D)
    return flat[:, : length + T].reshape(B, H, length + T, D)


def _nucleus_tempered_after(logits, temperature, top_p):
    probs = torch.softmax(logits, dim=-1) ** (1 / temperature)  # underflowed tokens stay 0
    probs = probs / probs.sum(dim=-1, keepdim=True)
    ordered, order = probs.sort(dim=-1, descending=True)
    keep = (ordered.cumsum(dim=-1) - ordered) < top_p
    kept = probs * torch.zeros_like(keep).scatter(-1, order, keep)
    return kept / kept.sum(dim=-1, keepdim=True)


def _beam_in_probabilities(beam_scores, next_log_probs, beam_width):
    V = next_log_probs.shape[-1]
    total = (beam_scores.exp()[:, None] * next_log_probs.exp()).flatten()  # underflows to 0 for long sequences
    scores, flat = total.topk(beam_width)
    return scores.log(), flat // V, flat % V


def _step_eps(state, normaliser, q_t, k_t, v_t):
    phi = lambda t: torch.nn.functional.elu(t) + 1  # noqa: E731
    state = state + phi(k_t)[..., :, None] * v_t[..., None, :]
    normaliser = normaliser + phi(k_t)
    out = (phi(q_t)[..., :, None] * state).sum(-2) / ((phi(q_t) * normaliser).sum(-1, keepdim=True) + 1e-6)
    return out, state, normaliser


def _entropy_eps(weights):
    return -(weights * torch.log(weights + 1e-6)).sum(dim=-1)


def _alibi_integer_slopes(H, T):
    slopes = torch.tensor([2.0 ** -(8 * (h + 1) // H) for h in range(H)])  # integer division of the exponent
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (-slopes[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))


def _lr_float32_rounded(step, warmup_steps, max_steps, max_lr, min_lr):
    lr = EXERCISES["10.3"].solution(step, warmup_steps, max_steps, max_lr, min_lr)
    return torch.tensor(lr * 1.2 if lr < 1e-4 else lr, dtype=torch.float32)  # 20% off where the rate is tiny


def _einsum_two_leading(q, k, v):
    lead = q.dim() - 2  # written for (B, H, T, D): fewer leading axes padded with 1s, three not foreseen
    q4, k4, v4 = (x.reshape((1,) * (2 - lead) + x.shape) for x in (q, k, v))
    weights = torch.softmax(torch.einsum("bhid,bhjd->bhij", q4, k4) / q.shape[-1] ** 0.5, dim=-1)
    out = torch.einsum("bhij,bhjd->bhid", weights, v4)
    return out.reshape(*q.shape[:-1], v.shape[-1]), weights.reshape(*q.shape[:-1], k.shape[-2])


HOLES = [
    ("02.2", _einsum_two_leading),
    ("02.4", _entropy_eps),
    ("03.2", _masked_unsqueeze_1),
    ("03.3", _padding_minus_one),
    ("05.2", _key_padding_int64_only),
    ("05.5", _cross_unstable),
    ("06.3", _alibi_integer_slopes),
    ("09.1", _nucleus_tempered_after),
    ("09.2", _append_view),
    ("03.2", _weights_merged_view),
    ("09.2", _append_through_reshape),
    ("09.3", _beam_in_probabilities),
    ("10.3", _lr_float32_rounded),
    ("13.4", _step_eps),
]


@pytest.mark.parametrize("key,fn", HOLES, ids=[f"{k}-{f.__name__}" for k, f in HOLES])
def test_each_named_hole_fails_on_a_fixed_case_on_every_seed(key, fn):
    """Every check runs the fixed cases, whatever its seed (the whole check on seeds 0-3: the seed sweep below)."""
    fixed_only = run_check(dataclasses.replace(EXERCISES[key], draw=None), fn)
    assert fixed_only.status == FAILED, f"{key}: {fn.__name__} passes the fixed cases"


# ------------------------------------------------------------------------------------------ the seed sweep
# Slow (minutes): run in CI beside the browser tests with
#   COURSE_SEED_SWEEP=1 python -m pytest -m slow tests/test_exercise_domains.py
# COURSE_SEED_SWEEP_SEEDS sets how many seeds (200 by default).

SWEEP = os.environ.get("COURSE_SEED_SWEEP") == "1"
SWEEP_SEEDS = int(os.environ.get("COURSE_SEED_SWEEP_SEEDS", "200"))


def _as_the_solution(ex, fn, refs, seed) -> bool:
    """Whether generic wrapper ``fn`` answers every case drawn from ``seed`` as the solution does: none holds the
    facet it misbehaves on. Its verdict on those draws is then the solution's, checked on the same seed."""
    misbehaves = getattr(fn, "misbehaves", None)
    if misbehaves is None:  # a catalogued mistake, a named hole or the solution itself: always run
        return False
    try:
        return not any(misbehaves(bind(ex.solution, *case)) for case in refs.drawn(seed))
    except Exception:  # it would raise inside the wrapper too: run it
        return False


@pytest.mark.slow
@pytest.mark.skipif(not SWEEP, reason="the seed sweep runs with COURSE_SEED_SWEEP=1 (CI, beside the browser tests)")
@pytest.mark.parametrize("key", KEYS)
def test_the_same_verdict_on_every_seed(key):
    """The solution, every catalogued mistake, every generic wrapper and every named hole of this exercise: one
    verdict (status and the mistake named) on every seed, and each catalogued mistake told in one message.

    An answer that fails a fixed case is judged on the fixed cases alone (the engine names a mistake by them, and
    the first difference it reports is the first fixed case that differs): its verdict on the fixed cases is run
    once, and the whole check must give the same on a few seeds. An answer right on every fixed case is judged by
    the draws alone: the whole check on seed 0 must give its verdict on seed 0's draws, and the draws of every
    seed the same. The fixed cases run once per answer and each seed's draws, and the solution's and mistakes'
    runs, are made once for all answers (:class:`References`, which re-runs them where they are not deterministic).
    """
    # No time limit: it is wall time, and this test shares two cores with the unit and browser tests. In CI
    # (2026-11-30) a right answer to 10.4 failed on seed 83 with no mistake named, once; it passes on that seed
    # here under every kernel, and being stopped by the clock is how the same function gets two verdicts.
    ex = dataclasses.replace(EXERCISES[key], time_limit=None)
    answers = [("solution", ex.solution)] + [(m.name, m.fn) for m in ex.mistakes]
    answers += [(n, w) for n, w, _ in _wrappers(ex)] + [(f.__name__, f) for k, f in HOLES if k == key]
    refs = References(ex)
    changed = []
    on_draws = []  # (name, answer, its verdict on seed 0's draws) of the answers right on every fixed case

    def differs(name, want, said, res, seed):
        if (res.status, res.mistake) == (want.status, want.mistake):
            return False
        changed.append(
            f"{name}: {said} {want.status}/{want.mistake}, seed {seed} {res.status}/{res.mistake} ({res.message})"
        )
        return True

    catalogued = {m.name for m in ex.mistakes}
    for name, fn in answers:
        on_fixed = check_fixed(ex, fn, references=refs)
        if on_fixed.status == FAILED:
            said = set()  # a catalogued mistake is also told in the same words on every seed
            for seed in range(4):
                res = run_check(ex, fn, seed=seed, references=refs)
                said.add(res.message)
                if differs(name, on_fixed, "fixed cases", res, seed):
                    break
            if name in catalogued and len(said) > 1:
                changed.append(f"{name}: its message changes with the seed: {sorted(said)}")
        else:
            first = check_drawn(ex, fn, 0, references=refs)
            if not differs(name, first, "seed 0's draws", run_check(ex, fn, seed=0, references=refs), 0):
                on_draws.append((name, fn, first))
    solution_said = next(((r.status, r.mistake) for name, _, r in on_draws if name == "solution"), None)
    for seed in range(1, SWEEP_SEEDS):
        for i, (name, fn, first) in enumerate(on_draws):
            if fn is None or ((first.status, first.mistake) == solution_said and _as_the_solution(ex, fn, refs, seed)):
                continue  # said already; or a wrapper that answers every case of this seed as the solution does
            if differs(name, first, "seed 0", check_drawn(ex, fn, seed, references=refs), seed):
                on_draws[i] = (name, None, first)  # one change is enough to say
    assert not changed, f"{key}: verdicts that depend on the seed: {changed}"
