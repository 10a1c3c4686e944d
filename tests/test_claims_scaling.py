"""The measurable claims notebooks 01, 02 and 04 make about dot products, the 1 / sqrt(D) scale and the softmax.

Each test names the claim it pins, in the words of the notebook, so that the prose cannot drift from what
the code measures. Every test seeds its own generators (and never uses one seed for two tensors that meet
in one computation: ``torch.manual_seed(s)`` and ``torch.Generator().manual_seed(s)`` give the same numbers).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import seeds
from torch import nn

from course_utils.attention import attention_grad_norms
from course_utils.exercises import all_exercises
from course_utils.gpt import GPT, GPTConfig
from course_utils.multihead import split_heads

pytestmark = pytest.mark.usefixtures("one_thread")


def _entropy(weights: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


# ---------------------------------------------------------------- notebook 01: which key wins, shift invariance

TOY_KEYS = torch.tensor([[0.95, 0.05], [0.10, 0.90], [0.80, 0.20]])  # notebook 01's three keys


def _toy_tokens() -> torch.Tensor:
    """Notebook 01's six word vectors, each of length 2."""
    raw = torch.tensor(
        [
            [0.0, 0.0, 1.0, 0.0],
            [1.0, 0.0, 0.0, 1.0],
            [0.0, 1.0, 0.0, 0.2],
            [0.0, 0.3, 1.0, 0.0],
            [0.1, 0.0, 1.0, 0.0],
            [1.0, 0.0, 0.0, 0.0],
        ]
    )
    return 2 * raw / raw.norm(dim=-1, keepdim=True)


@settings(deadline=None, max_examples=30)
@given(T=st.integers(2, 12), C=st.integers(2, 16), length=st.floats(0.1, 5.0), seed=seeds)
def test_with_equal_lengths_every_token_scores_itself_strictly_highest(T, C, length, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, C, generator=g, dtype=torch.float64)
    x = length * x / x.norm(dim=-1, keepdim=True)  # every row the same length, all rows different
    scores = x @ x.T
    off_diagonal = scores.masked_fill(torch.eye(T, dtype=torch.bool), -math.inf)
    assert (torch.diagonal(scores) > off_diagonal.amax(dim=-1)).all()


def test_the_toy_tokens_favour_themselves_and_a_near_copy_stays_below():
    x = _toy_tokens()
    scores = x @ x.T
    assert torch.equal(scores.argmax(dim=-1), torch.arange(6))
    torch.testing.assert_close(torch.diagonal(scores), torch.full((6,), 4.0))
    the_a = scores[0, 4].item()  # "the" against "a", its near-copy
    assert 3.97 < the_a < 3.99  # the notebook prints 3.9801


@settings(deadline=None, max_examples=30)
@given(C=st.integers(2, 16), seed=seeds)
def test_a_longer_vector_beats_the_token_itself_and_a_different_one_ties_only_as_x_plus_a_right_angle(C, seed):
    g = torch.Generator().manual_seed(seed)
    x, u = torch.randn(C, generator=g, dtype=torch.float64), torch.randn(C, generator=g, dtype=torch.float64)
    assert x @ (2 * x) > x @ x  # a longer vector in the same direction
    torch.testing.assert_close(x @ (2 * x), 2 * (x @ x))
    u = u - (u @ x) / (x @ x) * x  # the part of u at right angles to x
    if u.norm() > 1e-6:
        torch.testing.assert_close(x @ (x + u), x @ x)  # the same score as x itself ...
        assert (x + u).norm() > x.norm()  # ... from a longer vector
    # and no other vector at most as long as x reaches x's own score
    y = torch.randn(C, generator=g, dtype=torch.float64)
    y = y / y.norm() * x.norm() * torch.rand((), generator=g, dtype=torch.float64)
    assert x @ y < x @ x


@settings(deadline=None, max_examples=30)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), shift=st.floats(-50.0, 50.0), seed=seeds)
def test_softmax_is_shift_invariant(shape, shift, seed):
    scores = 3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(torch.softmax(scores + shift, dim=-1), torch.softmax(scores, dim=-1))


def test_equal_scores_give_equal_weights_the_45_degree_and_halfway_queries():
    for length in (0.5, 1.0, 10.0):  # 45 degrees, any length: each key's coordinates add up to 1
        q = length * torch.tensor([math.cos(math.pi / 4), math.sin(math.pi / 4)])
        torch.testing.assert_close(torch.softmax(TOY_KEYS @ q, dim=-1), torch.full((3,), 1 / 3))
    halfway = torch.tensor([0.7, 0.7])
    torch.testing.assert_close(TOY_KEYS @ halfway, torch.full((3,), 0.7))
    for c in (0.0, 5.0, -0.7):
        torch.testing.assert_close(torch.softmax(TOY_KEYS @ halfway + c, dim=-1), torch.full((3,), 1 / 3))


@settings(deadline=None, max_examples=30)
@given(angle=st.floats(0.0, 360.0))
def test_a_longer_query_makes_the_lookup_sharper_unless_the_scores_tie(angle):
    """'lengthen it to make the lookup sharper'; 'Longer queries (larger scores) make the lookup sharper'"""
    direction = torch.tensor([math.cos(math.radians(angle)), math.sin(math.radians(angle))], dtype=torch.float64)
    lengths = torch.linspace(0.1, 8.0, 40, dtype=torch.float64)
    weights = torch.stack([torch.softmax(TOY_KEYS.double() @ (n * direction), dim=-1) for n in lengths])  # (40, 3)
    top, entropy = weights.max(dim=-1).values, _entropy(weights)
    assert (top.diff() >= -1e-12).all() and (entropy.diff() <= 1e-12).all()  # never flatter as the query grows
    tied = torch.allclose(weights[-1], torch.full((3,), 1 / 3, dtype=torch.float64))
    assert tied or (top[-1] > top[0] and entropy[-1] < entropy[0])  # and strictly sharper unless all tie


def test_the_layout_exercises_state_is_the_one_their_cases_use():
    """01.4 and 02.3 store weights as nn.Linear does, (out, in) = (D, C): x @ w.T projects."""
    exercises = all_exercises()
    for key in ("01.4", "02.3"):
        for args, _ in exercises[key].cases():
            x, *weights = args
            C = x.shape[-1]
            assert all(w.shape[1] == C for w in weights), (key, [tuple(w.shape) for w in weights])
    assert any(w.shape[0] != w.shape[1] for args, _ in exercises["02.3"].cases() for w in args[1:])


# ---------------------------------------------------------------- notebook 02, section 1: what the scale guarantees


@pytest.mark.parametrize("var_q,var_k", [(1.0, 1.0), (1 / 3, 1 / 3), (0.15, 0.15)])
def test_scaled_score_variance_is_var_q_times_var_k_for_every_head_dim(var_q, var_k):
    g = torch.Generator().manual_seed(1)
    for D in (4, 64, 1024):
        q = math.sqrt(var_q) * torch.randn(8000, D, generator=g)
        k = math.sqrt(var_k) * torch.randn(8000, D, generator=g)
        scaled = ((q * k).sum(-1) / math.sqrt(D)).var().item()
        assert scaled == pytest.approx(var_q * var_k, rel=0.08), (D, scaled)
        unscaled = (q * k).sum(-1).var().item()
        assert unscaled == pytest.approx(D * var_q * var_k, rel=0.08), (D, unscaled)


def test_a_fresh_layernorm_hands_each_token_mean_0_and_variance_1():
    """'what a LayerNorm hands to attention at initialisation: each token's vector rescaled to mean 0 and
    variance 1, then a learned gain and bias that start at 1 and 0' (notebook 02; 06's gloss too)"""
    torch.manual_seed(0)
    ln = nn.LayerNorm(64)
    x = 5 * torch.randn(3, 7, 64, dtype=torch.float64) + 2  # (B, T, C), far from mean 0 and variance 1
    y = ln.double()(x)
    assert torch.equal(ln.weight, torch.ones(64, dtype=torch.float64)) and not ln.bias.any()
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 7, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(y.var(-1, correction=0), torch.ones(3, 7, dtype=torch.float64), atol=1e-4, rtol=0)


# (init std, seed of the layers, seed of x, Var(q) / Var(x), Var(scores), mean largest weight): the notebook prints
# 0.33, 0.111 (about 1/9) and 0.033 for nn.Linear's default ('a third of the input variance'), and 0.15 and 0.022
# for N(0, 0.02^2), as notebook 02 re-initialises the layers and course_utils.gpt does
LINEAR_INITS = [(None, 3, 4, (0.30, 0.37), (0.09, 0.135), 0.045), (0.02, 7, 8, (0.135, 0.165), (0.015, 0.03), 0.03)]


@pytest.mark.parametrize("std, seed_w, seed_x, q_var, score_var, largest", LINEAR_INITS, ids=["default", "0.02"])
def test_the_notebooks_linear_layers_give_the_variances_and_weights_the_prose_says(
    std, seed_w, seed_x, q_var, score_var, largest
):
    torch.manual_seed(seed_w)
    B, T, C, D = 8, 64, 384, 64
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed_x))
    w_q, w_k = nn.Linear(C, D, bias=False), nn.Linear(C, D, bias=False)
    for layer in (w_q, w_k) if std else ():
        nn.init.normal_(layer.weight, mean=0.0, std=std)
    with torch.no_grad():
        q, k = w_q(x), w_k(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    assert q_var[0] < (q.var() / x.var()).item() < q_var[1]
    assert score_var[0] < scores.var().item() < score_var[1]
    assert 1 / T < torch.softmax(scores, dim=-1).amax(dim=-1).mean().item() < largest  # close to uniform


def test_gpt_init_gives_scaled_scores_far_below_unit_variance_and_near_uniform_weights():
    """The course GPT (N(0, 0.02^2) weights), measured on its own first layer: Var(q) = C * 0.02^2."""
    torch.manual_seed(5)
    config = GPTConfig.preset("gpu")  # embed_dim 384, 6 heads of 64
    gpt = GPT(config)
    block = gpt.blocks[0]
    assert block.attn.qkv_proj.weight.std().item() == pytest.approx(0.02, rel=0.02)
    B, T, C, H = 4, 64, config.embed_dim, config.num_heads
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        q, k, _ = (split_heads(t, H) for t in block.attn.qkv_proj(block.ln_1(x)).chunk(3, dim=-1))  # (B, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(config.head_dim)
        weights = torch.softmax(scores, dim=-1)
    assert q.var().item() == pytest.approx(C * 0.02**2, rel=0.1)  # 0.15
    assert scores.var().item() == pytest.approx((C * 0.02**2) ** 2, rel=0.2)  # about 0.02
    assert weights.amax(dim=-1).mean().item() < 2 / T  # close to uniform (1/T)
    assert _entropy(weights).mean().item() > math.log(T) - 0.05


def _self_scores(C: int, D: int, heads: int, N: int, seed: int, tied: bool = False):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(N, C, generator=g), torch.randn(N, C, generator=g)
    W_q = torch.randn(heads * D, C, generator=g) / math.sqrt(C)
    W_k = W_q if tied else torch.randn(heads * D, C, generator=g) / math.sqrt(C)

    def scores(a, b):
        return ((a @ W_q.T).view(N, heads, D) * (b @ W_k.T).view(N, heads, D)).sum(-1) / math.sqrt(D)

    return scores(x, y), scores(x, x)


def test_a_token_with_itself_barely_differs_at_initialisation():
    different, itself = _self_scores(C=384, D=64, heads=16, N=4096, seed=10)
    assert different.var().item() == pytest.approx(1.0, abs=0.05)
    assert itself.var().item() == pytest.approx(1.0, abs=0.05)
    assert abs(itself.mean().item()) < 0.05


def test_the_shared_x_adds_two_over_c_to_the_variance():
    """In expectation E[s^2] = 1 + 2 / C for a token with itself; visible at a small width."""
    C = D = 8
    _, itself = _self_scores(C=C, D=D, heads=512, N=4096, seed=11)  # many heads: averages over W too
    assert itself.pow(2).mean().item() == pytest.approx(1 + 2 / C, abs=0.06)
    different, _ = _self_scores(C=C, D=D, heads=512, N=4096, seed=12)
    assert different.pow(2).mean().item() == pytest.approx(1.0, abs=0.06)


def test_with_w_k_equal_to_w_q_a_token_with_itself_scores_sqrt_d_on_average():
    for D in (16, 64):
        _, itself = _self_scores(C=384, D=D, heads=8, N=2048, seed=13, tied=True)
        assert itself.mean().item() == pytest.approx(math.sqrt(D), rel=0.03)
        assert (itself > 0).all()  # |q_i|^2 / sqrt(D)


# ---------------------------------------------------------------- notebook 02, section 2: the gradient


def test_the_softmax_jacobian_rises_then_vanishes_as_the_logits_grow():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(256, 8, generator=g)

    def jac_norm(factor):
        w = torch.softmax(factor * logits, dim=-1)
        return (torch.diag_embed(w) - w[..., :, None] * w[..., None, :]).norm(dim=(-2, -1)).mean().item()

    assert max(jac_norm(f) for f in (1.0, 2.0, 3.0)) > jac_norm(0.1)  # it rises at first
    assert jac_norm(100.0) < 0.15 * max(jac_norm(f) for f in (1.0, 2.0, 3.0))  # almost 0 at 100


def _gradients(D: int, seed: int, n: int = 64, T: int = 32, S: int = 32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, m, D, generator=g) for m in (T, S, S))
    grad_out = torch.randn(n, T, D, generator=g)
    unscaled = attention_grad_norms(q, k, v, grad_out, scale=1.0)
    scaled = attention_grad_norms(q, k, v, grad_out)
    return q, k, unscaled, scaled


def _share_of_largest_tenth(norms: torch.Tensor) -> float:
    flat = norms.flatten()
    return (flat.topk(len(flat) // 10).values.sum() / flat.sum()).item()


@pytest.mark.parametrize("seed", [12, 0, 1])
def test_unscaled_gradients_are_larger_on_average_but_most_queries_get_almost_none(seed):
    _, _, (uq, uk), (sq, sk) = _gradients(1024, seed)
    uq, sq = uq.flatten(), sq.flatten()
    assert uq.mean() > 3 * sq.mean()  # the notebook prints 46 against 7.4
    assert uq.median() < sq.median() / 50  # 0.041 against 7
    assert (uq < 0.1).float().mean() > 0.4 and (sq < 0.1).float().mean() == 0  # 53% against 0%
    assert _share_of_largest_tenth(uq) > 0.6 and _share_of_largest_tenth(sq) < 0.25  # 79% against 17%
    assert uq.max() > 100 * sq.median()  # up to about 200 times a typical scaled gradient
    # the keys: the same split, a little less extreme (about 30% below 0.1, the largest tenth carry about 60%)
    assert uk.mean() > sk.mean() and uk.median() < sk.median()
    assert (uk < 0.1).float().mean() > 0.2 and (sk < 0.1).float().mean() == 0
    assert _share_of_largest_tenth(uk) > 0.45 and _share_of_largest_tenth(uk) > 2 * _share_of_largest_tenth(sk)


@pytest.mark.parametrize("seed", [12, 0])
def test_the_queries_with_the_largest_unscaled_gradients_are_near_ties(seed):
    q, k, (uq, _), _ = _gradients(1024, seed)
    scores = q @ k.transpose(-2, -1)
    best_two = scores.topk(2, dim=-1).values
    gap = (best_two[..., 0] - best_two[..., 1]).flatten()
    largest = uq.flatten() >= uq.flatten().quantile(0.9)
    assert scores.std().item() == pytest.approx(32, rel=0.05)
    assert gap[largest].median() < 3 and gap[~largest].median() > 8  # 1 against 12 in the notebook
    assert gap[largest].median() < 0.25 * gap[~largest].median()


def test_with_the_scale_the_spread_of_gradients_does_not_depend_on_head_dim_without_it_it_grows():
    scaled_share, unscaled_share, scaled_below = [], [], []
    for D in (16, 128, 1024):
        _, _, (uq, _), (sq, _) = _gradients(D, seed=20 + D)
        scaled_share.append(_share_of_largest_tenth(sq))
        unscaled_share.append(_share_of_largest_tenth(uq))
        scaled_below.append((sq < 0.01 * sq.median()).float().mean().item())
    assert max(scaled_share) - min(scaled_share) < 0.05, scaled_share
    assert all(b == 0 for b in scaled_below)
    assert unscaled_share[0] < unscaled_share[1] < unscaled_share[2], unscaled_share


def test_with_the_scale_the_entropy_does_not_depend_on_head_dim_without_it_it_falls():
    scaled, unscaled = [], []
    for D in (8, 64, 1024):
        g = torch.Generator().manual_seed(D)
        q, k = torch.randn(8, 32, D, generator=g), torch.randn(8, 32, D, generator=g)
        scores = q @ k.transpose(-2, -1)
        scaled.append(_entropy(torch.softmax(scores / math.sqrt(D), dim=-1)).mean().item())
        unscaled.append(_entropy(torch.softmax(scores, dim=-1)).mean().item())
    assert max(scaled) - min(scaled) < 0.1, scaled
    assert unscaled[0] > unscaled[1] > unscaled[2] and unscaled[2] < 0.2, unscaled


# ---------------------------------------------------------------- notebooks 02 and 04: scaling by C instead of D


def test_scaling_by_embed_dim_shrinks_the_score_variance_by_c_over_d_and_flattens_the_weights():
    g = torch.Generator().manual_seed(5)
    B, T, C, D = 8, 32, 384, 64
    x = torch.randn(B, T, C, generator=g)
    w_q, w_k = (torch.randn(D, C, generator=g) / math.sqrt(C) for _ in range(2))  # (D, C), nn.Linear's layout
    scores = (x @ w_q.T) @ (x @ w_k.T).transpose(-2, -1)
    by_d, by_c = scores * D**-0.5, scores * C**-0.5
    assert (by_c.var() / by_d.var()).item() == pytest.approx(D / C, rel=1e-4)  # 1/6, whatever the init
    w_d, w_c = torch.softmax(by_d, dim=-1), torch.softmax(by_c, dim=-1)
    assert _entropy(w_c).mean() > _entropy(w_d).mean() + 0.2  # 3.38 against 3.01 in notebook 02
    assert w_c.amax(dim=-1).mean() < w_d.amax(dim=-1).mean()


def test_in_h_heads_scaling_by_c_divides_each_heads_scores_by_an_extra_sqrt_h():
    """Notebook 04: with C = H * D, 1 / sqrt(C) is 1 / sqrt(D) divided by sqrt(H); the weights get flatter."""
    B, T, C, H = 4, 16, 64, 8
    D = C // H
    assert math.isclose(C**-0.5 * math.sqrt(H), D**-0.5)
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(1))
    w = 2 * torch.randn(2 * C, C, generator=torch.Generator().manual_seed(2)) / math.sqrt(C)
    q, k = (split_heads(t, H) for t in (x @ w.T).chunk(2, dim=-1))  # (B, H, T, D)
    raw = q @ k.transpose(-2, -1)
    w_d, w_c = torch.softmax(raw * D**-0.5, dim=-1), torch.softmax(raw * C**-0.5, dim=-1)
    assert _entropy(w_c).mean() > _entropy(w_d).mean() and w_c.amax(dim=-1).mean() < w_d.amax(dim=-1).mean()
