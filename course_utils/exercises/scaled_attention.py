"""Exercises of notebook 02 (scaled attention): stable softmax, scaled dot-product attention, one head, entropy.

Each mistake below is one that people really make; the cases are chosen so that every mistake gives
outputs that differ from the solution and from every other mistake (a large-logit row for the missing
max subtraction, rows of very different size for the global max, T != S for the wrong softmax axis,
C != D for scaling by the model width, an exactly one-hot row for 0 * log 0).
"""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention, softmax
from course_utils.checking import Exercise, Mistake

__all__ = ["EXERCISES"]


# --- 02.1 stable softmax ----------------------------------------------------------------------------


def _softmax_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(2)
    small = torch.randn(3, 5, generator=g)  # (3, 5): ordinary logits
    large = torch.tensor([[100.0, 101.0, 102.0], [90.0, 80.0, 95.0]])  # exp(100) overflows float32
    mixed = torch.tensor([[60.0, 61.0, 62.0], [-60.0, -59.0, -58.0]])  # rows 120 apart
    batched = torch.randn(2, 4, 3, generator=g) * 3  # (2, 4, 3), normalised over dim=1
    return [((small,), {}), ((large,), {}), ((mixed,), {}), ((batched,), {"dim": 1})]


def _softmax_no_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_global_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.max())  # one number for the whole tensor: small rows underflow to 0 / 0
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_whole_sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum()  # sums every entry of the tensor, not one row


def _softmax_ignores_dim(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)


# --- 02.2 scaled dot-product attention --------------------------------------------------------------


def _sdpa_solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return scaled_dot_product_attention(q, k, v)


def _sdpa_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(22)
    cases = []
    for batch, T, S, D, Dv in (((), 3, 5, 4, 2), ((2,), 4, 6, 8, 3), ((2, 2), 5, 3, 16, 4)):
        q = torch.randn(*batch, T, D, generator=g)
        k = torch.randn(*batch, S, D, generator=g)
        v = torch.randn(*batch, S, Dv, generator=g)
        cases.append(((q, k, v), {}))
    return cases


def _sdpa_with(q, k, v, scale, dim=-1, after=False):
    scores = q @ k.transpose(-2, -1)  # (..., T, S)
    if not after:
        scores = scores * scale
    weights = torch.softmax(scores, dim=dim)
    if after:
        weights = weights * scale
    return weights @ v, weights


def _sdpa_no_scale(q, k, v):
    return _sdpa_with(q, k, v, 1.0)


def _sdpa_scale_by_d(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / q.shape[-1])


def _sdpa_wrong_axis(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / math.sqrt(q.shape[-1]), dim=-2)


def _sdpa_scale_after(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / math.sqrt(q.shape[-1]), after=True)


# --- 02.3 one attention head from x -----------------------------------------------------------------


def _head_solution(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, T, C) @ (C, D) -> (B, T, D)
    out, _ = scaled_dot_product_attention(q, k, v)  # scale 1 / sqrt(D), the head size
    return out


def _head_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(23)
    cases = []
    for B, T, C, D in ((1, 4, 8, 2), (2, 5, 12, 4), (2, 6, 32, 8)):
        x = torch.randn(B, T, C, generator=g)
        w_q, w_k, w_v = (torch.randn(C, D, generator=g) / math.sqrt(C) for _ in range(3))
        cases.append(((x, w_q, w_k, w_v), {}))
    return cases


def _head_with(x, w_q, w_k, w_v, scale, swap=False, dim=-1):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = (k @ q.transpose(-2, -1) if swap else q @ k.transpose(-2, -1)) * scale  # (B, T, T)
    return torch.softmax(scores, dim=dim) @ v


def _head_embed_dim(x, w_q, w_k, w_v):
    C = x.shape[-1]  # the model width, as in the "Let's build GPT" lecture code
    return _head_with(x, w_q, w_k, w_v, C**-0.5)


def _head_no_scale(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, 1.0)


def _head_wrong_axis(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, w_q.shape[-1] ** -0.5, dim=1)


def _head_swapped(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, w_q.shape[-1] ** -0.5, swap=True)


# --- 02.4 entropy of attention weights --------------------------------------------------------------


def _entropy_solution(weights: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # xlogy(0, 0) = 0, as the limit says


def _entropy_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(24)
    w1 = softmax(torch.randn(3, 4, generator=g) * 2)  # (3, 4), T != S
    w2 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # exact zeros
    w3 = softmax(torch.randn(2, 2, 5, 6, generator=g))  # (B, H, T, S)
    return [((w1,), {}), ((w2,), {}), ((w3,), {})]


def _entropy_nan_at_zero(weights):
    return -(weights * torch.log(weights)).sum(dim=-1)


def _entropy_wrong_axis(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-2)


def _entropy_no_minus(weights):
    return torch.special.xlogy(weights, weights).sum(dim=-1)


def _entropy_log2(weights):
    return -(torch.special.xlogy(weights, weights) / math.log(2)).sum(dim=-1)


EXERCISES = (
    Exercise(
        key="02.1",
        title="a numerically stable softmax",
        signature="stable_softmax(x, dim=-1) -> weights, same shape as x",
        solution=softmax,
        cases=_softmax_cases,
        mistakes=(
            Mistake("no max subtraction",
                    "exp(100) overflows float32 to inf and inf / inf is nan: subtract "
                    "x.amax(dim=dim, keepdim=True) before taking exp.",
                    _softmax_no_max),
            Mistake("subtracting the global max",
                    "x.max() is one number for the whole tensor, so a row far below it underflows to "
                    "0 / 0: take the max along `dim` with keepdim=True, one per row.",
                    _softmax_global_max),
            Mistake("dividing by the sum of the whole tensor",
                    "exps.sum() adds up every entry; each row must sum to 1 on its own: use "
                    "exps.sum(dim=dim, keepdim=True).",
                    _softmax_whole_sum),
            Mistake("ignoring the dim argument",
                    "your function always normalises the last axis; use `dim` in both the max and the sum.",
                    _softmax_ignores_dim),
        ),
    ),
    Exercise(
        key="02.2",
        title="scaled dot-product attention",
        signature="my_scaled_attention(q, k, v) -> (out, weights)",
        solution=_sdpa_solution,
        cases=_sdpa_cases,
        mistakes=(
            Mistake("missing scale",
                    "multiply the scores q @ k^T by 1 / sqrt(D), D = q.shape[-1], before the softmax.",
                    _sdpa_no_scale),
            Mistake("scaling by D instead of sqrt(D)",
                    "the variance of q . k grows like D, so its standard deviation grows like sqrt(D): "
                    "divide by math.sqrt(D), not by D.",
                    _sdpa_scale_by_d),
            Mistake("softmax over the wrong axis",
                    "each query's weights over the keys must sum to 1: softmax over the last axis "
                    "(dim=-1, the keys), not dim=-2 (the queries).",
                    _sdpa_wrong_axis),
            Mistake("scaling after the softmax",
                    "the scale goes on the scores, inside the softmax; scaling the weights afterwards makes "
                    "rows sum to 1 / sqrt(D) instead of 1.",
                    _sdpa_scale_after),
        ),
    ),
    Exercise(
        key="02.3",
        title="one attention head, scaled by its head size",
        signature="head_attention(x, w_q, w_k, w_v) -> out (B, T, D)",
        solution=_head_solution,
        cases=_head_cases,
        mistakes=(
            Mistake("scaling by embed_dim instead of head_dim",
                    "x.shape[-1] is C, the model width; q and k have D = w_q.shape[-1] entries and it is "
                    "their dot product you scale: use D ** -0.5.",
                    _head_embed_dim),
            Mistake("missing scale",
                    "multiply q @ k^T by D ** -0.5 (D = w_q.shape[-1]) before the softmax.",
                    _head_no_scale),
            Mistake("softmax over the wrong axis",
                    "the scores are (B, T, T) with keys on the last axis: softmax over dim=-1, not dim=1.",
                    _head_wrong_axis),
            Mistake("queries and keys swapped",
                    "k @ q^T gives the transposed scores (row = key); compute q @ k.transpose(-2, -1).",
                    _head_swapped),
        ),
    ),
    Exercise(
        key="02.4",
        title="entropy of attention weights",
        signature="attention_entropy(weights) -> entropy per query, in nats, shape weights.shape[:-1]",
        solution=_entropy_solution,
        cases=_entropy_cases,
        mistakes=(
            Mistake("0 * log 0 gives nan",
                    "a weight of exactly 0 makes weights * log(weights) = 0 * -inf = nan; the limit is 0: "
                    "use torch.special.xlogy(weights, weights).",
                    _entropy_nan_at_zero),
            Mistake("summing over the wrong axis",
                    "the entropy is of one query's weights over the keys: sum over dim=-1.",
                    _entropy_wrong_axis),
            Mistake("missing minus sign",
                    "p * log p is never positive, so H = -sum p log p: put the minus sign in front.",
                    _entropy_no_minus),
            Mistake("log base 2 instead of natural log",
                    "this course measures entropy in nats (natural log), so a uniform row over S keys "
                    "has entropy log(S): drop the division by log(2).",
                    _entropy_log2),
        ),
    ),
)
