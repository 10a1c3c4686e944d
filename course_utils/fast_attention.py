"""How fast attention works (notebook 08): the online softmax, attention computed tile by tile, its backward
pass by hand, and FlashAttention's recompute, which trains in memory linear in the sequence length.
Shapes: Dv is the values' width, ``...`` any leading (B, H); masks are boolean, True = may attend.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from course_utils._validate import (
    broadcast_shapes,
    check_bool,
    check_bool_mask,
    check_float_tensor,
    check_int,
    check_last_positions,
    check_positive_number,
    check_qkv,
    check_same_device,
    check_tensor,
)
from course_utils.attention import attend

__all__ = [
    "Partial",
    "block_partial",
    "merge_partials",
    "finish",
    "online_softmax",
    "tiled_attention",
    "saved_for_backward",
    "attention_backward",
    "flash_attention",
]

NEG_INF = float("-inf")


class Partial(NamedTuple):
    """What attention over some of the keys leaves behind, enough to merge exactly with the rest.

    Shape: m (..., T, 1) largest score (-inf: none visible); l (..., T, 1) sum of exp(score - m);
    o (..., T, Dv) sum of exp(score - m) * v. Taught in notebook 08.
    """

    m: torch.Tensor
    l: torch.Tensor  # noqa: E741 - the paper's name for the running sum
    o: torch.Tensor


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """``m`` with -inf replaced by 0, so that exp(-inf - m) is 0 and not NaN."""
    return m.masked_fill(m == NEG_INF, 0.0)


def block_partial(scores: torch.Tensor, v: torch.Tensor) -> Partial:
    """The :class:`Partial` of one block of keys; ``o / l`` is attention over that block alone.

    Shape: scores (..., T, Sb) scaled, -inf where blocked; v (..., Sb, Dv) -> Partial. Taught in notebook 08.
    """
    check_float_tensor("scores", scores, min_dim=2)
    check_float_tensor("v", v, min_dim=2)
    if scores.shape[-1] == 0 or scores.shape[-1] != v.shape[-2]:
        raise ValueError(
            f"scores (..., T, Sb) and v (..., Sb, Dv) need the same number Sb >= 1 of keys, got "
            f"scores {tuple(scores.shape)} and v {tuple(v.shape)}"
        )
    if scores.dtype != v.dtype:
        raise TypeError(f"scores and v must have one dtype, got {scores.dtype} and {v.dtype}")
    check_same_device(scores=scores, v=v)
    try:
        broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of scores {tuple(scores.shape)} and v {tuple(v.shape)} do not broadcast"
        ) from None
    return _block_partial(scores, v)


def _block_partial(scores: torch.Tensor, v: torch.Tensor) -> Partial:
    m = scores.amax(dim=-1, keepdim=True)  # (..., T, 1)
    p = torch.exp(scores - _safe_max(m))  # (..., T, Sb), every entry <= 1, 0 where blocked
    return Partial(m, p.sum(dim=-1, keepdim=True), p @ v)  # (..., T, 1), (..., T, 1), (..., T, Dv)


def merge_partials(a: Partial, b: Partial) -> Partial:
    """The :class:`Partial` of two blocks of keys together, exactly; a row seeing no key stays (-inf, 0, 0).

    Raises TypeError for partials of two dtypes. Shape: two Partials of the same shapes -> one Partial.
    Taught in notebook 08.
    """
    check_partial("a", a)
    check_partial("b", b)
    if a[0].shape != b[0].shape or a[2].shape != b[2].shape:
        raise ValueError(
            f"a and b must be partials of the same queries, got o {tuple(a[2].shape)} and {tuple(b[2].shape)}"
        )
    dtypes = {t.dtype for t in (*a, *b)}
    if len(dtypes) > 1:
        raise TypeError(
            f"a and b must hold tensors of one dtype, got {sorted(str(d) for d in dtypes)} "
            "(torch would silently promote the merged partial)"
        )
    check_same_device(a=a[0], b=b[0])
    return _merge(Partial(*a), Partial(*b))  # a plain tuple (m, l, o) is welcome too


def _merge(a: Partial, b: Partial) -> Partial:
    m = torch.maximum(a.m, b.m)  # (..., T, 1)
    m_safe = _safe_max(m)
    scale_a, scale_b = torch.exp(a.m - m_safe), torch.exp(b.m - m_safe)  # (..., T, 1), each <= 1
    return Partial(m, scale_a * a.l + scale_b * b.l, scale_a * a.o + scale_b * b.o)


def check_partial(name: str, p: object) -> None:
    """Raise unless ``p`` is a :class:`Partial` (m, l, o): m, l (..., T, 1), o (..., T, Dv), floating."""
    if not (isinstance(p, tuple) and len(p) == 3):
        raise TypeError(f"{name} must be a Partial (m, l, o) of three tensors, got {type(p).__name__}")
    m, l, o = p  # noqa: E741
    for part, t in (("m", m), ("l", l), ("o", o)):
        check_float_tensor(f"{name}.{part}", t, min_dim=2)
    if m.shape != l.shape or m.shape[-1] != 1 or o.shape[:-1] != m.shape[:-1]:
        raise ValueError(
            f"{name} must hold m and l of shape (..., T, 1) and o of shape (..., T, Dv), got m "
            f"{tuple(m.shape)}, l {tuple(l.shape)}, o {tuple(o.shape)}"
        )


def finish(p: Partial) -> torch.Tensor:
    """The attention output of a :class:`Partial`, ``o / l``, and 0 for a query that saw no visible key.

    Shape: Partial (m (..., T, 1), l (..., T, 1), o (..., T, Dv)) -> out (..., T, Dv). Taught in notebook 08.
    """
    check_partial("p", p)
    return _finish(Partial(*p))


def _finish(p: Partial) -> torch.Tensor:
    return p.o / p.l.masked_fill(p.l == 0, 1.0)  # l == 0 only where o == 0 too: those rows give 0


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last axis, its maximum and sum found in one streaming pass of ``block_size`` entries.

    Equal to ``torch.softmax(x, dim=-1)``, NaN for an all ``-inf`` row included.
    Shape: x (..., S) -> weights (..., S). Taught in notebook 08.
    """
    check_float_tensor("x", x)
    check_int("block_size", block_size)
    m = x.new_full((*x.shape[:-1], 1), NEG_INF)  # (..., 1): running maximum
    l = x.new_zeros((*x.shape[:-1], 1))  # noqa: E741  (..., 1): running sum of exp(x - m)
    for j0 in range(0, x.shape[-1], block_size):
        block = x[..., j0 : j0 + block_size]  # (..., Sb)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)
        m_safe = _safe_max(m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)  # noqa: E741
        m = m_new
    return torch.exp(x - _safe_max(m)) / l  # (..., S): 0 / 0 = NaN for an all -inf row, as torch.softmax


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    q_tile: int = 128,
    kv_tile: int = 128,
) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v, one (q_tile, kv_tile) tile of scores at a time, never all (T, S).

    ``scale`` defaults to 1 / sqrt(D); ``is_causal`` is ``causal_mask(T, S)`` (bottom-right; needs T <= S),
    and with ``mask`` both apply. A query that may see no key gets 0.
    Shape: q (..., T, D), k (..., S, D), v (..., S, Dv), mask bool broadcastable to (..., T, S)
    -> out (..., T, Dv). Taught in notebook 08.
    """
    check_tiled_args(q, k, v, mask, is_causal, scale, q_tile, kv_tile)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _tiled_forward(q, k, v, mask, is_causal, scale, q_tile, kv_tile)[0]


def check_tiled_args(q, k, v, mask, is_causal, scale, q_tile, kv_tile) -> None:
    """The door of :func:`tiled_attention` and :func:`flash_attention`, which take the same arguments."""
    check_qkv(q, k, v, scale)
    check_bool("is_causal", is_causal)
    check_int("q_tile", q_tile)
    check_int("kv_tile", kv_tile)
    T, S = q.shape[-2], k.shape[-2]
    if mask is not None:
        check_bool_mask(mask, (*broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]), T, S))
        check_same_device(q=q, mask=mask)
    if is_causal:
        check_last_positions(T, S, "is_causal")


def _masked(
    scores: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, offset: int, i0: int, i1: int, j0: int, j1: int
) -> torch.Tensor:
    """The scores (..., Tq, Sk) of the tile (queries i0:i1, keys j0:j1), -inf where the query may not see."""
    visible = None
    if is_causal and j1 - 1 > offset + i0:  # this tile crosses the diagonal of the first query row
        rows = torch.arange(offset + i0, offset + i1, device=scores.device)[:, None]  # (Tq, 1) absolute positions
        visible = torch.arange(j0, j1, device=scores.device)[None, :] <= rows  # (Tq, Sk)
    if mask is not None:  # its tile, broadcastable to (..., Tq, Sk); an axis of size 1 broadcasts whole
        m_t = mask[..., i0:i1, :] if mask.dim() >= 2 and mask.shape[-2] != 1 else mask
        m_t = m_t[..., j0:j1] if m_t.dim() >= 1 and m_t.shape[-1] != 1 else m_t
        visible = m_t if visible is None else visible & m_t
    return scores if visible is None else scores.masked_fill(~visible, NEG_INF)


def _tiled_forward(q, k, v, mask, is_causal, scale, q_tile, kv_tile) -> tuple[torch.Tensor, torch.Tensor]:
    """out (..., T, Dv) and each query's logsumexp of its visible scores (..., T, 1), -inf if it sees none."""
    T, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    offset = S - T  # query i sits at absolute position offset + i
    out = q.new_empty(*batch, T, Dv)  # (..., T, Dv), filled one query tile at a time
    lse = q.new_empty(*batch, T, 1)  # (..., T, 1)
    for i0 in range(0, T, q_tile):
        i1 = min(i0 + q_tile, T)
        q_t = q[..., i0:i1, :] * scale  # (..., Tq, D), scaled once rather than every tile of scores
        acc = Partial(
            q.new_full((*batch, i1 - i0, 1), NEG_INF), q.new_zeros(*batch, i1 - i0, 1), q.new_zeros(*batch, i1 - i0, Dv)
        )  # nothing seen yet
        last_key = offset + i1 - 1 if is_causal else S - 1  # keys after it are every query's future
        for j0 in range(0, last_key + 1, kv_tile):
            j1 = min(j0 + kv_tile, S)
            scores = q_t @ k[..., j0:j1, :].transpose(-2, -1)  # (..., Tq, D) @ (..., D, Sk) -> (..., Tq, Sk)
            scores = _masked(scores, mask, is_causal, offset, i0, i1, j0, j1)
            acc = _merge(acc, _block_partial(scores, v[..., j0:j1, :]))  # (..., Tq, 1), (..., Tq, Dv)
        out[..., i0:i1, :] = _finish(acc)  # (..., Tq, Dv)
        lse[..., i0:i1, :] = acc.m + torch.log(acc.l)  # (..., Tq, 1): log sum exp(scores); -inf + -inf if none
    return out, lse


def saved_for_backward(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Bytes autograd keeps from ``fn(*args, **kwargs)`` for the backward pass, each storage counted once.

    0 under ``torch.no_grad()``. Taught in notebook 08.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function to call, got {type(fn).__name__}")
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args, **kwargs)
    return sum(kept.values())


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    scale: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients (dq, dk, dv) of one attention call o = softmax(scale q k^T, masked) v, given do = dL/do.

    With P the weights: dv = P^T dO; dP = dO v^T; Delta = rowsum(dO * O); dS = P * (dP - Delta); dq = scale dS k;
    dk = scale dS^T q. ``o`` must be that call's output; broadcast batch axes are summed back.
    Shape: q (..., T, D), k (..., S, D), v (..., S, Dv), o and do (..., T, Dv), mask bool broadcastable to
    (..., T, S) -> dq, dk, dv of the shapes of q, k, v. Taught in notebook 08.
    """
    check_qkv(q, k, v)
    check_positive_number("scale", scale)
    T, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    for name, x in (("o", o), ("do", do)):
        check_tensor(name, x, min_dim=2)
        if x.dtype != q.dtype or x.shape != (*batch, T, Dv):
            raise ValueError(
                f"{name} must be the attention output's shape {(*batch, T, Dv)} and dtype {q.dtype}, got "
                f"{tuple(x.shape)} {x.dtype}"
            )
        check_same_device(q=q, **{name: x})
    if mask is not None:
        check_bool_mask(mask, (*batch, T, S))
        check_same_device(q=q, mask=mask)
    _, weights = attend(q, k, v, mask, scale=scale)  # (..., T, S): P, recomputed; 0 in a row that sees no key
    dv = weights.transpose(-2, -1) @ do  # (..., S, T) @ (..., T, Dv) -> (..., S, Dv)
    dweights = do @ v.transpose(-2, -1)  # (..., T, Dv) @ (..., Dv, S) -> (..., T, S): dP
    delta = (do * o).sum(dim=-1, keepdim=True)  # (..., T, 1): Delta = rowsum(dO * O)
    dscores = weights * (dweights - delta)  # (..., T, S): dS, the softmax's backward, row by row
    dq = scale * (dscores @ k)  # (..., T, S) @ (..., S, D) -> (..., T, D)
    dk = scale * (dscores.transpose(-2, -1) @ q)  # (..., S, T) @ (..., T, D) -> (..., S, D)
    return dq.sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    q_tile: int = 256,
    kv_tile: int = 256,
) -> torch.Tensor:
    """:func:`tiled_attention` that also trains without the (T, S) matrix: FlashAttention-2's recompute.

    Saves exactly q, k, v, the output and the logsumexp (..., T) for the backward pass, which recomputes each
    tile's weights. float16 and bfloat16 are computed in float32. Differentiable once (``create_graph=True``
    raises RuntimeError). Arguments and errors as :func:`tiled_attention`; 256 x 256 tiles were the fastest on a
    CPU (benchmarks/FLASH.md). Shapes as :func:`tiled_attention`. Taught in notebook 08.
    """
    check_tiled_args(q, k, v, mask, is_causal, scale, q_tile, kv_tile)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _FlashAttention.apply(q, k, v, mask, is_causal, scale, q_tile, kv_tile)


def _refuse_create_graph(backward: Callable[..., Any]) -> Callable[..., Any]:
    """``backward`` that raises under ``create_graph=True``: ``once_differentiable`` alone can let a second
    derivative come back silently without flash's part (tests/test_fast_attention.py shows how)."""

    @functools.wraps(backward)
    def guarded(ctx, *grads):
        if torch.is_grad_enabled():  # autograd runs a backward pass in grad mode only for create_graph=True
            raise RuntimeError(
                "flash_attention is differentiable once: its backward pass is not itself differentiable, got a "
                "backward pass with create_graph=True; use course_utils.attention.scaled_dot_product_attention "
                "for second derivatives"
            )
        return backward(ctx, *grads)

    return guarded


class _FlashAttention(torch.autograd.Function):
    """flash_attention's kernel: arguments already checked."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, scale, q_tile, kv_tile):
        with _no_autocast(q.device):  # autograd is off in here
            out, lse = _tiled_forward(*_widened(q, k, v), mask, is_causal, scale, q_tile, kv_tile)
        out = out.to(q.dtype)  # (..., T, Dv); lse stays float32 (or float64)
        # FlashAttention-2's contract: exactly q, k, v, the output and the logsumexp; the mask is kept on ctx
        ctx.save_for_backward(q, k, v, out, lse.squeeze(-1))
        ctx.mask, ctx.settings = mask, (is_causal, scale, q_tile, kv_tile)
        ctx.mask_version = None if mask is None else mask._version  # autograd's own guard, for the tensor on ctx
        return out

    @staticmethod
    @_refuse_create_graph
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        if ctx.mask is not None and ctx.mask._version != ctx.mask_version:
            raise RuntimeError(
                "flash_attention's mask was changed in place after the forward pass (version "
                f"{ctx.mask_version} -> {ctx.mask._version}); the backward pass needs the mask the forward pass "
                "used: change a copy (mask.clone()), or run the forward pass again"
            )
        with _no_autocast(q.device):
            grads = _tiled_backward(*_widened(q, k, v, out, dout), lse.unsqueeze(-1), ctx.mask, *ctx.settings)
        dq, dk, dv = (g.to(q.dtype) for g in grads)
        return dq, dk, dv, None, None, None, None, None  # no gradient for the mask and the settings


def _widened(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """float16 and bfloat16 tensors in float32, others as they are: sums over many tiles need float32."""
    return tuple(t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in tensors)


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off (where the device has it), so that the kernel's products keep the dtype it chose."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


def _tiled_backward(q, k, v, out, dout, lse, mask, is_causal, scale, q_tile, kv_tile):
    """dq, dk, dv (the shapes of q, k, v) one tile at a time, each tile's weights recomputed from the logsumexp."""
    T, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    offset = S - T
    delta = (dout * out).sum(dim=-1, keepdim=True)  # (..., T, 1): rowsum(dO * O), which is rowsum(P * dP)
    lse = lse.masked_fill(lse == NEG_INF, float("inf"))  # a query that saw no key: exp(-inf - inf) = 0 weights
    dq, dk, dv = q.new_zeros(*batch, T, D), k.new_zeros(*batch, S, D), v.new_zeros(*batch, S, Dv)
    for i0 in range(0, T, q_tile):
        i1 = min(i0 + q_tile, T)
        q_t, do_t = q[..., i0:i1, :] * scale, dout[..., i0:i1, :]  # (..., Tq, D), (..., Tq, Dv)
        last_key = offset + i1 - 1 if is_causal else S - 1  # the forward pass skipped the tiles after it
        for j0 in range(0, last_key + 1, kv_tile):
            j1 = min(j0 + kv_tile, S)
            k_t, v_t = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., Sk, D), (..., Sk, Dv)
            scores = _masked(q_t @ k_t.transpose(-2, -1), mask, is_causal, offset, i0, i1, j0, j1)  # as forward
            weights = (scores - lse[..., i0:i1, :]).exp_()  # (..., Tq, Sk): P = exp(scores - logsumexp)
            dv[..., j0:j1, :] += weights.transpose(-2, -1) @ do_t  # (..., Sk, Tq) @ (..., Tq, Dv)
            dweights = do_t @ v_t.transpose(-2, -1)  # (..., Tq, Dv) @ (..., Dv, Sk) -> (..., Tq, Sk): dP
            dscores = dweights.sub_(delta[..., i0:i1, :]).mul_(weights)  # (..., Tq, Sk): dS = P * (dP - Delta)
            dq[..., i0:i1, :] += dscores @ k_t  # (..., Tq, Sk) @ (..., Sk, D); times scale at the end
            dk[..., j0:j1, :] += dscores.transpose(-2, -1) @ q_t  # q_t holds the scale already
    return dq.mul_(scale).sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)
