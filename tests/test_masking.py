"""Tests for course_utils.masking: the causal triangle, padding, combining, converting, and every error message."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import refusals_test

from course_utils.attention import scaled_dot_product_attention
from course_utils.masking import causal_mask, combine_masks, convert_mask, mask_scores, padding_mask
from course_utils.multihead import MultiHeadAttention

CONVENTIONS = ("allow", "block", "additive")


# ---------------------------------------------------------------- causal_mask


@settings(deadline=None, max_examples=30)
@given(T=st.integers(1, 8), extra=st.integers(0, 5))
def test_causal_mask_is_bottom_right_aligned(T, extra):
    S = T + extra
    mask = causal_mask(T, S)
    assert mask.shape == (T, S) and mask.dtype == torch.bool
    expected = torch.tensor([[j <= S - T + i for j in range(S)] for i in range(T)])
    torch.testing.assert_close(mask, expected, atol=0, rtol=0)
    # The T queries are the last T of S positions: the last T rows of the square mask.
    torch.testing.assert_close(mask, causal_mask(S)[S - T :], atol=0, rtol=0)


def test_causal_mask_device():
    assert causal_mask(3, device="cpu").device.type == "cpu"
    assert causal_mask(2, 4, device=torch.device("cpu")).shape == (2, 4)


# ---------------------------------------------------------------- mask_scores


def test_mask_scores_fills_blocked_entries_only():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4)
    mask = torch.rand(3, 4) > 0.5
    out = mask_scores(scores, mask)
    torch.testing.assert_close(out[:, mask], scores[:, mask], atol=0, rtol=0)
    assert torch.isneginf(out[:, ~mask]).all()
    assert (mask_scores(scores, mask, fill_value=-5.0)[:, ~mask] == -5.0).all()


def test_mask_scores_fully_masked_row_nan_with_inf_uniform_with_finfo_min():
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        scores = torch.randn(3, 4, dtype=dtype)
        mask = torch.ones(3, 4, dtype=torch.bool)
        mask[1] = False
        with_inf = torch.softmax(mask_scores(scores, mask), dim=-1)
        assert torch.isnan(with_inf[1]).all()
        assert not torch.isnan(with_inf[[0, 2]]).any()
        with_min = torch.softmax(mask_scores(scores, mask, fill_value=torch.finfo(dtype).min), dim=-1)
        torch.testing.assert_close(with_min[1], torch.full((4,), 0.25, dtype=dtype))  # silent leakage
        torch.testing.assert_close(with_min[[0, 2]], with_inf[[0, 2]])


# ---------------------------------------------------------------- padding_mask, combine_masks


def test_padding_mask_values():
    mask = padding_mask([3, 1, 0, 4], 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(mask, expected, atol=0, rtol=0)
    torch.testing.assert_close(padding_mask(torch.tensor([3, 1, 0, 4]), 4), expected, atol=0, rtol=0)
    assert padding_mask([], 4).shape == (0, 4)  # an empty batch is still a batch


@settings(deadline=None, max_examples=25)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5), extra=st.integers(0, 3))
def test_padding_mask_counts_real_tokens(lengths, extra):
    S = max(lengths) + extra
    if S == 0:
        S = 1
    mask = padding_mask(lengths, S)
    assert mask.shape == (len(lengths), S) and mask.dtype == torch.bool
    assert mask.sum(-1).tolist() == lengths
    # True entries come first: a prefix of real tokens, then padding.
    assert (mask[:, 1:] <= mask[:, :-1]).all()


def test_padding_mask_broadcasts_over_queries_in_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2)
    lengths = [5, 2]
    out, weights = scaled_dot_product_attention(q, k, v, mask=padding_mask(lengths, 5)[:, None, :])
    assert (weights[1, :, 2:] == 0).all()
    out_short, _ = scaled_dot_product_attention(q[1], k[1, :2], v[1, :2])  # as if the padding were not there
    torch.testing.assert_close(out[1], out_short)


def test_combine_masks_is_logical_and_with_broadcasting():
    causal = causal_mask(4)  # (4, 4)
    pad = padding_mask([4, 2], 4)[:, None, :]  # (2, 1, 4)
    both = combine_masks(causal, None, pad)
    assert both.shape == (2, 4, 4)
    torch.testing.assert_close(both, causal[None] & pad, atol=0, rtol=0)
    assert not both[1, :, 2:].any() and both[0].equal(causal)
    assert combine_masks(causal) is causal
    assert combine_masks() is None and combine_masks(None, None) is None


# ---------------------------------------------------------------- convert_mask


def _all_conventions(allow: torch.Tensor, dtype=torch.float32) -> dict[str, torch.Tensor]:
    additive = torch.zeros(allow.shape, dtype=dtype).masked_fill(~allow, float("-inf"))
    return {"allow": allow, "block": ~allow, "additive": additive}


@pytest.mark.parametrize("src, dst", list(itertools.product(CONVENTIONS, CONVENTIONS)))
def test_convert_mask_all_pairs_and_round_trip(src, dst):
    torch.manual_seed(0)
    allow = torch.rand(2, 3, 5) > 0.4
    reps = _all_conventions(allow)
    converted = convert_mask(reps[src], src, dst)
    assert converted.dtype == reps[dst].dtype and converted.shape == allow.shape
    torch.testing.assert_close(converted, reps[dst], atol=0, rtol=0)
    torch.testing.assert_close(convert_mask(converted, dst, src), reps[src], atol=0, rtol=0)


def test_convert_mask_additive_dtype_and_use_in_scores():
    torch.manual_seed(0)
    allow = causal_mask(4)
    additive = convert_mask(allow, "allow", "additive", dtype=torch.float64)
    assert additive.dtype == torch.float64
    scores = torch.randn(4, 4, dtype=torch.float64)
    torch.testing.assert_close(torch.softmax(scores + additive, -1), torch.softmax(mask_scores(scores, allow), -1))


def test_convert_mask_block_matches_nn_multihead_attention():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 4, 8)
    allow = causal_mask(4)
    with_block, _ = mha(x, x, x, attn_mask=convert_mask(allow, "allow", "block"))
    with_additive, _ = mha(x, x, x, attn_mask=convert_mask(allow, "allow", "additive"))
    torch.testing.assert_close(with_block, with_additive)
    # Ours is the same function as nn.MultiheadAttention given the converted mask.
    torch.testing.assert_close(MultiHeadAttention.from_torch(mha)(x, allow), with_block)
    # Handing our "allow" mask straight to nn.MultiheadAttention inverts it: query 0 then sees keys 1..3.
    inverted, _ = mha(x, x, x, attn_mask=allow)
    assert (inverted[:, 0] - with_block[:, 0]).abs().max() > 1e-3


# ---------------------------------------------------------------- error messages


ALLOW = torch.ones(2, 2, dtype=torch.bool)
OK = torch.ones(3, 3, dtype=torch.bool)
BIAS_NOT_MASK = "so it is a bias, not a mask"

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: padding_mask(torch.tensor([1, 2], device="meta"), 4), ValueError,
     "lengths is on the meta device, which holds no values to check"),
    (lambda: convert_mask(torch.zeros(3, device="meta"), "additive", "allow"), ValueError,
     "mask is on the meta device, which holds no values to check"),
    (lambda: padding_mask([1, 2], 2**62), ValueError,
     "S must be at most 16777216 (the mask holds B * S entries), got 4611686018427387904"),
    (lambda: mask_scores(torch.ones(3, 5, dtype=torch.float16), causal_mask(3, 5), fill_value=-1e5), ValueError,
     "fill_value -100000.0 is below the lowest torch.float16 (-65504.0)"),
    (lambda: mask_scores(torch.ones(3, 5), causal_mask(3, 5, device="meta")), ValueError,
     "scores, mask must be on one device, got scores on cpu, mask on meta"),
    (lambda: combine_masks(torch.ones(3, dtype=torch.bool, device="meta"), torch.ones(3, dtype=torch.bool)), ValueError,
     "mask 0, mask 1 must be on one device, got mask 0 on meta, mask 1 on cpu"),
    *[
        (lambda args=args: causal_mask(*args), error, words)
        for args, error, words in [
            (
                (4, 3),
                ValueError,
                "causal_mask needs T <= S (the queries are the last T of the S positions), got T=4, S=3",
            ),
            ((10**12,), ValueError, "causal_mask(1000000000000, 1000000000000) would need 1,000,000,000,000,"),
        ]
    ],
    (lambda: causal_mask(4, device="gpu"), ValueError, "device 'gpu' is not a device name"),
    (lambda: mask_scores(torch.zeros(3), torch.ones(3, dtype=torch.bool)), ValueError,
     "scores must have at least 2 dimensions, got shape (3,)"),
    (lambda: mask_scores(torch.zeros(2, 3), torch.ones(3, 2, dtype=torch.bool)), ValueError,
     "mask of shape (3, 2) does not broadcast to the scores' shape (2, 3)"),
    (lambda: mask_scores(torch.randn(3, 3), OK, fill_value="x"), TypeError,
     "fill_value must be a number or None, got 'x' (str)"),
    *[
        (
            lambda fill=fill: mask_scores(torch.randn(3, 3), OK, fill_value=fill),
            ValueError,
            "fill_value must be -inf or a finite negative number",
        )
        for fill in (float("inf"), 3.0)  # NaN and 0: tests/bad_inputs.json
    ],
    *[
        (lambda lengths=lengths: padding_mask(lengths, 4), error, words)
        for lengths, error, words in [
            (
                [2.0, 1.0],
                TypeError,
                "lengths must be a 1-D integer tensor or list, got dtype torch.float32, shape (2,)",
            ),
            (torch.tensor([True, False]), TypeError, "got dtype torch.bool"),
            ([[1, 2]], TypeError, "got dtype torch.int64, shape (1, 2)"),
            ([1, 5], ValueError, "every length must be in [0, S=4], got [1, 5]"),
            ([-1, 2], ValueError, "every length must be in [0, S=4], got [-1, 2]"),
        ]
    ],
    (lambda: combine_masks(OK, torch.ones(2, 4, dtype=torch.bool)), ValueError,
     "masks of shapes (3, 3), (2, 4) do not broadcast together"),
    (lambda: convert_mask(ALLOW, "keep", "block"), ValueError,
     "src must be one of ('allow', 'block', 'additive'), got 'keep'"),
    (lambda: convert_mask(ALLOW, "allow", "Allow"), ValueError,
     "dst must be one of ('allow', 'block', 'additive'), got 'Allow'"),
    (lambda: convert_mask(torch.zeros(2, 2, dtype=torch.long), "block", "allow"), TypeError,
     "a 'block' mask must be boolean, got dtype torch.int64"),
    (lambda: convert_mask(OK, "allow", "additive", dtype=torch.long), TypeError,
     "dtype must be a floating-point torch.dtype (an additive mask holds -inf), got torch.int64"),
    *[
        (
            lambda bad=bad: convert_mask(torch.tensor([[0.0, float("-inf")], [0.0, bad]]), "additive", "allow"),
            ValueError,
            BIAS_NOT_MASK,
        )
        for bad in (0.5, -2.0, float("inf"), float("nan"))
    ],
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_causal_mask_takes_numpy_ints():
    import numpy as np

    assert torch.equal(causal_mask(np.int64(3), np.int32(4)), causal_mask(3, 4))
