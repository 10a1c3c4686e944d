"""Sampling, generation and beam search (notebook 09): the top-p boundary cases, cached generation equal to
recomputing the prefix (tokens and logits), a KV cache that runs past the context by shifting (equal to
recomputing while the sequence fits, equal to the forward pass over its window after), beam search equal to
greedy at width 1 and better than greedy where it matters, and every error message."""

from __future__ import annotations

import math
import runpy
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from strategies import refusals_test
from test_gpt import make as tiny_gpt  # the tiny GPT of test_gpt.py: 11 tokens, heads of 4
from torch import nn

from course_utils.generation import (
    beam_search,
    distinct_ngrams,
    generate,
    generate_stream,
    sample_next_token,
    top_k_filter,
    top_p_keep,
)
from course_utils.gpt import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny models, one CPU thread


# --- filters ----------------------------------------------------------------------------------------

DYADIC = torch.tensor([0.125, 0.5, 0.0625, 0.25, 0.0625])  # exact in binary: cumulative sums are exact


@pytest.mark.parametrize(
    "top_p, kept",
    [
        (0.5, [1]),  # the top token alone reaches exactly p: the set is {0.5}
        (0.500001, [1, 3]),  # just above: the token that crosses p (0.25) is kept
        (0.75, [1, 3]),  # exactly 0.75 = 0.5 + 0.25
        (0.8, [0, 1, 3]),
        (0.875, [0, 1, 3]),
        (0.9, None),  # 0.875 < 0.9 <= 0.9375: one of the two tied 0.0625 tokens crosses p (checked below)
        (1e-6, [1]),  # a tiny p still keeps the most likely token
        (1.0, [0, 1, 2, 3, 4]),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    keep = top_p_keep(DYADIC, top_p)
    if top_p == 0.9:  # 0.875 + 0.0625 = 0.9375 >= 0.9: only one of the two tied tokens is needed
        assert keep[[0, 1, 3]].all() and keep[[2, 4]].sum() == 1
        return
    assert torch.nonzero(keep).flatten().tolist() == kept


def test_top_p_kept_mass_reaches_p_and_the_set_is_minimal():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(50, 20, generator=g, dtype=torch.float64), dim=-1)
    for p in (0.1, 0.5, 0.9, 0.99):
        keep = top_p_keep(probs, p)
        mass = (probs * keep).sum(-1)
        assert (mass >= p - 1e-12).all()
        smallest_kept = probs.masked_fill(~keep, float("inf")).amin(-1)
        assert (mass - smallest_kept < p).all()  # dropping the least likely kept token falls below p


def test_sampling_with_top_p_draws_only_from_the_nucleus():
    drawn = sample_next_token(DYADIC.log().expand(2000, -1), top_p=0.75, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {1, 3}


def test_top_k_filter():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 5.0, 1.0]])
    out = top_k_filter(logits, 2)
    assert torch.isfinite(out).tolist() == [[False, True, True, False], [False, False, True, True]]
    assert torch.equal(top_k_filter(logits, 10), logits)


# --- sampling ---------------------------------------------------------------------------------------


def test_greedy_is_the_argmax():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, -1.0, 0.0]])
    assert sample_next_token(logits, greedy=True).tolist() == [1, 0]


def test_sampling_frequencies_follow_temperature_and_filters():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(20000, 4)
    g = torch.Generator().manual_seed(0)
    for temperature, top_k, top_p in [(1.0, None, None), (0.5, None, None), (2.0, 3, None), (1.0, None, 0.8)]:
        tokens = sample_next_token(logits, temperature, top_k, top_p, generator=g)
        freq = torch.bincount(tokens, minlength=4).double() / len(tokens)
        expected = torch.softmax(logits[0].double() / temperature, dim=-1)
        if top_k is not None:
            expected[top_k:] = 0
        if top_p is not None:
            expected[~top_p_keep(expected, top_p)] = 0
        expected /= expected.sum()
        torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


def test_low_temperature_approaches_greedy():
    logits = torch.randn(8, 10, generator=torch.Generator().manual_seed(1))
    tokens = sample_next_token(logits, temperature=1e-4, generator=torch.Generator().manual_seed(2))
    assert torch.equal(tokens, logits.argmax(-1))


def _decoder(**overrides) -> nn.Module:
    """Notebook 09's model: a tiny GPT (16 tokens, grouped-query) behind the generation protocol."""
    return GPT(GPTConfig.preset("tiny", **{"vocab_size": 16, "num_kv_heads": 2, **overrides})).for_generation()


# --- generation -------------------------------------------------------------------------------------


@pytest.fixture
def model():
    torch.manual_seed(0)
    return _decoder(context_length=24).eval()


def test_stream_yields_the_same_tokens_one_by_one(model):
    idx = torch.randint(0, 16, (1, 3))
    streamed = [t for t, _ in generate_stream(model, idx, 6, greedy=True)]
    assert len(streamed) == 6 and all(t.shape == (1,) for t in streamed)
    seen = []
    out = generate(model, idx, 6, greedy=True, callback=seen.append)
    assert torch.equal(out[0, 3:], torch.cat(streamed)) and torch.equal(torch.cat(seen), torch.cat(streamed))


def test_without_cache_generation_can_run_past_the_context(model):
    out = generate(model, torch.zeros(1, 4, dtype=torch.long), 30, greedy=True, use_cache=False)
    assert out.shape == (1, 34)


# --- running a KV cache past the context: on_full="shift" ----------------------------------------------


def _shift_models() -> list[tuple[str, nn.Module]]:
    """Models with context_length 16: the course's GPT, learned and rotary positions, with and without GQA."""
    models = []
    for name, make in [
        ("gqa-learned", lambda: _decoder(context_length=16)),
        ("gqa-rope", lambda: _decoder(context_length=16, positions="rope")),
        ("gpt-learned", lambda: GPT(GPTConfig.preset("tiny", context_length=16)).for_generation()),
        ("gpt-rope", lambda: GPT(GPTConfig.preset("tiny", context_length=16, positions="rope")).for_generation()),
    ]:
        torch.manual_seed(0)
        models.append((name, make().eval()))
    return models


SHIFT_MODELS = _shift_models()
SHIFT_IDS = [name for name, _ in SHIFT_MODELS]


def _window_starts(T: int, N: int, context_length: int, keep: int) -> list[int]:
    """Where the context of each new token begins under on_full="shift", restated from its definition.

    Token i is chosen from the logits at position T + i - 1, whose context is seq[start:T + i]. The window
    grows by one each step; when it would exceed context_length it restarts with the last ``keep`` tokens.
    """
    starts, start = [], max(0, T - context_length)
    for i in range(N):
        end = T + i
        if end - start > context_length:
            start = end - keep
        starts.append(start)
    return starts


@pytest.mark.parametrize("keep", [1, 5, None, 15, 16])  # None: the default, context_length // 2 = 8
@pytest.mark.parametrize("name, model", SHIFT_MODELS, ids=SHIFT_IDS)
def test_every_steps_logits_are_the_forward_pass_over_its_window(name, model, keep):
    """Recomputing while the sequence fits, the last `keep` tokens right after a shift; keeping the whole context
    (16) is recomputing everywhere."""
    T, N = 3, 40
    idx = torch.randint(0, 16, (2, T), generator=torch.Generator().manual_seed(1))
    out, logits = generate(model, idx, N, greedy=True, on_full="shift", keep_on_shift=keep, return_logits=True)
    starts = _window_starts(T, N, 16, keep or 8)
    shifted = [i for i in range(1, N) if starts[i] != starts[i - 1]]
    assert shifted and all(T + i - starts[i] == (keep or 8) for i in shifted)  # right after a shift: keep tokens
    if keep == 16:
        torch.testing.assert_close(out, generate(model, idx, N, greedy=True, use_cache=False), atol=0, rtol=0)
    for i, start in enumerate(starts):
        window = out[:, start : T + i]  # (B, between keep and 16)
        torch.testing.assert_close(logits[:, i], model(window)[:, -1], msg=lambda m, i=i: f"step {i}: {m}")


@pytest.mark.parametrize("name, model", SHIFT_MODELS, ids=SHIFT_IDS)
def test_right_after_a_shift_the_context_is_shorter_than_recomputing(name, model):
    idx = torch.randint(0, 16, (1, 3), generator=torch.Generator().manual_seed(2))
    i = 16 - 3 + 1  # the first step after the cache filled up: positions 0..15 are cached
    out, logits = generate(model, idx, i + 1, greedy=True, on_full="shift", return_logits=True)
    prefix = out[:, : 3 + i]  # (1, 17): the tokens before step i
    shifted = model(prefix[:, -8:])[:, -1]  # the re-prefilled window: the last 16 // 2 tokens
    recomputed = model(prefix[:, -16:])[:, -1]  # what recomputing sees: the last 16
    torch.testing.assert_close(logits[:, i], shifted)
    assert not torch.allclose(logits[:, i], recomputed, atol=1e-3, rtol=0)  # a real difference, not rounding


def test_shift_crops_a_prompt_longer_than_the_context_like_recomputing():
    _, model = SHIFT_MODELS[0]
    idx = torch.randint(0, 16, (1, 20), generator=torch.Generator().manual_seed(4))
    a, la = generate(model, idx, 5, greedy=True, on_full="shift", return_logits=True)
    b, lb = generate(model, idx, 5, greedy=True, use_cache=False, return_logits=True)
    assert a.shape == (1, 25) and torch.equal(a[:, :21], b[:, :21])
    torch.testing.assert_close(la[:, 0], lb[:, 0])  # the first token sees the last 16 prompt tokens in both
    torch.testing.assert_close(la[:, 1], model(a[:, 21 - 8 : 21])[:, -1])  # then the cache is full: shift


def test_shift_samples_with_the_same_random_stream_as_recomputing():
    _, model = SHIFT_MODELS[1]
    idx = torch.randint(0, 16, (3, 2), generator=torch.Generator().manual_seed(5))
    kwargs = {"temperature": 0.9, "top_k": 6, "max_new_tokens": 25}
    a = generate(model, idx, on_full="shift", generator=torch.Generator().manual_seed(6), **kwargs)
    b = generate(model, idx, use_cache=False, generator=torch.Generator().manual_seed(6), **kwargs)
    assert a.shape == (3, 27) and torch.equal(a[:, :17], b[:, :17])


# --- beam search ------------------------------------------------------------------------------------


class BigramTable(nn.Module):
    """A language model whose next-token distribution depends only on the current token: a fixed table."""

    context_length = 1000

    def __init__(self, probs: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("log_probs", probs.log())

    def forward(self, idx: torch.Tensor, cache: object = None) -> torch.Tensor:
        return self.log_probs[idx]  # (B, T) -> (B, T, V)


def _trap() -> BigramTable:
    """From token 0, token 1 looks best (0.6), but everything after 1 is uncertain; after 2, token 3 is sure."""
    V = 4
    probs = torch.full((V, V), 0.25)
    probs[0] = torch.tensor([0.0, 0.6, 0.4, 0.0]) + 1e-9
    probs[2] = torch.tensor([0.05, 0.0, 0.05, 0.9]) + 1e-9
    return BigramTable(probs / probs.sum(-1, keepdim=True))


def _log_prob(model: nn.Module, seq: torch.Tensor, T: int) -> float:
    logp = torch.log_softmax(model(seq[None, :-1])[0], dim=-1)
    return sum(logp[t - 1, seq[t]].item() for t in range(T, len(seq)))


def test_beam_search_beats_greedy_where_it_matters():
    model = _trap()
    idx = torch.zeros(1, 1, dtype=torch.long)
    greedy = generate(model, idx, 2, greedy=True, use_cache=False)[0]
    seqs, scores = beam_search(model, idx, beam_width=2, max_new_tokens=2, use_cache=False)
    assert greedy.tolist()[:2] == [0, 1]
    assert seqs[0].tolist() == [0, 2, 3]
    assert math.isclose(scores[0].item(), math.log(0.4 * 0.9), rel_tol=1e-5)
    assert scores[0].item() > _log_prob(model, greedy, 1) + 0.5  # log 0.36 vs log 0.15


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_width_one_is_greedy(model, use_cache):
    idx = torch.randint(0, 16, (1, 4), generator=torch.Generator().manual_seed(3))
    seqs, scores = beam_search(model, idx, beam_width=1, max_new_tokens=12, use_cache=use_cache)
    greedy = generate(model, idx, 12, greedy=True)
    assert torch.equal(seqs, greedy)
    assert math.isclose(scores[0].item(), _log_prob(model, greedy[0], 4), rel_tol=1e-4)


def test_beam_search_with_and_without_cache_agree_and_scores_are_log_probs(model):
    idx = torch.randint(0, 16, (1, 3), generator=torch.Generator().manual_seed(4))
    a, sa = beam_search(model, idx, 4, 8, use_cache=True)
    b, sb = beam_search(model, idx, 4, 8, use_cache=False)
    assert torch.equal(a, b)
    torch.testing.assert_close(sa, sb)
    assert (sa[:-1] >= sa[1:]).all()  # best first
    for seq, s in zip(a, sa):
        assert math.isclose(s.item(), _log_prob(model, seq, 3), rel_tol=1e-4)
    assert sa[0] >= _log_prob(model, generate(model, idx, 8, greedy=True)[0], 3) - 1e-5


# --- bad arguments a learner might pass (issue 9) ----------------------------------------------------


def test_generate_takes_a_numpy_int_for_max_new_tokens():
    import numpy as np

    out = generate(GPT_VIEW, torch.zeros(1, 2, dtype=torch.long), np.int64(3), greedy=True)
    assert out.shape == (1, 5)


@pytest.mark.parametrize("kind", [Fraction, np.float32], ids=["Fraction", "numpy"])
def test_a_temperature_and_top_p_of_another_real_number_type_sample_as_the_floats_do(kind):
    """Before, a Fraction passed the check and failed inside torch. 0.5 and 0.75 are exact in binary."""
    logits = torch.randn(4, 7, generator=torch.Generator().manual_seed(1))
    for call in (
        lambda **kw: sample_next_token(logits, generator=torch.Generator().manual_seed(0), **kw),
        lambda **kw: generate(GPT_VIEW, PROMPT, 4, generator=torch.Generator().manual_seed(0), **kw),
    ):
        torch.testing.assert_close(call(temperature=kind(0.5), top_p=kind(0.75)), call(temperature=0.5, top_p=0.75))


def test_the_loop_checks_top_k_and_top_p_once_not_at_every_step(monkeypatch):
    """generate checks its sampling settings at the entry; the steps call the unchecked filters (#20)."""
    from course_utils import _validate, generation

    seen = []
    for module in (_validate, generation):
        for name in ("check_int", "check_fraction"):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda n, *a, _real=real, **k: (seen.append(n), _real(n, *a, **k))[1])
    model, prompt = GPT_VIEW, torch.zeros(1, 3, dtype=torch.long)
    out = generate(model, prompt, 6, top_k=3, top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 9)
    assert seen.count("top_k") == 1 and seen.count("top_p") == 1, seen
    top_k_filter(torch.randn(2, 5), 2)  # the public filters still check their arguments themselves
    top_p_keep(torch.softmax(torch.randn(2, 5), dim=-1), 0.5)
    assert seen.count("top_k") == 2 and seen.count("top_p") == 2


# --- every message a learner can meet in this module, as one table ------------------------------------------

torch.manual_seed(0)
DECODER = _decoder(context_length=24).eval()
ONE_LAYER = tiny_gpt(num_layers=1)
GPT_VIEW = ONE_LAYER.for_generation()
IDS, PROMPT = torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long)
LOGITS = torch.randn(2, 5)
GREEDY_HINT = "(use greedy=True for the argmax)"
NAN_ROW, DEAD_ROW = torch.randn(3, 5), torch.randn(3, 5)
NAN_ROW[1, 2], DEAD_ROW[1] = float("nan"), float("-inf")
NO_PROMPT = torch.zeros(0, 3, dtype=torch.long)  # a batch of no prompts
EMPTY_BATCH = "idx must hold at least one prompt (B >= 1), got an empty batch of shape (0, 3)"

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (
        lambda: sample_next_token(torch.tensor([[0.0, math.nan]]), greedy=True),
        ValueError,
        "logits must be numbers, got NaN in row(s) [0]",
    ),
    (
        lambda: sample_next_token(LOGITS, temperature=1e-40),
        ValueError,
        "got +inf (temperature=1e-40; too small a temperature overflows finite logits)",
    ),
    (  # before: a +inf in the model's own logits was blamed on temperature=1.0
        lambda: sample_next_token(torch.tensor([[0.0, math.inf]])),
        ValueError,
        "logits must be finite or -inf, got +inf in the logits given",
    ),
    *[
        (lambda t=t: sample_next_token(LOGITS, temperature=t), error, f"temperature must be {words}")
        for t, error, words in [
            (0.0, ValueError, f"> 0 {GREEDY_HINT}, got 0.0"),
            (-1.0, ValueError, f"> 0 {GREEDY_HINT}, got -1.0"),
            ("0.7", TypeError, f"a number > 0 {GREEDY_HINT}, got '0.7' (str)"),
            (math.inf, ValueError, "finite: an infinite one makes every token equally likely"),
        ]
    ],
    (lambda: sample_next_token(torch.randn(1, 2, 5)), ValueError, "logits must be (B, V)"),
    (lambda: sample_next_token(torch.randn(2, 0)), ValueError, "with V >= 1 tokens, got (2, 0)"),
    (lambda: sample_next_token(NAN_ROW), ValueError, "logits must be numbers, got NaN in row(s) [1]"),
    (lambda: sample_next_token(DEAD_ROW), ValueError, "every logit of row(s) [1] is -inf, so no token can be sampled"),
    (lambda: sample_next_token(LOGITS, greedy="yes"), TypeError, "greedy must be True or False, got 'yes' (str)"),
    (lambda: top_p_keep(torch.tensor([[1.0, 2.0]]), 0.5), ValueError, "probs must be rows of probabilities"),
    (lambda: top_p_keep(torch.tensor([[1.0, 2.0]]), 0.5), ValueError, "a row sum off from 1 by 2"),
    (lambda: top_p_keep(torch.tensor([[-0.5, 1.5]]), 0.5), ValueError, "got min -0.5"),
    # the generation loop: the prompt, the model, the settings, all before the first step
    (lambda: generate(DECODER, IDS, 30), ValueError, "exceeds the model's context_length (24)"),
    (
        lambda: generate(DECODER, torch.zeros(4), 2),
        ValueError,
        "idx must be a (B, T) tensor of token ids, got shape (4,)",
    ),
    (lambda: generate(_trap(), IDS, 2), TypeError, "BigramTable has no new_cache"),
    (
        lambda: generate(nn.Identity(), IDS, 2, use_cache=False),
        TypeError,
        "context_length must be an int attribute of the model, got NoneType",
    ),
    (
        lambda: generate(DECODER, IDS, 2, on_full="wrap"),
        ValueError,
        "on_full must be one of ('error', 'shift'), got 'wrap'",
    ),
    *[
        (
            lambda k=k: generate(DECODER, IDS, 2, on_full="shift", keep_on_shift=k),
            error,
            f"keep_on_shift must be {words}",
        )
        for k, error, words in [
            (0, ValueError, "in [1, 24], got 0"),
            (25, ValueError, "in [1, 24], got 25"),
            (8.0, TypeError, "an int or None, got float"),
            (True, TypeError, "an int or None, got bool"),
        ]
    ],
    (
        lambda: generate(DECODER, IDS, 2, keep_on_shift=8),
        ValueError,
        "keep_on_shift applies only with on_full='shift', got on_full='error'",
    ),
    (lambda: generate(DECODER, IDS, 3, use_cache="no"), TypeError, "use_cache must be True or False, got 'no' (str)"),
    (lambda: generate(DECODER, IDS.to("meta"), 3), ValueError, "idx is on the meta device, which holds no values"),
    (lambda: generate(GPT_VIEW, IDS, 0, temperature=-1), ValueError, f"temperature must be > 0 {GREEDY_HINT}, got -1"),
    (lambda: next(generate_stream(GPT_VIEW, IDS, 5, temperature="hot")), TypeError, "got 'hot' (str)"),
    (lambda: generate(GPT_VIEW, IDS, 0, top_p=1.5), ValueError, "top_p must be in (0, 1], got 1.5"),
    (
        lambda: generate(GPT_VIEW, torch.tensor([[1, 2, 70]]), 3),
        ValueError,
        "idx must be token ids in [0, vocab_size=11), got 70 at position (0, 2)",
    ),
    *[
        (
            lambda c=c: generate(ONE_LAYER, IDS, 3, use_cache=c),
            TypeError,
            "got a GPT, whose forward returns (logits, loss): pass model.for_generation(), whose forward is "
            "(idx, cache) -> logits",
        )
        for c in (True, False)  # the same one-line fix on both paths
    ],
    (lambda: generate(GPT_VIEW, NO_PROMPT, 4), ValueError, EMPTY_BATCH),
    (lambda: next(generate_stream(GPT_VIEW, NO_PROMPT, 4, use_cache=False)), ValueError, EMPTY_BATCH),
    (
        lambda: generate(GPT_VIEW, torch.zeros(1, 2), 3),
        TypeError,
        "idx must hold integer token ids (torch.long), got dtype torch.float32",
    ),
    (
        lambda: generate(GPT_VIEW, torch.zeros(1, 2, 3, dtype=torch.long), 3),
        ValueError,
        "idx must be a (B, T) tensor of token ids, got shape (1, 2, 3)",
    ),
    # beam search
    (
        lambda: beam_search(GPT_VIEW, torch.zeros(1, 0, dtype=torch.long), 2, 3),
        ValueError,
        "idx must hold at least one token (the prompt)",
    ),
    (lambda: beam_search(GPT_VIEW, NO_PROMPT, 2, 3), ValueError, EMPTY_BATCH),
    (lambda: beam_search(ONE_LAYER, PROMPT, 2, 3, use_cache=False), TypeError, "pass model.for_generation()"),
    # distinct_ngrams
    (
        lambda: distinct_ngrams(torch.tensor([1, 2, 3]), 2),
        TypeError,
        "text must be a str (decode the ids first), got Tensor",
    ),
    (lambda: distinct_ngrams("abc", 0), ValueError, "n must be at least 1, got 0"),
    (lambda: distinct_ngrams("abc", 4), ValueError, "at least n = 4 characters to have an n-gram, got 3"),
    (lambda: distinct_ngrams("abc", 2.0), TypeError, "n must be an int"),
]


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_the_edges_of_the_refusals_still_run():
    assert sample_next_token(LOGITS, temperature=0.0, greedy=True).shape == (2,)
    assert generate(DECODER, IDS, 21, greedy=True).shape == (1, 25)  # the last token is never fed back
    assert generate(DECODER, IDS, 30, greedy=True, on_full="shift").shape == (1, 34)
    assert top_p_keep(torch.tensor([[0.25, 0.75]]), 0.5).tolist() == [[False, True]]


# --- benchmarks/GENERATION.md: the work of each method, in token-passes -------------------------------

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = runpy.run_path(str(ROOT / "benchmarks" / "generation_speed.py"), run_name="generation_speed")


def _calls(model: nn.Module, prompt: int, new: int, **kwargs) -> list[int]:
    """Tokens fed to the whole model in each of its calls while ``generate`` runs."""
    fed: list[int] = []
    hook = model.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[1]))
    try:
        generate(model, torch.zeros(1, prompt, dtype=torch.long), new, greedy=True, **kwargs)
    finally:
        hook.remove()
    return fed


@pytest.mark.parametrize("prompt, new, keep", [(4, 40, 8), (3, 60, 5), (16, 20, 8), (1, 17, 16)])
def test_the_benchmarks_token_passes_are_what_the_model_is_fed(prompt, new, keep):
    _, model = SHIFT_MODELS[2]  # the course's GPT, context_length 16
    counted = BENCHMARK["token_passes"](prompt, new, 16, keep)
    recompute = _calls(model, prompt, new, use_cache=False)
    cached = _calls(model, prompt, new, on_full="shift", keep_on_shift=keep)
    assert len(recompute) == len(cached) == new  # one call per new token, either way
    assert sum(recompute) == counted["recompute"]
    assert sum(cached) == counted["kv_cache"]
    assert cached[1:].count(keep) == counted["shifts"] and set(cached[1:]) <= {1, keep}


def test_generation_md_states_the_benchmarks_counts():
    """'recompute 96,122; the cache 757 (4 + 497 single tokens + 2 shifts of 128 ...)', '127x fewer token-passes'"""
    prompt, new, context_length, keep = 4, 500, 256, 128
    counted = BENCHMARK["token_passes"](prompt, new, context_length, keep)
    singles = new - 1 - counted["shifts"]  # the first call runs the prompt; each later one a token or a shift
    assert counted["kv_cache"] == prompt + singles + counted["shifts"] * keep
    text = " ".join((ROOT / "benchmarks" / "GENERATION.md").read_text().split())
    assert (
        f"recompute {counted['recompute']:,}; the cache {counted['kv_cache']} ({prompt} + {singles} single tokens "
        f"+ {counted['shifts']} shifts of {keep}: {new} calls, one per new token)"
    ) in text
    assert f"The cache makes {counted['ratio']:.0f}x fewer token-passes." in text


def test_distinct_ngrams_counts_the_share_of_n_grams_seen_once_or_more():
    assert distinct_ngrams("abcdef", 3) == 1.0  # abc bcd cde def: none repeats
    assert distinct_ngrams("abababab", 2) == pytest.approx(2 / 7)  # ab, ba among 7 bigrams
    assert distinct_ngrams("aaaa", 4) == 1.0  # one 4-gram
    assert distinct_ngrams("the the the the ", 4) < distinct_ngrams("the cat sat on a", 4)
