"""Attention variants (notebook 07) and the KV cache (notebook 09): each one against
the plain masked reference or PyTorch, plus the equivalence matrix (GQA with H KV heads is MHA, with 1 it is
MQA; a window >= T is causal attention) and every error
message. The claims the notebooks' prose makes are pinned in test_claims_variants.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import refusals_test
from test_leakage import assert_no_leakage

from course_utils.attention import scaled_dot_product_attention
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention, merge_heads
from course_utils.variants import (
    GroupedQueryAttention,
    KVCache,
    aft_full,
    aft_local_bias,
    aft_simple,
    kv_cache_bytes,
    linformer_attention,
    repeat_kv,
    sliding_window_attention,
    sliding_window_mask,
    topk_attention,
)

# --- grouped-query attention ------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    B=st.integers(1, 3),
    Hkv=st.sampled_from([1, 2, 3]),
    group=st.integers(1, 3),
    T=st.integers(1, 9),
    D=st.sampled_from([2, 4, 8]),
    causal=st.booleans(),
)
def test_repeat_kv_matches_torch_enable_gqa(B, Hkv, group, T, D, causal):
    g = torch.Generator().manual_seed(B * 100 + Hkv * 10 + T)
    H = Hkv * group
    q = torch.randn(B, H, T, D, generator=g)
    k, v = torch.randn(B, Hkv, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g)
    mask = causal_mask(T) if causal else None
    ours, _ = scaled_dot_product_attention(q, repeat_kv(k, H), repeat_kv(v, H), mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(ours, theirs)


def test_query_head_h_reads_kv_head_h_over_group():
    k = torch.arange(3.0).view(1, 3, 1, 1)  # KV head j holds the value j
    assert repeat_kv(k, 6).flatten().tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_gqa_with_as_many_kv_heads_as_query_heads_is_multihead_attention(dropout):
    """from_multihead keeps the dropout (issue #17: GQA had none, so in training mode it differed from its MHA):
    the same outputs and weights, with and without a mask, in training mode from the same seed."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, bias=True, dropout=dropout).train()
    gqa = GroupedQueryAttention.from_multihead(mha).train()
    assert gqa.num_kv_heads == gqa.num_heads == 4 and gqa.dropout == dropout
    x = torch.randn(2, 7, 16)
    for mask in (None, causal_mask(7)):
        torch.manual_seed(5)
        out, w = gqa(x, mask, need_weights=True)
        torch.manual_seed(5)
        out_ref, w_ref = mha(x, mask, need_weights=True)
        torch.testing.assert_close(out, out_ref)
        torch.testing.assert_close(w, w_ref)


def _heads(gqa: GroupedQueryAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (B, H, T, D), k and v (B, Hkv, T, D): the packed projection's rows, q then k then v, cut into heads."""
    B, T, _ = x.shape
    H, Hkv, D = gqa.num_heads, gqa.num_kv_heads, gqa.head_dim
    q, k, v = gqa.qkv_proj(x).split([H * D, Hkv * D, Hkv * D], dim=-1)  # (B, T, H D), (B, T, Hkv D) twice
    return tuple(t.view(B, T, -1, D).transpose(1, 2) for t in (q, k, v))


@pytest.mark.parametrize("Hkv", [1, 2, 4])  # 1: multi-query attention
def test_gqa_module_matches_torch_enable_gqa(Hkv):
    torch.manual_seed(2)
    gqa = GroupedQueryAttention(16, 4, Hkv, bias=True)
    assert gqa.qkv_proj.weight.shape == (16 + 2 * Hkv * 4, 16)  # q, then Hkv k and Hkv v heads of D = 4
    x = torch.randn(2, 6, 16)
    ref = F.scaled_dot_product_attention(*_heads(gqa, x), is_causal=True, enable_gqa=True)  # (B, H, T, D)
    torch.testing.assert_close(gqa(x, causal_mask(6)), gqa.out_proj(merge_heads(ref)))


def test_kv_cache_bytes_for_a_7b_sized_model():
    per_token = {h: kv_cache_bytes(32, h, 128) for h in (32, 8, 1)}
    assert per_token == {32: 524288, 8: 131072, 1: 16384}  # 512 KiB, 128 KiB, 16 KiB per token in fp16
    assert kv_cache_bytes(32, 32, 128, num_tokens=4096) == 2 * 2**30  # 2 GiB for a 4096-token context


# --- sliding window ---------------------------------------------------------------------------------


def test_sliding_window_mask_small_case():
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(sliding_window_mask(4, 2), expected)
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("T,S", [(5, 5), (2, 7), (1, 4)])
def test_sliding_window_mask_definition(T, S):
    for window in range(1, S + 2):
        i = torch.arange(T)[:, None] + S - T
        j = torch.arange(S)[None, :]
        assert torch.equal(sliding_window_mask(T, window, S), (j <= i) & (i - j < window))
        assert sliding_window_mask(T, window, S).sum(-1).max() <= window


@pytest.mark.parametrize("T", [1, 4, 9])
def test_a_window_as_long_as_the_sequence_is_causal_attention(T):
    for window in (T, T + 1, 100):
        assert torch.equal(sliding_window_mask(T, window), causal_mask(T))


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 40), window=st.integers(1, 45), chunk=st.integers(1, 17))
def test_chunked_sliding_window_equals_the_masked_reference(T, window, chunk):
    g = torch.Generator().manual_seed(T * 1000 + window * 10 + chunk)
    q, k, v = (torch.randn(2, 3, T, 4, generator=g) for _ in range(3))
    ref, _ = scaled_dot_product_attention(q, k, v, sliding_window_mask(T, window))
    torch.testing.assert_close(sliding_window_attention(q, k, v, window, chunk_size=chunk), ref)


def test_chunked_sliding_window_is_causal():
    torch.manual_seed(3)
    w_q, w_k, w_v = (torch.randn(8, 8) / 8**0.5 for _ in range(3))
    fn = lambda x: sliding_window_attention(x @ w_q, x @ w_k, x @ w_v, window=3, chunk_size=2)
    assert_no_leakage(fn, torch.randn(2, 7, 8))


# --- Linformer and AFT ------------------------------------------------------------------------------


def test_linformer_with_identity_projections_is_plain_attention():
    torch.manual_seed(4)
    q, k, v = torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    eye = torch.eye(6)
    torch.testing.assert_close(linformer_attention(q, k, v, eye, eye), scaled_dot_product_attention(q, k, v)[0])


def _aft_reference(q, k, v, w, mask=None):
    """AFT-full as the paper's formula, one (t, channel) at a time in float64, with the max of the exponents
    subtracted (it cancels between numerator and denominator; without it exp overflows for large logits)."""
    B, T, C = q.shape
    S = k.shape[1]
    out = torch.zeros(B, T, C, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            keys = [s for s in range(S) if mask is None or mask[t, s]]
            for c in range(C):
                logits = torch.stack([k[b, s, c].double() + w[t, s].double() for s in keys])
                e = torch.exp(logits - logits.max())
                vals = torch.stack([v[b, s, c].double() for s in keys])
                out[b, t, c] = torch.sigmoid(q[b, t, c].double()) * (e * vals).sum() / e.sum()
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_aft_full_matches_the_paper_formula(causal):
    torch.manual_seed(6)
    q, k, v = torch.randn(2, 5, 3), torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    w = torch.randn(5, 5)
    mask = causal_mask(5) if causal else None
    torch.testing.assert_close(aft_full(q, k, v, w, mask).double(), _aft_reference(q, k, v, w, mask))


def test_aft_full_is_stable_for_large_logits():
    torch.manual_seed(7)
    q, v = torch.randn(1, 6, 4), torch.randn(1, 6, 4)
    k = 500.0 * torch.randn(1, 6, 4)  # exp(500) overflows float32 (and float64 beyond 709)
    w = 300.0 * torch.randn(6, 6)
    out = aft_full(q, k, v, w, causal_mask(6))
    assert torch.isfinite(out).all()
    naive_weights = torch.exp(k[:, None] + w[:, :, None])  # the formula without a max subtracted
    assert not torch.isfinite(naive_weights).all()
    torch.testing.assert_close(
        out.double(), _aft_reference(q.double(), k.double(), v.double(), w.double(), causal_mask(6))
    )


def test_aft_simple_is_aft_full_with_zero_biases_and_is_stable():
    torch.manual_seed(8)
    q, k, v = torch.randn(2, 7, 3), 1000.0 * torch.randn(2, 7, 3), torch.randn(2, 7, 3)
    out = aft_simple(q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, aft_full(q, k, v, torch.zeros(7, 7)))


def test_aft_local_bias_keeps_zero_outside_the_window():
    w = torch.full((5, 5), 3.0)
    local = aft_local_bias(w, 2)
    i, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    assert torch.equal(local == 3.0, (i - j).abs() < 2)
    assert torch.equal(local == 0.0, (i - j).abs() >= 2)


def test_aft_fully_masked_row_gives_zero():
    q, k, v = torch.randn(1, 3, 2), torch.randn(1, 3, 2), torch.randn(1, 3, 2)
    mask = causal_mask(3).clone()
    mask[0] = False
    out = aft_full(q, k, v, torch.zeros(3, 3), mask)
    assert torch.equal(out[0, 0], torch.zeros(2)) and torch.isfinite(out).all()


# --- chunked top-k ----------------------------------------------------------------------------------


def _topk_reference(q, k, v, top_k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    kth = scores.topk(min(top_k, k.shape[-2]), dim=-1).values[..., -1:]
    keep = scores >= kth
    if mask is not None:
        keep = keep & mask
    return scaled_dot_product_attention(q, k, v, keep)[0]


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 20), top_k=st.integers(1, 25), chunk=st.integers(1, 9), causal=st.booleans())
def test_chunked_topk_equals_the_full_reference(T, top_k, chunk, causal):
    g = torch.Generator().manual_seed(T * 1000 + top_k * 10 + chunk)
    q, k, v = (torch.randn(2, 2, T, 4, generator=g) for _ in range(3))
    mask = causal_mask(T) if causal else None
    torch.testing.assert_close(
        topk_attention(q, k, v, top_k, mask, chunk_size=chunk), _topk_reference(q, k, v, top_k, mask)
    )


@pytest.mark.parametrize("kernel", ["topk", "sliding"])
def test_no_query_gives_an_empty_output_as_torch_does(kernel):
    q, kv = torch.randn(2, 0, 4), torch.randn(2, 5, 4)
    if kernel == "topk":
        out = topk_attention(q, kv, kv, 2)
    else:
        out, kv = sliding_window_attention(q, q, q, 2), q
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, kv, kv))


def test_topk_with_k_at_least_S_is_ordinary_attention():
    torch.manual_seed(9)
    q, k, v = torch.randn(1, 3, 10, 4), torch.randn(1, 3, 12, 4), torch.randn(1, 3, 12, 4)
    ref, _ = scaled_dot_product_attention(q, k, v, causal_mask(10, 12))
    torch.testing.assert_close(topk_attention(q, k, v, 12, causal_mask(10, 12), chunk_size=3), ref)


# --- KV cache --------------------------------------------------------------------------------------


def test_kv_cache_appends_and_returns_the_valid_part():
    cache = KVCache(num_layers=2, capacity=5)
    k1, v1 = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    k, v = cache.update(0, k1, v1)
    assert k.shape == (1, 2, 3, 4) and cache.length == 0  # layer 1 has not appended yet
    cache.update(1, k1, v1)
    assert cache.length == 3
    k2 = torch.randn(1, 2, 2, 4)
    k, _ = cache.update(0, k2, k2)
    torch.testing.assert_close(k, torch.cat([k1, k2], dim=2))


def test_kv_cache_reorder():
    cache = KVCache(num_layers=1, capacity=4)
    k = torch.arange(2.0).view(2, 1, 1, 1)
    cache.update(0, k, k)
    cache.reorder(torch.tensor([1, 1, 0]))  # beam search may repeat rows
    assert cache.keys[0][:, 0, 0, 0].tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("Hkv", [1, 2, 4])
@pytest.mark.parametrize("rope", [False, True])
def test_gqa_cached_decoding_equals_the_full_forward(Hkv, rope):
    torch.manual_seed(10)
    gqa = GroupedQueryAttention(16, 4, Hkv, rope=rope)
    x = torch.randn(2, 7, 16)
    full = gqa(x, causal_mask(7))
    cache = KVCache(1, capacity=7)
    pieces, t = [], 0
    for n in (3, 1, 2, 1):  # a prompt of 3, then single tokens and a pair
        pieces.append(gqa(x[:, t : t + n], causal_mask(n, t + n), cache=cache))
        t += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)


def _rope_gqa_reference(gqa: GroupedQueryAttention, x: torch.Tensor, base: float, pairing: str) -> torch.Tensor:
    """Grouped-query attention written out, q and k rotated by apply_rope with frequencies base ** (-2i / D)."""
    from course_utils.positional import apply_rope

    q, k, v = _heads(gqa, x)
    q, k = apply_rope(q, base=base, pairing=pairing), apply_rope(k, base=base, pairing=pairing)
    H = gqa.num_heads
    out, _ = scaled_dot_product_attention(q, repeat_kv(k, H), repeat_kv(v, H), causal_mask(x.shape[1]))
    return gqa.out_proj(merge_heads(out))


@pytest.mark.parametrize(
    "Hkv, base, pairing, agrees",
    [(4, 10000.0, "half", True), (4, 10000.0, "interleaved", False), (2, 10000.0, "half", True)]
    + [(2, 500000.0, "half", True), (2, 100.0, "half", True)],
)
def test_gqa_rope_rotates_with_the_half_pairing_and_its_rope_base(Hkv, base, pairing, agrees):
    """GQA's rope=True rotates with the half pairing (apply_rope's default, gpt.py's), not the interleaved one, and
    with its ``rope_base`` (issue #17: before, every GQA rotated with 10000 whatever it was told)."""
    torch.manual_seed(14)
    gqa = GroupedQueryAttention(16, 4, Hkv, rope=True, rope_base=base).double()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    out = gqa(x, causal_mask(12))
    assert torch.allclose(out, _rope_gqa_reference(gqa, x, base, pairing), rtol=1e-9, atol=1e-12) is agrees
    if base != 10000.0:
        assert not torch.allclose(out, _rope_gqa_reference(gqa, x, 10000.0, pairing), rtol=1e-6, atol=1e-6)


# --- bad input --------------------------------------------------------------------------------------


# --- bad arguments a learner might pass (issue 9) ----------------------------------------------------


def test_layers_and_chunked_functions_check_q_k_v_once_at_their_boundary(monkeypatch):
    """A layer hands its checked projections to the unchecked kernels, and a function that attends chunk by chunk
    checks q, k, v once, not once per chunk (#20)."""
    from course_utils import variants

    calls, real = [], variants.check_qkv
    monkeypatch.setattr(variants, "check_qkv", lambda *a: (calls.append(1), real(*a))[1])
    x = torch.randn(2, 6, 16)
    GroupedQueryAttention(16, 4, 2)(x)
    assert calls == []
    q = torch.randn(1, 2, 9, 4)
    sliding_window_attention(q, q, q, window=3, chunk_size=2)
    topk_attention(q, q, q, top_k=2, chunk_size=2)
    linformer_attention(q, q, q, torch.randn(3, 9), torch.randn(3, 9))
    assert len(calls) == 3


# --- every message a learner can meet in this module, as one table ------------------------------------------


def _cache(*appends, num_layers=1, capacity=4):
    """A KVCache after the given appends, each (layer, shape): its state is what a row's refusal depends on."""
    cache = KVCache(num_layers, capacity)
    for layer, shape in appends:
        cache.update(layer, torch.randn(shape), torch.randn(shape))
    return cache


Q = torch.randn(2, 5, 4)
Q3, Q8, V8 = torch.randn(3, 1, 4, 2), torch.randn(2, 5, 8), torch.randn(2, 5, 4)
P6, Q6, KV = torch.randn(3, 6), torch.randn(1, 6, 4), torch.zeros(1, 1, 2, 3)
K1, K2 = torch.randn(1, 1, 1, 2), torch.randn(1, 1, 2, 2)  # one new position, two
BATCH_OF_2 = _cache((0, (2, 1, 3, 4)), capacity=8)
MODULE_WEIGHTS = "but the module's weights are"
GQA = GroupedQueryAttention(8, 4, 2)
MASK_3_5_META = torch.ones(3, 5, dtype=torch.bool, device="meta")
CHANNELS = "q and v must have the same number of channels C, got q (2, 5, 8) and v (2, 5, 4)"
SCALE_ABC = "scale must be a positive number, got 'abc' (str)"

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: GroupedQueryAttention(16, 4, 3), ValueError, "num_heads (4) must be divisible by num_kv_heads (3)"),
    (lambda: GroupedQueryAttention(10, 4, 2), ValueError, "embed_dim (10) must be divisible by num_heads (4)"),
    (lambda: GroupedQueryAttention(16, 4, 2, dropout=1.0), ValueError, "dropout must be in [0, 1), got 1.0"),
    (
        lambda: GroupedQueryAttention(16, 4, 2, dropout="0.1"),
        TypeError,
        "dropout must be a number in [0, 1), got '0.1' (str)",
    ),
    (
        lambda: GroupedQueryAttention(16, 4, 2, rope=True, rope_base=1.0),
        ValueError,
        "rope_base must be a number greater than 1, got 1.0",
    ),
    (
        lambda: GroupedQueryAttention(8, 4, 2)(Q8, need_weights="no"),
        TypeError,
        "need_weights must be True or False, got 'no'",
    ),
    (lambda: repeat_kv(torch.randn(1, 4, 2, 2), 6), ValueError, "num_heads (6) must be divisible by num_kv_heads (4)"),
    (lambda: repeat_kv(torch.randn(1, 0, 3, 4), 2), ValueError, "num_kv_heads must be at least 1, got 0"),
    (lambda: sliding_window_attention(*Q3, window=-2), ValueError, "window must be at least 1, got -2"),
    (lambda: sliding_window_attention(*torch.zeros(3, 1, 0, 4), window=2, scale="abc"), TypeError, SCALE_ABC),
    (
        lambda: topk_attention(Q8, V8, Q8, top_k=2),
        ValueError,
        "q and k must have the same last dimension D, got q (2, 5, 8) and k (2, 5, 4)",
    ),
    (lambda: topk_attention(Q8, Q8, Q8, 2, scale="abc"), TypeError, SCALE_ABC),
    (
        lambda: topk_attention(Q[0], Q[0], Q[0], top_k=2, mask=torch.ones(5, 5, dtype=torch.bool, device="meta")),
        ValueError,
        "q, mask must be on one device, got q on cpu, mask on meta",
    ),
    (lambda: aft_full(*Q3, w=torch.zeros(3, 3)), ValueError, "w must have shape (T, S) = (4, 4)"),
    (
        lambda: aft_full(*Q3, w=torch.zeros(4, 4, dtype=torch.cfloat)),
        TypeError,  # was torch's softmax error
        "w must be a floating-point tensor, got dtype torch.complex64",
    ),
    (
        lambda: aft_local_bias(torch.ones(4, 4, dtype=torch.bool), 2),
        TypeError,  # was a bool "bias"
        "w must be a floating-point tensor, got dtype torch.bool",
    ),
    (lambda: aft_full(Q8, Q8, V8, torch.zeros(5, 5)), ValueError, CHANNELS),
    (lambda: aft_simple(Q8, Q8, V8), ValueError, CHANNELS),
    (
        lambda: linformer_attention(*torch.randn(3, 1, 6, 2), proj_k=torch.eye(4), proj_v=torch.eye(6)),
        ValueError,
        "proj_k must have shape (R, S') with S' >= S = 6",
    ),
    (lambda: linformer_attention(Q6, Q6, Q6, P6, P6.to("meta")), ValueError, "k on cpu, proj_k on cpu, proj_v on meta"),
    (
        lambda: linformer_attention(*torch.randn(3, 1, 1, 7, 4), torch.randn(3, 7), torch.randn(4, 7)),
        ValueError,
        "proj_k and proj_v must have the same number of rows R (the projected length), got (3, 7) and (4, 7)",
    ),
    # the layers' input: the wrong rank, width or dtype; then one the module's weights do not match
    (lambda: GQA(torch.randn(5, 8)), ValueError, "x must have at least 3 dimensions, got shape (5, 8)"),
    (lambda: GQA(torch.randn(2, 5, 16)), ValueError, "x must have shape (B, T, C=8), got (2, 5, 16)"),
    (lambda: GQA(torch.ones(2, 5, 8).long()), TypeError, "x must be a floating-point tensor, got dtype torch.int64"),
    (lambda: GQA(Q8[:1].double()), TypeError, "x is float64 " + MODULE_WEIGHTS + " float32"),
    (lambda: GQA(Q8[:1].to("meta")), ValueError, "x is on meta " + MODULE_WEIGHTS + " on cpu"),
    # the KV cache, and the decoder that uses it
    (lambda: KVCache(2, 4).update(2, K1, K1), ValueError, "layer must be in [0, 1], got 2"),
    (lambda: KVCache(2, 4).update(True, K1, K1), TypeError, "layer must be an int, got bool"),
    (
        lambda: _cache((0, (1, 1, 3, 2))).update(0, K2, K2),
        ValueError,
        "KV cache overflow: capacity (context_length) is 4 positions, 3 are cached and 2",
    ),
    (lambda: _cache((0, K1.shape), num_layers=2, capacity=8).update(0, K1, K1), RuntimeError, "layer 0 appended twice"),
    (
        lambda: KVCache(1, 4).update(0, KV, KV.double()),
        TypeError,
        "k and v must have one dtype, got torch.float32 and torch.float64",
    ),
    (
        lambda: KVCache(1, 4).update(0, KV.long(), KV.long()),
        TypeError,
        "k must be a floating-point tensor, got dtype torch.int64",
    ),
    (
        lambda: _cache((0, KV.shape)).update(0, KV.double(), KV.double()),
        TypeError,
        "layer 0 caches torch.float32 on cpu, got new keys of torch.float64 on cpu",
    ),
    (
        lambda: KVCache(1, 4).update(0, KV, KV.to("meta")),
        ValueError,
        "k, v must be on one device, got k on cpu, v on meta",
    ),
    (
        lambda: aft_full(Q8[:, :3, :4], V8, V8, torch.randn(3, 5), mask=MASK_3_5_META),
        ValueError,
        "q, w, mask must be on one device, got q on cpu, w on cpu, mask on meta",
    ),
    (lambda: KVCache(1, 4).filled(5), ValueError, "layer must be in [0, 0], got 5"),
    (lambda: KVCache(2, 4).filled(-1), ValueError, "layer must be in [0, 1], got -1"),
    (lambda: topk_attention(Q8, Q8, Q8, 2, causal="no"), TypeError, "causal must be True or False, got 'no' (str)"),
    (
        lambda: topk_attention(Q8, Q8[:, :3], Q8[:, :3], 2, causal=True),
        ValueError,
        "causal needs T <= S (the queries are the last T of the S positions), got T=5, S=3",
    ),
    (lambda: BATCH_OF_2.reorder([1, 0]), TypeError, "indices must be a torch.Tensor, got list"),
    (
        lambda: BATCH_OF_2.reorder(torch.tensor([1.0, 0.0])),
        TypeError,
        "indices must be a 1-D integer tensor of batch rows, got dtype torch.float32, shape (2,)",
    ),
    (lambda: BATCH_OF_2.reorder(torch.tensor([0, 5])), ValueError, "indices must be batch rows in [0, 2), got [0, 5]"),
]


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_a_refused_append_leaves_the_cache_as_it_was():
    cache = KVCache(num_layers=1, capacity=4)
    with pytest.raises(TypeError):
        cache.update(0, KV, KV.double())
    assert cache.length == 0
