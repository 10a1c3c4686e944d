"""Exercises of notebook 03 (masking): a causal mask for a cache, masked weights, padding, nn.MultiheadAttention masks.

Each reference solution is built from :mod:`course_utils.masking`; each mistake is one that learners
really make with masks: the polarity flipped, the triangle on the wrong side or one step off, the mask
applied after the softmax, a 0 where a -inf belongs.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.masking import causal_mask, combine_masks, convert_mask, mask_scores, padding_mask

__all__ = ["EXERCISES"]


# --- 03.1 causal mask for T <= S (queries are the last T positions) ---------------------------------


def _causal_solution(T: int, S: int) -> torch.Tensor:
    return causal_mask(T, S)  # (T, S)


def _causal_cases() -> list[tuple[tuple, dict]]:
    return [((4, 4), {}), ((3, 6), {}), ((2, 5), {}), ((1, 4), {}), ((1, 1), {})]


def _causal_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        T = randint(g, 1, 49)  # up to 48 queries and 64 keys: beyond the notebook's examples
        cases.append(((T, T + randint(g, 0, 17)), {}))
    return cases


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
    # not causal, not a padding mask: a function that ignores the mask and blocks the future is caught
    scattered = torch.tensor(
        [[True, False, True, True, False], [False, False, False, True, True], [True, True, False, False, False]]
    )  # (3, 5)
    both = causal_mask(5) & padding_mask([5, 3], 5)[:, None, :]  # (2, 5, 5): padding next to causal
    return [
        ((2.0 * torch.randn(4, 4, generator=g), causal), {}),
        ((2.0 * torch.randn(2, 3, 5, generator=g), pad), {}),
        ((2.0 * torch.randn(3, 6, generator=g), cache), {}),
        ((100.0 * torch.randn(3, 5, generator=g), scattered), {}),  # rows spanning hundreds
        ((2.0 * torch.randn(2, 5, 5, generator=g), both), {}),
        # blocked scores 200 above the allowed ones, which are near -100: only a true block (-inf, -1e9,
        # -1e4) gives the right weights; a softmax renormalised after masking, an exp shifted by the allowed
        # maximum or a fill of -30 gives NaN or weight on blocked keys
        ((torch.where(scattered, -100.0, 100.0) + torch.randn(3, 5, generator=g), scattered), {}),
        # (B, H, T, S) scores of one query (T == 1) each, a padding mask of lengths 4 and 1 for each head: the
        # second sequence's query keeps a single key
        (
            (2.0 * torch.randn(2, 2, 1, 4, generator=g), padding_mask([4, 1], 4)[:, None, None, :].expand(2, 2, 1, 4)),
            {},
        ),
        ((2.0 * torch.randn(3, 1, generator=g), torch.ones(3, 1, dtype=torch.bool)), {}),  # one key (S == 1)
        ((2.0 * torch.randn(2, 4, 4, generator=g), causal), {}),  # a (T, S) mask beside (B, T, S) scores
        # non-contiguous (B, H, T, S) scores with two leading axes: a .view(-1, T, S) that merges them breaks
        (
            (
                2.0 * torch.randn(2, 2, 4, 5, generator=g).transpose(0, 1),
                padding_mask([5, 2], 5)[:, None, None, :].expand(2, 2, 1, 5),
            ),
            {},
        ),
    ]


def _weights_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, T, S = randint(g, 1, 3), randint(g, 1, 4), randint(g, 1, 49), randint(g, 2, 65)
        scores = [1.0, 50.0][randint(g, 0, 2)] * torch.randn(B, H, T, S, generator=g)
        kind = randint(g, 0, 3)
        if kind == 0:  # a cache: causal, bottom-right aligned
            T = min(T, S)
            scores, mask = scores[:, :, :T], causal_mask(T, S)
        elif kind == 1:  # padding next to causal (T = S)
            scores = torch.randn(B, H, S, S, generator=g)
            lengths = torch.randint(1, S + 1, (B,), generator=g)
            mask = causal_mask(S) & padding_mask(lengths, S)[:, None, None, :]
        else:  # any pattern, each row keeping its first key
            mask = torch.rand(T, S, generator=g) < 0.5
            mask[:, 0] = True
        cases.append(((scores, mask), {}))
    return cases


def _weights_after_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1) * mask


def _weights_renormalised(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(scores, dim=-1) * mask  # equal in exact arithmetic; in floats the kept weights may underflow
    return w / w.sum(dim=-1, keepdim=True)


def _weights_multiply(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores * mask, dim=-1)  # same as filling with 0: exp(0) = 1 still counts


def _weights_inverted(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)


def _weights_wrong_axis(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(mask_scores(scores, mask), dim=-2)


def _weights_always_causal(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    T, S = scores.shape[-2:]
    causal = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # the mask given is never read
    return torch.softmax(mask_scores(scores, causal), dim=-1)


# --- 03.3 padding mask from lengths -----------------------------------------------------------------


def _padding_solution(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return padding_mask(lengths, S)  # (B, S)


def _padding_cases() -> list[tuple[tuple, dict]]:
    return [
        ((torch.tensor([3, 5, 1]), 6), {}),
        ((torch.tensor([2]), 4), {}),
        ((torch.tensor([4, 0, 2, 3]), 7), {}),
        ((torch.tensor([5, 0, 2, 5]), 5), {}),  # full length (L == S) next to an empty sequence
        ((torch.tensor([1, 0], dtype=torch.int32), 1), {}),  # int32 lengths, S == 1
    ]


def _padding_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, S = randint(g, 1, 7), randint(g, 1, 49)
        cases.append(((torch.randint(0, S + 1, (B,), generator=g), S), {}))
    return cases


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
        # T != S after the T == S cases (where every catalogued mistake runs and is named by its values): one
        # query blocked from every key, a sequence all padding, one with none
        ((torch.tensor([[False, True, False, True, False], [True] * 5]), block_padding([5, 0, 3], 5)), {}),
        ((torch.tensor([[True, False, False]]), block_padding([2], 3)), {}),  # one query (T == 1), B == 1
        ((torch.tensor([[False], [True], [False], [False]]), block_padding([1, 0], 1)), {}),  # one key (S == 1)
    ]


def _mha_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    # T == S (self-attention), as nn.MultiheadAttention's two masks usually come, or T < S (a cache)
    cases = []
    for _ in range(4):
        B, T = randint(g, 1, 6), randint(g, 2, 41)
        S = T if randint(g, 0, 2) else T + randint(g, 1, 17)
        attn = ~causal_mask(T, S) if randint(g, 0, 2) else torch.rand(T, S, generator=g) < 0.3
        lengths = torch.randint(0, S + 1, (B,), generator=g)
        cases.append(((attn, ~padding_mask(lengths, S)), {}))
    return cases


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
        draw=_causal_draw,
        edges={
            "T == S": lambda T, S: T == S,
            "T < S (a cache)": lambda T, S: T < S,
            "T == 1": lambda T, S: T == 1,
            "S == 1": lambda T, S: S == 1,
        },
        mistakes=(
            Mistake(
                "triu instead of tril",
                "Query i must see the keys up to its own position, which lie on and below the diagonal; "
                "you kept the triangle above it.",
                _causal_triu,
                fix="torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)",
            ),
            Mistake(
                "off-by-one diagonal (query cannot see itself)",
                "A query may attend to its own position; your triangle stops one step short of it.",
                _causal_strict,
                fix=".tril(diagonal=S - T), not diagonal=S - T - 1",
            ),
            Mistake(
                "top-left alignment when T < S",
                "With a cache the T queries are the LAST T of the S positions, not the first T: each "
                "query sees every cached key as well as the new ones up to itself.",
                _causal_top_left,
                fix="query i sits at position S - T + i, so shift the triangle right by "
                "the S - T cached keys: .tril(diagonal=S - T) instead of .tril()",
            ),
            Mistake(
                "mask polarity inverted",
                "This course's masks are True = may attend (as F.scaled_dot_product_attention reads them); "
                "yours is True = blocked, nn.MultiheadAttention's convention.",
                _causal_inverted,
                fix="drop the ~ (or the logical not) from your mask",
            ),
        ),
    ),
    Exercise(
        key="03.2",
        domain=Domain(leading={"scores": 2}, views=True),
        title="masked attention weights",
        signature="masked_weights(scores, mask) -> weights (..., T, S)",
        solution=_weights_solution,
        cases=_weights_cases,
        draw=_weights_draw,
        edges={
            "no leading axes": lambda scores, mask: scores.dim() == 2,
            "one leading axis": lambda scores, mask: scores.dim() == 3,
            "two leading axes": lambda scores, mask: scores.dim() == 4,
            "a mask of the scores' own shape": lambda scores, mask: mask.shape == scores.shape,
            "a mask that broadcasts (fewer axes, or axes of size 1)": lambda scores, mask: mask.shape != scores.shape,
            "a (T, S) mask beside (B, T, S) scores": lambda scores, mask: mask.dim() == 2 and scores.dim() == 3,
            "T != S": lambda scores, mask: scores.shape[-2] != scores.shape[-1],
            "T == 1": lambda scores, mask: scores.shape[-2] == 1,
            "S == 1": lambda scores, mask: scores.shape[-1] == 1,
            "a mask neither causal nor padding (an allowed key after a blocked one)": lambda scores, mask: bool(
                (~mask[..., :-1] & mask[..., 1:]).any()
            ),
            "a query that keeps a single key": lambda scores, mask: bool((mask.expand_as(scores).sum(-1) == 1).any()),
            "rows spanning hundreds": lambda scores, mask: bool((scores.amax(-1) - scores.amin(-1) > 100).any()),
            "blocked scores far above the allowed ones": lambda scores, mask: bool(
                (
                    scores.masked_fill(mask, -math.inf).amax(-1) > scores.masked_fill(~mask, math.inf).amin(-1) + 100
                ).any()
            ),
        },
        mistakes=(
            Mistake(
                "mask applied after the softmax",
                "Zeroing weights after the softmax leaves rows that no longer sum to 1, because the "
                "blocked keys were still counted in the normaliser. Block the scores, then normalise.",
                _weights_after_softmax,
                fix="torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)",
            ),
            Mistake(
                "blocked keys removed after the exponential, then renormalised",
                "In exact arithmetic this is the same, but not in floats where a blocked score is far above the "
                "allowed ones: the allowed keys' weights underflow to 0 (and 0 / 0 is NaN), or the blocked key's "
                "exponential overflows (and inf * 0 is NaN). Block the scores before the softmax, so that the "
                "blocked keys never enter it.",
                _weights_renormalised,
                fix="torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)",
            ),
            Mistake(
                "multiplied the mask into the scores (or filled with 0)",
                "A score of 0 is not blocked: exp(0) = 1 still gets weight. A blocked key needs a score "
                "whose exponential is exactly 0.",
                _weights_multiply,
                fix="scores.masked_fill(~mask, float('-inf')) instead of scores * mask",
            ),
            Mistake(
                "mask polarity inverted",
                "True means MAY attend: you blocked the keys the mask allows and kept the ones it blocks.",
                _weights_inverted,
                fix="masked_fill(~mask, ...), not masked_fill(mask, ...)",
            ),
            Mistake(
                "softmax over the wrong axis",
                "Each query's weights over the keys must sum to 1, and the keys are the last axis.",
                _weights_wrong_axis,
                fix="torch.softmax(..., dim=-1)",
            ),
            Mistake(
                "every mask treated as causal",
                "The mask you are given can be any pattern (padding, a window, a scattered one), not only "
                "the causal triangle: block exactly the keys it marks False, whatever their position.",
                _weights_always_causal,
                fix="torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1), with the mask you are "
                "given (not is_causal=True or a triangle of your own)",
            ),
        ),
    ),
    Exercise(
        key="03.3",
        domain=Domain(ints={"lengths": (torch.int64, torch.int32, torch.uint8)}),
        title="padding mask from lengths",
        signature="my_padding_mask(lengths, S) -> bool (B, S), True = real token",
        solution=_padding_solution,
        cases=_padding_cases,
        draw=_padding_draw,
        edges={
            "an empty sequence (length 0)": lambda lengths, S: bool((lengths == 0).any()),
            "a sequence of full length (L == S)": lambda lengths, S: bool((lengths == S).any()),
            "B == 1": lambda lengths, S: len(lengths) == 1,
            "S == 1": lambda lengths, S: S == 1,
            "int32 lengths": lambda lengths, S: lengths.dtype == torch.int32,
            "int64 lengths": lambda lengths, S: lengths.dtype == torch.int64,
        },
        mistakes=(
            Mistake(
                "<= instead of < (one padding token let through)",
                "Positions count from 0: a sequence of length L has exactly L real tokens, and your mask "
                "marks one more.",
                _padding_le,
                fix="real tokens sit at 0 .. L-1, position L is padding: torch.arange(S)[None, :] < lengths[:, None]",
            ),
            Mistake(
                "mask polarity inverted",
                "True must mark the real tokens (may attend), False the padding; yours is the other way round.",
                _padding_inverted,
                fix="compare with <, not >=",
            ),
            Mistake(
                "float mask instead of bool",
                "A float 0/1 mask is not a mask to PyTorch: F.scaled_dot_product_attention ADDS a float "
                "attn_mask to the scores, so 0/1 blocks nothing. The result must be boolean.",
                _padding_float,
                fix="drop the .float(): the comparison is already a bool tensor",
            ),
            Mistake(
                "broadcast the wrong way round",
                "Rows are sequences and columns positions: the result is (B, S), not (S, B).",
                _padding_transposed,
                fix="torch.arange(S)[None, :] < lengths[:, None]",
            ),
        ),
    ),
    Exercise(
        key="03.4",
        title="nn.MultiheadAttention masks to one course mask",
        signature="from_mha_masks(attn_mask, key_padding_mask) -> bool (B, 1, T, S), True = may attend",
        solution=_mha_solution,
        cases=_mha_cases,
        draw=_mha_draw,
        edges={
            "T == S": lambda attn_mask, key_padding_mask: attn_mask.shape[0] == attn_mask.shape[1],
            "T != S": lambda attn_mask, key_padding_mask: attn_mask.shape[0] != attn_mask.shape[1],
            "T == 1": lambda attn_mask, key_padding_mask: attn_mask.shape[0] == 1,
            "S == 1": lambda attn_mask, key_padding_mask: attn_mask.shape[1] == 1,
            "B == 1": lambda attn_mask, key_padding_mask: key_padding_mask.shape[0] == 1,
            "attn_mask not causal (a blocked key before an allowed one)": lambda attn_mask, key_padding_mask: bool(
                (attn_mask[:, :-1] & ~attn_mask[:, 1:]).any()
            ),
            "a query blocked from every key": lambda attn_mask, key_padding_mask: bool(attn_mask.all(-1).any()),
            "a sequence all padding": lambda attn_mask, key_padding_mask: bool(key_padding_mask.all(-1).any()),
            "a sequence with no padding": lambda attn_mask, key_padding_mask: bool((~key_padding_mask).all(-1).any()),
        },
        mistakes=(
            Mistake(
                "mask polarity not inverted",
                "nn.MultiheadAttention reads True as BLOCKED; this course reads True as MAY ATTEND, so "
                "both masks change meaning on the way.",
                _mha_not_inverted,
                fix="~attn_mask & ~key_padding_mask[:, None, None, :]",
            ),
            Mistake(
                "De Morgan: ~(a & b) instead of ~(a | b)",
                "A key is allowed only if NEITHER mask blocks it; your mask lets a key through when just "
                "one of them allows it.",
                _mha_de_morgan,
                fix="~(a | b), which is ~a & ~b",
            ),
            Mistake(
                "padding mask on the query axis",
                "key_padding_mask masks KEYS, and the keys are the last axis of the scores.",
                _mha_query_axis,
                fix="key_padding_mask[:, None, None, :], (B, 1, 1, S)",
            ),
            Mistake(
                "no head axis",
                "The result must broadcast against scores of shape (B, H, T, S), so it needs an axis of "
                "size 1 for the heads.",
                _mha_no_head_axis,
                fix="key_padding_mask[:, None, None, :] so the result is (B, 1, T, S)",
            ),
        ),
    ),
)
