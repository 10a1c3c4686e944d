"""Exercises of notebook 03 (masking): a causal mask for a cache, masked weights, padding, nn.MultiheadAttention masks.

Each reference solution is built from :mod:`course_utils.masking`; each mistake is one that learners
really make with masks: the polarity flipped, the triangle on the wrong side or one step off, the mask
applied after the softmax, a 0 where a -inf belongs.
"""

from __future__ import annotations

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.masking import causal_mask, combine_masks, convert_mask, mask_scores, padding_mask

__all__ = ["EXERCISES"]


# --- 03.1 causal mask for T <= S (queries are the last T positions) ---------------------------------

def _causal_solution(T: int, S: int) -> torch.Tensor:
    return causal_mask(T, S)  # (T, S)


def _causal_cases() -> list[tuple[tuple, dict]]:
    return [((4, 4), {}), ((3, 6), {}), ((2, 5), {}), ((1, 4), {})]


def _causal_triu(T: int, S: int) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool).triu(diagonal=S - T)


def _causal_strict(T: int, S: int) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T - 1)


def _causal_top_left(T: int, S: int) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril()


def _causal_inverted(T: int, S: int) -> torch.Tensor:
    return ~causal_mask(T, S)


# --- 03.2 masked attention weights from scores and a boolean mask -----------------------------------

def _weights_solution(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(mask_scores(scores, mask), dim=-1)  # (..., T, S)


def _weights_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(3)
    causal = causal_mask(4)  # (4, 4)
    pad = padding_mask([5, 3], 5)[:, None, :]  # (2, 1, 5): masks keys only, no row is empty
    cache = causal_mask(3, 6)  # (3, 6), bottom-right aligned
    return [
        ((2.0 * torch.randn(4, 4, generator=g), causal), {}),
        ((2.0 * torch.randn(2, 3, 5, generator=g), pad), {}),
        ((2.0 * torch.randn(3, 6, generator=g), cache), {}),
    ]


def _weights_after_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) * mask


def _weights_multiply(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores * mask, dim=-1)  # same as filling with 0: exp(0) = 1 still counts


def _weights_inverted(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)


def _weights_wrong_axis(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(mask_scores(scores, mask), dim=-2)


# --- 03.3 padding mask from lengths -----------------------------------------------------------------

def _padding_solution(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return padding_mask(lengths, S)  # (B, S)


def _padding_cases() -> list[tuple[tuple, dict]]:
    return [
        ((torch.tensor([3, 5, 1]), 6), {}),
        ((torch.tensor([2]), 4), {}),
        ((torch.tensor([4, 0, 2, 3]), 7), {}),
    ]


def _padding_le(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return torch.arange(S)[None, :] <= lengths[:, None]


def _padding_inverted(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return torch.arange(S)[None, :] >= lengths[:, None]


def _padding_float(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return (torch.arange(S)[None, :] < lengths[:, None]).float()


def _padding_transposed(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return torch.arange(S)[:, None] < lengths[None, :]  # (S, B)


# --- 03.4 nn.MultiheadAttention's two masks -> one course mask --------------------------------------

def _mha_solution(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    allow = convert_mask(attn_mask, "block", "allow")  # (T, S)
    keys = convert_mask(key_padding_mask, "block", "allow")[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
    return combine_masks(allow, keys)  # (B, 1, T, S)


def _mha_cases() -> list[tuple[tuple, dict]]:
    def block_future(T: int) -> torch.Tensor:
        return ~causal_mask(T)  # nn.MultiheadAttention style: True = blocked

    def block_padding(lengths: list[int], S: int) -> torch.Tensor:
        return ~padding_mask(lengths, S)

    g = torch.Generator().manual_seed(4)
    return [
        ((block_future(4), block_padding([4, 2], 4)), {}),
        ((block_future(5), block_padding([3, 5, 1], 5)), {}),
        ((torch.rand(3, 3, generator=g) < 0.3, block_padding([2, 3], 3)), {}),
    ]


def _mha_not_inverted(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    return attn_mask | key_padding_mask[:, None, None, :]


def _mha_de_morgan(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    return ~(attn_mask & key_padding_mask[:, None, None, :])


def _mha_query_axis(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    return ~(attn_mask | key_padding_mask[:, None, :, None])


def _mha_no_head_axis(attn_mask: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    return ~(attn_mask | key_padding_mask[:, None, :])  # (B, T, S)


EXERCISES = (
    Exercise(
        key="03.1",
        title="causal mask for T queries and S keys",
        signature="my_causal_mask(T, S) -> bool (T, S), True = may attend",
        solution=_causal_solution,
        cases=_causal_cases,
        mistakes=(
            Mistake("triu instead of tril",
                    "Query i must see the keys up to its own position, which lie on and below the diagonal: "
                    "keep the lower triangle with .tril(), not the upper one.",
                    _causal_triu),
            Mistake("off-by-one diagonal (query cannot see itself)",
                    "A query may attend to its own position. Your triangle is one step too far down: "
                    "raise the diagonal argument by 1.",
                    _causal_strict),
            Mistake("top-left alignment when T < S",
                    "With a cache the T queries are the LAST T of the S positions, so query i sits at "
                    "position S - T + i: shift the diagonal with .tril(diagonal=S - T).",
                    _causal_top_left),
            Mistake("mask polarity inverted",
                    "This course's masks are True = may attend (as F.scaled_dot_product_attention reads them); "
                    "yours is True = blocked, nn.MultiheadAttention's convention. Drop the ~ (or add one).",
                    _causal_inverted),
        ),
    ),
    Exercise(
        key="03.2",
        title="masked attention weights",
        signature="masked_weights(scores, mask) -> weights (..., T, S)",
        solution=_weights_solution,
        cases=_weights_cases,
        mistakes=(
            Mistake("mask applied after the softmax",
                    "Zeroing weights after the softmax leaves rows that no longer sum to 1, and the blocked "
                    "keys still sat in the normaliser. Fill the SCORES with -inf where the mask is False, "
                    "then take the softmax.",
                    _weights_after_softmax),
            Mistake("multiplied the mask into the scores (or filled with 0)",
                    "A score of 0 is not blocked: exp(0) = 1 still gets weight. Use "
                    "scores.masked_fill(~mask, float('-inf')) so exp gives exactly 0.",
                    _weights_multiply),
            Mistake("mask polarity inverted",
                    "True means MAY attend: fill where the mask is False (~mask), not where it is True.",
                    _weights_inverted),
            Mistake("softmax over the wrong axis",
                    "Each query's weights over the keys must sum to 1: take the softmax over the last "
                    "axis (dim=-1), the key axis.",
                    _weights_wrong_axis),
        ),
    ),
    Exercise(
        key="03.3",
        title="padding mask from lengths",
        signature="my_padding_mask(lengths, S) -> bool (B, S), True = real token",
        solution=_padding_solution,
        cases=_padding_cases,
        mistakes=(
            Mistake("<= instead of < (one padding token let through)",
                    "A sequence of length L has real tokens at positions 0 .. L-1: compare positions with "
                    "`<` lengths, not `<=`.",
                    _padding_le),
            Mistake("mask polarity inverted",
                    "True must mark the real tokens (may attend), False the padding; yours is the other way round.",
                    _padding_inverted),
            Mistake("float mask instead of bool",
                    "Return a boolean tensor. A float 0/1 mask is not a mask to PyTorch: "
                    "F.scaled_dot_product_attention ADDS a float attn_mask to the scores, so 0/1 blocks nothing.",
                    _padding_float),
            Mistake("broadcast the wrong way round",
                    "Rows are sequences and columns positions: compare positions[None, :] (1, S) with "
                    "lengths[:, None] (B, 1) to get (B, S), not (S, B).",
                    _padding_transposed),
        ),
    ),
    Exercise(
        key="03.4",
        title="nn.MultiheadAttention masks to one course mask",
        signature="from_mha_masks(attn_mask, key_padding_mask) -> bool (B, 1, T, S), True = may attend",
        solution=_mha_solution,
        cases=_mha_cases,
        mistakes=(
            Mistake("mask polarity not inverted",
                    "nn.MultiheadAttention reads True as BLOCKED; this course reads True as MAY ATTEND. "
                    "Invert both masks (convert_mask(m, 'block', 'allow') or ~m).",
                    _mha_not_inverted),
            Mistake("De Morgan: ~(a & b) instead of ~(a | b)",
                    "A key is allowed only if NEITHER mask blocks it: allow = ~a & ~b = ~(a | b). "
                    "~(a & b) lets a key through when just one of the masks allows it.",
                    _mha_de_morgan),
            Mistake("padding mask on the query axis",
                    "key_padding_mask masks KEYS, the last axis: broadcast it as (B, 1, 1, S), "
                    "not (B, 1, T, 1).",
                    _mha_query_axis),
            Mistake("no head axis",
                    "The result must broadcast against scores of shape (B, H, T, S): put the padding mask "
                    "in as (B, 1, 1, S) so the result is (B, 1, T, S).",
                    _mha_no_head_axis),
        ),
    ),
)
