"""The online softmax and tiled attention (notebook 08): exact against the course's reference and
F.scaled_dot_product_attention over random shapes, tile sizes, causal or not, masks (fully masked rows
included), and every error message."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import dtypes, seeds, tol

from course_utils.attention import scaled_dot_product_attention
from course_utils.fast_attention import (
    Partial,
    block_partial,
    finish,
    merge_partials,
    online_softmax,
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


@settings(max_examples=150, deadline=None)
@given(
    seed=seeds,
    dtype=dtypes,
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
    fewer_keys=st.booleans(),
)
def test_tiled_attention_equals_the_reference_and_torch(
    seed, dtype, B, H, T, extra_keys, D, Dv, q_tile, kv_tile, is_causal, mask_kind, fewer_keys
):
    """Tile sizes that divide T and S or not (1 .. 48 against lengths 1 .. 70), T != S both ways, any mask."""
    S = T + extra_keys
    if fewer_keys and not is_causal:  # T > S: more queries than keys (cross-attention)
        T, S = S, T
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=dtype)
    k = torch.randn(B, H, S, D, generator=g, dtype=dtype)
    v = torch.randn(B, H, S, Dv, generator=g, dtype=dtype)
    mask = _mask(mask_kind, B, T, S, g)
    combined = mask
    if is_causal:
        combined = causal_mask(T, S) if mask is None else causal_mask(T, S) & mask  # (..., T, S)

    out = tiled_attention(q, k, v, mask, is_causal=is_causal, q_tile=q_tile, kv_tile=kv_tile)
    assert out.shape == (B, H, T, Dv) and out.dtype == dtype
    ours, _ = scaled_dot_product_attention(q, k, v, combined)
    torch.testing.assert_close(out, ours, **tol(dtype))
    torch_mask = None if combined is None else combined.expand(B, H, T, S)  # torch wants at least (T, S)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch_mask)  # zeros for fully masked rows
    torch.testing.assert_close(out, theirs, **tol(dtype))


@settings(max_examples=40, deadline=None)
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


# --- errors ------------------------------------------------------------------------------------------


QKV = (torch.randn(1, 4, 3), torch.randn(1, 5, 3), torch.randn(1, 5, 2))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"q_tile": 0}, ValueError, r"q_tile must be at least 1, got 0"),
        ({"kv_tile": 0}, ValueError, r"kv_tile must be at least 1, got 0"),
        ({"kv_tile": -3}, ValueError, r"kv_tile must be at least 1, got -3"),
        ({"q_tile": 2.0}, TypeError, r"q_tile must be an int, got float"),
        ({"kv_tile": None}, TypeError, r"kv_tile must be an int, got NoneType"),
        ({"is_causal": 1}, TypeError, r"is_causal must be True or False, got 1 \(int\)"),
        ({"scale": 0.0}, ValueError, r"scale must be a positive finite number, got 0.0"),
        (
            {"mask": torch.ones(4, 4, dtype=torch.bool)},
            ValueError,
            r"mask of shape \(4, 4\) does not broadcast to the "
            r"scores' shape \(1, 4, 5\)",
        ),
        ({"mask": torch.ones(4, 5)}, TypeError, r"mask must be boolean \(True = may attend\), got dtype torch.float32"),
    ],
)
def test_tiled_attention_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        tiled_attention(*QKV, **kwargs)


def test_tiled_attention_checks_q_k_v_and_causal_lengths():
    q, k, v = QKV
    with pytest.raises(ValueError, match=r"q and k must have the same last dimension D"):
        tiled_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match=r"k and v must have the same number of positions S"):
        tiled_attention(q, k, v[:, :4])
    with pytest.raises(TypeError, match=r"q must be a torch.Tensor, got list"):
        tiled_attention([[1.0]], k, v)
    with pytest.raises(TypeError, match=r"q, k and v must share a dtype"):
        tiled_attention(q.double(), k, v)
    with pytest.raises(ValueError, match=r"is_causal needs T <= S .* got T=5, S=4"):
        tiled_attention(k, q, q, is_causal=True)


def test_online_softmax_errors():
    with pytest.raises(ValueError, match=r"block_size must be at least 1, got 0"):
        online_softmax(torch.randn(3), 0)
    with pytest.raises(TypeError, match=r"block_size must be an int, got float"):
        online_softmax(torch.randn(3), 1.5)
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor, got dtype torch.int64"):
        online_softmax(torch.arange(3), 2)


def test_partial_errors():
    with pytest.raises(ValueError, match=r"scores \(\.\.\., T, Sb\) and v \(\.\.\., Sb, Dv\) need the same number"):
        block_partial(torch.randn(2, 3), torch.randn(4, 2))
    with pytest.raises(ValueError, match=r"need the same number Sb >= 1 of keys"):
        block_partial(torch.randn(2, 0), torch.randn(0, 2))
    good = block_partial(torch.randn(2, 3), torch.randn(3, 4))
    with pytest.raises(TypeError, match=r"b must be a Partial \(m, l, o\) of three tensors, got Tensor"):
        merge_partials(good, torch.randn(2, 1))
    with pytest.raises(ValueError, match=r"a must hold m and l of shape \(\.\.\., T, 1\) and o of shape"):
        merge_partials(Partial(good.m, good.l[:1], good.o), good)
    other = block_partial(torch.randn(2, 3), torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"a and b must be partials of the same queries"):
        merge_partials(good, other)
    with pytest.raises(TypeError, match=r"p.l must be a floating-point tensor"):
        finish(Partial(good.m, good.l.long(), good.o))


def test_merge_refuses_partials_of_two_dtypes():
    """Before, a float32 and a float64 partial merged silently into float64 (tiled_attention refuses mixed dtypes)."""
    scores, v = torch.randn(3, 6), torch.randn(6, 5)
    a = block_partial(scores[:, :3], v[:3])
    b = block_partial(scores[:, 3:].double(), v[3:].double())
    with pytest.raises(
        TypeError, match=r"a and b must hold tensors of one dtype, got \['torch.float32', 'torch.float64'\]"
    ):
        merge_partials(a, b)
