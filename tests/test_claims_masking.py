"""The measurable claims of notebooks 03 (masking), 04 (a padding mask with heads) and 05 (parity, cross-attention).

If PyTorch changes one of the behaviours the prose describes (what a fully masked row gives on each path
of nn.MultiheadAttention, for instance), a test here fails and the prose must change with it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import dtypes, seeds, tol
from torch import nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from course_utils.data import get_batch
from course_utils.masking import causal_mask, convert_mask, padding_mask
from course_utils.multihead import MultiHeadAttention, split_heads

ROOT = Path(__file__).resolve().parent.parent


def _version(text: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor)


# ------------------------------------------------------------------ 03: padding in the loss (ignore_index)


@st.composite
def padded_batches(draw):
    B, S, V = draw(st.integers(1, 4)), draw(st.integers(2, 7)), draw(st.integers(2, 12))
    lengths = [draw(st.integers(1, S)) for _ in range(B)]
    return B, S, V, lengths, draw(seeds)


def _padded_targets_and_logits(B, S, V, lengths, seed, pad_id=0):
    g = torch.Generator().manual_seed(seed)
    real = padding_mask(lengths, S)  # (B, S)
    targets = torch.randint(1, V, (B, S), generator=g).masked_fill(~real, pad_id)  # (B, S)
    logits = torch.randn(B, S, V, generator=g, requires_grad=True)  # (B, S, V)
    return real, targets, logits


@given(batch=padded_batches())
def test_ignore_index_loss_is_the_mean_over_real_tokens_only(batch):
    B, S, V, lengths, seed = batch
    real, targets, logits = _padded_targets_and_logits(B, S, V, lengths, seed)
    loss = F.cross_entropy(logits.reshape(B * S, V), targets.reshape(B * S), ignore_index=0)
    per_token = F.cross_entropy(logits.reshape(B * S, V), targets.reshape(B * S), reduction="none").view(B, S)
    torch.testing.assert_close(loss, per_token[real].mean())
    # the padding positions get no gradient at all; the real ones do
    (grad,) = torch.autograd.grad(loss, logits)  # (B, S, V)
    assert (grad[~real] == 0).all()
    assert (grad[real].abs().sum(-1) > 0).all()


def test_notebook_03_counting_the_padding_changes_the_loss_and_trains_pad_after_pad():
    """The notebook's batch: lengths 3, 5, 1 padded to S = 5, 10 ids, seed 3."""
    B, S, V = 3, 5, 10
    real, targets, logits = _padded_targets_and_logits(B, S, V, [3, 5, 1], 3)
    flat_logits, flat_targets = logits.reshape(B * S, V), targets.reshape(B * S)
    ignored = F.cross_entropy(flat_logits, flat_targets, ignore_index=0)
    counted = F.cross_entropy(flat_logits, flat_targets)
    assert abs(ignored.item() - counted.item()) > 0.01
    (grad,) = torch.autograd.grad(counted, logits)
    # counted, the loss pushes the logit of <pad> (id 0) up at every padding position: gradient < 0
    assert (grad[~real][:, 0] < 0).all()


def test_the_tiny_gpt_batches_have_no_padding():
    """Its batches are windows of one text, all context_length long, so it has nothing to ignore."""
    data = torch.arange(100) % 7 + 1
    x, y = get_batch(data, batch_size=5, context_length=12, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 12)
    assert torch.equal(x[:, 1:], y[:, :-1])  # every target is the next real token of the text


# ------------------------------------------------------------------ 03 and 05: fully masked rows, per path


def test_the_course_needs_torch_2_5_and_the_installed_torch_has_it():
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; the course runs on 3.10 too)
    floors = [_version(v) for v in re.findall(r'^\s*"torch>=([0-9.]+)', text, flags=re.MULTILINE)]
    assert floors and min(floors) >= (2, 5), floors
    assert _version(torch.__version__) >= (2, 5)


@settings(deadline=None, max_examples=30)
@given(
    B=st.integers(1, 3),
    H=st.integers(1, 3),
    T=st.integers(1, 5),
    S=st.integers(1, 6),
    D=st.integers(1, 5),
    dtype=dtypes,
    seed=seeds,
)
def test_sdpa_gives_fully_masked_rows_zeros_and_takes_enable_gqa(B, H, T, S, D, dtype, seed):
    """Since PyTorch 2.5: a query with no visible key gets output 0, not NaN (bool and additive masks)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=dtype)
    k, v = (torch.randn(B, 1, S, D, generator=g, dtype=dtype) for _ in range(2))  # one KV head: GQA
    mask = torch.rand(B, 1, T, S, generator=g) < 0.5
    mask[..., 0, :] = False  # query 0 sees nothing
    for m in (mask, convert_mask(mask, "allow", "additive", dtype=dtype)):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
        assert not out.isnan().any()
        empty = ~mask.any(-1)  # (B, 1, T): every fully masked row, query 0 among them
        assert (out.masked_select(empty[..., None]) == 0).all()


def _spies():
    return (
        mock.patch.object(F, "scaled_dot_product_attention", wraps=F.scaled_dot_product_attention),
        mock.patch.object(torch, "_native_multi_head_attention", wraps=torch._native_multi_head_attention),
    )


def _run_path(m, x, path, **kwargs):
    """nn.MultiheadAttention(x, x, x) on one of its three paths; checks that it took that path."""
    sdpa, native = _spies()
    with sdpa as sdpa_spy, native as native_spy:
        if path == "need_weights=True":
            out, _ = m(x, x, x, need_weights=True, **kwargs)
            assert sdpa_spy.call_count == 0 and native_spy.call_count == 0
        elif path == "need_weights=False":
            out, _ = m(x, x, x, need_weights=False, **kwargs)
            assert sdpa_spy.call_count == 1 and native_spy.call_count == 0
        else:  # eval, no autograd, batch_first, even head count, biases, query is key is value: the native fast path
            with torch.no_grad():
                out, _ = m(x, x, x, need_weights=False, **kwargs)
            assert native_spy.call_count == 1 and sdpa_spy.call_count == 0
    return out.detach()


PATHS = ("need_weights=True", "need_weights=False", "fast path")


@settings(deadline=None, max_examples=25)
@given(
    B=st.integers(1, 3),
    T=st.integers(2, 6),
    half_heads=st.integers(1, 2),
    D=st.integers(1, 4),
    bias=st.booleans(),
    seed=seeds,
)
@example(B=2, T=5, half_heads=1, D=4, bias=True, seed=0)  # notebook 05's module and batch (section 4)
def test_a_forgotten_inversion_gives_nan_or_silent_zeros_depending_on_the_path(B, T, half_heads, D, bias, seed):
    """The course's causal mask (True = may attend) handed to nn.MultiheadAttention uninverted: the last
    query's row is fully masked. Measured on the CPU: NaN on need_weights=True and on the native fast path;
    on need_weights=False (through F.scaled_dot_product_attention) that token's attention output is 0, so
    the module returns exactly out_proj's bias, zeros at PyTorch's initialisation. The partly wrong rows are
    finite, the same on every path, and far from the right answer. Without biases there is no fast path:
    eval mode under no_grad then goes through F.scaled_dot_product_attention too, and gives zeros."""
    H = 2 * half_heads  # the fast path needs an even head count
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(H * D, H, bias=bias, batch_first=True).eval()
    x = torch.randn(B, T, H * D)
    allow = causal_mask(T)
    right = _run_path(m, x, "need_weights=True", attn_mask=convert_mask(allow, "allow", "block"))
    paths = PATHS if bias else PATHS[:2]
    outs = {p: _run_path(m, x, p, attn_mask=allow) for p in paths}
    assert outs["need_weights=True"][:, -1].isnan().all()
    if bias:
        assert outs["fast path"][:, -1].isnan().all()
    else:
        sdpa, native = _spies()
        with sdpa as sdpa_spy, native as native_spy, torch.no_grad():
            no_grad_out, _ = m(x, x, x, attn_mask=allow, need_weights=False)
        assert native_spy.call_count == 0 and sdpa_spy.call_count == 1
        assert (no_grad_out[:, -1] == 0).all()
    zeros = outs["need_weights=False"]
    assert not zeros.isnan().any()
    expected = torch.zeros(B, H * D) if m.out_proj.bias is None else m.out_proj.bias.detach().expand(B, H * D)
    torch.testing.assert_close(zeros[:, -1], expected, rtol=0, atol=0)
    if bias:
        assert (m.out_proj.bias == 0).all() and (zeros[:, -1] == 0).all()  # PyTorch starts out_proj.bias at 0
    for p in paths:  # the rows that still see some keys: finite, equal on every path, wrong
        partly = outs[p][:, :-1]
        assert partly.isfinite().all()
        torch.testing.assert_close(partly, outs["need_weights=True"][:, :-1], atol=1e-5, rtol=1e-4)
    assert (outs["need_weights=True"][:, :-1] - right[:, :-1]).abs().max() > 1e-2


def test_notebook_05_section_4_the_three_paths_on_its_own_module():
    """Notebook 05's module and batch (seed 0, C = 8, H = 2, B = 2, T = 5; the explicit example of the test above
    pins its last token NaN / zeros / NaN and the other tokens equal on every path): off by about 0.96."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    right = _run_path(m, x, "fast path", attn_mask=~causal_mask(5))
    for p in PATHS:
        wrong = _run_path(m, x, p, attn_mask=causal_mask(5))
        assert round((wrong[:, :-1] - right[:, :-1]).abs().max().item(), 2) == 0.96


def test_notebook_03_section_10_forgotten_inversion_weights():
    """One head, need_weights=True: each query attends only to the future, and the last row is NaN."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(embed_dim=8, num_heads=1, batch_first=True)
    x = torch.randn(1, 6, 8)
    with torch.no_grad():
        _, wrong = mha(x, x, x, attn_mask=causal_mask(6))
        out_zero, _ = mha(x, x, x, attn_mask=causal_mask(6), need_weights=False)  # one head: no fast path
    assert wrong[0, -1].isnan().all() and not wrong[0, :-1].isnan().any()
    assert (wrong[0, :-1] * causal_mask(6)[:-1]).abs().max() == 0  # no weight on the past or on itself
    assert (out_zero[0, -1] == 0).all() and not out_zero.isnan().any()


@pytest.mark.parametrize("no_grad", [False, True])
def test_cross_attention_never_takes_the_fast_path_so_a_forgotten_inversion_gives_zeros(no_grad):
    """Notebook 05, section 11: key_padding_mask passed in the course's polarity. Sentence 0 (no padding)
    has every key blocked: NaN with need_weights=True, out_proj's bias (zeros) with need_weights=False,
    with or without autograd, because query is not key and the fast path is never taken."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 6, 8)
    src_keys = padding_mask(torch.tensor([6, 4]), 6)
    sdpa, native = _spies()
    with sdpa as sdpa_spy, native as native_spy, torch.no_grad() if no_grad else torch.enable_grad():
        nan_out, _ = m(x, memory, memory, key_padding_mask=src_keys)
        zero_out, _ = m(x, memory, memory, key_padding_mask=src_keys, need_weights=False)
    assert native_spy.call_count == 0 and sdpa_spy.call_count == 1
    assert nan_out[0].isnan().all() and nan_out[1].isfinite().all()
    assert (zero_out[0] == 0).all() and zero_out[1].isfinite().all()


# ------------------------------------------------------------------ 03: PyTorch's names for the two alignments


@given(
    B=st.integers(1, 3),
    H=st.integers(1, 3),
    T=st.integers(1, 6),
    extra=st.integers(0, 5),
    D=st.integers(1, 5),
    dtype=dtypes,
    seed=seeds,
)
def test_causal_lower_right_is_causal_mask_and_upper_left_is_is_causal(B, H, T, extra, D, dtype, seed):
    S = T + extra
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=dtype)
    k, v = (torch.randn(B, H, S, D, generator=g, dtype=dtype) for _ in range(2))
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, S))
    lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, S))
    torch.testing.assert_close(lower_right, ours, **tol(dtype))
    upper_left = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(T, S))
    torch.testing.assert_close(upper_left, F.scaled_dot_product_attention(q, k, v, is_causal=True), **tol(dtype))
    top_left = torch.ones(T, S, dtype=torch.bool).tril()
    torch.testing.assert_close(upper_left, F.scaled_dot_product_attention(q, k, v, attn_mask=top_left), **tol(dtype))
    if extra > 0 and T > 0:  # the two alignments really differ when T < S (the last query sees more keys)
        assert not torch.equal(causal_mask(T, S), top_left)


# ------------------------------------------------------------------ 05: cross-attention


@settings(deadline=None, max_examples=30)
@given(
    B=st.integers(1, 3), T=st.integers(1, 5), S=st.integers(2, 7), H=st.integers(1, 3), D=st.integers(1, 4), seed=seeds
)
def test_cross_attention_sees_every_real_memory_token_and_ignores_the_padding(B, T, S, H, D, seed):
    torch.manual_seed(seed)
    C = H * D
    m = MultiHeadAttention(C, H).eval()
    x, memory = torch.randn(B, T, C), torch.randn(B, S, C)
    lengths = torch.randint(1, S + 1, (B,))
    keys = padding_mask(lengths, S)  # (B, S)
    out, weights = m(x, keys[:, None, None, :], need_weights=True, memory=memory)
    assert weights.shape == (B, H, T, S)  # a rectangle: T queries, S keys
    real = keys[:, None, None, :].expand(B, H, T, S)
    assert (weights[real] > 0).all()  # no causal mask across the sequences: every real memory token is seen
    assert (weights[~real] == 0).all()
    other = memory.clone()
    other[~keys] = 100 * torch.randn(int((~keys).sum()), C)  # new vectors at the padding only
    torch.testing.assert_close(m(x, keys[:, None, None, :], memory=other), out, rtol=0, atol=0)
    moved = memory.clone()
    moved[torch.arange(B), lengths - 1] += 1.0  # the last REAL memory token of each sequence
    assert ((m(x, keys[:, None, None, :], memory=moved) - out).abs().amax(dim=-1) > 0).all()  # moves every query


def test_notebook_05_a_causal_mask_across_the_sequences_hides_the_end_of_the_source():
    T, S = 5, 6
    assert not causal_mask(T, S)[0, -1]  # the first target word would not see the last source token
    assert causal_mask(T, S)[0].sum() == S - T + 1


@settings(deadline=None, max_examples=30)
@given(S=st.integers(1, 8), T=st.integers(1, 8))
def test_decoder_only_the_answer_sees_the_whole_prompt_and_the_prompt_never_the_answer(S, T):
    mask = causal_mask(S + T)  # one sequence: S source (prompt) tokens, then T answer tokens
    assert mask[S:, :S].all()
    assert not mask[:S, S:].any()


def test_nn_multihead_attention_starts_its_biases_at_zero():
    m = nn.MultiheadAttention(8, 2)
    assert (m.out_proj.bias == 0).all() and (m.in_proj_bias == 0).all()


@pytest.mark.parametrize("make", [nn.RNN, nn.LSTM, nn.GRU])
def test_notebook_05_section_6_multihead_attention_is_time_first_by_default_like_torchs_recurrent_modules(make):
    """'time first, like PyTorch's recurrent modules (`nn.RNN`, `nn.LSTM`, `nn.GRU`)': all read (T, B, C) unless
    batch_first=True."""
    assert nn.MultiheadAttention(8, 2).batch_first is False and make(8, 8).batch_first is False


# ------------------------------------------------------------------ 05: how equal is equal (section 7)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_notebook_05_parity_is_at_rounding_level_and_float32_is_about_1e_7_from_float64(bias, causal):
    """'they agree to each type's rounding error or exactly ... (checked below 1e-6 in float32, 1e-14 in
    float64), while float32 itself is about 1e-7 from the float64 answer' (section 7's B = 3, T = 6, C = 16, H = 4)."""

    def outputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        m = nn.MultiheadAttention(16, 4, bias=bias, batch_first=True).to(dtype).eval()
        x = torch.randn(3, 6, 16).to(dtype)  # the same numbers in both dtypes
        allow, block = (causal_mask(6), ~causal_mask(6)) if causal else (None, None)
        with torch.no_grad():
            return MultiHeadAttention.from_torch(m)(x, allow), m(x, x, x, attn_mask=block)[0]

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return ((a - b).norm() / b.norm()).item()

    (ours32, torch32), (ours64, torch64) = outputs(torch.float32), outputs(torch.float64)
    assert rel(ours32, torch32) < 1e-6 and rel(ours64, torch64) < 1e-14
    assert 5e-8 < rel(ours32.double(), torch64) < 5e-7


# ------------------------------------------------------------------ 04: Pitfall 4, a padding mask with one axis too few


@settings(deadline=None, max_examples=30)
@given(H=st.integers(2, 5), T=st.integers(2, 6), D=st.integers(1, 4), seed=seeds)
def test_a_padding_mask_missing_an_axis_hands_sequence_bs_padding_to_head_b(H, T, D, seed):
    """'Against (B, H, T, S) it counts as (1, B, 1, S) ... when B == H it runs, and head b of every sequence
    uses the padding of sequence b'; and with (B, 1, 1, S) no weight reaches a padding key."""
    torch.manual_seed(seed)
    B, C = H, H * D
    m = MultiHeadAttention(C, H)
    x = torch.randn(B, T, C)
    lengths = torch.randint(1, T + 1, (B,))
    lengths[0] = T  # sequence 0 has no padding, as in the notebook
    pad = padding_mask(lengths, T)  # (B, S)
    _, right = m(x, pad[:, None, None, :], need_weights=True)
    wrong = _broadcast_weights(m, x, pad[:, None, :])  # as PyTorch reads it: the course's modules refuse it
    assert (right * ~pad[:, None, None, :]).sum() == 0
    for b in range(B):
        for h in range(H):
            torch.testing.assert_close(wrong[b, h], m(x, pad[h][None, None, None, :], need_weights=True)[1][b, h])
    with pytest.raises(ValueError, match=r"mask of shape \(\d+, 1, \d+\) is ambiguous"):
        m(x, pad[:, None, :])


def _broadcast_weights(m: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The weights of m's heads (B, H, T, S) with ``mask`` broadcast against the scores as PyTorch broadcasts it."""
    q, k, _ = (split_heads(t, m.num_heads) for t in m.qkv_proj(x).chunk(3, dim=-1))  # (B, H, T, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(m.head_dim)  # (B, H, T, S)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def test_notebook_04_pitfall_4_the_wrong_layout_changes_every_sequence_and_the_course_refuses_it():
    """Notebook 04's example: lengths 5, 3, 2 through three heads. 'sequences 1 and 2 put weight on their
    padding ... sequence 0, which has no padding at all, loses keys 3 and 4 in head 1 and keys 2 to 4 in head 2,
    so its output changes too'; 'PyTorch raises no error'; with B == H 'the course's modules refuse a 3-D mask'."""
    torch.manual_seed(0)
    T, C = 5, 12
    m = MultiHeadAttention(C, 3)
    x = torch.randn(3, T, C, generator=torch.Generator().manual_seed(7))
    pad = padding_mask([5, 3, 2], T)
    q, k, v = (split_heads(t, 3) for t in m.qkv_proj(x).chunk(3, dim=-1))  # (B, H, T, D)
    right_out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, None, :])
    wrong_out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad[:, None, :])  # runs: no error from PyTorch
    right, wrong = _broadcast_weights(m, x, pad[:, None, None, :]), _broadcast_weights(m, x, pad[:, None, :])
    on_padding = (wrong * ~pad[:, None, None, :]).sum(dim=(1, 2, 3))
    assert (right * ~pad[:, None, None, :]).sum() == 0
    assert on_padding[0] == 0 and (on_padding[1:] > 0).all()
    assert (wrong[0, 1, :, 3:] == 0).all() and (wrong[0, 2, :, 2:] == 0).all() and (wrong[0, 0] > 0).all()
    assert all(not torch.allclose(r, w, atol=1e-4) for r, w in zip(right_out, wrong_out))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 5\) is ambiguous .* mask\[:, None\]"):
        m(x, pad[:, None, :])  # B == H: refused, with the 4-D forms named
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5\) does not broadcast to the scores' shape"):
        m(x[:2], pad[:2, None, :])  # B = 2, H = 3: it does not broadcast
