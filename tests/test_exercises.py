"""Every exercise check is real: it passes the solution, calls the stub 'not attempted',
and names each catalogued mistake when given a function that makes it."""

import copy
import dataclasses
import inspect
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils.checking import FAILED, NOT_ATTEMPTED, PASSED, REPORT_ENV, ExerciseFailed, run_check
from course_utils.exercises import NotAttempted, all_exercises, check, get_exercise

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_thread")  # many tiny checks: a second thread only waits

EXERCISES = all_exercises()
MISTAKES = [(key, m.name) for key, ex in EXERCISES.items() for m in ex.mistakes]


def stub(*args, **kwargs):
    raise NotAttempted("replace this line with your code")


@pytest.mark.parametrize("key", EXERCISES)
def test_solution_passes(key):
    res = run_check(EXERCISES[key], EXERCISES[key].solution)
    assert res.status == PASSED, res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_unsolved_stub_is_not_attempted(key):
    res = run_check(EXERCISES[key], stub)
    assert res.status == NOT_ATTEMPTED, res.message


@pytest.mark.parametrize("key,name", MISTAKES)
def test_each_catalogued_mistake_is_named(key, name):
    ex = EXERCISES[key]
    mistake = next(m for m in ex.mistakes if m.name == name)
    res = run_check(ex, mistake.fn)
    assert res.status == FAILED
    assert res.mistake == name, f"diagnosed as {res.mistake!r}: {res.message}"
    assert name in res.message and mistake.hint in res.message


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


@pytest.mark.parametrize("key", EXERCISES)
def test_every_exercise_is_checked_in_its_notebook_source(key):
    (source,) = ROOT.glob(f"course_source/{key.split('.')[0]}_*.py")
    assert re.search(rf"check\(\s*[\"']{re.escape(key)}[\"']", source.read_text()), f"{source.name} never checks {key}"


def test_wrong_answer_that_matches_no_mistake_gets_a_generic_reason():
    ex = get_exercise("02.1")

    def garbage(*args, **kwargs):
        out = ex.solution(*args, **kwargs)
        return tuple(o * 0 + 7 for o in out) if isinstance(out, tuple) else out * 0 + 7

    res = run_check(ex, garbage)
    assert res.status == FAILED and res.mistake is None
    assert "matches none of the common mistakes" in res.message


def test_function_that_raises_is_a_failure_not_a_crash():
    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    res = run_check(get_exercise("01.1"), broken)
    assert res.status == FAILED
    assert "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied" in res.message


def test_not_a_function():
    res = run_check(get_exercise("01.1"), 42)
    assert res.status == FAILED and "expected a function" in res.message


def test_check_prints_records_and_raises(tmp_path, monkeypatch, capsys):
    report = tmp_path / "report.jsonl"
    monkeypatch.setenv(REPORT_ENV, str(report))
    ex = get_exercise("03.1")
    assert check("03.1", ex.solution).status == PASSED
    assert check("03.2", stub).status == NOT_ATTEMPTED
    with pytest.raises(ExerciseFailed, match=re.escape(ex.mistakes[0].name)):
        check("03.1", ex.mistakes[0].fn)
    printed = capsys.readouterr().out
    assert "03.1" in printed and "passed" in printed and "not attempted" in printed
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["status"] for r in rows] == [PASSED, NOT_ATTEMPTED, FAILED]
    assert rows[2]["mistake"] == ex.mistakes[0].name


def test_unknown_key_lists_the_known_ones():
    with pytest.raises(KeyError, match="no exercise '9.9'; known exercises: 01.1"):
        get_exercise("9.9")


def test_numbers_compare_infinities_and_nans_as_equal_to_themselves():
    from course_utils.checking import compare_outputs

    inf, nan = float("inf"), float("nan")
    assert compare_outputs(inf, inf, 1e-6, 1e-6) is None
    assert compare_outputs(nan, nan, 1e-6, 1e-6) is None
    assert compare_outputs(inf, 1.0, 1e-6, 1e-6) == "expected 1, got inf"
    assert compare_outputs(1.0, inf, 1e-6, 1e-6) == "expected inf, got 1"
    assert compare_outputs(-inf, inf, 1e-6, 1e-6) == "expected inf, got -inf"
    assert compare_outputs(1.0 + 1e-9, 1.0, 1e-6, 1e-6) is None


# ------------------------------------------------------------------------------------------ issue #10

SEEDS = range(20)  # the drawn cases change with the seed; the verdicts must not
MISTAKE_SEEDS = range(10)  # whole checks of every mistake cost more; the test below covers 50 draws cheaply


def _fixed_only(ex):
    return dataclasses.replace(ex, draw=None)


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
def test_the_solution_passes_and_each_mistake_is_named_on_many_seeds(key):
    ex = EXERCISES[key]
    for seed in SEEDS:
        res = run_check(ex, ex.solution, seed=seed)
        assert res.status == PASSED, f"seed {seed}: {res.message}"
        for m in ex.mistakes if seed in MISTAKE_SEEDS else ():
            res = run_check(ex, m.fn, seed=seed)
            assert res.mistake == m.name, f"{key}, seed {seed}: {m.name!r} diagnosed as {res.mistake!r}: {res.message}"


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
            for args, kwargs in ex.cases():
                m.fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception:
            continue
        fns.append(m.fn)
    for seed in range(50):
        for args, kwargs in ex.draw(torch.Generator().manual_seed(seed)):
            for fn in fns:
                fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))


def test_the_seed_comes_from_the_environment_when_pinned(monkeypatch):
    monkeypatch.setenv("COURSE_CHECK_SEED", "4242")
    assert run_check(EXERCISES["02.1"], EXERCISES["02.1"].solution).details["seed"] == 4242


@pytest.mark.parametrize("key,name", MISTAKES)
def test_each_catalogued_mistake_is_named_on_the_fixed_cases_alone(key, name):
    ex = _fixed_only(EXERCISES[key])
    mistake = next(m for m in ex.mistakes if m.name == name)
    res = run_check(ex, mistake.fn)
    assert res.status == FAILED and res.mistake == name, f"diagnosed as {res.mistake!r}: {res.message}"


@pytest.mark.parametrize("key,name", MISTAKES)
def test_a_hint_never_gives_the_code_of_the_fix(key, name):
    mistake = next(m for m in EXERCISES[key].mistakes if m.name == name)
    assert mistake.fix, f"{key} {name!r} has no exact fix for hint=2"
    assert mistake.fix not in mistake.hint
    code = re.compile(r"torch\.\w+|\.\w+\(|dim=|\[:|\[\.\.\.|\.T\b")  # torch's names, a call, an axis, a slice
    assert not code.search(mistake.hint), f"{key} {name!r}: the hint shows code: {mistake.hint}"
    res = run_check(_fixed_only(EXERCISES[key]), mistake.fn)
    assert mistake.fix not in res.message and "hint=2" in res.message
    assert mistake.fix in run_check(_fixed_only(EXERCISES[key]), mistake.fn, hint=2).message


def test_only_the_stub_is_not_attempted_and_not_implemented_is_a_failure():
    def unfinished(*args, **kwargs):
        raise NotImplementedError("the second case is still to do")

    for key, ex in EXERCISES.items():
        res = run_check(ex, unfinished)
        assert res.status == FAILED, f"{key}: {res.status}"
        assert "NotImplementedError: the second case is still to do" in res.message


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


def test_07_4_checks_the_buffer_it_asks_to_write_into():
    ex = EXERCISES["07.4"]
    assert ex.inplace is not None

    def returns_a_copy(cache, length, new):
        return torch.cat([cache[:, :, :length], new], dim=2)  # the right keys, but the buffer is never written

    res = run_check(ex, returns_a_copy, seed=0)
    assert res.status == FAILED and "`cache`" in res.message and "write into" in res.message, res.message


@pytest.mark.parametrize("key", EXERCISES)
def test_a_lookup_table_of_the_fixed_answers_fails(key):
    """A pasted table of the fixed cases' answers passes those cases and nothing else."""
    ex = EXERCISES[key]
    table = [(_case_text(ex, [c]), ex.solution(*copy.deepcopy(c[0]), **copy.deepcopy(c[1]))) for c in ex.cases()]

    def lookup(*args, **kwargs):
        seen = _case_text(ex, [(args, kwargs)])
        out = next((out for text, out in table if text == seen), table[0][1])
        if ex.inplace is not None:  # 07.4: the table's keys go into the buffer as well
            args[0][:, :, :out.shape[2]] = out
        return out

    assert run_check(_fixed_only(ex), lookup).status == PASSED  # it does fool the fixed cases
    for seed in range(5):
        assert run_check(ex, lookup, seed=seed).status == FAILED, f"seed {seed}"


@pytest.mark.parametrize("key", [k for k, ex in EXERCISES.items()
                                 if isinstance(ex.solution(*ex.cases()[0][0], **ex.cases()[0][1]), torch.Tensor)
                                 and ex.solution(*ex.cases()[0][0], **ex.cases()[0][1]).is_floating_point()])
def test_a_float64_answer_fails_where_float32_is_asked(key):
    ex = EXERCISES[key]
    res = run_check(ex, lambda *a, **kw: ex.solution(*a, **kw).double(), seed=0)
    assert res.status == FAILED and "expected dtype float32, got float64" in res.message, res.message


# Answers written for these tests, independently of the catalogues: wrong ones a sceptical learner tried
# (each used to pass, or could have: see the commit that added them), and right ones written differently
# from the reference, which must pass.

def _min_softmax(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))  # subtracts the row MINIMUM
    return e / e.sum(dim=dim, keepdim=True)


def _mean_softmax(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _masked_fill_in_place(scores, mask):
    return torch.softmax(scores.masked_fill_(~mask, float("-inf")), dim=-1)  # corrupts the caller's scores


def _causal_whenever_masked(scores, mask):
    T, S = scores.shape[-2:]
    return torch.softmax(scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), -math.inf), dim=-1)


def _mha_is_causal_when_masked(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None):
    B, T, C = x.shape
    q, k, v = (t.view(B, T, num_heads, C // num_heads).transpose(1, 2)
               for t in F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None)  # every mask taken as causal
    return F.linear(out.transpose(1, 2).reshape(B, T, C), out_weight, out_bias)


def _windows_float_ids(data, starts, T):
    w = data[starts[:, None] + torch.arange(T + 1)].float()  # ids as floats
    return w[:, :-1], w[:, 1:]


def _windows_ids_plus(data, starts, T):
    w = data[starts[:, None] + torch.arange(T + 1)] + 0.9  # 3.9 is not the id 3
    return w[:, :-1], w[:, 1:]


def _nucleus_divides_in_place(logits, temperature, top_p):
    logits /= temperature  # the caller's logits change
    probs = torch.softmax(logits, dim=-1)
    s, order = probs.sort(dim=-1, descending=True)
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, s.cumsum(-1) - s < top_p)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


def _rope_writes_back(x, positions):
    D = x.shape[-1]
    angles = positions.double()[:, None] * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2], x[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # rotated in place
    return x


def _append_returns_cat(cache, length, new):
    return torch.cat([cache[:, :, :length], new], dim=2)  # right keys, buffer never written


def _mask_as_float(T, S):
    return torch.ones(T, S).tril(S - T)  # 0/1 floats


def _alibi_float64(H, T):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (-slopes[:, None, None] * (i - j)).masked_fill(j > i, -math.inf)  # float64


def _padding_int(lengths, S):
    return (torch.arange(S)[None, :] < lengths[:, None]).long()


WRONG = {
    "02.1": [_min_softmax, _mean_softmax],
    "03.1": [_mask_as_float],
    "03.2": [_masked_fill_in_place, _causal_whenever_masked],
    "03.3": [_padding_int],
    "04.4": [_mha_is_causal_when_masked],
    "06.2": [_rope_writes_back],
    "06.3": [_alibi_float64],
    "07.3": [_nucleus_divides_in_place],
    "07.4": [_append_returns_cat],
    "08.1": [_windows_float_ids, _windows_ids_plus],
}


@pytest.mark.parametrize("key,fn", [(k, f) for k, fns in WRONG.items() for f in fns], ids=lambda x: getattr(x, "__name__", x))
def test_independently_written_wrong_answers_fail(key, fn):
    for seed in (0, 1):
        res = run_check(EXERCISES[key], fn, seed=seed)
        assert res.status == FAILED, f"{fn.__name__} passes {key}"


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


def _sdpa_torch(q, k, v):
    w = torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1)
    return w @ v, w


def _repeat_expand(k, num_heads):
    B, Hkv, S, D = k.shape
    return k[:, :, None].expand(B, Hkv, num_heads // Hkv, S, D).reshape(B, num_heads, S, D)


def _windows_unfold(data, starts, T):
    w = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
    return w[:, :T], w[:, 1:]


RIGHT = {
    "01.1": [_lookup_python_number],
    "02.2": [_sdpa_torch],
    "03.2": [_masked_large_negative],
    "07.2": [_repeat_expand],
    "08.1": [_windows_unfold],
    "08.3": [_lr_float32],
}


@pytest.mark.parametrize("key,fn", [(k, f) for k, fns in RIGHT.items() for f in fns], ids=lambda x: getattr(x, "__name__", x))
def test_right_answers_written_differently_pass(key, fn):
    for seed in (0, 1, 2):
        res = run_check(EXERCISES[key], fn, seed=seed)
        assert res.status == PASSED, f"{fn.__name__}, seed {seed}: {res.message}"


def test_the_instructor_guide_table_lists_each_exercise_mistakes_and_what_it_enforces():
    from course_utils.room import exercise_table

    rows = {line.split(" ")[1]: line for line in exercise_table().splitlines()[2:]}
    assert sorted(rows) == sorted(EXERCISES)
    for key, ex in EXERCISES.items():
        row = rows[key]
        assert all(m.name.replace("|", "\\|") in row for m in ex.mistakes), row
        assert f"{ex.time_limit:g} s per case" in row and "drawn cases" in row
        assert ("writes into `cache` (checked)" in row) == (ex.inplace is not None), row
    assert "returns bool, dtype checked" in rows["03.1"] and "returns float32, dtype checked" in rows["02.1"]
    assert "returns a number" in rows["08.3"] and "int64, int64" in rows["08.1"]
