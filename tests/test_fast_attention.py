"""The online softmax, tiled attention, the backward pass by hand and flash attention (notebook 08): exact
against the course's reference, autograd and F.scaled_dot_product_attention over random shapes, tile sizes,
causal or not, masks (fully masked rows included); flash attention keeps nothing (T, S)-sized for the backward
pass; and every error message."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import CountProducts, dtypes, refusals_test, seeds, tol

from course_utils.attention import scaled_dot_product_attention
from course_utils.fast_attention import (
    Partial,
    attention_backward,
    block_partial,
    finish,
    flash_attention,
    merge_partials,
    online_softmax,
    saved_for_backward,
    tiled_attention,
)
from course_utils.masking import causal_mask

pytestmark = pytest.mark.usefixtures("one_thread")  # many small tensors: a second thread only waits

MASK_KINDS = (
    "none",
    "full (T, S)",
    "per batch (B, 1, T, S)",
    "key padding (B, 1, 1, S)",
    "one key row (S,)",
    "some rows fully masked",
)


def _mask(kind: str, B: int, T: int, S: int, g: torch.Generator) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "full (T, S)":
        return torch.rand(T, S, generator=g) < 0.7
    if kind == "per batch (B, 1, T, S)":
        return torch.rand(B, 1, T, S, generator=g) < 0.5
    if kind == "key padding (B, 1, 1, S)":
        return torch.rand(B, 1, 1, S, generator=g) < 0.8
    if kind == "one key row (S,)":
        return torch.rand(S, generator=g) < 0.8
    mask = torch.rand(T, S, generator=g) < 0.6
    mask[torch.rand(T, generator=g) < 0.4] = False  # these queries may see nothing
    return mask


def _combined(mask: torch.Tensor | None, is_causal: bool, T: int, S: int) -> torch.Tensor | None:
    """The one boolean mask (..., T, S) that ``mask`` and ``is_causal`` make together, None for none."""
    if not is_causal:
        return mask
    return causal_mask(T, S) if mask is None else causal_mask(T, S) & mask


def _draw_case(seed, dtype, B, H, T, S, D, Dv, mask_kind, broadcast_batch, requires_grad=True):
    """q (B, H, T, D), k, v, a mask and dout; with ``broadcast_batch`` q is (B, 1, T, D) and k, v (1, H, S, .)."""
    g = torch.Generator().manual_seed(seed)
    q_batch, kv_batch = ((B, 1), (1, H)) if broadcast_batch else ((B, H), (B, H))
    q = torch.randn(*q_batch, T, D, generator=g, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(*kv_batch, S, D, generator=g, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(*kv_batch, S, Dv, generator=g, dtype=dtype, requires_grad=requires_grad)
    return q, k, v, _mask(mask_kind, B, T, S, g), torch.randn(B, H, T, Dv, generator=g, dtype=dtype)


CASE = dict(  # tiles that divide T and S or not (1 .. 48 against lengths 1 .. 70), Dv != D, any mask
    B=st.integers(1, 3),
    H=st.integers(1, 3),
    T=st.integers(1, 40),
    extra_keys=st.integers(0, 30),
    D=st.integers(1, 16),
    Dv=st.integers(1, 12),
    q_tile=st.integers(1, 48),
    kv_tile=st.integers(1, 48),
    is_causal=st.booleans(),
    mask_kind=st.sampled_from(MASK_KINDS),
)


@settings(max_examples=150, deadline=None)
@given(seed=seeds, dtype=dtypes, fewer_keys=st.booleans(), **CASE)
def test_tiled_attention_equals_the_reference_and_torch(
    seed, dtype, B, H, T, extra_keys, D, Dv, q_tile, kv_tile, is_causal, mask_kind, fewer_keys
):
    """T != S both ways."""
    S = T + extra_keys
    if fewer_keys and not is_causal:  # T > S: more queries than keys (cross-attention)
        T, S = S, T
    q, k, v, mask, _ = _draw_case(seed, dtype, B, H, T, S, D, Dv, mask_kind, False, requires_grad=False)
    combined = _combined(mask, is_causal, T, S)  # (..., T, S)
    out = tiled_attention(q, k, v, mask, is_causal=is_causal, q_tile=q_tile, kv_tile=kv_tile)
    assert out.shape == (B, H, T, Dv) and out.dtype == dtype
    ours, _ = scaled_dot_product_attention(q, k, v, combined)
    torch.testing.assert_close(out, ours, **tol(dtype))
    torch_mask = None if combined is None else combined.expand(B, H, T, S)  # torch wants at least (T, S)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)  # zeros for fully masked rows
    torch.testing.assert_close(out, theirs, **tol(dtype))


@given(seed=seeds, T=st.integers(1, 33), q_tile=st.integers(1, 20), kv_tile=st.integers(1, 20))
def test_is_causal_is_torchs_is_causal_when_t_equals_s(seed, T, q_tile, kv_tile):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g) for _ in range(3))
    torch.testing.assert_close(
        tiled_attention(q, k, v, is_causal=True, q_tile=q_tile, kv_tile=kv_tile),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_is_causal_aligns_bottom_right_like_causal_mask_not_top_left_like_torch():
    """With fewer queries than keys (decoding with a cache) the queries are the last T positions."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 2, 3, 4, generator=g),
        torch.randn(1, 2, 7, 4, generator=g),
        torch.randn(1, 2, 7, 4, generator=g),
    )
    ours = tiled_attention(q, k, v, is_causal=True, q_tile=2, kv_tile=3)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(3, 7)))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ours - top_left).abs().max() > 0.1


@pytest.mark.parametrize("q_tile, kv_tile", [(1, 1), (2, 3), (4, 4), (8, 8)])
def test_is_causal_never_lets_a_query_see_its_future(q_tile, kv_tile):
    """The future tiles are skipped, the diagonal ones masked: changing token t+1 never changes output t."""
    from test_leakage import assert_no_leakage

    torch.manual_seed(0)
    w_q, w_k, w_v = (torch.randn(8, 8, dtype=torch.float64) / 8**0.5 for _ in range(3))
    assert_no_leakage(
        lambda x: tiled_attention(x @ w_q, x @ w_k, x @ w_v, is_causal=True, q_tile=q_tile, kv_tile=kv_tile),
        torch.randn(2, 7, 8, dtype=torch.float64),
    )


def test_fully_masked_rows_give_zeros_like_torch():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 5, 6, generator=g), torch.randn(2, 9, 6, generator=g), torch.randn(2, 9, 3, generator=g)
    mask = torch.rand(2, 5, 9, generator=g) < 0.5
    mask[0, 1] = False
    mask[1, 4] = False
    mask[:, :, :4] &= torch.tensor([True, False, True, True, False])[
        :, None
    ]  # some rows blocked in the first tile only
    out = tiled_attention(q, k, v, mask, q_tile=2, kv_tile=4)
    assert torch.isfinite(out).all()
    assert out[0, 1].abs().max() == 0 and out[1, 4].abs().max() == 0
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    nothing = torch.zeros(5, 9, dtype=torch.bool)
    assert tiled_attention(q, k, v, nothing, q_tile=3, kv_tile=2).abs().max() == 0


def test_tiled_attention_broadcasts_batch_dimensions_and_takes_a_scale():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 1, 6, 4, generator=g)
    k, v = torch.randn(1, 3, 8, 4, generator=g), torch.randn(1, 3, 8, 5, generator=g)
    out = tiled_attention(q, k, v, scale=0.3, q_tile=4, kv_tile=3)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, scale=0.3)[0])
    assert out.shape == (2, 3, 6, 5)


def test_tiled_attention_is_stable_for_huge_scores():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 10, 4, generator=g) for _ in range(3))
    out = tiled_attention(300 * q, 300 * k, v, q_tile=3, kv_tile=3)  # scores of tens of thousands
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(300 * q, 300 * k, v))


# --- the online softmax ----------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    seed=seeds,
    dtype=dtypes,
    rows=st.integers(1, 5),
    S=st.integers(1, 60),
    block_size=st.integers(1, 70),
    spread=st.sampled_from([1.0, 30.0, 1000.0]),
    blocked=st.floats(0.0, 0.6),
)
def test_online_softmax_equals_torch_softmax(seed, dtype, rows, S, block_size, spread, blocked):
    g = torch.Generator().manual_seed(seed)
    x = spread * torch.randn(rows, S, generator=g, dtype=dtype)
    x = x.masked_fill(torch.rand(rows, S, generator=g) < blocked, float("-inf"))
    x[:, 0] = torch.randn(rows, generator=g, dtype=dtype)  # at least one visible entry per row
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1), **tol(dtype))


def test_online_softmax_of_an_all_minus_inf_row_is_nan_like_torch():
    x = torch.tensor([[float("-inf")] * 4, [0.0, 1.0, float("-inf"), 2.0]])
    ours, theirs = online_softmax(x, 3), torch.softmax(x, dim=-1)
    assert ours[0].isnan().all() and theirs[0].isnan().all()
    torch.testing.assert_close(ours[1], theirs[1])


@settings(max_examples=60, deadline=None)
@given(
    seed=seeds,
    dtype=dtypes,
    T=st.integers(1, 6),
    S=st.integers(2, 30),
    Dv=st.integers(1, 5),
    spread=st.sampled_from([1.0, 100.0]),
    data=st.data(),
)
def test_merging_the_partials_of_two_blocks_is_the_partial_of_both(seed, dtype, T, S, Dv, spread, data):
    cut = data.draw(st.integers(1, S - 1))
    g = torch.Generator().manual_seed(seed)
    scores = spread * torch.randn(2, T, S, generator=g, dtype=dtype)
    scores = scores.masked_fill(torch.rand(2, T, S, generator=g) < 0.3, float("-inf"))
    scores[0, 0] = float("-inf")  # a query with no visible key at all
    v = torch.randn(2, S, Dv, generator=g, dtype=dtype)
    left, right = block_partial(scores[..., :cut], v[..., :cut, :]), block_partial(scores[..., cut:], v[..., cut:, :])
    whole = block_partial(scores, v)
    for merged in (merge_partials(left, right), merge_partials(right, left)):  # the order does not matter
        for got, expected in zip(merged, whole):
            torch.testing.assert_close(got, expected, **tol(dtype))
    out = finish(merge_partials(left, right))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # the no-key row: 0 weights
    torch.testing.assert_close(out, weights @ v, **tol(dtype))


def test_a_query_that_saw_no_key_stays_minus_inf_zero_zero():
    empty = Partial(torch.full((1, 2, 1), float("-inf")), torch.zeros(1, 2, 1), torch.zeros(1, 2, 3))
    merged = merge_partials(empty, empty)
    assert torch.isneginf(merged.m).all() and merged.l.abs().max() == 0 and merged.o.abs().max() == 0
    assert finish(merged).abs().max() == 0
    some = block_partial(torch.tensor([[[1.0, 2.0], [float("-inf"), 0.5]]]), torch.randn(1, 2, 3))
    for a, b in ((empty, some), (some, empty)):
        for got, expected in zip(merge_partials(a, b), some):
            torch.testing.assert_close(got, expected)


def test_merge_rescales_without_overflow():
    """A later block whose scores are 1000 above the first: the first block's sums shrink, nothing overflows."""
    v = torch.randn(1, 4, 2)
    low, high = torch.tensor([[[0.0, 1.0]]]), torch.tensor([[[1000.0, 1001.0]]])
    merged = merge_partials(block_partial(low, v[:, :2]), block_partial(high, v[:, 2:]))
    assert torch.isfinite(merged.l).all() and torch.isfinite(merged.o).all()
    assert merged.m.item() == 1001.0
    torch.testing.assert_close(finish(merged), torch.softmax(torch.cat([low, high], -1), -1) @ v)


# --- the backward pass by hand, and flash attention -------------------------------------------------


def _out_and_grads(out: torch.Tensor, inputs, dout: torch.Tensor):
    return (out, *torch.autograd.grad(out, inputs, dout))


@settings(max_examples=120, deadline=None)
@given(seed=seeds, fewer_keys=st.booleans(), broadcast_batch=st.booleans(), **CASE)
def test_flash_attention_output_and_gradients_equal_autograd_through_plain_attention_in_float64(
    seed, B, H, T, extra_keys, D, Dv, q_tile, kv_tile, is_causal, mask_kind, fewer_keys, broadcast_batch
):
    """Tiles that divide T and S or not, T != S both ways, Dv != D, masks broadcast over batch and heads."""
    S = T + extra_keys
    if fewer_keys and not is_causal:  # T > S (cross-attention)
        T, S = S, T
    q, k, v, mask, dout = _draw_case(seed, torch.float64, B, H, T, S, D, Dv, mask_kind, broadcast_batch)
    ours = _out_and_grads(flash_attention(q, k, v, mask, is_causal, q_tile=q_tile, kv_tile=kv_tile), (q, k, v), dout)
    plain = scaled_dot_product_attention(q, k, v, _combined(mask, is_causal, T, S))[0]
    for got, expected in zip(ours, _out_and_grads(plain, (q, k, v), dout), strict=True):
        assert got.shape == expected.shape and got.dtype == torch.float64
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, **CASE)
def test_flash_attention_output_and_gradients_equal_torch_sdpa_in_float32(
    seed, B, H, T, extra_keys, D, Dv, q_tile, kv_tile, is_causal, mask_kind
):
    S = T + extra_keys
    q, k, v, mask, dout = _draw_case(seed, torch.float32, B, H, T, S, D, Dv, mask_kind, False)
    ours = _out_and_grads(flash_attention(q, k, v, mask, is_causal, q_tile=q_tile, kv_tile=kv_tile), (q, k, v), dout)
    combined = _combined(mask, is_causal, T, S)
    torch_mask = None if combined is None else combined.expand(B, H, T, S)  # torch wants at least (T, S)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)  # zeros for fully masked rows
    for got, expected in zip(ours, _out_and_grads(theirs, (q, k, v), dout), strict=True):
        torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "T, S, is_causal, masked, q_tile, kv_tile",
    [(5, 5, False, False, 2, 3), (3, 7, True, False, 2, 3), (4, 6, True, True, 3, 4), (6, 4, False, True, 4, 3)],
)
def test_flash_attention_passes_gradcheck(T, S, is_causal, masked, q_tile, kv_tile):
    g = torch.Generator().manual_seed(T * 10 + S)
    q = torch.randn(2, 1, T, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, S, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, S, 2, generator=g, dtype=torch.float64, requires_grad=True)
    mask = None
    if masked:
        mask = torch.rand(2, 1, T, S, generator=g) < 0.6
        mask[0, 0, 1] = False  # a query that sees no key
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, mask, is_causal, q_tile=q_tile, kv_tile=kv_tile), (q, k, v)
    )


def test_a_query_that_sees_no_key_gets_output_zero_and_gradient_zero():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(2, 6, 6, generator=g) < 0.6
    mask[0, 2] = False
    mask[1, 5] = False
    out = flash_attention(q, k, v, mask, q_tile=4, kv_tile=4)
    out.backward(torch.randn(out.shape, generator=g, dtype=torch.float64))
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()
    assert out[0, 2].abs().max() == 0 and out[1, 5].abs().max() == 0
    assert q.grad[0, 2].abs().max() == 0 and q.grad[1, 5].abs().max() == 0
    q.grad = k.grad = v.grad = None
    nothing = flash_attention(q, k, v, torch.zeros(6, 6, dtype=torch.bool), q_tile=4, kv_tile=4)
    nothing.sum().backward()
    assert nothing.abs().max() == 0
    for grad in (q.grad, k.grad, v.grad):
        assert grad.abs().max() == 0


def test_flash_attention_without_autograd_is_tiled_attention_and_grads_only_what_asks():
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 9, 4, generator=g), torch.randn(2, 11, 4, generator=g), torch.randn(2, 11, 3, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(
            flash_attention(q, k, v, is_causal=True, q_tile=4, kv_tile=5),
            tiled_attention(q, k, v, is_causal=True, q_tile=4, kv_tile=5),
            atol=0,
            rtol=0,
        )
    v.requires_grad_(True)
    flash_attention(q, k, v, q_tile=4, kv_tile=5).sum().backward()
    assert q.grad is None and k.grad is None and v.grad.shape == v.shape


def test_flash_attention_refuses_a_second_derivative_rather_than_give_a_wrong_one():
    """create_graph=True asks flash's backward to be differentiable; it is not. Before, its gradients came back
    as constants: alone they raised autograd's puzzling 'does not require grad', and when the parameter also
    reached the loss another way, the second derivative silently left flash's part out. The refusal stays beside
    once_differentiable: with loss = out.sum() the gradient reaching flash needs no graph, so once_differentiable
    adds no error node; a plain cube marked once_differentiable shows what flash would give without the refusal."""

    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x**2 * grad

    w = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(Cube.apply(w) + w**2, w, create_graph=True)
    (second,) = torch.autograd.grad(grad, w)
    assert second.item() == 2.0  # d2/dw2 (w^3 + w^2) = 6 w + 2 = 14: once_differentiable lost the 12, silently
    g = torch.Generator().manual_seed(9)
    x, w = torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(4, 4, generator=g, dtype=torch.float64)
    k, v = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 2, generator=g, dtype=torch.float64)
    w.requires_grad_(True)
    match = r"flash_attention is differentiable once: .* got a backward pass with create_graph=True"
    for out in (flash_attention(x @ w, k, v).pow(2), flash_attention(x @ w, k, v)):  # w reaches the loss twice
        with pytest.raises(RuntimeError, match=match):
            torch.autograd.grad(out.sum() + w.pow(2).sum(), w, create_graph=True)
    (once,) = torch.autograd.grad(flash_attention(x @ w, k, v).pow(2).sum(), w)  # a first derivative still works
    assert once.shape == w.shape and torch.isfinite(once).all()


@pytest.mark.parametrize("is_causal, masked", [(False, False), (True, False), (False, True)])
def test_flash_attention_saves_exactly_q_k_v_out_and_the_logsumexp_for_backward(is_causal, masked):
    """The contract FlashAttention-2 Functions and course test suites read off out.grad_fn.saved_tensors: q, k, v,
    the output and L = logsumexp of each query's scaled, visible scores, shaped (..., T), nothing None."""
    g = torch.Generator().manual_seed(12)
    q = torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64, requires_grad=True)  # (B, H, T, D)
    k = torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64, requires_grad=True)  # S = 9 != T
    v = torch.randn(2, 3, 9, 5, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 1, 7, 9, generator=g) < 0.7 if masked else None
    out = flash_attention(q, k, v, mask=mask, is_causal=is_causal, q_tile=3, kv_tile=4)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 5 and all(isinstance(t, torch.Tensor) for t in saved)
    for mine, theirs in zip(saved[:4], (q, k, v, out)):
        assert mine is theirs or mine.equal(theirs)
    scores = q @ k.transpose(-2, -1) / 2.0  # (B, H, T, S); scale 1/sqrt(4)
    visible = torch.ones(7, 9, dtype=torch.bool) if mask is None else mask
    if is_causal:
        visible = visible & causal_mask(7, 9)
    lse = torch.logsumexp(scores.masked_fill(~visible, float("-inf")), dim=-1)  # (B, H, T)
    assert saved[4].shape == (2, 3, 7)
    torch.testing.assert_close(saved[4], lse.detach(), rtol=0, atol=1e-12)


def test_flash_attention_refuses_a_backward_after_its_mask_changed_in_place():
    """The mask rides on ctx, outside save_for_backward, so autograd's version counter no longer guards it: the
    Function checks the version itself, as autograd does for a saved tensor, instead of computing the gradients
    of a mask the forward pass never saw (they came back silently wrong)."""
    g = torch.Generator().manual_seed(13)
    q, k, v = (torch.randn(n, 4, generator=g, dtype=torch.float64, requires_grad=True) for n in (5, 7, 7))
    mask = torch.ones(5, 7, dtype=torch.bool)
    out = flash_attention(q, k, v, mask=mask, q_tile=2, kv_tile=2)
    mask[:, 3:] = False  # after the forward pass, before the backward pass
    with pytest.raises(RuntimeError, match=r"flash_attention's mask was changed in place after the forward pass"):
        out.sum().backward()
    unchanged = torch.ones(5, 7, dtype=torch.bool)
    out = flash_attention(q, k, v, mask=unchanged, q_tile=2, kv_tile=2)
    (dq,) = torch.autograd.grad(out.sum(), q)  # an untouched mask still trains
    q2 = q.detach().clone().requires_grad_()
    (ref,) = torch.autograd.grad(F.scaled_dot_product_attention(q2, k, v).sum(), q2)
    torch.testing.assert_close(dq, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flash_attention_computes_half_precision_in_float32_like_flashattention(dtype):
    """bfloat16 and float16 in, the same dtype out, but summed over the tiles in float32: each output and
    gradient is the exact float64 answer for those inputs up to about one rounding (at most 0.8 units of the
    last place measured, 1.5 allowed). Summed in the input's dtype, as before, they were 2 to 3.6 units off
    on every seed tried, more than torch's own kernel."""
    B, H, T, D, tile = 1, 2, 256, 32, 32  # 8 tiles of keys to sum over
    g = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(B, H, T, D, generator=g).mul_(s).to(dtype).requires_grad_() for s in (2, 2, 1))
    dout = torch.randn(B, H, T, D, generator=g).to(dtype)
    ours = _out_and_grads(flash_attention(q, k, v, is_causal=True, q_tile=tile, kv_tile=tile), (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    exact = _out_and_grads(
        F.scaled_dot_product_attention(q64, k64, v64, is_causal=True), (q64, k64, v64), dout.double()
    )
    ulp = 1.5 * torch.finfo(dtype).eps  # eps: the spacing of numbers in [1, 2)
    for got, want in zip(ours, exact, strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=ulp, atol=ulp * want.abs().max().item())


def test_flash_attention_under_autocast_keeps_its_own_precision():
    """Autocast would run the forward pass's products in bfloat16 and the backward pass's in float32, so the
    weights recomputed in the backward pass would not be the forward pass's. flash_attention turns it off inside:
    float32 inputs give under autocast exactly what they give without it."""
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 40, 8, generator=g, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 40, 8, generator=g)
    plain = _out_and_grads(flash_attention(q, k, v, is_causal=True, q_tile=16, kv_tile=16), (q, k, v), dout)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = flash_attention(q, k, v, is_causal=True, q_tile=16, kv_tile=16)
    for got, want in zip(_out_and_grads(out, (q, k, v), dout), plain, strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("is_causal, tiles", [(False, 4 * 4), (True, 4 + 3 + 2 + 1)])
def test_flash_attention_skips_the_tiles_past_the_causal_diagonal_in_both_passes(is_causal, tiles):
    """T = S = 8 in tiles of 2: 16 tiles, 10 of them on or below the diagonal (notebook 08's 'tiles computed:
    10 of 16'); 2 products a tile forward, in tiled_attention as in flash_attention, 5 back."""
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 8, 4, generator=g, requires_grad=True) for _ in range(3))
    with torch.no_grad(), CountProducts() as tiled:
        tiled_attention(q, k, v, is_causal=is_causal, q_tile=2, kv_tile=2)
    assert tiled.products == 2 * tiles
    with CountProducts() as forward:
        out = flash_attention(q, k, v, is_causal=is_causal, q_tile=2, kv_tile=2)
    with CountProducts() as backward:
        out.sum().backward()
    assert (forward.products, backward.products) == (2 * tiles, 5 * tiles)


def _saved_bytes(fn) -> tuple[int, int]:
    """(total bytes, largest tensor's number of elements) of what autograd saves for the backward pass of fn()."""
    sizes = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        sizes.append((t.numel() * t.element_size(), t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(b for b, _ in sizes), max(n for _, n in sizes)


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_attention_saves_nothing_of_size_t_by_s_where_tiled_attention_saves_every_tile(is_causal):
    B, H, T, D, tile = 1, 2, 256, 8, 32
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    flash, flash_largest = _saved_bytes(
        lambda: flash_attention(q, k, v, is_causal=is_causal, q_tile=tile, kv_tile=tile)
    )
    tiled, _ = _saved_bytes(lambda: tiled_attention(q, k, v, is_causal=is_causal, q_tile=tile, kv_tile=tile))
    qkv_out_lse = (4 * B * H * T * D + B * H * T) * 4  # float32 bytes: q, k, v, out, one logsumexp per query
    assert flash == qkv_out_lse
    assert flash_largest == B * H * T * D  # q, k, v and out; never (T, S)
    assert tiled > B * H * T * T * 4 * (0.5 if is_causal else 1)  # every tile's scores (about half when causal)
    assert tiled > 10 * flash


@settings(max_examples=80, deadline=None)
@given(
    seed=seeds,
    B=st.integers(1, 3),
    H=st.integers(1, 3),
    T=st.integers(1, 12),
    S=st.integers(1, 12),
    D=st.integers(1, 8),
    Dv=st.integers(1, 8),
    scale=st.sampled_from([None, 0.3, 2.0]),
    mask_kind=st.sampled_from(MASK_KINDS),
    broadcast_batch=st.booleans(),
)
def test_attention_backward_equals_autograd_in_float64(seed, B, H, T, S, D, Dv, scale, mask_kind, broadcast_batch):
    """T != S, Dv != D, batch and head axes (broadcast ones summed back), masks with fully masked rows."""
    q, k, v, mask, dout = _draw_case(seed, torch.float64, B, H, T, S, D, Dv, mask_kind, broadcast_batch)
    scale = D**-0.5 if scale is None else scale
    out = scaled_dot_product_attention(q, k, v, mask, scale=scale)[0]
    expected = torch.autograd.grad(out, (q, k, v), dout)
    got = attention_backward(q.detach(), k.detach(), v.detach(), out.detach(), dout, scale, mask)
    for g_, e in zip(got, expected, strict=True):
        assert g_.shape == e.shape
        torch.testing.assert_close(g_, e, atol=1e-12, rtol=1e-12)


def test_attention_backward_gives_blocked_entries_and_blind_queries_no_gradient():
    g = torch.Generator().manual_seed(7)
    q, k, v = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[:, 4] = False  # no query sees key 4
    mask[2] = False  # query 2 sees no key
    out = scaled_dot_product_attention(q, k, v, mask)[0]
    dq, dk, dv = attention_backward(q, k, v, out, torch.randn(4, 2, generator=g), 3**-0.5, mask)
    assert dq[2].abs().max() == 0 and dk[4].abs().max() == 0 and dv[4].abs().max() == 0


# --- errors ------------------------------------------------------------------------------------------


QKV = (torch.randn(1, 4, 3), torch.randn(1, 5, 3), torch.randn(1, 5, 2))
Q, K, V = QKV
O = torch.zeros(1, 4, 2)
BAD_ARGUMENTS = [  # the same for tiled_attention and flash_attention
    ((), {"kv_tile": -3}, ValueError, "kv_tile must be at least 1, got -3"),
    ((), {"is_causal": 1}, TypeError, "is_causal must be True or False, got 1 (int)"),
    ((), {"mask": torch.ones(4, 4, dtype=torch.bool)}, ValueError,
     "mask of shape (4, 4) does not broadcast to the scores' shape (1, 4, 5)"),
    ((K, Q, Q), {"is_causal": True}, ValueError,
     "is_causal needs T <= S (the queries are the last T of the S positions), got T=5, S=4"),
]  # fmt: skip
SCORES, VALUES = torch.randn(3, 6), torch.randn(6, 5)
GOOD = block_partial(torch.randn(2, 3), torch.randn(3, 4))

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: block_partial(torch.randn(2, 2, 3), torch.randn(3, 3, 4)), ValueError,
     "the batch dimensions of scores (2, 2, 3) and v (3, 3, 4) do not broadcast"),
    (lambda: block_partial(torch.randn(2, 3), torch.randn(3, 4, device="meta")), ValueError,
     "scores, v must be on one device, got scores on cpu, v on meta"),
    (
        lambda: merge_partials(
            block_partial(torch.randn(2, 3), torch.randn(3, 4)),
            Partial(*(t.to("meta") for t in block_partial(torch.randn(2, 3), torch.randn(3, 4)))),
        ),
        ValueError,
        "a, b must be on one device, got a on cpu, b on meta",
    ),
    *[
        (lambda fn=fn, a=a, kw=kw: fn(*(a or QKV), **kw), error, words)
        for fn in (tiled_attention, flash_attention)
        for a, kw, error, words in BAD_ARGUMENTS
    ],
    (lambda: attention_backward(Q, K, V, O[:, :3], O, 0.5), ValueError,
     "o must be the attention output's shape (1, 4, 2) and dtype torch.float32"),
    (lambda: attention_backward(Q, K, V, O, O.double(), 0.5), ValueError, "got (1, 4, 2) torch.float64"),
    (lambda: block_partial(torch.randn(2, 0), torch.randn(0, 2)), ValueError, "need the same number Sb >= 1 of keys"),
    (lambda: merge_partials(GOOD, torch.randn(2, 1)), TypeError,
     "b must be a Partial (m, l, o) of three tensors, got Tensor"),
    (lambda: merge_partials(Partial(GOOD.m, GOOD.l[:1], GOOD.o), GOOD), ValueError,
     "a must hold m and l of shape (..., T, 1) and o of shape"),
    (lambda: merge_partials(GOOD, block_partial(torch.randn(2, 3), torch.randn(3, 5))), ValueError,
     "a and b must be partials of the same queries"),
    (lambda: finish(Partial(GOOD.m, GOOD.l.long(), GOOD.o)), TypeError, "p.l must be a floating-point tensor"),
    (
        # before, a float32 and a float64 partial merged silently into float64
        lambda: merge_partials(
            block_partial(SCORES[:, :3], VALUES[:3]), block_partial(SCORES[:, 3:].double(), VALUES[3:].double())
        ),
        TypeError,
        "a and b must hold tensors of one dtype, got ['torch.float32', 'torch.float64']",
    ),
    (lambda: saved_for_backward(Q), TypeError, "fn must be a function to call, got Tensor"),
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


# --- the benchmark (benchmarks/flash_attention.py) runs, and counts what autograd keeps ----------------------


def test_the_flash_benchmark_runs_and_flash_keeps_what_the_fused_kernel_keeps():
    """A tiny run of the benchmark (memory in its child process): every method at two lengths, ratios to sdpa."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "flash_attention.py"
    spec = importlib.util.spec_from_file_location("flash_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = bench.run(lengths=(64, 128), repeats=1, threads=1, q_tile=32, kv_tile=48, verbose=False)
    by = {(r["method"], r["T"]): r for r in data["results"]}
    assert set(by) == {(m, T) for m in bench.METHODS for T in (64, 128)}
    for T in (64, 128):
        assert by["sdpa", T]["time_s_vs_sdpa"] == 1.0
        # flash keeps q, k, v, out and one logsumexp per query: exactly what PyTorch's fused CPU kernel keeps
        assert by["flash", T]["saved_mb"] == by["sdpa", T]["saved_mb"] == round((4 * T * 64 + T) * 4 * 4 / 1e6, 2)
    assert by["tiled", 128]["saved_mb"] > by["plain", 128]["saved_mb"] > by["flash", 128]["saved_mb"]  # (T, T)-sized
    assert set(data["goals"]) >= {"memory_met", "time_met", "flash_peak_growth_per_doubling_of_T"}
    assert "T" in bench.table(data) and data["meta"]["tiles"] == {"q_tile": 32, "kv_tile": 48}


# --- what autograd keeps (notebook 08, section 4) ------------------------------------------------------------


def test_saved_for_backward_counts_each_storage_once_and_nothing_without_autograd():

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    weights_bytes = 2 * 16 * 16 * 4  # one (B, T, S) float32 matrix
    plain = saved_for_backward(lambda: scaled_dot_product_attention(q, k, v)[0])
    assert plain >= 3 * q.numel() * 4 + weights_bytes  # q, k, v and the weights at least
    x = torch.randn(1000, requires_grad=True)
    assert saved_for_backward(lambda: (x[:10] * x[10:20]).sum()) == 1000 * 4, "two views of x: one storage"
    with torch.no_grad():
        assert saved_for_backward(flash_attention, q, k, v) == 0
    assert saved_for_backward(tiled_attention, *(t.detach() for t in (q, k, v))) == 0
