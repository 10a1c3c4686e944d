"""Every exercise check is real: it passes the solution, calls the stub 'not attempted',
and names each catalogued mistake when given a function that makes it."""

import copy
import dataclasses
import functools
import inspect
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from exercise_answers_linear_attention import NAMED as NAMED_13
from exercise_answers_linear_attention import RIGHT as RIGHT_13
from exercise_answers_linear_attention import WRONG as WRONG_13

from course_utils.exercises import NotAttempted, all_exercises, check, get_exercise
from course_utils.exercises._engine import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    REPORT_ENV,
    SEED_ENV,
    ExerciseFailed,
    References,
    run_check,
)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny checks: a second thread only waits

EXERCISES = all_exercises()
MISTAKES = [(key, m.name) for key, ex in EXERCISES.items() for m in ex.mistakes]


def stub(*args, **kwargs):
    raise NotAttempted("replace this line with your code")


def unfinished(*args, **kwargs):
    raise NotImplementedError("the second case is still to do")


@pytest.mark.parametrize("key", EXERCISES)
def test_the_solution_passes_the_stub_is_not_attempted_and_not_implemented_is_a_failure(key):
    """Each catalogued mistake's name on the fixed cases: below; the same verdict and message on every seed, and the
    solution's: the seed sweep (tests/test_exercise_domains.py, a step of its own in `course.py test`)."""
    res = run_check(EXERCISES[key], EXERCISES[key].solution, seed=0, references=_references(key))
    assert res.status == PASSED, res.message
    res = run_check(EXERCISES[key], stub)
    assert res.status == NOT_ATTEMPTED, res.message
    res = run_check(EXERCISES[key], unfinished)
    assert res.status == FAILED and "NotImplementedError: the second case is still to do" in res.message, res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_each_exercise_knows_three_distinct_mistakes(key):
    names = [m.name for m in EXERCISES[key].mistakes]
    assert len(names) >= 3, f"{key} catalogues only {len(names)} mistakes"
    assert len(set(names)) == len(names)


def test_every_notebook_has_three_exercises():
    per_notebook = Counter(key.split(".")[0] for key in EXERCISES)
    numbers = sorted(p.name[:2] for p in ROOT.glob("course_source/[0-9][0-9]_*.py") if not p.name.startswith("00"))
    assert sorted(per_notebook) == numbers
    assert all(n >= 3 for n in per_notebook.values()), per_notebook


def test_check_prints_records_and_raises(tmp_path, monkeypatch, capsys):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(REPORT_ENV, str(report))
    monkeypatch.setenv(SEED_ENV, "5")
    ex = get_exercise("03.1")
    assert check("03.1", ex.solution).status == PASSED
    assert check("03.2", stub).status == NOT_ATTEMPTED
    with pytest.raises(ExerciseFailed, match=re.escape(ex.mistakes[0].name)):
        check("03.1", ex.mistakes[0].fn)
    printed = capsys.readouterr().out
    assert "03.1" in printed and "passed" in printed and "not attempted" in printed
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["status"] for r in rows] == [PASSED, NOT_ATTEMPTED, FAILED]
    assert rows[2]["mistake"] == ex.mistakes[0].name and rows[2]["seed"] == 5 and rows[2]["key"] == "03.1"
    assert all({"key", "title", "status", "mistake", "message"} <= set(r) for r in rows)  # the contracted fields


def test_numbers_compare_infinities_and_nans_as_equal_to_themselves():
    from course_utils.exercises._engine import compare

    inf, nan = float("inf"), float("nan")
    assert compare(inf, inf, 1e-6, 1e-6) is None
    assert compare(nan, nan, 1e-6, 1e-6) is None
    assert compare(inf, 1.0, 1e-6, 1e-6).text == "expected 1, got inf"
    assert compare(1.0, inf, 1e-6, 1e-6).text == "expected inf, got 1"
    assert compare(-inf, inf, 1e-6, 1e-6).text == "expected inf, got -inf"
    assert compare(1.0 + 1e-9, 1.0, 1e-6, 1e-6) is None


# ------------------------------------------------------------------------------------------ issue #10

SEEDS = range(10)  # the drawn cases change with the seed; the verdicts must not


def _fixed_only(ex):
    return dataclasses.replace(ex, draw=None)


@functools.cache
def _references(key):
    """Exercise ``key``'s solution and mistakes run once for all the checks of many answers on many seeds here (a
    verdict with references is the one without: tests/test_checking.py)."""
    return References(EXERCISES[key])


@pytest.mark.parametrize("key", EXERCISES)
def test_every_exercise_draws_fresh_cases_that_change_with_the_seed(key):
    ex = EXERCISES[key]
    assert ex.draw is not None, f"{key} has no draw(gen)"
    first, second = (ex.draw(torch.Generator().manual_seed(s)) for s in (1, 2))
    assert first and second
    assert _case_text(ex, first) != _case_text(ex, second), f"{key}: seeds 1 and 2 draw the same cases"
    again = ex.draw(torch.Generator().manual_seed(1))
    assert _case_text(ex, again) == _case_text(ex, first), f"{key}: the same seed draws different cases"


def _case_text(ex, cases):
    """The cases as text precise enough to tell two draws apart (shapes, and the values themselves)."""

    def show(x):
        if isinstance(x, torch.Tensor):
            return f"{tuple(x.shape)}{x.flatten()[:8].tolist()}"
        if isinstance(x, torch.nn.Module):
            return str([(k, show(v)) for k, v in x.state_dict().items()])
        return repr(x)

    return [([show(a) for a in args], {k: show(v) for k, v in kwargs.items()}) for args, kwargs in cases]


@pytest.mark.parametrize("key", EXERCISES)
def test_every_mistake_runs_on_every_drawn_case(key):
    """A mistake whose function raises on a drawn case could not be named there (the check skips it), so
    the verdict would depend on the draw: each must run on 50 draws. The exception: a mistake that raises on
    a fixed case (weights in the wrong layout, once they are not square) is stopped there, before any drawn
    case, and named by its error (the tests above prove it is)."""
    ex = EXERCISES[key]
    fns = [ex.solution]
    for m in ex.mistakes:
        try:
            for args, kwargs in ex.fixed_cases():
                m.fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception:
            continue
        fns.append(m.fn)
    for seed in range(50):
        for args, kwargs in ex.draw(torch.Generator().manual_seed(seed)):
            for fn in fns:
                fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))


def _sizes(args, kwargs):
    """Each size a case sets: every tensor's (and a module's first parameter's) dimensions, counted from the
    last, and every integer argument, keyed by (argument, dimension)."""
    out = {}
    for name, a in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(a, torch.nn.Module):
            a = next(a.parameters())
        if isinstance(a, torch.Tensor):
            out.update({(name, -d): a.shape[-d] for d in range(1, a.dim() + 1)})
        elif isinstance(a, int) and not isinstance(a, bool):
            out[(name, None)] = a
    return out


@pytest.mark.parametrize("key", EXERCISES)
def test_the_drawn_cases_go_beyond_the_fixed_sizes(key):
    """An answer that only works up to a size (a table as large as the notebook's examples, a loop with a
    hard-coded bound) must fail: in every size the fixed cases vary, the draws of 20 seeds reach past the
    largest fixed one."""
    ex = EXERCISES[key]
    fixed = [_sizes(*c) for c in ex.fixed_cases()]
    drawn = [_sizes(*c) for seed in range(20) for c in ex.draw(torch.Generator().manual_seed(seed))]
    for size in {k for f in fixed for k in f}:
        seen = [f[size] for f in fixed if size in f]
        if len(set(seen)) > 1:
            reached = max((d[size] for d in drawn if size in d), default=None)
            assert reached is not None and reached > max(seen), (
                f"{key}: argument {size[0]}, dimension {size[1]}: fixed cases reach {max(seen)}, draws {reached}"
            )


@pytest.mark.parametrize("key,name", MISTAKES)
def test_each_catalogued_mistake_is_named_on_the_fixed_cases_alone_by_a_hint_without_code(key, name):
    """Named by the fixed cases alone, with its hint (by the whole check on every seed: the seed sweep); the exact
    fix only with hint=2, and the hint never shows the code of the fix."""
    mistake = next(m for m in EXERCISES[key].mistakes if m.name == name)
    assert mistake.fix, f"{key} {name!r} has no exact fix for hint=2"
    assert mistake.fix not in mistake.hint
    code = re.compile(r"torch\.\w+|\.\w+\(|dim=|\[:|\[\.\.\.|\.T\b")  # torch's names, a call, an axis, a slice
    assert not code.search(mistake.hint), f"{key} {name!r}: the hint shows code: {mistake.hint}"
    res = run_check(_fixed_only(EXERCISES[key]), mistake.fn)
    assert res.status == FAILED and res.mistake == name, f"diagnosed as {res.mistake!r}: {res.message}"
    assert name in res.message and mistake.hint in res.message
    assert mistake.fix not in res.message and "hint=2" in res.message
    assert mistake.fix in run_check(_fixed_only(EXERCISES[key]), mistake.fn, hint=2).message


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, torch.nn.Module):
        yield from x.parameters()
    elif isinstance(x, (list, tuple)):
        for i in x:
            yield from _tensors(i)


def _changes_an_input(ex):
    """The solution, then one input (never the one the exercise asks to write into) changed in place."""
    names = list(inspect.signature(ex.solution).parameters)
    skip = names.index(ex.inplace) if isinstance(ex.inplace, str) else ex.inplace

    def answer(*args, **kwargs):
        out = ex.solution(*args, **kwargs)
        inputs = [a for i, a in enumerate(args) if i != skip] + list(kwargs.values())
        tensor = next(_tensors(inputs))
        with torch.no_grad():
            tensor.logical_not_() if tensor.dtype == torch.bool else tensor.add_(1)
        return out

    return answer


INPLACE_KEYS = [key for key, ex in EXERCISES.items() if any(True for c in ex.cases() for _ in _tensors(list(c[0])))]


@pytest.mark.parametrize("key", INPLACE_KEYS)
def test_an_answer_that_changes_its_input_in_place_fails(key):
    res = run_check(EXERCISES[key], _changes_an_input(EXERCISES[key]), seed=0)
    assert res.status == FAILED
    assert "in place" in res.message, res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_a_lookup_table_of_the_fixed_answers_fails(key):
    """A pasted table of the fixed cases' answers passes those cases and nothing else."""
    ex = EXERCISES[key]
    table = [(_case_text(ex, [c]), ex.solution(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))) for c in ex.fixed_cases()]

    def lookup(*args, **kwargs):
        seen = _case_text(ex, [(args, kwargs)])
        out = next((out for text, out in table if text == seen), table[0][1])
        if ex.inplace is not None:  # 09.2: the table's keys go into the buffer as well
            args[0][:, :, : out.shape[2]] = out
        return out

    assert run_check(_fixed_only(ex), lookup).status == PASSED  # it does fool the fixed cases
    for seed in range(5):
        assert run_check(ex, lookup, seed=seed).status == FAILED, f"seed {seed}"


@pytest.mark.parametrize(
    "key",
    [
        k
        for k, ex in EXERCISES.items()
        if isinstance(ex.solution(*ex.cases()[0][0], **ex.cases()[0][1]), torch.Tensor)
        and ex.solution(*ex.cases()[0][0], **ex.cases()[0][1]).is_floating_point()
    ],
)
def test_a_float64_answer_fails_where_float32_is_asked(key):
    ex = EXERCISES[key]
    res = run_check(ex, lambda *a, **kw: ex.solution(*a, **kw).double(), seed=0)
    assert res.status == FAILED and "expected dtype float32, got float64" in res.message, res.message


# Answers written for these tests, independently of the catalogues: wrong ones a sceptical learner tried
# (each used to pass, or could have: see the commit that added them), and right ones written differently
# from the reference, which must pass. A wrong answer whose outputs, arguments after the call and errors equal
# a mutant's of the reference (tests/test_mutations.py) or a catalogued mistake's, bit for bit on every fixed case
# and ten seeds of draws, is not listed: the check sees only those, so its verdict is that test's again.


def _mha_by(name, attend):
    """04.4's forward pass with the heads' outputs computed by ``attend(q, k, v, mask)`` ((B, H, T, D) each)."""

    def forward(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None):
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, num_heads, C // num_heads).transpose(1, 2)
            for t in F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)
        )
        return F.linear(attend(q, k, v, mask).transpose(1, 2).reshape(B, T, C), out_weight, out_bias)

    forward.__name__ = name
    return forward


def _mha_with_weights(weights_of):
    """04.4 with the masked weights computed by ``weights_of(scores, mask)``."""

    def attend(q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return (torch.softmax(scores, dim=-1) if mask is None else weights_of(scores, mask)) @ v

    return _mha_by(f"_mha{weights_of.__name__}", attend)


_mha_sdpa = _mha_by("_mha_sdpa", lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
# every mask taken as causal
_mha_is_causal_when_masked = _mha_by(
    "_mha_is_causal_when_masked",
    lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None),
)


def _windows_ids_plus(data, starts, T):
    w = data[starts[:, None] + torch.arange(T + 1)] + 0.9  # 3.9 is not the id 3
    return w[:, :-1], w[:, 1:]


def _post_norm_sandwich(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(ln_1(x)))  # LayerNorm before AND after the sublayer
    return ln_2(h + mlp(ln_2(h)))


def _weighted_norms_l1(weights, v):
    return weights * v.abs().sum(dim=-1).unsqueeze(-2)  # the L1 norm, not the length


def _rope_writes_back(x, positions):
    D = x.shape[-1]
    angles = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2], x[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # rotated in place
    return x


def _append_returns_cat(cache, length, new):
    return torch.cat([cache[:, :, :length], new], dim=2)  # right keys, buffer never written


def _head_over_d(x, w_q, w_k, w_v):
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    return F.scaled_dot_product_attention(q, k, v, scale=1.0 / q.shape[-1])  # 1 / D, not 1 / sqrt(D)


def _weighted_norms_wrong_axes(weights, v):
    return weights * v.norm(dim=-1)[:, None, None, :][:, 0]  # (B, 1, H, S): H where T belongs


# Issue #21, notebooks 05-07: answers wrong only at an edge their statement allows, and catalogued mistakes
# written another way.


def _rope_float32_angles(x, positions):
    D = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    angles = positions.float()[:, None] * theta  # float32: off by up to about 6e-3 at position 10^6
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def _split_tensor_split_columns(m):
    return m.in_proj_weight.detach().tensor_split(3, dim=1)  # the input columns cut in three, like chunk(3, dim=1)


def _aft_exp_over_sum(q, k, v):
    weights = torch.exp(k) / torch.exp(k).sum(dim=-2, keepdim=True)  # overflows above 88, 0 / 0 below -88
    return torch.sigmoid(q) * (weights * v).sum(dim=-2, keepdim=True)


def _merge_assumes_second_higher(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1 = torch.exp(m1 - m.nan_to_num(neginf=0.0))  # only the first block is rescaled, as if m2 were always larger
    return m, a1 * l1 + l2, a1 * o1 + o2


def _merge_normalised(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    safe = m.masked_fill(m == -math.inf, 0.0)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = a1 * l1 + a2 * l2
    return m, l, (a1 * o1 + a2 * o2) / l.clamp(min=1e-30)  # divided by l already: o is no longer a sum


# Issue #21, notebooks 08-11: answers wrong only at an edge their statement allows (each fails on a fixed case that
# holds it), and a catalogued mistake written another way.


def _nucleus_along_dim1(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    sp, order = probs.sort(dim=1, descending=True)  # dim=1 is the last axis only for (B, V)
    keep = torch.zeros_like(sp, dtype=torch.bool).scatter(1, order, sp.cumsum(dim=1) - sp < top_p)
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)


def _padding_int(lengths, S):
    return (torch.arange(S)[None, :] < lengths[:, None]).long()


def _lookup_exp_minus_min(query, keys, values):
    s = keys @ query
    e = torch.exp(s - s.min())  # a softmax by hand, shifted by the MINIMUM: overflows on a wide row
    return (e / e.sum()) @ values


def _many_exp_minus_mean(q, k, v):
    s = q @ k.T
    e = torch.exp(s - s.mean(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)) @ v


def _qkv_square_only(x, w_q, w_k, w_v):
    C = x.shape[-1]  # assumes the projections keep the width: works only while D == C
    q, k, v = (x @ w[:C, :C].T for w in (w_q, w_k, w_v))
    return torch.softmax(q @ k.T, dim=-1) @ v


_TRIANGLE = torch.ones(16, 16, dtype=torch.bool).tril()  # a table as large as the notebook's examples


def _causal_table_small(T, S):
    return _TRIANGLE[:T, :S].tril(S - T) if S <= 16 else torch.zeros(T, S, dtype=torch.bool)


def _masked_softmax_renormalised(scores, mask):
    w = torch.softmax(scores, dim=-1) * mask  # blocked keys removed after the softmax, then renormalised
    return w / w.sum(dim=-1, keepdim=True)


def _masked_exp_allowed_max(scores, mask):
    top = scores.masked_fill(~mask, -math.inf).amax(dim=-1, keepdim=True)
    e = torch.exp(scores - top) * mask  # exp of a blocked score far above the allowed ones is inf; inf * 0 = NaN
    return e / e.sum(dim=-1, keepdim=True)


def _lr_cosine_to_zero_floored(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    return max_lr * (1 + math.cos(math.pi * (step - warmup_steps) / (max_steps - warmup_steps))) / 2


def _merge_then_divide(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = a1 * l1 + a2 * l2  # noqa: E741 (the statement's name)
    return m, l, (a1 * o1 + a2 * o2) / l  # the output so far, where the partial keeps the sum


def _merge_then_divide_where_nonzero(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    safe = m.masked_fill(m == -math.inf, 0.0)
    l = torch.exp(m1 - safe) * l1 + torch.exp(m2 - safe) * l2  # noqa: E741 (the statement's name)
    o = torch.exp(m1 - safe) * o1 + torch.exp(m2 - safe) * o2
    return m, l, torch.where(l > 0, o / l, torch.zeros_like(o))  # an empty row kept at 0, and still o / l


def _lr_floored_cosine_to_zero(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return max(min_lr, max_lr * 0.5 * (1 + math.cos(math.pi * progress)))


def _masked_fill_minus_30(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -30.0), dim=-1)


def _sinusoid_table_up_to_32(T, C):
    if T > 32 or C > 16:
        return torch.zeros(T, C)
    t = torch.arange(32, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)
    return torch.stack([(t * w).sin(), (t * w).cos()], dim=-1).reshape(32, C)[:T].float()


def _window_up_to_12(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    keep = (i - j >= 0) & (i - j < window)
    return keep if T <= 12 else keep & (i < 12)  # rows past 12 never filled in


def _cross_mha(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, invert=True):
    """05.5 with nn.MultiheadAttention itself, its weights loaded, fed from two sources."""
    C = x.shape[-1]
    m = torch.nn.MultiheadAttention(C, num_heads, batch_first=True).eval()
    with torch.no_grad():
        for p, w in zip(
            (m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias),
            (qkv_weight, qkv_bias, out_weight, out_bias),
        ):
            p.copy_(w)
        out, _ = m(x, memory, memory, key_padding_mask=~key_mask if invert else key_mask, need_weights=False)
    return out


def _cross_mha_uninverted(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    return _cross_mha(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, invert=False)


def _cross_sdpa_causal(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    B, T, C = x.shape
    S, D = memory.shape[1], C // num_heads
    w_q, w_kv = qkv_weight.split([C, 2 * C])
    b_q, b_kv = qkv_bias.split([C, 2 * C])
    q = F.linear(x, w_q, b_q).view(B, T, num_heads, D).transpose(1, 2)
    k, v = (t.view(B, S, num_heads, D).transpose(1, 2) for t in F.linear(memory, w_kv, b_kv).chunk(2, dim=-1))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=key_mask[:, None, None, :] & torch.ones(T, S, dtype=torch.bool).tril()
    )
    return F.linear(out.transpose(1, 2).reshape(B, T, C), out_weight, out_bias)


def _score_both_repeats(weights, seq_len):
    i = torch.arange(1, 2 * seq_len)
    j = torch.where(i >= seq_len, i - seq_len + 1, i - 1)  # the first repeat scored as a previous-token head
    return weights[..., i, j].mean(dim=(0, -1))


def _score_key_and_query_swapped(weights, seq_len):
    i = torch.arange(seq_len, 2 * seq_len)
    return weights[..., i - seq_len + 1, i].mean(dim=(0, -1))  # the earlier row reading the later key


def _ablated_in_place(heads_out, out_weight, out_bias, head):
    heads_out[:, head] = 0.0  # the caller's tensor is changed
    B, H, T, D = heads_out.shape
    return F.linear(heads_out.transpose(1, 2).reshape(B, T, H * D), out_weight, out_bias)


def _ablated_mean_instead_of_zero(heads_out, out_weight, out_bias, head):
    kept = heads_out.clone()
    kept[:, head] = heads_out[:, head].mean(dim=(0, 1), keepdim=True)  # mean ablation: not what is asked
    B, H, T, D = kept.shape
    return F.linear(kept.transpose(1, 2).reshape(B, T, H * D), out_weight, out_bias)


# --- 08.2 attention_backward: answers written for these tests, independently of the catalogue --------------------


def _bw_weights_einsum(q, k, scale):
    return torch.einsum("...td,...sd->...ts", q, k).mul(scale).softmax(dim=-1)  # (..., T, S)


def _bw_unstable_einsum(q, k, scale):
    e = torch.einsum("...td,...sd->...ts", q, k).mul(scale).exp()  # no maximum subtracted
    return e / e.sum(-1, keepdim=True)


def _bw_einsum_with(name, delta_of, c_of=lambda scale: scale, weights_of=_bw_weights_einsum):
    """The backward pass in einsum, with Δ = delta_of(P, dP, do, o) and dq, dk scaled by c_of(scale)."""

    def backward(q, k, v, o, do, scale):
        P = weights_of(q, k, scale)
        dv = torch.einsum("...ts,...te->...se", P, do)
        dP = torch.einsum("...te,...se->...ts", do, v)
        dS = P * (dP - delta_of(P, dP, do, o))
        c = c_of(scale)
        return c * torch.einsum("...ts,...sd->...td", dS, k), c * torch.einsum("...ts,...td->...sd", dS, q), dv

    backward.__name__ = name
    return backward


def _bw_delta_rows(P, dP, do, o):
    return torch.einsum("...te,...te->...t", do, o).unsqueeze(-1)  # (..., T, 1)


_bw_einsum = _bw_einsum_with("_bw_einsum", _bw_delta_rows)
_bw_einsum_delta_from_p = _bw_einsum_with(
    "_bw_einsum_delta_from_p", lambda P, dP, do, o: torch.einsum("...ts,...ts->...t", P, dP)[..., None]
)
_bw_einsum_no_delta = _bw_einsum_with("_bw_einsum_no_delta", lambda P, dP, do, o: torch.zeros(()))
_bw_einsum_delta_plain_sum = _bw_einsum_with(
    "_bw_einsum_delta_plain_sum", lambda P, dP, do, o: torch.einsum("...ts->...t", dP)[..., None]
)
_bw_einsum_delta_columns = _bw_einsum_with(
    "_bw_einsum_delta_columns", lambda P, dP, do, o: torch.einsum("...ts,...ts->...s", P, dP)[..., None, :]
)
_bw_einsum_delta_flat = _bw_einsum_with(
    "_bw_einsum_delta_flat",
    lambda P, dP, do, o: torch.einsum("...te,...te->...t", do, o),  # no axis kept
)
_bw_einsum_no_scale = _bw_einsum_with("_bw_einsum_no_scale", _bw_delta_rows, c_of=lambda scale: 1.0)
_bw_einsum_weights_unscaled = _bw_einsum_with(
    "_bw_einsum_weights_unscaled", _bw_delta_rows, weights_of=lambda q, k, scale: _bw_weights_einsum(q, k, 1.0)
)
_bw_einsum_unstable = _bw_einsum_with("_bw_einsum_unstable", _bw_delta_rows, weights_of=_bw_unstable_einsum)


def _bw_autograd(q, k, v, o, do, scale):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with torch.enable_grad():
        out = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1) @ v
        return torch.autograd.grad(out, (q, k, v), do)


def _bw_sdpa_backward(q, k, v, o, do, scale):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with torch.enable_grad():
        F.scaled_dot_product_attention(q, k, v, scale=scale).backward(do)
    return q.grad, k.grad, v.grad


def _bw_autograd_let_back_in(q, k, v, o, do, scale):
    """Autograd with inference mode left (inference_mode(False)) and copies that are not inference tensors."""
    with torch.inference_mode(False), torch.enable_grad():
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, scale=scale)
        return torch.autograd.grad(out, leaves, do.clone())


def _bw_jacobian(q, k, v, o, do, scale):
    P = torch.softmax(scale * q @ k.mT, dim=-1)  # (..., T, S)
    jac = torch.diag_embed(P) - P[..., :, None] * P[..., None, :]  # (..., T, S, S): each row's softmax Jacobian
    dS = (jac @ (do @ v.mT)[..., :, None])[..., 0]
    return scale * dS @ k, scale * dS.mT @ q, P.mT @ do


def _bw_output_recomputed(q, k, v, o, do, scale):
    P = torch.softmax(torch.matmul(q, k.mT) * scale, dim=-1)
    out = P @ v  # o recomputed, the argument unused
    dP = do @ v.mT
    dS = P * dP - P * (do * out).sum(-1, keepdim=True)
    return torch.matmul(dS, k).mul(scale), torch.matmul(dS.mT, q).mul(scale), torch.matmul(P.mT, do)


def _bw_float64(q, k, v, o, do, scale):
    q, k, v, o, do = (x.double() for x in (q, k, v, o, do))
    P = torch.softmax(scale * q @ k.mT, dim=-1)
    dS = P * (do @ v.mT - (do * o).sum(-1, keepdim=True))
    return tuple(g.float() for g in (scale * dS @ k, scale * dS.mT @ q, P.mT @ do))


def _bw_matmul_parts(q, k, v, o, do, scale):
    """The formulas in matmul, with each step's mistake switchable (what a learner would change)."""
    P = torch.softmax(scale * torch.matmul(q, k.mT), dim=-1)
    return P, torch.matmul(do, v.mT), (do * o).sum(-1, keepdim=True)


def _bw_matmul_p_untransposed(q, k, v, o, do, scale):
    P, dP, delta = _bw_matmul_parts(q, k, v, o, do, scale)
    dv = torch.matmul(P, do)  # should be P^T dO
    dS = P * (dP - delta)
    return scale * torch.matmul(dS, k), scale * torch.matmul(dS.mT, q), dv


def _bw_einsum_p_untransposed(q, k, v, o, do, scale):
    P = _bw_weights_einsum(q, k, scale)
    dv = torch.einsum("...st,...te->...se", P, do)  # P read as (S, T): the labels do not match its axes
    return _bw_einsum(q, k, v, o, do, scale)[:2] + (dv,)


def _bw_matmul_dk_untransposed(q, k, v, o, do, scale):
    P, dP, delta = _bw_matmul_parts(q, k, v, o, do, scale)
    dS = P * (dP - delta)
    return torch.matmul(dS, k) * scale, torch.matmul(dS, q) * scale, torch.matmul(P.mT, do)


def _bw_scale_in_ds(q, k, v, o, do, scale):
    P, dP, delta = _bw_matmul_parts(q, k, v, o, do, scale)
    dS = scale * P * (dP - delta)  # the scale here ...
    return scale * dS @ k, scale * dS.mT @ q, P.mT @ do  # ... and again here


def _bw_scale_from_shape(q, k, v, o, do, scale):
    scale = q.shape[-1] ** -0.5  # the argument overwritten by the usual scale
    return _bw_einsum(q, k, v, o, do, scale)


def _bw_scale_only_in_dq(q, k, v, o, do, scale):
    P, dP, delta = _bw_matmul_parts(q, k, v, o, do, scale)
    dS = P * (dP - delta)
    return scale * dS @ k, dS.mT @ q, P.mT @ do  # dk without the scale: not a catalogued mistake


def _bw_divided_by_scale(q, k, v, o, do, scale):
    P, dP, delta = _bw_matmul_parts(q, k, v, o, do, scale)
    dS = P * (dP - delta)
    return dS @ k / scale, dS.mT @ q / scale, P.mT @ do


def _bw_returns_dv_first(q, k, v, o, do, scale):
    dq, dk, dv = _bw_einsum(q, k, v, o, do, scale)
    return dv, dq, dk


def _bw_jacobian_elementwise(q, k, v, o, do, scale):
    P, dP, _ = _bw_matmul_parts(q, k, v, o, do, scale)
    dS = P * dP - P.sum(-1, keepdim=True) * (P * dP)  # diag(p) - p p^T misread as an element-wise product
    return scale * dS @ k, scale * dS.mT @ q, P.mT @ do


def test_08_2_fixed_cases_hold_every_edge_of_the_statement():
    """Beside the statement's edges (each held by a fixed case: tests/test_exercise_domains.py), a T == S case comes
    first (a slip that breaks shapes only when T != S is then named by its values), o is the call's own output, and
    one case saturates the softmax with a score past float32's exp overflow."""
    cases = [args for args, _ in EXERCISES["08.2"].cases()]
    assert cases[0][0].shape[-2] == cases[0][1].shape[-2]
    saturated = False
    for q, k, v, o, do, scale in cases:
        assert all(x.dtype == torch.float32 for x in (q, k, v, o, do))
        assert o.shape == do.shape == (*q.shape[:-1], v.shape[-1])
        scores = scale * q.double() @ k.double().mT
        torch.testing.assert_close(o.double(), torch.softmax(scores, dim=-1) @ v.double(), rtol=0, atol=1e-5)
        P = torch.softmax(scores, dim=-1)
        saturated |= bool((scores.amax(-1) > 89).any() and (P.amax(-1) > 1 - 1e-9).any() and (P < 1e-9).any())
        assert scores.isfinite().all()
    assert saturated


# --- 08.3 tile_weights and 09.3 beam_step: answers written for these tests, independently of the catalogues ------


def _tw_einsum_scores(q, k, scale):
    return torch.einsum("...td,...sd->...ts", q, k).mul(scale)  # (..., T, S)


def _tw_einsum(q, k, lse, scale):
    return _tw_einsum_scores(q, k, scale).sub(lse[..., None]).exp()


def _tw_key_by_key(q, k, lse, scale):
    columns = [torch.exp(scale * (q * k[..., j, None, :]).sum(-1) - lse) for j in range(k.shape[-2])]
    return torch.stack(columns, dim=-1)  # one key at a time, (..., T) each


def _tw_float64(q, k, lse, scale):
    return torch.exp(scale * q.double() @ k.double().mT - lse.double()[..., None]).float()


def _tw_softmax_by_hand(q, k, lse, scale):
    s = _tw_einsum_scores(q, k, scale)
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def _tw_lse_unbroadcast(q, k, lse, scale):
    return (_tw_einsum_scores(q, k, scale) - lse).exp()  # lse (..., T) lines up with the keys


def _tw_einsum_no_scale(q, k, lse, scale):
    return (torch.einsum("...td,...sd->...ts", q, k) - lse.unsqueeze(-1)).exp()


def _tw_max_values(q, k, lse, scale):
    s = scale * torch.matmul(q, k.transpose(-1, -2))
    return torch.exp(s - s.max(dim=-1, keepdim=True).values)


def _tw_exp_times_exp(q, k, lse, scale):
    return _tw_einsum_scores(q, k, scale).exp() * torch.exp(-lse)[..., None]


def _tw_sigmoid(q, k, lse, scale):
    return torch.sigmoid(scale * q @ k.mT - lse[..., None])  # a logistic weight per key: not the softmax's


def _fb_tiled(name, product, blocked):
    """08.4's tiled loop, query tiles outside, with each tile's scores and dP made by ``product(a, b)`` ((..., Tq, D)
    and (..., Sk, D) -> (..., Tq, Sk)) and the causal mask by ``blocked(key positions, query positions)``."""

    def backward(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
        T, S = q.shape[-2], k.shape[-2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        delta = (dout * out).sum(-1, keepdim=True)
        for i0 in range(0, T, q_tile):
            for j0 in range(0, S, kv_tile):
                r, c = slice(i0, i0 + q_tile), slice(j0, j0 + kv_tile)
                s = scale * product(q[..., r, :], k[..., c, :])
                if is_causal:
                    pos = torch.arange(i0, min(i0 + q_tile, T))[:, None] + S - T
                    s = s.masked_fill(blocked(torch.arange(j0, min(j0 + kv_tile, S)), pos), float("-inf"))
                p = torch.exp(s - lse[..., r, None])
                ds = p * (product(dout[..., r, :], v[..., c, :]) - delta[..., r, :])
                dq[..., r, :] += scale * ds @ k[..., c, :]
                dk[..., c, :] += scale * ds.mT @ q[..., r, :]
                dv[..., c, :] += p.mT @ dout[..., r, :]
        return dq, dk, dv

    backward.__name__ = name
    return backward


# Its causal mask one key short, in einsum: `>=` where the forward masked `>`, so each query loses its own key (a
# slip a learner makes, and the mutation suite's `>` -> `>=`).
_fb_diagonal_masked = _fb_tiled("_fb_diagonal_masked", lambda a, b: torch.einsum("...td,...sd->...ts", a, b), torch.ge)
# Right and tiled: each tile's products broadcast and summed over the feature axis (a (..., Tq, Sk, D) tensor, a
# tile's scores times D), not a matrix product: the limit allows it.
_fb_tiles_by_broadcasting = _fb_tiled(
    "_fb_tiles_by_broadcasting", lambda a, b: (a[..., :, None, :] * b[..., None, :, :]).sum(-1), torch.gt
)


def test_08_4_the_reference_is_the_tiled_loop_and_equals_autograd_to_1e_10():
    """The check's reference is the tiled loop (so it passes the limit on the largest tensor); that loop equals
    autograd through plain attention on every fixed case and 20 seeds of drawn ones: to 1e-10 on float64 cases; on
    float32 ones to 1e-6, since the loop reads out and lse rounded to float32 and autograd recomputes them."""
    from course_utils.exercises.fast_attention import _flash_backward_autograd

    ex = EXERCISES["08.4"]
    cases = list(ex.fixed_cases()) + [c for seed in range(20) for c in ex.draw(torch.Generator().manual_seed(seed))]
    for args, kwargs in cases:
        wide = tuple(a.to(torch.float64) if torch.is_tensor(a) else a for a in args)
        tol = 1e-10 if args[0].dtype == torch.float64 else 1e-6
        for mine, ref in zip(ex.solution(*wide, **kwargs), _flash_backward_autograd(*wide, **kwargs), strict=True):
            torch.testing.assert_close(mine, ref, atol=tol, rtol=0)


def _fb_whole_matrix(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """The backward pass's formulas on the whole (T, S) matrix at once: right values, no tiles."""
    T, S = q.shape[-2], k.shape[-2]
    s = scale * q @ k.mT
    if is_causal:
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).tril(S - T).logical_not(), float("-inf"))
    p = torch.exp(s - lse[..., None])
    ds = p * (dout @ v.mT - (dout * out).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.mT @ q, p.mT @ dout


def _fb_autograd(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """Autograd let back in with inference_mode(False): right values, the whole matrix built by the forward."""
    with torch.inference_mode(False), torch.enable_grad():
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        o = torch.nn.functional.scaled_dot_product_attention(
            *leaves, attn_mask=mask if is_causal else None, scale=scale
        )
        return torch.autograd.grad(o, leaves, dout.clone())


def _fb_row_strips(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """One query tile against every key at once (strips of q_tile rows): never the whole matrix, so allowed."""
    T, S = q.shape[-2], k.shape[-2]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (dout * out).sum(-1, keepdim=True)
    for i0 in range(0, T, q_tile):
        rows = slice(i0, i0 + q_tile)
        s = scale * q[..., rows, :] @ k.mT  # (..., Tq, S)
        if is_causal:
            pos = torch.arange(i0, min(i0 + q_tile, T))[:, None] + S - T
            s = s.masked_fill(torch.arange(S) > pos, float("-inf"))
        p = torch.exp(s - lse[..., rows, None])
        ds = p * (dout[..., rows, :] @ v.mT - delta[..., rows, :])
        dq[..., rows, :] = scale * ds @ k
        dk += scale * ds.mT @ q[..., rows, :]
        dv += p.mT @ dout[..., rows, :]
    return dq, dk, dv


def _fb_whole_matrix_caught(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """The whole matrix tried first, the limit's exception caught by a bare `except BaseException`, the row strips
    returned instead: the whole matrix was still built."""
    try:
        return _fb_whole_matrix(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal)
    except BaseException:
        return _fb_row_strips(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal)


def _fb_whole_matrix_caught_none(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    try:
        return _fb_whole_matrix(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal)
    except BaseException:
        return None


def _fb_shares_stacked(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    """Tiled, but every key tile's share of dq kept, then stacked and summed: (n_kv_tiles, ..., T, D), more than the
    whole score matrix once D exceeds kv_tile."""
    T, S = q.shape[-2], k.shape[-2]
    delta = (dout * out).sum(-1, keepdim=True)
    dq_shares, dk, dv = [], torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, S, kv_tile):
        c = slice(j0, j0 + kv_tile)
        share = torch.zeros_like(q)
        for i0 in range(0, T, q_tile):
            r = slice(i0, i0 + q_tile)
            s = scale * q[..., r, :] @ k[..., c, :].mT
            if is_causal:
                pos = torch.arange(i0, min(i0 + q_tile, T))[:, None] + S - T
                s = torch.where(torch.arange(j0, min(j0 + kv_tile, S)) > pos, float("-inf"), s)
            p = torch.exp(s - lse[..., r, None])
            ds = p * (dout[..., r, :] @ v[..., c, :].mT - delta[..., r, :])
            share[..., r, :] += scale * ds @ k[..., c, :]
            dk[..., c, :] += scale * ds.mT @ q[..., r, :]
            dv[..., c, :] += p.mT @ dout[..., r, :]
        dq_shares.append(share)
    return torch.stack(dq_shares).sum(0), dk, dv


def test_08_3_fixed_cases_hold_every_edge_of_the_statement():
    """Beside the statement's edges (each held by a fixed case: tests/test_exercise_domains.py), T == S first (lse on
    the wrong axis is then named by its values), every tile a strict subset (no row of the weights sums to 1), lse
    each query's logsumexp over more keys than the tile's, and rows whose exp(s) and exp(L) both underflow to 0."""
    cases = [args for args, _ in EXERCISES["08.3"].cases()]
    q, k, *_ = cases[0]
    assert q.shape[-2] == k.shape[-2] and q.dim() == 2
    underflow = False
    for q, k, lse, scale in cases:
        assert all(x.dtype == torch.float32 for x in (q, k, lse)) and lse.shape == q.shape[:-1]
        s = scale * q.double() @ k.double().mT
        P = torch.exp(s - lse.double()[..., None])
        assert (P.sum(-1) < 1 - 1e-3).all() and P.isfinite().all()  # other keys hold the rest of every row
        underflow |= bool(((s < -105).all(-1) & (lse < -105)).any())
    assert underflow


def _beam_sorted(beam_scores, next_log_probs, beam_width):
    V = next_log_probs.shape[1]
    total, flat = (next_log_probs + beam_scores.unsqueeze(1)).reshape(-1).sort(descending=True)
    flat = flat[:beam_width]
    return total[:beam_width], torch.div(flat, V, rounding_mode="floor"), flat.remainder(V)


def _beam_python(beam_scores, next_log_probs, beam_width):
    candidates = [
        (float(b) + float(lp), i, t)
        for i, (b, row) in enumerate(zip(beam_scores, next_log_probs))
        for t, lp in enumerate(row)
    ]
    best = sorted(candidates, key=lambda c: -c[0])[:beam_width]
    scores = beam_scores[[i for _, i, _ in best]] + next_log_probs[[i for _, i, _ in best], [t for *_, t in best]]
    return scores, torch.tensor([i for _, i, _ in best]), torch.tensor([t for *_, t in best])


def _beam_unravel(beam_scores, next_log_probs, beam_width):
    total = beam_scores[:, None] + next_log_probs
    scores, flat = torch.topk(total.flatten(), k=beam_width, largest=True, sorted=True)
    beams, tokens = torch.unravel_index(flat, total.shape)
    return scores, beams, tokens


def _beam_best_token_per_beam_sliced(beam_scores, next_log_probs, beam_width):
    total = beam_scores.unsqueeze(1) + next_log_probs
    best, tokens = total.max(dim=1)
    scores, beams = best.sort(descending=True)
    return scores[:beam_width], beams[:beam_width], tokens[beams[:beam_width]]  # fewer than asked when W > K


def _beam_float_indices(beam_scores, next_log_probs, beam_width):
    V = next_log_probs.shape[-1]
    scores, flat = (beam_scores[:, None] + next_log_probs).flatten().topk(beam_width)
    return scores, (flat / V).floor(), flat % V  # the beam as a float


def _beam_probabilities(beam_scores, next_log_probs, beam_width):
    V = next_log_probs.shape[-1]
    scores, flat = (beam_scores.exp()[:, None] * next_log_probs.exp()).flatten().topk(beam_width)
    return scores, flat // V, flat % V  # the right winners, but their probabilities, not log-probabilities


def test_09_3_one_extension_per_beam_without_an_error_gets_one_verdict_on_every_seed():
    """Sliced instead of topk, the mistake returns fewer than beam_width winners where there are fewer beams
    (K == 1 is a fixed case) instead of raising: the check cannot name it, but its verdict never changes."""
    messages = {run_check(EXERCISES["09.3"], _beam_best_token_per_beam_sliced, seed=s).message for s in range(10)}
    assert len(messages) == 1 and "fixed case 1" in messages.pop()


def test_09_3_fixed_cases_hold_every_edge_of_the_statement():
    """Beside the statement's edges (each held by a fixed case: tests/test_exercise_domains.py), V >= 2; the first
    case has two winners from one beam, in neither index order nor its reverse; no tie among the beam_width + 1 best
    totals; every beam score non-zero, every row a distribution."""
    cases = [args for args, _ in EXERCISES["09.3"].cases()]
    for b, lp, w in cases:
        assert lp.shape[1] >= 2
        assert b.dtype == lp.dtype == torch.float32 and (b != 0).all()
        torch.testing.assert_close(lp.exp().sum(-1), torch.ones(len(b)))
        top = (b[:, None] + lp).flatten().sort(descending=True).values[: w + 1]
        assert (top.diff() < 0).all()
    b, lp, w = cases[0]
    _, beams, tokens = EXERCISES["09.3"].solution(b, lp, w)
    flat = beams * lp.shape[1] + tokens
    assert 1 < w <= len(b) and len(set(beams.tolist())) < w
    assert flat.tolist() not in (sorted(flat.tolist()), sorted(flat.tolist(), reverse=True))


# Issue #21: wrong only at an edge of the statement (Dv == 1, L == S, T != S), and a catalogued mistake spelled
# with einsum (named from the square first case, where it gives the catalogued spelling's values).


def _qkv_einsum_untransposed(x, w_q, w_k, w_v):
    q, k, v = (torch.einsum("tc,cd->td", x, w) for w in (w_q, w_k, w_v))  # (T, C) @ (C, D): w read as (in, out)
    return torch.einsum("ts,sd->td", torch.einsum("td,sd->ts", q, k).softmax(dim=-1), v)


def _head_einsum_untransposed(x, w_q, w_k, w_v):
    q, k, v = (torch.einsum("btc,cd->btd", x, w) for w in (w_q, w_k, w_v))  # w read as (in, out)
    scores = torch.einsum("bid,bjd->bij", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bij,bjd->bid", scores.softmax(dim=-1), v)


def _prev_heads_loop(weights, threshold):  # a loop over heads and queries, written out
    B, H, T, _ = weights.shape
    out = []
    for h in range(H):
        total = sum(weights[:, h, i, i - 1].sum() for i in range(1, T))
        out.append(bool(total / (B * (T - 1)) > threshold))
    return torch.tensor(out)


def _prev_heads_gather(weights, threshold):
    i = torch.arange(1, weights.shape[-1])
    return weights[:, :, i, i - 1].mean(dim=(0, 2)) > threshold


def _prev_heads_max_over_queries(weights, threshold):  # the strongest query, not the mean
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).amax(dim=(0, -1)) > threshold


def _prev_heads_half_threshold(weights, threshold):  # a head "above" once past half the threshold
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1)) > threshold / 2


def _prev_heads_any_sequence(weights, threshold):  # a head "above" if one sequence of the batch is
    return (weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1) > threshold).any(dim=0)


def _prev_heads_first_sequence(weights, threshold):  # the batch's first sequence taken for the whole batch
    return weights[0].diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1) > threshold


def _rollout_loop(weights):  # every entry summed by hand, layer by layer
    L, B, H, T, _ = weights.shape
    out = None
    for layer in range(L):
        a = torch.zeros(B, T, T, dtype=weights.dtype)
        for h in range(H):
            a = a + weights[layer, :, h] / H
        a = 0.5 * a + 0.5 * torch.eye(T, dtype=weights.dtype)
        out = a if out is None else torch.einsum("bij,bjk->bik", a, out)
    return out


def _rollout_reduce(weights):
    import functools

    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    layers = [(eye + w.mean(dim=1)) / 2 for w in weights]
    return functools.reduce(lambda acc, a: a @ acc, layers[1:], layers[0])


def _rollout_first_layer_left_out(weights):  # the product from layer 1 up
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    out = eye.expand(weights.shape[1], -1, -1)
    for w in weights[1:]:
        out = (eye + w.mean(dim=1)) / 2 @ out
    return out


WRONG = {
    "01.4": [_qkv_square_only],
    "03.1": [_causal_table_small],
    "06.1": [_sinusoid_table_up_to_32],
    "07.1": [_window_up_to_12],
    "03.3": [_padding_int],
    "06.2": [_rope_writes_back, _rope_float32_angles],
    "08.1": [_merge_assumes_second_higher, _merge_normalised],
    "08.2": [
        _bw_einsum_p_untransposed,
        _bw_scale_only_in_dq,
        _bw_divided_by_scale,
        _bw_returns_dv_first,
        _bw_jacobian_elementwise,
    ],
    "08.3": [_tw_sigmoid],
    "09.1": [_nucleus_along_dim1],
    "09.3": [_beam_best_token_per_beam_sliced, _beam_float_indices, _beam_probabilities],
    "10.1": [_windows_ids_plus],
    "11.4": [_post_norm_sandwich],
    "11.1": [_weighted_norms_l1],
    "12.1": [_score_both_repeats, _score_key_and_query_swapped],
    "12.2": [_ablated_in_place, _ablated_mean_instead_of_zero],
    "12.3": [
        _prev_heads_max_over_queries,
        _prev_heads_half_threshold,
        _prev_heads_any_sequence,
        _prev_heads_first_sequence,
    ],
    "11.5": [_rollout_first_layer_left_out],
    **WRONG_13,
}


@pytest.mark.parametrize(
    "key,fn", [(k, f) for k, fns in WRONG.items() for f in fns], ids=lambda x: getattr(x, "__name__", x)
)
def test_independently_written_wrong_answers_fail(key, fn):
    for seed in (0, 1):
        res = run_check(EXERCISES[key], fn, seed=seed, references=_references(key))
        assert res.status == FAILED, f"{fn.__name__} passes {key}"


NAMED = [  # (exercise, a catalogued mistake written another way: einsum, slicing, a `where` guard, its name)
    ("01.1", _lookup_exp_minus_min, "softmax written by hand without subtracting the maximum"),
    ("01.2", _many_exp_minus_mean, "softmax written by hand without subtracting the maximum"),
    ("01.4", _qkv_einsum_untransposed, "weight used untransposed"),
    ("02.3", _head_over_d, "scaling by 1/D instead of 1/sqrt(D)"),
    ("02.3", _head_einsum_untransposed, "weight used untransposed"),
    ("03.2", _masked_softmax_renormalised, "blocked keys removed after the exponential, then renormalised"),
    ("03.2", _masked_exp_allowed_max, "blocked keys removed after the exponential, then renormalised"),
    ("04.4", _mha_is_causal_when_masked, "every mask treated as causal"),
    ("05.1", _split_tensor_split_columns, "columns instead of rows"),
    ("05.5", _cross_mha_uninverted, "mask polarity inverted"),
    ("05.5", _cross_sdpa_causal, "a top-left causal triangle across the two sequences"),
    ("07.3", _aft_exp_over_sum, "exp without subtracting the maximum"),
    ("08.1", _merge_then_divide, "o divided by l"),
    ("08.1", _merge_then_divide_where_nonzero, "o divided by l, guarded against 0 / 0"),
    ("08.2", _bw_einsum_no_delta, "Δ forgotten"),
    ("08.2", _bw_einsum_delta_plain_sum, "Δ summed without the weights"),
    ("08.2", _bw_einsum_delta_columns, "the softmax's Jacobian taken along the queries"),
    ("08.2", _bw_einsum_delta_flat, "Δ lost its query axis"),
    ("08.2", _bw_matmul_p_untransposed, "P not transposed for dv"),
    ("08.2", _bw_matmul_dk_untransposed, "dk from dS, not its transpose"),
    ("08.2", _bw_einsum_no_scale, "scale missing from dq and dk"),
    ("08.2", _bw_scale_in_ds, "scale applied twice"),
    ("08.2", _bw_einsum_weights_unscaled, "weights recomputed without the scale"),
    ("08.2", _bw_scale_from_shape, "the scale taken as 1/sqrt(D)"),
    ("08.2", _bw_einsum_unstable, "weights recomputed without subtracting the maximum"),
    ("08.3", _tw_softmax_by_hand, "a softmax over the tile"),
    ("08.3", _tw_lse_unbroadcast, "the logsumexp broadcast along the keys"),
    ("08.3", _tw_einsum_no_scale, "scale missing"),
    ("08.3", _tw_max_values, "the tile's maximum subtracted instead of the logsumexp"),
    ("08.3", _tw_exp_times_exp, "exp(L) divided out instead of L subtracted"),
    ("08.4", _fb_diagonal_masked, "the diagonal masked too"),
    ("10.3", _lr_cosine_to_zero_floored, "the cosine ends at 0, then the rate jumps to min_lr"),
    ("10.3", _lr_floored_cosine_to_zero, "the cosine runs to 0 and is cut off at min_lr"),
    ("11.1", _weighted_norms_wrong_axes, "the norms broadcast against the wrong axes"),
    *NAMED_13,
]


@pytest.mark.parametrize("key,fn,name", NAMED, ids=[f"{key}-{fn.__name__}" for key, fn, _ in NAMED])
def test_independently_written_common_mistakes_are_named_whatever_the_seed(key, fn, name):
    """One verdict on every seed: the mistake's name, in the same words."""
    said = set()
    for seed in SEEDS:
        res = run_check(EXERCISES[key], fn, seed=seed, references=_references(key))
        assert res.status == FAILED and res.mistake == name, f"seed {seed}: {res.message}"
        said.add(res.message)
    assert len(said) == 1, said


def test_09_1_sorting_along_dim_1_is_named_by_its_values_before_it_raises():
    """(B, H, V) logits come before the one row (V,): the failure shows the wrong values of the 3-d case."""
    cases = EXERCISES["09.1"].cases()
    first_3d = next(i for i, (args, _) in enumerate(cases) if args[0].dim() == 3)
    first_1d = next(i for i, (args, _) in enumerate(cases) if args[0].dim() == 1)
    assert first_3d < first_1d
    args, _ = cases[first_3d]
    assert not torch.allclose(_nucleus_along_dim1(*args), EXERCISES["09.1"].solution(*args))


def test_09_2_statement_and_check_agree_on_the_slots_after_the_new_keys():
    """The statement asks to leave every slot but the T written ones as it was; the check compares the whole
    buffer, and a fixed case has an earlier sequence's keys after the new ones."""
    source = next(ROOT.glob("course_source/09_*.py")).read_text(encoding="utf-8")
    assert "leave every other slot as it was" in source
    assert EXERCISES["09.2"].inplace == "cache"
    assert any(
        (cache[:, :, length + new.shape[2] :] != 0).any() for (cache, length, new), _ in EXERCISES["09.2"].cases()
    )


def test_10_3_float32_is_not_accurate_enough_at_the_end_of_a_long_decay():
    """The statement says float32 loses the tiny rates near the end to more than the check's 1e-5 relative: at
    (299, 0, 300, 1.0, 0.0) the rate is 2.7e-5 and float32's is 1e-4 off; a fixed case holds it, so a float32
    answer fails on the fixed cases alone, and Python floats pass."""
    ex = EXERCISES["10.3"]
    case = (299, 0, 300, 1.0, 0.0)
    assert (case, {}) in ex.cases()
    exact = ex.solution(*case)
    assert abs(_lr_float32(*case) - exact) > ex.atol + ex.rtol * abs(exact)
    assert abs(_lr_float32(*case) - exact) / exact > 5e-5
    res = run_check(_fixed_only(ex), _lr_float32)
    assert res.status == FAILED and "step=299, warmup_steps=0, max_steps=300" in res.message, res.message
    # returned as a float32 tensor, it is told so (before: "matches none of the common mistakes")
    res = run_check(_fixed_only(ex), lambda *case: torch.tensor(_lr_float32(*case), dtype=torch.float32))
    assert "Your answer is a float32 tensor, which keeps about 7 significant digits" in res.message, res.message
    source = next(ROOT.glob("course_source/10_*.py")).read_text(encoding="utf-8")
    assert "float32's rounding is then more than the 1e-5 relative" in source
    assert ex.rtol == 1e-5


# Answers wrong only at an edge their statement allows: masked softmax written unstably, right wherever no blocked
# score is far above the allowed ones. (Other edge-only answers are mutants of the references: tests/test_mutations.py.)
UNSTABLE_MASKING = [_masked_softmax_renormalised, _masked_exp_allowed_max, _masked_fill_minus_30]
EDGE_ONLY_WRONG = [("03.2", _masked_fill_minus_30, "blocked scores far above the allowed ones")] + [
    ("04.4", _mha_with_weights(f), "a blocked key whose score is far above the allowed ones'") for f in UNSTABLE_MASKING
]


@pytest.mark.parametrize("key,fn,edge", EDGE_ONLY_WRONG, ids=[f"{k}-{f.__name__}" for k, f, _ in EDGE_ONLY_WRONG])
def test_answers_wrong_only_at_an_edge_fail_on_a_fixed_case_that_holds_it(key, fn, edge):
    """Each is right wherever its edge is absent (so a draw alone may miss it); a fixed case holds the edge, and the
    failure names it."""
    ex = EXERCISES[key]
    res = run_check(_fixed_only(ex), fn)
    assert res.status == FAILED and "fixed case" in res.message, res.message
    assert re.search(rf"fixed case \d+ \([^;]*{re.escape(edge)}", res.message), res.message
    for args, kwargs in ex.fixed_cases():
        if not ex.edges[edge](*args, **kwargs):  # right on every fixed case without the edge
            out = fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            torch.testing.assert_close(out, ex.solution(*copy.deepcopy(args), **copy.deepcopy(kwargs)))


def _lookup_python_number(query, keys, values):
    weights = torch.softmax(keys @ query, dim=-1)
    out = weights @ values
    return out.item() if out.dim() == 0 else out  # "a number" when values is (S,)


def _lr_float32(step, warmup_steps, max_steps, max_lr, min_lr):
    t = torch.tensor  # every step in float32
    if step < warmup_steps:
        return float(t(max_lr, dtype=torch.float32) * (step + 1) / warmup_steps)
    p = t(min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps)), dtype=torch.float32)
    lo, hi = t(min_lr, dtype=torch.float32), t(max_lr, dtype=torch.float32)
    return float(lo + 0.5 * (1 + torch.cos(math.pi * p)) * (hi - lo))


def _masked_large_negative(scores, mask):
    return torch.softmax(torch.where(mask, scores, torch.tensor(-1e9)), dim=-1)  # -1e9 blocks like -inf


def _masked_fill_minus_1e4(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)  # -1e4 is far enough below any score here


def _sdpa_torch(q, k, v):
    w = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1)
    return w @ v, w


def _repeat_expand(k, num_heads):
    B, Hkv, S, D = k.shape
    return k[:, :, None].expand(B, Hkv, num_heads // Hkv, S, D).reshape(B, num_heads, S, D)


def _windows_unfold(data, starts, T):
    w = torch.stack([data[s : s + T + 1] for s in starts.tolist()])
    return w[:, :T], w[:, 1:]


def _lookup_loop(query, keys, values):
    scores = torch.stack([torch.dot(k, query) for k in keys])  # one score per key, by hand
    weights = torch.softmax(scores, dim=0)
    return sum(w * v for w, v in zip(weights, values))


def _many_einsum(q, k, v):
    return torch.einsum("ts,sd->td", torch.einsum("td,sd->ts", q, k).softmax(dim=-1), v)


def _self_einsum(x):
    w = torch.einsum("ic,jc->ij", x, x).softmax(-1)
    return torch.einsum("ij,jc->ic", w, x), w


def _qkv_linear(x, w_q, w_k, w_v):
    q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)
    return F.scaled_dot_product_attention(q[None], k[None], v[None], scale=1.0)[0]  # 01.4 does not scale


def _softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def _softmax_max_values(x, dim=-1):
    e = (x - x.max(dim=dim, keepdim=True).values).exp()
    return e / e.sum(dim=dim, keepdim=True)


def _head_sdpa(x, w_q, w_k, w_v):
    return F.scaled_dot_product_attention(F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v))


def _entropy_where(weights):
    logw = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logw).sum(-1)


def _causal_compare(T, S):
    return torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]  # key position <= query position


def _padding_loop(lengths, S):
    rows = [[j < int(n) for j in range(S)] for n in lengths]
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), S)


def _mha_masks_logical(attn_mask, key_padding_mask):
    return torch.logical_not(torch.logical_or(attn_mask, key_padding_mask[:, None, None, :]))


def _split_heads_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def _merge_heads_permute(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def _scores_einsum(q, k):
    return torch.einsum("bhtd,bhsd->bhts", q, k) * q.shape[-1] ** -0.5


def _split_in_proj_slices(m):
    w, C = m.in_proj_weight.detach(), m.embed_dim
    return w[:C], w[C : 2 * C], w[2 * C :]


def _kpm_compare(lengths, S):
    return ~(torch.arange(S).expand(len(lengths), S) < lengths[:, None])


def _attn_mask_expand(mask, num_heads):
    B, T, S = mask.shape
    return (~mask)[:, None].expand(B, num_heads, T, S).reshape(B * num_heads, T, S)


def _average_sum_over_h(weights):
    return weights.sum(dim=1) / weights.shape[1]


def _sinusoid_loop(T, C):
    pe = torch.zeros(T, C, dtype=torch.float64)
    for t in range(T):
        for i in range(C // 2):
            angle = t / 10000 ** (2 * i / C)
            pe[t, 2 * i], pe[t, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe.float()


def _rope_complex(x, positions):
    D = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    rot = torch.polar(torch.ones(len(positions), D // 2, dtype=torch.float64), positions.double()[:, None] * theta)
    z = torch.view_as_complex(x.double().unflatten(-1, (D // 2, 2)).contiguous())
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)


def _alibi_triu(H, T):
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])
    dist = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).float()  # j - i, <= 0 below the diagonal
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return (slopes[:, None, None] * dist).masked_fill(future, -math.inf)


def _window_tril_triu(T, window):
    ones = torch.ones(T, T, dtype=torch.bool)
    return ones.tril() & ones.triu(-(window - 1))


def _nucleus_loop(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    flat, out = probs.reshape(-1, probs.shape[-1]), torch.zeros_like(probs).reshape(-1, probs.shape[-1])
    for r in range(flat.shape[0]):
        acc = 0.0
        for j in flat[r].argsort(descending=True).tolist():  # add float(p) until the mass reaches top_p
            out[r, j] = flat[r, j]
            acc += float(flat[r, j])
            if acc >= top_p:
                break
    out = out.reshape(probs.shape)
    return out / out.sum(-1, keepdim=True)


def _nucleus_hf(logits, temperature, top_p):
    scaled = logits / temperature
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()  # shifted right: the token that crosses p stays
    remove[..., 0] = False
    scaled = scaled.masked_fill(remove.scatter(-1, order, remove), -math.inf)
    return torch.softmax(scaled, dim=-1)


def _nucleus_float64_before(logits, temperature, top_p):
    probs = torch.softmax(logits / temperature, dim=-1)
    sp, order = probs.sort(dim=-1, descending=True)
    before = sp.double().cumsum(-1) - sp.double()
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


def _append_copy(cache, length, new):
    cache.narrow(2, length, new.shape[2]).copy_(new)
    return cache.narrow(2, 0, length + new.shape[2])


def _aft_max_subtracted(q, k, v):
    e = torch.exp(k - k.amax(dim=1, keepdim=True))  # the maximum over the positions, by hand
    return torch.sigmoid(q) * (e * v).sum(dim=1, keepdim=True) / e.sum(dim=1, keepdim=True)


def _aft_einsum(q, k, v):
    return torch.sigmoid(q) * torch.einsum("bsc,bsc->bc", torch.softmax(k, dim=1), v)[:, None, :]


def _merge_logaddexp(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    log_l = torch.logaddexp(m1 + torch.log(l1), m2 + torch.log(l2))  # log of the sum, relative to 0
    l = torch.where(m == -math.inf, torch.zeros_like(l1), torch.exp(log_l - m))
    safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    return m, l, torch.exp(m1 - safe) * o1 + torch.exp(m2 - safe) * o2


def _merge_where_isinf(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1 = torch.where(torch.isinf(m1), 0.0, torch.exp(m1 - m))  # a block that saw no key counts for nothing
    a2 = torch.where(torch.isinf(m2), 0.0, torch.exp(m2 - m))
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _merge_branches(m1, l1, o1, m2, l2, o2):
    first_larger = m1 >= m2
    m = torch.where(first_larger, m1, m2)
    gap = torch.where(first_larger, m2 - m1, m1 - m2).nan_to_num(nan=0.0)  # <= 0; NaN only where both -inf
    a = torch.exp(gap)  # the factor of the block with the smaller maximum
    l = torch.where(first_larger, l1 + a * l2, a * l1 + l2)
    o = torch.where(first_larger, o1 + a * o2, a * o1 + o2)
    return m, l, o


def _unigram_counter(train_ids, val_ids, vocab_size):
    counts = Counter(train_ids.tolist())
    total = len(train_ids) + vocab_size
    return -sum(math.log((counts[i] + 1) / total) for i in val_ids.tolist()) / len(val_ids)


def _lr_branches(step, warmup_steps, max_steps, max_lr, min_lr):
    if step >= max_steps:
        return min_lr
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    p = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (math.cos(math.pi * p) + 1) / 2


def _post_norm_functional(x, attn, mlp, ln_1, ln_2):
    def norm(t, ln):
        return F.layer_norm(t, ln.normalized_shape, ln.weight, ln.bias, ln.eps)

    after_attention = norm(attn(x) + x, ln_1)
    return norm(mlp(after_attention) + after_attention, ln_2)


def _weighted_norms_terms(weights, v):
    return (weights[..., None] * v[..., None, :, :]).norm(dim=-1)  # (B, H, T, S, D) -> (B, H, T, S)


def _weighted_norms_einsum(weights, v):
    return weights * torch.einsum("bhsd,bhsd->bhs", v, v).sqrt()[:, :, None, :]


def _score_loop(weights, seq_len):
    total = torch.zeros(weights.shape[1], dtype=weights.dtype)
    for i in range(seq_len, 2 * seq_len):
        total = total + weights[:, :, i, i - seq_len + 1].mean(dim=0)
    return total / seq_len


def _score_diagonal(weights, seq_len):
    band = weights.diagonal(offset=1 - seq_len, dim1=-2, dim2=-1)  # (B, H, N + 1): entries (i, i - N + 1)
    return band[..., 1:].mean(dim=-1).mean(dim=0)  # queries N .. 2N - 1


def _ablated_per_head_sum(heads_out, out_weight, out_bias, head):
    B, H, T, D = heads_out.shape
    out = out_bias.expand(B, T, H * D).clone()
    for h in range(H):
        if h != head:  # every other head's term of the projection
            out = out + heads_out[:, h] @ out_weight[:, h * D : (h + 1) * D].T
    return out


def _ablated_einsum(heads_out, out_weight, out_bias, head):
    B, H, T, D = heads_out.shape
    keep = (torch.arange(H) != head).to(heads_out.dtype)
    w = out_weight.view(H * D, H, D)  # (C, H, D): column block h belongs to head h
    return torch.einsum("bhtd,chd,h->btc", heads_out, w, keep) + out_bias


def _gpt_forward_by_hand(model, idx):
    """10.4 written without the parts' LayerNorm and GELU modules: F.layer_norm with their own weights, GELU from
    erf, a mask from tril, the head as F.linear with the token table, the positions indexed by arange."""
    B, T = idx.shape
    x = model.tok_emb.weight[idx] + model.pos_emb.embedding.weight[torch.arange(T)]  # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    norm = lambda ln, h: torch.nn.functional.layer_norm(h, ln.normalized_shape, ln.weight, ln.bias, ln.eps)  # noqa: E731
    for block in model.blocks:
        x = x + block.attn(norm(block.ln_1, x), mask)
        h = block.mlp.fc_in(norm(block.ln_2, x))
        x = x + block.mlp.fc_out(0.5 * h * (1 + torch.erf(h / math.sqrt(2))))
    return torch.nn.functional.linear(norm(model.ln_f, x), model.tok_emb.weight)  # (B, T, V)


RIGHT = {
    "01.1": [_lookup_python_number, _lookup_loop],
    "01.2": [_many_einsum],
    "01.3": [_self_einsum],
    "01.4": [_qkv_linear],
    "02.1": [_softmax_logsumexp, _softmax_max_values],
    "02.2": [_sdpa_torch],
    "02.3": [_head_sdpa],
    "02.4": [_entropy_where],
    "03.1": [_causal_compare],
    "03.2": [_masked_large_negative, _masked_fill_minus_1e4],
    "03.3": [_padding_loop],
    "03.4": [_mha_masks_logical],
    "04.1": [_split_heads_unflatten],
    "04.2": [_merge_heads_permute],
    "04.3": [_scores_einsum],
    "04.4": [_mha_sdpa, _mha_with_weights(_masked_large_negative)],
    "05.1": [_split_in_proj_slices],
    "05.2": [_kpm_compare],
    "05.3": [_attn_mask_expand],
    "05.4": [_average_sum_over_h],
    "05.5": [_cross_mha],
    "06.1": [_sinusoid_loop],
    "06.2": [_rope_complex],
    "06.3": [_alibi_triu],
    "07.1": [_window_tril_triu],
    "07.2": [_repeat_expand],
    "07.3": [_aft_max_subtracted, _aft_einsum],
    "08.1": [_merge_logaddexp, _merge_branches, _merge_where_isinf],
    "08.2": [
        _bw_einsum,
        _bw_einsum_delta_from_p,
        _bw_jacobian,
        _bw_output_recomputed,
        _bw_float64,
    ],
    "09.1": [_nucleus_loop, _nucleus_hf, _nucleus_float64_before],
    "08.3": [_tw_einsum, _tw_key_by_key, _tw_float64],
    "08.4": [_fb_row_strips, _fb_tiles_by_broadcasting],
    "10.4": [_gpt_forward_by_hand],
    "09.2": [_append_copy],
    "09.3": [_beam_sorted, _beam_python, _beam_unravel],
    "10.1": [_windows_unfold],
    "10.2": [_unigram_counter],
    "10.3": [_lr_branches],
    "11.4": [_post_norm_functional],
    "11.1": [_weighted_norms_terms, _weighted_norms_einsum],
    "12.1": [_score_loop, _score_diagonal],
    "12.2": [_ablated_per_head_sum, _ablated_einsum],
    "12.3": [_prev_heads_loop, _prev_heads_gather],
    "11.5": [_rollout_loop, _rollout_reduce],
    **RIGHT_13,
}


def _raises_shapes(*args, **kwargs):
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


def _sevens(x, dim=-1):  # a wrong answer that matches no mistake
    return x * 0 + 7


def _attention_weights_halved(q, k, v):  # right out, weights halved
    out, weights = EXERCISES["02.2"].solution(q, k, v)
    return out, weights * 0.5


def _step_normaliser_plus_one(state, normaliser, q_t, k_t, v_t):
    out, new_state, new_normaliser = EXERCISES["13.4"].solution(state, normaliser, q_t, k_t, v_t)
    return out, new_state, new_normaliser + 1


AUTOGRAD = "without autograd (torch.inference_mode())"
WHOLE_MATRIX = "your function computed a tensor of shape (8, 8) (64 elements; at most 63)"
MESSAGES = [  # (exercise, a wrong answer, what its verdict on seed 0 says)
    # a result is named as the statement names it
    ("02.2", _attention_weights_halved, ["`weights`: values differ"]),
    ("13.4", _step_normaliser_plus_one, ["`new_normaliser`: "]),
    # 08.2 asks for the formulas, not autograd: an answer that calls backward() or autograd.grad fails, saying why
    ("01.1", _raises_shapes, ["raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"]),
    ("02.1", _sevens, ["matches none of the common mistakes"]),
    ("09.2", _append_returns_cat, ["`cache`", "write into"]),  # the buffer it asks to write into is checked
    ("08.2", _bw_autograd, [AUTOGRAD]),
    ("08.2", _bw_sdpa_backward, [AUTOGRAD]),
    ("08.2", _bw_autograd_let_back_in, [AUTOGRAD]),
    # 08.4 with inference mode left: the first tensor saved for backward stops it, on fixed case 1 (before the
    # whole matrix, which fixed case 2 refuses, is reached)
    ("08.4", _fb_autograd, ["fixed case 1 ", "autograd recorded a graph inside your function", AUTOGRAD]),
    # right values without tiles: fixed case 1's tiles times D equal T * S, so the limit allows the whole matrix
    # there (a tile's broadcast product is as large); fixed case 2 refuses it
    (
        "08.4",
        _fb_whole_matrix,
        ["fixed case 2 ", WHOLE_MATRIX, "the whole (..., T, S) score matrix, which the tiled backward never needs"],
    ),
    # catching the limit's exception does not unmake the tensor that tripped it: not a pass, nor a wrong result
    ("08.4", _fb_whole_matrix_caught, [WHOLE_MATRIX]),
    ("08.4", _fb_whole_matrix_caught_none, [WHOLE_MATRIX]),
    # a tensor over the limit need not be the score matrix
    (
        "08.4",
        _fb_shares_stacked,
        [
            "a tensor of shape (3, 8, 4) (96 elements; at most 63): at least as many elements as",
            "every tile's share kept and stacked",
        ],
    ),
]


@pytest.mark.parametrize("key,fn,words", MESSAGES, ids=[f"{k}-{f.__name__}" for k, f, _ in MESSAGES])
def test_a_wrong_answer_gets_the_verdict_that_says_why(key, fn, words):
    res = run_check(EXERCISES[key], fn, seed=0)
    assert res.status == FAILED and all(w in res.message for w in words), res.message
    assert "result 1" not in res.message  # a result by its name, never its number
    assert "set_grad_enabled" not in res.message  # the check's own mode is not blamed on the learner


def test_every_exercise_has_a_right_answer_written_differently():
    assert sorted(RIGHT) == sorted(EXERCISES)


@pytest.mark.parametrize(
    "key,fn", [(k, f) for k, fns in RIGHT.items() for f in fns], ids=lambda x: getattr(x, "__name__", x)
)
def test_right_answers_written_differently_pass(key, fn):
    for seed in (0, 1, 2):
        res = run_check(EXERCISES[key], fn, seed=seed, references=_references(key))
        assert res.status == PASSED, f"{fn.__name__}, seed {seed}: {res.message}"


def test_the_instructor_guide_table_lists_each_exercise_mistakes_and_what_it_enforces():
    from course_tools.room import exercise_table

    rows = {line.split(" ")[1]: line for line in exercise_table().splitlines()[2:]}
    assert sorted(rows) == sorted(EXERCISES)
    for key, ex in EXERCISES.items():
        row = rows[key]
        assert all(m.name.replace("|", "\\|") in row for m in ex.mistakes), row
        assert f"{ex.time_limit:g} s per case" in row and "drawn cases" in row
        assert ("writes into `cache` (checked)" in row) == (ex.inplace is not None), row
    assert "returns bool, dtype checked" in rows["03.1"] and "returns float32, dtype checked" in rows["02.1"]
    assert "returns a number" in rows["10.3"] and "int64, int64" in rows["10.1"]
