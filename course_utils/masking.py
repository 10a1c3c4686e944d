"""Masks: which keys each query may see (notebook 03).

One convention: boolean, ``True`` = may attend, as ``F.scaled_dot_product_attention`` reads it;
:func:`convert_mask` is the one place that translates to ``nn.MultiheadAttention``'s and additive masks.
A mask lines up with the scores from the right, as broadcasting does: (T, S), (B, 1, T, S), (1, H, T, S),
(B, 1, 1, S) for padding; a 3-D mask is (H, T, S), one per head. Against multi-head scores (B, H, T, S) with
B == H a 3-D mask is refused: (B, T, S) and (H, T, S) have one shape there (notebook 04, Pitfall 4).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch

from course_utils._validate import (
    MAX_POSITIONS,
    broadcast_shapes,
    check_bool_mask,
    check_choice,
    check_float_tensor,
    check_holds_values,
    check_int,
    check_last_positions,
    check_number,
    check_same_device,
    check_tensor,
    is_integer_tensor,
)
from course_utils.devices import parse_device

__all__ = [
    "causal_mask",
    "mask_scores",
    "padding_mask",
    "combine_masks",
    "convert_mask",
    "MaskConvention",
]

MaskConvention = Literal["allow", "block", "additive"]
_CONVENTIONS = get_args(MaskConvention)


def causal_mask(T: int, S: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean causal mask: query i (the last T of S positions) may attend key j iff j <= S - T + i.

    Bottom-right aligned; ``is_causal=True`` in PyTorch aligns top-left, the same only when T == S.
    Shape: -> (T, S), S defaults to T. Taught in notebook 03.
    """
    S = T if S is None else S
    check_int("T", T)
    check_int("S", S)
    check_last_positions(T, S, "causal_mask")
    if T * S > 2**40:  # a terabyte of bools: torch would overflow or fail to allocate, deep inside
        raise ValueError(
            f"causal_mask({T}, {S}) would need {T * S:,} bytes ({T * S / 2**30:,.0f} GiB) for a "
            "(T, S) bool mask: use a smaller T and S"
        )
    if device is not None:
        device = parse_device(device)  # the one reading of a device name
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)  # (T, S)


def mask_scores(scores: torch.Tensor, mask: torch.Tensor, fill_value: float | None = None) -> torch.Tensor:
    """Put ``fill_value`` (default ``-inf``) where ``mask`` is False, before the softmax.

    Shape: scores (..., T, S), mask bool broadcastable to it -> (..., T, S). Taught in notebook 03.
    """
    check_float_tensor("scores", scores, min_dim=2)
    check_bool_mask(mask, scores.shape)
    check_same_device(scores=scores, mask=mask)
    fill = float("-inf") if fill_value is None else check_number("fill_value", fill_value, "a number or None")
    if not (fill == float("-inf") or (math.isfinite(fill) and fill < 0)):
        raise ValueError(
            f"fill_value must be -inf or a finite negative number (blocked keys need a score far below the others "
            f"so the softmax gives them ~0 weight; NaN or +inf would poison the row), got {fill}"
        )
    if fill < torch.finfo(scores.dtype).min and fill != float("-inf"):
        raise ValueError(
            f"fill_value {fill} is below the lowest {scores.dtype} ({torch.finfo(scores.dtype).min}): "
            "use -inf or a number that dtype holds"
        )
    return scores.masked_fill(~mask, fill)


def padding_mask(lengths: torch.Tensor | list[int], S: int) -> torch.Tensor:
    """Key mask for a batch padded to length S: True for real tokens, False for padding.

    Shape: lengths (B,) -> (B, S); use ``m[:, None, None, :]`` for (B, H, T, S) scores. Taught in notebook 03.
    """
    check_int("S", S, minimum=0)
    if S > MAX_POSITIONS:
        raise ValueError(f"S must be at most {MAX_POSITIONS} (the mask holds B * S entries), got {S}")
    try:
        lengths = torch.as_tensor(lengths)  # a list of ints too
    except (TypeError, RuntimeError, ValueError):
        raise TypeError(f"lengths must be a 1-D integer tensor or list, got {type(lengths).__name__}") from None
    if lengths.numel() == 0:
        lengths = lengths.long()  # torch.as_tensor([]) is float32; an empty batch is still a batch
    if lengths.dim() != 1 or not is_integer_tensor(lengths):
        raise TypeError(
            f"lengths must be a 1-D integer tensor or list, got dtype {lengths.dtype}, shape {tuple(lengths.shape)}"
        )
    check_holds_values("lengths", lengths)
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > S):
        raise ValueError(f"every length must be in [0, S={S}], got {lengths.tolist()}")
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return positions[None, :] < lengths[:, None]  # (1, S) < (B, 1) -> (B, S)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (True = may attend), broadcast together; None entries are skipped.

    Shape: masks broadcastable to one another -> their broadcast shape. Taught in notebook 03.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            got = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            raise TypeError(f"combine_masks takes boolean masks (True = may attend); mask {i} is {got}")
    try:
        broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from None
    check_same_device(**{f"mask {i}": m for i, m in enumerate(present)})
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def convert_mask(
    mask: torch.Tensor,
    src: MaskConvention,
    dst: MaskConvention,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Translate a mask between ``"allow"`` (bool, True = may attend), ``"block"`` (bool, True = blocked, as
    ``nn.MultiheadAttention``) and ``"additive"`` (float, 0 or -inf, of ``dtype``).

    An additive mask with finite non-zero entries is a bias, not a mask: ValueError.
    Shape: any -> same shape. Taught in notebook 03; used in notebook 05.
    """
    check_choice("src", src, _CONVENTIONS)
    check_choice("dst", dst, _CONVENTIONS)
    check_tensor("mask", mask, min_dim=0)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype (an additive mask holds -inf), got {dtype!r}")
    if src == "additive":
        if not mask.is_floating_point():
            raise TypeError(f"an 'additive' mask must be floating point, got dtype {mask.dtype}")
        check_holds_values("mask", mask)
        if not bool(((mask == 0) | (mask == float("-inf"))).all()):
            raise ValueError(
                "an 'additive' mask may only hold 0 (may attend) and -inf (blocked); this one holds other values, "
                "so it is a bias, not a mask"
            )
        allow = mask == 0
    elif mask.dtype != torch.bool:
        raise TypeError(f"a {src!r} mask must be boolean, got dtype {mask.dtype}")
    else:
        allow = ~mask if src == "block" else mask
    if dst == "allow":
        return allow
    if dst == "block":
        return ~allow
    return torch.zeros(allow.shape, dtype=dtype, device=allow.device).masked_fill(~allow, float("-inf"))
