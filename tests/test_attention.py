"""Tests for course_utils.attention: parity with PyTorch, the claims notebooks 01-03 make, every error message."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dtypes, refusals_test, seeds, tol

from course_utils.attention import (
    attention_grad_norms,
    attention_loops,
    attention_matmul,
    scaled_dot_product_attention,
    simple_self_attention,
    softmax,
    softmax_naive,
)


def reference_weights(q, k, mask=None, scale=None):
    """softmax(q k^T * scale) with blocked keys removed; a row with nothing visible is all 0."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)


@st.composite
def attention_inputs(draw, masked: bool = True):
    """q, k, v with random batch dims, T != S allowed, any D and Dv, and a mask that broadcasts to (..., T, S)."""
    batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    T, S = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    D, Dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    dtype = draw(dtypes)
    g = torch.Generator().manual_seed(draw(seeds))
    q = torch.randn(*batch, T, D, generator=g, dtype=dtype)
    k = torch.randn(*batch, S, D, generator=g, dtype=dtype)
    v = torch.randn(*batch, S, Dv, generator=g, dtype=dtype)
    mask = None
    if masked:
        # Broadcastable mask: drop some leading batch dims, squeeze others (and maybe the query dim) to 1.
        kept = batch[draw(st.integers(0, len(batch))) :]
        shape = [draw(st.sampled_from([b, 1])) for b in kept] + [draw(st.sampled_from([T, 1])), S]
        p_allow = draw(st.sampled_from([0.3, 0.7, 1.0]))
        mask = torch.rand(*shape, generator=g) < p_allow
        if draw(st.booleans()):
            mask[..., 0, :] = False  # a fully masked row (or, with a query dim of 1, every row)
    return q, k, v, mask


# ---------------------------------------------------------------- notebook 01: loops, matmul, simple


@settings(deadline=None, max_examples=15)
@given(
    T=st.integers(1, 5),
    S=st.integers(1, 5),
    D=st.integers(1, 6),
    Dv=st.integers(1, 6),
    scale=st.sampled_from([1.0, 0.5, 0.125]),
    dtype=dtypes,
    seed=seeds,
)
def test_attention_matmul_equals_loops(T, S, D, Dv, scale, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(T, D, generator=g, dtype=dtype), torch.randn(S, D, generator=g, dtype=dtype)
    v = torch.randn(S, Dv, generator=g, dtype=dtype)
    loops = attention_loops(q, k, v, scale=scale)
    assert loops.shape == (T, Dv) and loops.dtype == dtype
    torch.testing.assert_close(attention_matmul(q, k, v, scale=scale), loops, **tol(dtype))
    torch.testing.assert_close(loops, reference_weights(q, k, scale=scale) @ v, **tol(dtype))


def test_attention_matmul_batches_like_one_sequence_at_a_time():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 2)
    out = attention_matmul(q, k, v)
    assert out.shape == (2, 3, 4, 2)
    for b in range(2):
        for h in range(3):
            torch.testing.assert_close(out[b, h], attention_loops(q[b, h], k[b, h], v[b, h]))


@settings(deadline=None, max_examples=15)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2), T=st.integers(1, 6), C=st.integers(1, 6), dtype=dtypes, seed=seeds
)
def test_simple_self_attention_is_attention_with_q_k_v_equal_to_x(batch, T, C, dtype, seed):
    x = torch.randn(*batch, T, C, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    out, weights = simple_self_attention(x)
    assert out.shape == x.shape and weights.shape == (*batch, T, T)
    torch.testing.assert_close(weights, reference_weights(x, x, scale=1.0), **tol(dtype))
    torch.testing.assert_close(out, attention_matmul(x, x, x), **tol(dtype))
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, T, dtype=dtype), **tol(dtype))


# ---------------------------------------------------------------- notebook 02: softmax, scaling


@settings(deadline=None, max_examples=20)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    dim=st.integers(-1, 0),
    spread=st.sampled_from([1.0, 30.0, 1000.0]),
    dtype=dtypes,
    seed=seeds,
)
def test_softmax_matches_torch(shape, dim, spread, dtype, seed):
    x = spread * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim), **tol(dtype))


def test_softmax_naive_matches_on_small_logits():
    torch.manual_seed(0)
    x = torch.randn(4, 7)
    torch.testing.assert_close(softmax_naive(x), torch.softmax(x, dim=-1))
    torch.testing.assert_close(softmax_naive(x, dim=0), torch.softmax(x, dim=0))


@pytest.mark.parametrize("dtype, big", [(torch.float32, 100.0), (torch.float64, 1000.0)])
def test_softmax_naive_overflows_where_stable_softmax_does_not(dtype, big):
    x = torch.tensor([[big, big - 1.0, 0.0]], dtype=dtype)  # exp(big) is inf in this dtype
    naive = softmax_naive(x)
    assert not torch.isfinite(naive).all(), naive  # inf / inf = nan
    assert torch.isnan(naive[0, 0])
    stable = softmax(x)
    assert torch.isfinite(stable).all()
    expected = torch.softmax(torch.tensor([[1.0, 0.0, -big]], dtype=dtype), dim=-1)  # shift by big changes nothing
    torch.testing.assert_close(stable, expected)


def test_softmax_of_a_fully_masked_row_is_nan_like_torch():
    x = torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]])
    out = softmax(x)
    assert torch.isnan(out[1]).all() and torch.isnan(torch.softmax(x, -1)[1]).all()
    torch.testing.assert_close(out[0], torch.softmax(x[0], -1))


def test_scaling_keeps_score_variance_near_one_unscaled_grows_like_d():
    torch.manual_seed(0)
    N, D = 4000, 256
    q, k = torch.randn(N, D), torch.randn(N, D)  # unit-variance entries
    dots = (q * k).sum(-1)  # N independent q . k scores
    scaled_var = (dots / math.sqrt(D)).var().item()
    unscaled_var = dots.var().item()
    assert 0.8 < scaled_var < 1.2, scaled_var
    assert 0.8 * D < unscaled_var < 1.2 * D, unscaled_var


def test_unscaled_scores_saturate_the_softmax_scaled_do_not():
    torch.manual_seed(0)
    D, S = 256, 8
    q, k = torch.randn(64, D), torch.randn(S, D)
    unscaled = torch.softmax(q @ k.T, dim=-1).amax(-1).mean().item()
    scaled = torch.softmax(q @ k.T / math.sqrt(D), dim=-1).amax(-1).mean().item()
    assert unscaled > 0.9 and scaled < 0.7, (unscaled, scaled)


# ---------------------------------------------------------------- scaled_dot_product_attention


@given(inputs=attention_inputs(masked=False), use_scale=st.booleans())
def test_sdpa_matches_pytorch_without_mask(inputs, use_scale):
    q, k, v, _ = inputs
    scale = 0.37 if use_scale else None
    out, weights = scaled_dot_product_attention(q, k, v, scale=scale)
    expected = F.scaled_dot_product_attention(q, k, v, scale=scale)
    assert out.shape == expected.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, expected, **tol(q.dtype))
    torch.testing.assert_close(weights, reference_weights(q, k, scale=scale), **tol(q.dtype))


@given(inputs=attention_inputs(masked=True), use_scale=st.booleans())
def test_sdpa_matches_pytorch_with_bool_mask(inputs, use_scale):
    q, k, v, mask = inputs
    scale = 1.7 if use_scale else None
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    torch.testing.assert_close(out, expected, **tol(q.dtype))
    torch.testing.assert_close(weights, reference_weights(q, k, mask, scale), **tol(q.dtype))
    # Every row sums to 1, except a row that sees nothing: it is all 0 (weights and output), never NaN.
    sees_something = mask.expand(weights.shape).any(-1)
    ones = torch.ones_like(weights[..., 0])
    torch.testing.assert_close(weights.sum(-1)[sees_something], ones[sees_something], **tol(q.dtype))
    assert (weights[~sees_something] == 0).all()
    assert (out[~sees_something] == 0).all()
    assert not out.isnan().any()


def test_sdpa_all_true_mask_changes_nothing():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    out, weights = scaled_dot_product_attention(q, k, v)
    out_m, weights_m = scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 5, dtype=torch.bool))
    torch.testing.assert_close(out_m, out, atol=0, rtol=0)
    torch.testing.assert_close(weights_m, weights, atol=0, rtol=0)


def test_sdpa_gradients_match_pytorch():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    ours = torch.autograd.grad(scaled_dot_product_attention(q, k, v, mask)[0].sum(), (q, k, v))
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum(), (q, k, v))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_sdpa_dropout_scales_kept_weights_and_zeroes_the_rest():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 4)
    p = 0.25
    out0, w0 = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(1)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=p)
    kept = w != 0
    assert 0 < kept.float().mean().item() < 1  # some dropped, some kept
    torch.testing.assert_close(w[kept], w0[kept] / (1 - p))
    row_sums = w.sum(-1)
    assert (row_sums - 1).abs().max() > 0.1  # rows no longer sum to 1
    torch.testing.assert_close(out, w @ v)  # the returned weights are the ones used
    assert (out - out0).abs().max() > 1e-3


def test_sdpa_dropout_is_reproducible_with_a_seed():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 6, 4), torch.randn(3, 6, 4), torch.randn(3, 6, 4)
    torch.manual_seed(7)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.5)[0]
    torch.manual_seed(7)
    b = scaled_dot_product_attention(q, k, v, dropout_p=0.5)[0]
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_sdpa_broadcasts_batch_dims():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(1, 3, 6, 4), torch.randn(3, 6, 2)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5, 2) and weights.shape == (2, 3, 5, 6)
    out_full, _ = scaled_dot_product_attention(q, k.expand(2, 3, 6, 4), v.expand(2, 3, 6, 2))
    torch.testing.assert_close(out, out_full)


# ---------------------------------------------------------------- error messages


def _qkv(*shapes, dtype=torch.float32):
    return [torch.zeros(s, dtype=dtype) for s in shapes]


Q, K, V = _qkv((3, 4), (5, 4), (5, 2))  # one sequence: T = 3, S = 5, D = 4, Dv = 2
QB, KB, VB = _qkv((2, 3, 4), (2, 5, 4), (2, 5, 2))  # a batch of 2
X = torch.randn(2, 5, 4)
SDPA = scaled_dot_product_attention
NORMS = attention_grad_norms
BAD_SCALES = [
    ("abc", TypeError, "scale must be a positive number, got 'abc' (str)"),
    (torch.tensor(0.5), TypeError, "scale must be a positive number, got tensor(0.5000) (Tensor)"),
    (float("inf"), ValueError, "scale must be a positive finite number, got inf"),
]  # fmt: skip
BAD_QKV = [  # (q, k, v) -> error, words: the same for each function that takes q, k, v
    ((Q, K, torch.zeros(5)), ValueError, "v must have at least 2 dimensions, got shape (5,)"),
    ((Q, torch.zeros(5, 3), V), ValueError, "q and k must have the same last dimension D, got q (3, 4) and k (5, 3)"),
    ((Q, K, torch.zeros(6, 2)), ValueError,
     "k and v must have the same number of positions S, got k (5, 4) and v (6, 2)"),
]  # fmt: skip
ONE_DEVICE = "must be on one device, got q on cpu"

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: attention_loops(torch.randn(3, 4), torch.randn(0, 4), torch.randn(0, 4)), ValueError,
     "attention_loops needs at least one key (S >= 1), got k of shape (0, 4)"),
    *[
        (lambda fn=fn, qkv=qkv: fn(*qkv), error, words)
        for fn in (attention_matmul, attention_loops, lambda q, k, v: SDPA(q, k, v))
        for qkv, error, words in BAD_QKV
    ],
    *[
        (lambda fn=fn, scale=scale: fn(Q, K, V, scale=scale), error, words)
        for fn in (attention_loops, attention_matmul, SDPA)
        for scale, error, words in BAD_SCALES
    ],
    (lambda: attention_matmul(*_qkv((2, 3, 4), (3, 5, 4), (3, 5, 2))), ValueError,
     "the batch dimensions of q (2, 3, 4), k (3, 5, 4) and v (3, 5, 2) do not broadcast"),
    (lambda: SDPA(*_qkv((2, 3, 4), (3, 5, 4), (3, 5, 2))), ValueError, "do not broadcast"),
    (lambda: attention_loops(QB, KB, VB), ValueError,
     "attention_loops works on one sequence: q must be (T, D), k (S, D) and v (S, Dv), got (2, 3, 4)"),
    (lambda: SDPA(QB, KB, VB, mask=torch.ones(3, 4, dtype=torch.bool)), ValueError,
     "mask of shape (3, 4) does not broadcast to the scores' shape (2, 3, 5)"),
    (lambda: SDPA(QB, KB, VB, mask=torch.ones(4, 3, 5, dtype=torch.bool)), ValueError,
     "mask of shape (4, 3, 5) does not broadcast to the scores' shape (2, 3, 5)"),
    *[
        (lambda p=p: SDPA(Q, K, V, dropout_p=p), ValueError, f"dropout_p must be in [0, 1), got {p}")
        for p in (-0.1, 1.0)
    ],
    (lambda: SDPA(Q, K, V, dropout_p="0.1"), TypeError, "dropout_p must be a number in [0, 1), got '0.1' (str)"),
    *[
        row
        for fn in (softmax, softmax_naive)
        for row in [
            (lambda fn=fn: fn(X[0], dim=3), ValueError, "dim must be in [-2, 1] for x of shape (5, 4), got 3"),
            (lambda fn=fn: fn(X[0], dim="-1"), TypeError, "dim must be an int, got '-1' (str)"),
        ]
    ],
    (lambda: simple_self_attention(torch.zeros(3)), ValueError, "x must have at least 2 dimensions, got shape (3,)"),
    (lambda: simple_self_attention(torch.zeros(2, 3, dtype=torch.int32)), TypeError,
     "x must be a floating-point tensor, got dtype torch.int32"),
    (lambda: SDPA(X, X, X, bias=torch.zeros(4, 5)), ValueError,
     "bias of shape (4, 5) does not broadcast to the scores' shape (2, 5, 5)"),
    (lambda: SDPA(X, X.to("meta"), X), ValueError, "q, k, v must be on one device, got q on cpu, k on meta, v on cpu"),
    (lambda: SDPA(X, X, X.to("meta")), ValueError, "v on meta"),
    (lambda: SDPA(X, X, X, mask=torch.ones(5, 5, dtype=torch.bool, device="meta")), ValueError,
     "q, mask " + ONE_DEVICE),
    (lambda: SDPA(X, X, X, bias=torch.zeros(5, 5, device="meta")), ValueError, "q, bias " + ONE_DEVICE),
    (lambda: SDPA(*_qkv((2, 3, 0), (2, 3, 0), (2, 3, 4))), ValueError,
     "head dimension D >= 1 (the scale is 1 / sqrt(D)), got q (2, 3, 0)"),
    (lambda: NORMS(Q, K, V, torch.randn(3, 4)), ValueError,
     "grad_out must have the shape of the attention output (3, 2)"),
    (lambda: NORMS(Q, K, V, torch.zeros(3, 2, device="meta")), ValueError, "q, grad_out " + ONE_DEVICE),
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_additive_bias_matches_float_attn_mask_of_pytorch():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    bias = torch.randn(3, 5, 7)
    mask = torch.rand(5, 7) > 0.3
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
    additive = bias.masked_fill(~mask, float("-inf"))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    keep = mask.any(-1)  # PyTorch's additive path gives NaN on fully masked rows; ours gives 0
    torch.testing.assert_close(out[..., keep, :], ref[..., keep, :])


def test_a_bias_row_of_minus_inf_gives_zero_like_pytorchs_float_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    bias = torch.randn(3, 5)
    bias[1] = float("-inf")  # query 1 may see no key
    out, weights = scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    assert (out[:, 1] == 0).all() and (weights[:, 1] == 0).all()
    mask = torch.ones(3, 5, dtype=torch.bool)  # with a mask too, the -inf row still gives 0
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask, bias=bias)[0], out)


def test_softmax_over_an_empty_axis_and_attention_loops_output_on_the_inputs_device():
    torch.testing.assert_close(softmax(torch.zeros(2, 0)), torch.softmax(torch.zeros(2, 0), dim=-1))
    q, k, v = (torch.randn(n, 4, device="meta") for n in (3, 5, 5))
    assert attention_loops(q, k, v).device.type == "meta"


# ---------------------------------------------------------------- attention_grad_norms (notebook 02)


def _autograd_norms(q, k, v, grad_out, scale):
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    out = F.scaled_dot_product_attention(q, k, v, scale=scale)
    grad_q, grad_k = torch.autograd.grad(out, (q, k), grad_out)
    return grad_q.norm(dim=-1), grad_k.norm(dim=-1)


@given(inputs=attention_inputs(masked=False), scale=st.sampled_from([None, 1.0, 0.3, 4.0]), seed=seeds)
def test_attention_grad_norms_match_autograd_through_pytorch_attention(inputs, scale, seed):
    q, k, v, _ = inputs  # batch dims that broadcast, T != S, any D and Dv
    g = torch.Generator().manual_seed(seed)
    out_shape = F.scaled_dot_product_attention(q, k, v).shape
    grad_out = torch.randn(out_shape, generator=g, dtype=q.dtype)
    grad_q, grad_k = attention_grad_norms(q, k, v, grad_out, scale=scale)
    expected_q, expected_k = _autograd_norms(q, k, v, grad_out, scale)
    assert grad_q.shape == q.shape[:-1] and grad_k.shape == k.shape[:-1]
    torch.testing.assert_close(grad_q, expected_q, **tol(q.dtype))
    torch.testing.assert_close(grad_k, expected_k, **tol(q.dtype))


def test_attention_grad_norms_leaves_the_inputs_alone_and_builds_no_graph():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 3, generator=g, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(2, 4, 3, generator=g)
    grad_q, grad_k = attention_grad_norms(q, k, v, grad_out)
    assert not grad_q.requires_grad and not grad_k.requires_grad and q.grad is None
