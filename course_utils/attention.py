"""Dot-product attention, from three vectors to ``scaled_dot_product_attention``.

Reading order: the loop version and the matrix version (notebook 01), the softmax done safely, the scaled
and maskable version every later notebook builds on and the gradient it sends back (02, 03).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils._validate import (
    broadcast_shapes,
    check_broadcasts,
    check_dim,
    check_float_tensor,
    check_fraction,
    check_positive_number,
    check_qkv,
    check_same_device,
    check_scores_mask,
    check_tensor,
)

__all__ = [
    "attention_loops",
    "attention_matmul",
    "simple_self_attention",
    "softmax_naive",
    "softmax",
    "scaled_dot_product_attention",
    "attend",
    "attention_grad_norms",
]


def attention_loops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Dot-product attention with explicit Python loops, one query at a time (slow on purpose).

    Shape: q (T, D), k (S, D), v (S, Dv) -> out (T, Dv). Taught in notebook 01.
    """
    check_qkv(q, k, v)
    check_positive_number("scale", scale)
    if q.dim() != 2 or k.dim() != 2 or v.dim() != 2:
        raise ValueError(
            "attention_loops works on one sequence: q must be (T, D), k (S, D) and v (S, Dv), got "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        )
    T, S = q.shape[0], k.shape[0]
    if S == 0:
        raise ValueError(f"attention_loops needs at least one key (S >= 1), got k of shape {tuple(k.shape)}")
    out = v.new_zeros(T, v.shape[1])  # on v's device, in its dtype
    for i in range(T):
        scores = torch.stack([torch.dot(q[i], k[j]) * scale for j in range(S)])  # (S,)
        exps = torch.exp(scores - scores.max())  # (S,)
        weights = exps / exps.sum()  # (S,)
        for j in range(S):
            out[i] += weights[j] * v[j]  # (Dv,)
    return out


def attention_matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Dot-product attention as two matrix products and a softmax; equal to :func:`attention_loops`.

    Shape: q (..., T, D), k (..., S, D), v (..., S, Dv) -> out (..., T, Dv). Taught in notebook 01.
    """
    check_qkv(q, k, v)
    check_positive_number("scale", scale)
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, D) @ (..., D, S) -> (..., T, S)
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    return weights @ v  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)


def simple_self_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention with no learned weights: each token is its own query, key and value.

    Shape: x (..., T, C) -> out (..., T, C), weights (..., T, T). Taught in notebook 01.
    """
    check_float_tensor("x", x, min_dim=2)
    scores = x @ x.transpose(-2, -1)  # (..., T, C) @ (..., C, T) -> (..., T, T)
    weights = torch.softmax(scores, dim=-1)  # (..., T, T)
    return weights @ x, weights  # (..., T, C), (..., T, T)


def softmax_naive(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax straight from the formula exp(x) / sum(exp(x)); overflows above about 88 in float32.

    Shape: x any -> same shape. Taught in notebook 02.
    """
    check_float_tensor("x", x)
    check_dim("x", x, dim)
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax (row maximum subtracted first); an all ``-inf`` row gives NaN, as torch's.

    Shape: x any -> same shape. Taught in notebook 02.
    """
    check_float_tensor("x", x)
    check_dim("x", x, dim)
    if x.shape[dim] == 0:  # nothing to normalise: an empty result, as torch.softmax gives
        return x.clone()
    shift = x.amax(dim=dim, keepdim=True).detach()
    exps = torch.exp(x - shift)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale + bias, masked) v; returns the output and the weights used (after dropout).

    Equal to ``F.scaled_dot_product_attention`` with the same boolean mask: ``mask`` is True where a query
    may attend (``nn.MultiheadAttention``'s masks are the opposite: ``masking.convert_mask``). ``scale`` defaults
    to 1 / sqrt(D); a fully masked query row gets weights and output 0, as in ``F.sdpa`` since torch 2.5.
    TypeError or ValueError for inputs that do not fit (dtypes, shapes, a float mask, scale <= 0).
    Shape: q (..., T, D), k (..., S, D), v (..., S, Dv), mask (bool) and bias (float) broadcastable to
    (..., T, S) -> out (..., T, Dv), weights (..., T, S). Taught in notebook 02, 03 (mask), 06 (bias).
    """
    check_qkv(q, k, v, scale)
    check_fraction("dropout_p", dropout_p)
    scores_shape = (*broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])  # (..., T, S)
    if bias is not None:
        check_tensor("bias", bias, min_dim=0)
        if not bias.is_floating_point():
            raise TypeError(f"bias must be a floating-point tensor added to the scores, got dtype {bias.dtype}")
        if bias.dtype != q.dtype:
            raise TypeError(f"bias must have the dtype of q, k and v ({q.dtype}), got {bias.dtype}")
        check_broadcasts("bias", bias, scores_shape)
        check_same_device(q=q, bias=bias)
    if mask is not None:
        check_scores_mask(mask, q, k)
    return attend(q, k, v, mask, dropout_p, scale, bias)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel of :func:`scaled_dot_product_attention`, which checks its arguments and calls this.

    It trusts its inputs (no checks): the attention layers of the other modules check x and the mask at their
    entry, make q, k, v themselves and call this, so nothing is checked twice. Shapes as there.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, D) @ (..., D, S) -> (..., T, S)
    if bias is not None:
        scores = scores + bias  # (..., T, S): a bias changes scores, a mask removes keys
        finite = scores != float("-inf")  # a -inf bias blocks keys, as in F.sdpa's float mask: a row it
        mask = finite if mask is None else mask & finite  # blocks entirely gets 0 below, not NaN
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # blocked keys get -inf before the softmax
        sees_nothing = ~mask.any(dim=-1, keepdim=True)  # (..., T, 1): rows with every key blocked
        scores = scores.masked_fill(sees_nothing, 0.0)  # keep softmax away from 0 / 0 = NaN there ...
    weights = torch.softmax(scores, dim=-1)  # (..., T, S), rows sum to 1
    if mask is not None:
        weights = weights.masked_fill(sees_nothing, 0.0)  # ... and give those rows no weight at all
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)  # (..., T, S), kept entries scaled by 1 / (1 - p)
    out = weights @ v  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)
    return out, weights


def attention_grad_norms(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Norms of the gradient that unmasked attention sends to each query and key, given dL/d(out).

    Shape: q (..., T, D), k (..., S, D), v (..., S, Dv), grad_out (..., T, Dv) -> (..., T), (..., S).
    Taught in notebook 02. ``scale`` defaults to 1 / sqrt(D).
    """
    check_qkv(q, k, v, scale)
    check_float_tensor("grad_out", grad_out, min_dim=2)
    check_same_device(q=q, grad_out=grad_out)
    if grad_out.dtype != q.dtype:
        raise TypeError(f"grad_out must have the dtype of q, k and v ({q.dtype}), got {grad_out.dtype}")
    out_shape = (*broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]), q.shape[-2], v.shape[-1])
    if tuple(grad_out.shape) != out_shape:
        raise ValueError(
            f"grad_out must have the shape of the attention output {out_shape}, got {tuple(grad_out.shape)}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    with torch.no_grad():
        weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)  # (..., T, S)
        grad_weights = grad_out @ v.transpose(-2, -1)  # (..., T, Dv) @ (..., Dv, S) -> (..., T, S)
        # each row through the softmax Jacobian: w * (g - sum_j w_j g_j)
        grad_scores = weights * (grad_weights - (weights * grad_weights).sum(dim=-1, keepdim=True))  # (..., T, S)
        grad_q = (grad_scores @ k * scale).sum_to_size(q.shape)  # (..., T, S) @ (..., S, D) -> (..., T, D)
        grad_k = (grad_scores.transpose(-2, -1) @ q * scale).sum_to_size(k.shape)  # (..., S, T) @ (..., T, D)
    return grad_q.norm(dim=-1), grad_k.norm(dim=-1)  # (..., T), (..., S)
