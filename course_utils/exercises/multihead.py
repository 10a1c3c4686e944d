"""Exercises of notebook 04 (multi-head attention with einsum): split and merge heads, einsum scores,
a full multi-head forward pass from packed weights.

Each reference solution comes from :mod:`course_utils.multihead`; each mistake is one that shows up
in real code (a ``view`` without the ``transpose``, heads cut the wrong way, q and k swapped, the
scale taken from the model width, the output projection forgotten).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.exercises._draws import randint, randn
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.masking import causal_mask, padding_mask
from course_utils.multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["EXERCISES"]


HEADS = (1, 2, 3, 5, 6, 7, 24)  # head counts, not only powers of two, and more than the notebook's examples


# ---------------------------------------------------------------------------------------------------
# 04.1 split_heads: (B, T, C) -> (B, H, T, D)
# ---------------------------------------------------------------------------------------------------


def _split_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(401)
    # T != H everywhere, and D != H in two cases, so each wrong layout gives different numbers
    # then one head (H == 1), and one token cut into heads of one channel each (T == 1, D == 1)
    return [
        ((randn(g, 2, 5, 12), 3), {}),
        ((randn(g, 1, 4, 8), 2), {}),
        ((randn(g, 3, 3, 12), 4), {}),
        ((randn(g, 2, 3, 5), 1), {}),
        ((randn(g, 2, 1, 6), 6), {}),
    ]


def _split_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        H = HEADS[randint(g, 0, len(HEADS))]
        cases.append(((randn(g, randint(g, 1, 5), randint(g, 1, 49), H * randint(g, 1, 11)), H), {}))
    return cases


def _split_view_only(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, num_heads, T, C // num_heads)  # no error, but rows now mix tokens


def _split_no_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads)  # stops at (B, T, H, D)


def _split_last_axes(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(-2, -1)  # (B, T, D, H): the wrong pair swapped


def _split_interleaved(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, C // num_heads, num_heads).permute(0, 3, 1, 2)  # head h gets channels h, h+H, ...


# ---------------------------------------------------------------------------------------------------
# 04.2 merge_heads: (B, H, T, D) -> (B, T, C)
# ---------------------------------------------------------------------------------------------------


def _merge_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(402)
    return [
        ((randn(g, 2, 3, 5, 4),), {}),
        ((randn(g, 1, 2, 4, 3),), {}),
        ((randn(g, 2, 4, 3, 2),), {}),
        ((randn(g, 2, 1, 3, 4),), {}),  # one head (H == 1)
        ((randn(g, 1, 5, 2, 1),), {}),  # heads of one channel (D == 1)
        ((randn(g, 2, 3, 1, 2),), {}),  # one token (T == 1)
    ]


def _merge_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    return [
        ((randn(g, randint(g, 1, 5), HEADS[randint(g, 0, len(HEADS))], randint(g, 1, 49), randint(g, 1, 11)),), {})
        for _ in range(4)
    ]


def _merge_view_only(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)  # no transpose: tokens and heads get mixed


def _merge_interleaved(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * D)  # channel order d * H + h instead of h * D + d


def _merge_wrong_axes(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.transpose(-2, -1).reshape(B, T, H * D)  # swaps T and D instead of H and T


def _merge_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)  # adds the heads up: (B, T, D), not (B, T, C)


# ---------------------------------------------------------------------------------------------------
# 04.3 scaled scores with einsum: (B, H, T, D), (B, H, S, D) -> (B, H, T, S)
# ---------------------------------------------------------------------------------------------------


def _scores_solution(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, D) @ (B, H, D, S) -> (B, H, T, S)


def _scores_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(403)
    shapes = [
        ((2, 3, 4, 5), (2, 3, 6, 5)),
        ((1, 2, 5, 4), (1, 2, 5, 4)),
        ((2, 4, 3, 2), (2, 4, 3, 2)),
        ((1, 1, 1, 3), (1, 1, 4, 3)),  # one head, one query (H == 1, T == 1)
        ((2, 3, 2, 1), (2, 3, 1, 1)),  # one key, heads of one channel (S == 1, D == 1)
    ]
    return [((randn(g, *qs), randn(g, *ks)), {}) for qs, ks in shapes]


def _scores_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, T, S, D = (
            randint(g, 1, 5),
            HEADS[randint(g, 0, len(HEADS))],
            randint(g, 1, 49),
            randint(g, 1, 49),
            randint(g, 1, 33),
        )
        cases.append(((randn(g, B, H, T, D), randn(g, B, H, S, D)), {}))
    return cases


def _scores_swapped(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bhid,bhjd->bhji", q, k) / math.sqrt(q.shape[-1])  # the transpose of the scores


def _scores_no_scale(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bhid,bhjd->bhij", q, k)


def _scores_embed_dim(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    C = q.shape[1] * q.shape[-1]  # H * D: the model width, not the head size
    return torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(C)


def _scores_sum_heads(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.einsum("bhid,bhjd->bij", q, k) / math.sqrt(q.shape[-1])  # h left out of the output: summed


# ---------------------------------------------------------------------------------------------------
# 04.4 a full multi-head forward pass from packed weights
# ---------------------------------------------------------------------------------------------------


def _mha_solution(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None):
    C = x.shape[-1]
    m = MultiHeadAttention(C, num_heads)
    with torch.no_grad():
        m.qkv_proj.weight.copy_(qkv_weight)
        m.qkv_proj.bias.copy_(qkv_bias)
        m.out_proj.weight.copy_(out_weight)
        m.out_proj.bias.copy_(out_bias)
        return m(x, mask)


def _random_mha(g: torch.Generator, B: int, T: int, C: int, H: int, w: float = 0.5) -> tuple:
    """x (B, T, C) and an H-head layer's packed weights (times ``w``) and biases, drawn from ``g`` in one order."""
    return (
        randn(g, B, T, C),
        w * randn(g, 3 * C, C),
        0.1 * randn(g, 3 * C),
        w * randn(g, C, C),
        0.1 * randn(g, C),
        H,
    )


def _mha_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(404)
    cases = []
    for B, T, C, H, causal in ((2, 5, 12, 3, False), (1, 6, 8, 2, True), (2, 4, 16, 4, True)):
        args = _random_mha(g, B, T, C, H)
        cases.append((args, {"mask": causal_mask(T)} if causal else {}))
    # a padding mask (B, 1, 1, T), not causal: a function that treats every mask as causal is caught
    B, T, C, H = 2, 5, 15, 5
    args = _random_mha(g, B, T, C, H)
    cases.append((args, {"mask": padding_mask([5, 3], T)[:, None, None, :]}))
    # one head whose scores for the blocked last key are about +159 and for the allowed keys about -159 (every
    # query is (15, 0); the keys are (-15, 0), (-15, 0), (15, 0)): only a true block (-inf, -1e9) gives the
    # right output; a softmax renormalised after masking, an exp shifted by the allowed maximum or a fill of
    # -30 gives NaN or weight on the blocked key
    x = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]])  # (1, 3, 2)
    w_q, w_k, w_v = torch.tensor([[15.0, 0.0], [0.0, 0.0]]), torch.tensor([[-15.0, 30.0], [0.0, 0.0]]), randn(g, 2, 2)
    args = (x, torch.cat([w_q, w_k, w_v]), torch.zeros(6), randn(g, 2, 2), 0.1 * randn(g, 2), 1)
    cases.append((args, {"mask": padding_mask([2], 3)[:, None, None, :]}))
    # causal and padding together (B, 1, T, T); a mask of its own for each head (B, H, T, T), each query keeping
    # its first key; heads of one channel (D == 1, H == C); one token (T == 1)
    both = causal_mask(4) & padding_mask([4, 2], 4)[:, None, None, :]  # (2, 1, 4, 4)
    per_head = torch.rand(2, 3, 4, 4, generator=g) < 0.5
    per_head[..., 0] = True
    for (B, T, C, H), mask in (((2, 4, 6, 2), both), ((2, 4, 6, 3), per_head), ((1, 3, 3, 3), causal_mask(3))):
        args = _random_mha(g, B, T, C, H)
        cases.append((args, {"mask": mask}))
    C = 4
    args = (
        randn(g, 2, 1, C),
        0.5 * randn(g, 3 * C, C),
        0.1 * randn(g, 3 * C),
        0.5 * randn(g, C, C),
        0.1 * randn(g, C),
        2,
    )
    cases.append((args, {}))
    # a mask for each head but not for each sequence (H, T, T): it broadcasts over the batch
    per_head_only = torch.rand(3, 4, 4, generator=g) < 0.5
    per_head_only[..., 0] = True
    cases.append((_random_mha(g, 2, 4, 6, 3), {"mask": per_head_only}))
    return cases


def _mha_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, H, D = randint(g, 1, 5), randint(g, 1, 49), HEADS[randint(g, 0, len(HEADS))], randint(g, 1, 6)
        C = H * D
        w = 1.5 / C**0.5  # weights scaled with the width, so the scores stay in the notebook's range
        args = _random_mha(g, B, T, C, H, w)
        kind = randint(g, 0, 5)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        if kind == 4:  # a mask of its own for each head, each query keeping its first key
            mask = torch.rand(B, H, T, T, generator=g) < 0.5
            mask[..., 0] = True
        else:
            mask = [
                None,
                causal_mask(T),
                padding_mask(lengths, T)[:, None, None, :],
                causal_mask(T) & padding_mask(lengths, T)[:, None, None, :],
            ][kind]
        cases.append((args, {} if mask is None else {"mask": mask}))
    return cases


def _mha_scores(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    """The scaled scores (B, H, T, T) of the forward pass."""
    q, k, _ = (split_heads(t, num_heads) for t in F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1))
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _mha_steps(
    x,
    qkv_weight,
    qkv_bias,
    out_weight,
    out_bias,
    num_heads,
    mask=None,
    *,
    order="qkv",
    scale_by="D",
    split="right",
    project_out=True,
    causal_when_masked=False,
):
    """The forward pass with one step done wrong, chosen by keyword."""
    B, T, C = x.shape
    H, D = num_heads, C // num_heads
    first, second, third = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)  # 3 x (B, T, C)
    q, k, v = (first, second, third) if order == "qkv" else (second, first, third)
    if split == "right":
        q, k, v = (split_heads(t, H) for t in (q, k, v))  # (B, H, T, D)
    else:
        q, k, v = (t.reshape(B, H, T, D) for t in (q, k, v))  # a view without the transpose
    scale = 1 / math.sqrt(D if scale_by == "D" else C)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * scale  # (B, H, T, T)
    if mask is not None:
        mask = causal_mask(T) if causal_when_masked else mask  # is_causal=True whenever a mask is given
        scores = scores.masked_fill(~mask, float("-inf"))
    out = merge_heads(torch.softmax(scores, dim=-1) @ v)  # (B, T, C)
    return F.linear(out, out_weight, out_bias) if project_out else out


EXERCISES = (
    Exercise(
        key="04.1",
        title="split_heads",
        signature="my_split_heads(x, num_heads) -> (B, H, T, D)",
        solution=split_heads,
        cases=_split_cases,
        draw=_split_draw,
        edges={
            "H == 1": lambda x, num_heads: num_heads == 1,
            "D == 1 (H == C)": lambda x, num_heads: num_heads == x.shape[-1],
            "H not a power of two": lambda x, num_heads: num_heads & (num_heads - 1) != 0,
            "T == 1": lambda x, num_heads: x.shape[1] == 1,
            "B == 1": lambda x, num_heads: x.shape[0] == 1,
            "T, H and D all different": lambda x, num_heads: (
                len({x.shape[1], num_heads, x.shape[-1] // num_heads}) == 3
            ),
        },
        mistakes=(
            Mistake(
                "a view straight to (B, H, T, D)",
                "Viewing the flat memory straight as (B, H, T, D) runs without error but cuts it in the "
                "wrong place, so a row of a head mixes channels of different tokens. The channels of "
                "one token must first be cut into heads, and only then the axes reordered.",
                _split_view_only,
                fix="x.view(B, T, num_heads, C // num_heads).transpose(1, 2)",
            ),
            Mistake(
                "the transpose is missing",
                "Cutting the channels into (H, D) is half the job: the head axis must come before time.",
                _split_no_transpose,
                fix="add .transpose(1, 2) after view(B, T, H, D)",
            ),
            Mistake(
                "the wrong pair of axes transposed",
                "After cutting the channels into heads, it is time and heads that swap places, not the last two axes.",
                _split_last_axes,
                fix=".transpose(1, 2), not .transpose(-2, -1)",
            ),
            Mistake(
                "heads cut from interleaved channels",
                "Each head owns one block of consecutive channels; yours takes every H-th channel.",
                _split_interleaved,
                fix="head h owns channels h*D ... (h+1)*D - 1: view the channels as (H, D): "
                "x.view(B, T, H, D).transpose(1, 2)",
            ),
        ),
    ),
    Exercise(
        key="04.2",
        title="merge_heads",
        signature="my_merge_heads(x) -> (B, T, C)",
        solution=merge_heads,
        cases=_merge_cases,
        draw=_merge_draw,
        edges={
            "H == 1": lambda x: x.shape[1] == 1,
            "D == 1": lambda x: x.shape[-1] == 1,
            "H not a power of two": lambda x: x.shape[1] & (x.shape[1] - 1) != 0,
            "T == 1": lambda x: x.shape[2] == 1,
            "B == 1": lambda x: x.shape[0] == 1,
            "T, H and D all different": lambda x: len(set(x.shape[1:])) == 3,
        },
        mistakes=(
            Mistake(
                "a reshape without the transpose",
                "Reshaping (B, H, T, D) straight to (B, T, C) mixes tokens and heads: the head axis has "
                "to move back next to D first.",
                _merge_view_only,
                fix="x.transpose(1, 2).reshape(B, T, H * D)",
            ),
            Mistake(
                "heads interleaved channel by channel",
                "The heads sit side by side, each in one block of consecutive channels; yours alternate "
                "channel by channel.",
                _merge_interleaved,
                fix="head h goes to channels h*D ... (h+1)*D - 1: x.transpose(1, 2).reshape(B, T, H * D), "
                "not permute(0, 2, 3, 1)",
            ),
            Mistake(
                "the wrong pair of axes transposed",
                "Heads and time swap places, not time and head_dim.",
                _merge_wrong_axes,
                fix=".transpose(1, 2), not .transpose(-2, -1)",
            ),
            Mistake(
                "the heads summed instead of concatenated",
                "Merging puts the H outputs of size D next to each other (size C = H * D); it does not add them up.",
                _merge_sum,
                fix="x.transpose(1, 2).reshape(B, T, H * D) instead of x.sum(dim=1)",
            ),
        ),
    ),
    Exercise(
        key="04.3",
        title="scaled scores with einsum",
        signature="my_scores(q, k) -> (B, H, T, S)",
        solution=_scores_solution,
        cases=_scores_cases,
        draw=_scores_draw,
        edges={
            "T != S": lambda q, k: q.shape[-2] != k.shape[-2],
            "T == 1": lambda q, k: q.shape[-2] == 1,
            "S == 1": lambda q, k: k.shape[-2] == 1,
            "H == 1": lambda q, k: q.shape[1] == 1,
            "H not a power of two": lambda q, k: q.shape[1] & (q.shape[1] - 1) != 0,
            "D == 1": lambda q, k: q.shape[-1] == 1,
            "B == 1": lambda q, k: q.shape[0] == 1,
        },
        mistakes=(
            Mistake(
                "queries and keys swapped",
                "The output letters are in the wrong order: you computed the transpose of the scores. "
                "Queries index the rows.",
                _scores_swapped,
                fix='torch.einsum("bhid,bhjd->bhij", q, k)',
            ),
            Mistake(
                "the scale is missing",
                "The scores must be divided by the square root of the head size.",
                _scores_no_scale,
                fix="/ math.sqrt(q.shape[-1])",
            ),
            Mistake(
                "scaled by the model width instead of the head size",
                "The dot products are between vectors of one head, of size D; the model width H * D "
                "makes the weights too flat.",
                _scores_embed_dim,
                fix="/ math.sqrt(q.shape[-1]), not math.sqrt(H * D)",
            ),
            Mistake(
                "the heads summed together",
                "A letter missing from einsum's output is summed over: the heads must stay separate.",
                _scores_sum_heads,
                fix='"bhid,bhjd->bhij" (keep h in the output)',
            ),
        ),
    ),
    Exercise(
        key="04.4",
        title="multi-head attention from packed weights",
        signature="my_mha_forward(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None) -> (B, T, C)",
        solution=_mha_solution,
        cases=_mha_cases,
        draw=_mha_draw,
        edges={
            "no mask": lambda *a, mask=None: mask is None,
            "a causal mask (T, T)": lambda *a, mask=None: mask is not None and mask.dim() == 2,
            "a padding mask (B, 1, 1, T)": lambda *a, mask=None: (
                mask is not None and mask.dim() == 4 and mask.shape[1:3] == (1, 1)
            ),
            "causal and padding together (B, 1, T, T)": lambda *a, mask=None: (
                mask is not None and mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] > 1
            ),
            "a mask for each head (B, H, T, T)": lambda *a, mask=None: (
                mask is not None and mask.dim() == 4 and mask.shape[1] > 1
            ),
            "a mask for each head, shared by the batch (H, T, T)": lambda *a, mask=None: (
                mask is not None and mask.dim() == 3
            ),
            "H == 1": lambda x, *a, mask=None: a[-1] == 1,
            "D == 1 (H == C)": lambda x, *a, mask=None: a[-1] == x.shape[-1],
            "H not a power of two": lambda x, *a, mask=None: a[-1] & (a[-1] - 1) != 0,
            "T == 1": lambda x, *a, mask=None: x.shape[1] == 1,
            "B == 1": lambda x, *a, mask=None: x.shape[0] == 1,
            "a blocked key whose score is far above the allowed ones'": lambda x, *a, mask=None: (
                mask is not None and bool((_mha_scores(x, *a).masked_fill(mask, -math.inf).amax(-1) > 100).any())
            ),
        },
        atol=1e-4,
        mistakes=(
            Mistake(
                "q and k taken in the wrong order",
                "The packed projection stacks q, k, v in that order.",
                lambda *a, **kw: _mha_steps(*a, **kw, order="kqv"),
                fix="q, k, v = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)",
            ),
            Mistake(
                "scaled by the model width instead of the head size",
                "The dot products are between vectors of one head, of size D = C // num_heads, not C.",
                lambda *a, **kw: _mha_steps(*a, **kw, scale_by="C"),
                fix="divide the scores by math.sqrt(C // num_heads)",
            ),
            Mistake(
                "the output projection is missing",
                "After merging the heads, the output goes through its own learned projection.",
                lambda *a, **kw: _mha_steps(*a, **kw, project_out=False),
                fix="return F.linear(out, out_weight, out_bias)",
            ),
            Mistake(
                "heads split with a view and no transpose",
                "Viewing q, k, v straight as (B, H, T, D) mixes tokens; the channels of each token must "
                "be cut into heads first, then the axes reordered.",
                lambda *a, **kw: _mha_steps(*a, **kw, split="view"),
                fix="t.view(B, T, num_heads, D).transpose(1, 2) for each of q, k, v",
            ),
            Mistake(
                "every mask treated as causal",
                "The mask argument can be any pattern, a padding mask for instance, not only the causal "
                "triangle: the keys blocked must be exactly those the given mask marks False.",
                lambda *a, **kw: _mha_steps(*a, **kw, causal_when_masked=True),
                fix="pass the mask itself: F.scaled_dot_product_attention(q, k, v, attn_mask=mask) (or "
                "scores.masked_fill(~mask, float('-inf'))), not is_causal=True whenever a mask is given",
            ),
        ),
    ),
)
