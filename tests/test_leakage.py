"""No attention class of the course lets a position see the future under a causal mask.

``assert_no_leakage`` is the one check; ``FACTORIES`` lists every attention the course defines, so a later
class (a KV-cache attention, GQA, RoPE attention) is one more entry. The tests at the end make sure the check
itself catches a leak: with no mask, an inverted mask, a transposed mask or an off-by-one diagonal it fails.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.fast_attention import tiled_attention
from course_utils.masking import causal_mask
from course_utils.multihead import (
    MultiHeadAttention,
    MultiHeadAttentionEinsum,
    MultiHeadAttentionWrapper,
    SingleHeadAttention,
)
from course_utils.positional import ALiBiMultiHeadAttention
from course_utils.variants import GroupedQueryAttention, aft_full, aft_local_bias, topk_attention

B, T, C, H = 2, 6, 8, 2
MaskFn = Callable[[int], "torch.Tensor | None"]
Attention = Callable[[torch.Tensor], torch.Tensor]  # x: (B, T, C) -> out: (B, T, any)


def assert_no_leakage(fn: Attention, x: torch.Tensor) -> None:
    """For every t: changing tokens t+1.. leaves outputs 0..t unchanged, and d out[t] / d x[t+1:] is exactly 0.

    Raises AssertionError (from torch.testing.assert_close) at the first leak.
    """
    T = x.shape[1]
    out = fn(x)
    g = torch.Generator().manual_seed(1234)
    for t in range(T - 1):
        x_changed = x.clone()
        x_changed[:, t + 1 :] += 10.0 * torch.randn(x_changed[:, t + 1 :].shape, generator=g, dtype=x.dtype)
        out_changed = fn(x_changed)
        torch.testing.assert_close(
            out_changed[:, : t + 1],
            out[:, : t + 1],
            msg=lambda m, t=t: f"changing tokens after {t} changed an output at or before {t}: {m}",
        )
        x_grad = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(fn(x_grad)[:, t].sum(), x_grad)
        torch.testing.assert_close(
            grad[:, t + 1 :],
            torch.zeros_like(grad[:, t + 1 :]),
            atol=0,
            rtol=0,
            msg=lambda m, t=t: f"output {t} has a gradient from a later token: {m}",
        )
        assert grad[:, : t + 1].abs().sum() > 0, "output t should depend on tokens 0..t"


def _projected(attend: Callable[..., torch.Tensor]):
    """A function of q, k, v and the mask, ``attend(q, k, v, mask=mask)``, on random projections of x."""

    def factory(mask_fn: MaskFn, dtype: torch.dtype) -> Attention:
        w_q, w_k, w_v = (torch.randn(C, C, dtype=dtype) / C**0.5 for _ in range(3))
        return lambda x: attend(x @ w_q, x @ w_k, x @ w_v, mask=mask_fn(x.shape[1]))

    return factory


def _module(make: Callable[[], torch.nn.Module], seed_each_call: bool = False):
    def factory(mask_fn: MaskFn, dtype: torch.dtype) -> Attention:
        module = make().to(dtype)

        def fn(x):
            if seed_each_call:  # dropout: the same dropped entries on every call
                torch.manual_seed(99)
            return module(x, mask_fn(x.shape[1]))

        return fn

    return factory


def _gpt_blocks(mask_fn: MaskFn, dtype: torch.dtype, **overrides) -> Attention:
    """The stack of blocks of a course_utils.gpt.GPT on x (B, T, C); an explicit mask replaces the causal one."""
    from course_utils.gpt import GPT, GPTConfig

    config = GPTConfig(
        vocab_size=5, context_length=T, embed_dim=C, num_heads=H, num_layers=2, **{"attention": "course", **overrides}
    )
    blocks = GPT(config).blocks.to(dtype).eval()

    def fn(x):
        mask = mask_fn(x.shape[1])
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool) if mask is None else mask  # None: see all
        for block in blocks:
            x = block(x, mask=mask)
        return x

    return fn


def _aft_w(q: torch.Tensor) -> torch.Tensor:
    """AFT's position biases w (T, T) for q (B, T, C): the same on every call."""
    return torch.randn(q.shape[1], q.shape[1], generator=torch.Generator().manual_seed(0)).to(q.dtype)


FACTORIES: dict[str, Callable[[MaskFn, torch.dtype], Attention]] = {
    "scaled_dot_product_attention": _projected(lambda q, k, v, mask: scaled_dot_product_attention(q, k, v, mask)[0]),
    "SingleHeadAttention": _module(lambda: SingleHeadAttention(C, C // H, bias=True)),
    "MultiHeadAttentionWrapper": _module(lambda: MultiHeadAttentionWrapper(C, H)),
    "MultiHeadAttentionEinsum": _module(lambda: MultiHeadAttentionEinsum(C, H)),
    "MultiHeadAttention": _module(lambda: MultiHeadAttention(C, H).eval()),
    "MultiHeadAttention(dropout=0.3, training)": _module(
        lambda: MultiHeadAttention(C, H, dropout=0.3).train(), seed_each_call=True
    ),
    "GPT blocks (course attention, learned positions)": _gpt_blocks,
    "GPT blocks (torch attention, rope)": functools.partial(_gpt_blocks, positions="rope", attention="torch"),
    "GPT blocks (grouped-query, rope)": functools.partial(_gpt_blocks, positions="rope", num_kv_heads=1),
    "ALiBiMultiHeadAttention": _module(lambda: ALiBiMultiHeadAttention(C, H).eval()),
    # notebook 07's variants: grouped-query, multi-query, chunked top-k, AFT-full and AFT-local
    "GroupedQueryAttention(num_kv_heads=H)": _module(lambda: GroupedQueryAttention(C, H, H, bias=True)),
    "GroupedQueryAttention(num_kv_heads=1)": _module(lambda: GroupedQueryAttention(C, H, 1)),
    "GroupedQueryAttention(rope=True)": _module(lambda: GroupedQueryAttention(C, H, 1, rope=True)),
    "topk_attention(top_k=3, chunk_size=2)": _projected(functools.partial(topk_attention, top_k=3, chunk_size=2)),
    "aft_full": _projected(lambda q, k, v, mask: aft_full(q, k, v, _aft_w(q), mask)),
    "aft_full, AFT-local's biases (window 2)": _projected(
        lambda q, k, v, mask: aft_full(q, k, v, aft_local_bias(_aft_w(q), 2), mask)
    ),
    # notebook 08's tiled attention, with tiles that do not divide T
    "tiled_attention(q_tile=4, kv_tile=4)": _projected(functools.partial(tiled_attention, q_tile=4, kv_tile=4)),
}

LEAKY_MASKS: dict[str, MaskFn] = {
    "no mask": lambda T: None,
    "inverted polarity": lambda T: ~causal_mask(T),
    "transposed": lambda T: causal_mask(T).T,
    "off-by-one diagonal": lambda T: torch.ones(T, T, dtype=torch.bool).tril(diagonal=1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(FACTORIES))
def test_no_leakage_with_causal_mask(name, dtype):
    torch.manual_seed(0)
    fn = FACTORIES[name](causal_mask, dtype)
    assert_no_leakage(fn, torch.randn(B, T, C, dtype=dtype))


@pytest.mark.parametrize("mask_name", list(LEAKY_MASKS))
@pytest.mark.parametrize("name", list(FACTORIES))
def test_leakage_check_catches_a_wrong_mask(name, mask_name):
    torch.manual_seed(0)
    fn = FACTORIES[name](LEAKY_MASKS[mask_name], torch.float32)
    with pytest.raises(AssertionError):
        assert_no_leakage(fn, torch.randn(B, T, C))


def test_leakage_check_catches_a_leak_too_small_to_see_in_the_output():
    torch.manual_seed(0)
    causal = FACTORIES["MultiHeadAttention"](causal_mask, torch.float32)

    def tiny_leak(x):  # far below assert_close's tolerance, but its gradient is not zero
        return causal(x) + 1e-30 * x[:, -1:].sum()

    with pytest.raises(AssertionError, match="gradient from a later token"):
        assert_no_leakage(tiny_leak, torch.randn(B, T, C))


def test_leakage_check_catches_a_leak_at_one_position_only():
    torch.manual_seed(0)
    mask_fn = lambda T: causal_mask(T) | (torch.arange(T)[:, None] == 2) & (torch.arange(T)[None, :] == 4)
    fn = FACTORIES["MultiHeadAttention"](mask_fn, torch.float32)  # query 2 may see key 4
    with pytest.raises(AssertionError, match="after 2"):
        assert_no_leakage(fn, torch.randn(B, T, C))


@pytest.mark.parametrize("T_q, S", [(1, 5), (3, 5), (5, 5)])
def test_no_leakage_with_fewer_queries_than_keys(T_q, S):
    """Decoding with a cache: the T_q queries are positions S - T_q .. S - 1; query i must not see past S - T_q + i."""
    torch.manual_seed(0)
    q, k, v = torch.randn(B, T_q, 4), torch.randn(B, S, 4), torch.randn(B, S, 3)
    mask = causal_mask(T_q, S)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    for i in range(T_q):
        last_visible = S - T_q + i
        k2, v2 = k.clone(), v.clone()
        k2[:, last_visible + 1 :] += 10.0
        v2[:, last_visible + 1 :] -= 10.0
        out2, _ = scaled_dot_product_attention(q, k2, v2, mask)
        torch.testing.assert_close(out2[:, : i + 1], out[:, : i + 1])
        if last_visible + 1 < S:  # the change is visible to the later queries
            assert (out2[:, i + 1 :] - out[:, i + 1 :]).abs().max() > 1e-3
