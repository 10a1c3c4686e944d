"""Masks: which keys each query may see (notebook 03).

One convention: boolean, ``True`` = may attend, as ``F.scaled_dot_product_attention`` reads it;
:func:`convert_mask` is the one place that translates to ``nn.MultiheadAttention``'s and additive masks.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from course_utils._validate import (
    check_causal_mask_args,
    check_combinable,
    check_convert_mask_args,
    check_mask_scores_args,
    check_padding_mask_args,
)

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
    T, S, device = check_causal_mask_args(T, S, device)  # S = T when None
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)  # (T, S)


def mask_scores(scores: torch.Tensor, mask: torch.Tensor, fill_value: float | None = None) -> torch.Tensor:
    """Put ``fill_value`` (default ``-inf``) where ``mask`` is False, before the softmax.

    Shape: scores (..., T, S), mask bool broadcastable to it -> (..., T, S). Taught in notebook 03.
    """
    fill = check_mask_scores_args(scores, mask, fill_value)  # -inf when None
    return scores.masked_fill(~mask, fill)


def padding_mask(lengths: torch.Tensor | list[int], S: int) -> torch.Tensor:
    """Key mask for a batch padded to length S: True for real tokens, False for padding.

    Shape: lengths (B,) -> (B, S); use ``m[:, None, None, :]`` for (B, H, T, S) scores. Taught in notebook 03.
    """
    lengths, S = check_padding_mask_args(lengths, S)  # lengths as a (B,) integer tensor
    positions = torch.arange(S, device=lengths.device)  # (S,)
    return positions[None, :] < lengths[:, None]  # (1, S) < (B, 1) -> (B, S)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (True = may attend), broadcast together; None entries are skipped.

    Shape: masks broadcastable to one another -> their broadcast shape. Taught in notebook 03.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    check_combinable(present)
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
    check_convert_mask_args(mask, src, dst, dtype, _CONVENTIONS)  # an additive mask holds only 0 and -inf
    if src == "additive":
        allow = mask == 0
    elif src == "block":
        allow = ~mask
    else:
        allow = mask
    if dst == "allow":
        return allow
    if dst == "block":
        return ~allow
    return torch.zeros(allow.shape, dtype=dtype, device=allow.device).masked_fill(~allow, float("-inf"))
