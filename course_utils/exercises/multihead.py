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

from course_utils.checking import Exercise, Mistake
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["EXERCISES"]


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# ---------------------------------------------------------------------------------------------------
# 04.1 split_heads: (B, T, C) -> (B, H, T, D)
# ---------------------------------------------------------------------------------------------------

def _split_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(401)
    # T != H everywhere, and D != H in two cases, so each wrong layout gives different numbers
    return [((_randn(g, 2, 5, 12), 3), {}), ((_randn(g, 1, 4, 8), 2), {}), ((_randn(g, 3, 3, 12), 4), {})]


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
    return [((_randn(g, 2, 3, 5, 4),), {}), ((_randn(g, 1, 2, 4, 3),), {}), ((_randn(g, 2, 4, 3, 2),), {})]


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
    shapes = [((2, 3, 4, 5), (2, 3, 6, 5)), ((1, 2, 5, 4), (1, 2, 5, 4)), ((2, 4, 3, 2), (2, 4, 3, 2))]
    return [((_randn(g, *qs), _randn(g, *ks)), {}) for qs, ks in shapes]


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


def _mha_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(404)
    cases = []
    for B, T, C, H, causal in ((2, 5, 12, 3, False), (1, 6, 8, 2, True), (2, 4, 16, 4, True)):
        args = (_randn(g, B, T, C), 0.5 * _randn(g, 3 * C, C), 0.1 * _randn(g, 3 * C),
                0.5 * _randn(g, C, C), 0.1 * _randn(g, C), H)
        cases.append((args, {"mask": causal_mask(T)} if causal else {}))
    return cases


def _mha_steps(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None, *, order="qkv",
               scale_by="D", split="right", project_out=True):
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
        mistakes=(
            Mistake("a view straight to (B, H, T, D)",
                    "x.view(B, H, T, D) runs without error but cuts the flat memory in the wrong place, so a "
                    "row of a head mixes channels of different tokens. View as (B, T, H, D) first, then "
                    "transpose(1, 2).",
                    _split_view_only),
            Mistake("the transpose is missing",
                    "x.view(B, T, H, D) is half the job: the head axis must come before time, so add "
                    ".transpose(1, 2) to get (B, H, T, D).",
                    _split_no_transpose),
            Mistake("the wrong pair of axes transposed",
                    "After view(B, T, H, D), swap time and heads (axes 1 and 2), not the last two axes.",
                    _split_last_axes),
            Mistake("heads cut from interleaved channels",
                    "Head h owns the consecutive channels h*D ... (h+1)*D - 1, so view the channels as "
                    "(H, D), not (D, H).",
                    _split_interleaved),
        ),
    ),
    Exercise(
        key="04.2",
        title="merge_heads",
        signature="my_merge_heads(x) -> (B, T, C)",
        solution=merge_heads,
        cases=_merge_cases,
        mistakes=(
            Mistake("a reshape without the transpose",
                    "Reshaping (B, H, T, D) straight to (B, T, C) mixes tokens and heads. Move the head axis "
                    "back next to D first: x.transpose(1, 2), then .reshape(B, T, H * D).",
                    _merge_view_only),
            Mistake("heads interleaved channel by channel",
                    "The heads sit side by side: channel h * D + d, not d * H + h. Use transpose(1, 2) to get "
                    "(B, T, H, D), then reshape.",
                    _merge_interleaved),
            Mistake("the wrong pair of axes transposed",
                    "Swap heads and time (axes 1 and 2), not time and head_dim (the last two axes).",
                    _merge_wrong_axes),
            Mistake("the heads summed instead of concatenated",
                    "Merging puts the H outputs of size D next to each other (size C = H * D); it does not "
                    "add them up.",
                    _merge_sum),
        ),
    ),
    Exercise(
        key="04.3",
        title="scaled scores with einsum",
        signature="my_scores(q, k) -> (B, H, T, S)",
        solution=_scores_solution,
        cases=_scores_cases,
        mistakes=(
            Mistake("queries and keys swapped",
                    "The output letters are in the wrong order: you computed the transpose of the scores. "
                    "Queries index the rows: \"bhid,bhjd->bhij\".",
                    _scores_swapped),
            Mistake("the scale is missing",
                    "Divide the scores by sqrt(D), the head size q.shape[-1].",
                    _scores_no_scale),
            Mistake("scaled by the model width instead of the head size",
                    "Scale by sqrt(D) with D = q.shape[-1], the size of one head, not by sqrt(H * D): that "
                    "makes the weights too flat.",
                    _scores_embed_dim),
            Mistake("the heads summed together",
                    "Keep h in the output (\"...->bhij\"): a letter missing from the output is summed over.",
                    _scores_sum_heads),
        ),
    ),
    Exercise(
        key="04.4",
        title="multi-head attention from packed weights",
        signature="my_mha_forward(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None) -> (B, T, C)",
        solution=_mha_solution,
        cases=_mha_cases,
        atol=1e-4,
        mistakes=(
            Mistake("q and k taken in the wrong order",
                    "The packed projection stacks q, k, v in that order: q, k, v = qkv.chunk(3, dim=-1).",
                    lambda *a, **kw: _mha_steps(*a, **kw, order="kqv")),
            Mistake("scaled by the model width instead of the head size",
                    "Divide the scores by sqrt(D) with D = C // num_heads, not by sqrt(C).",
                    lambda *a, **kw: _mha_steps(*a, **kw, scale_by="C")),
            Mistake("the output projection is missing",
                    "After merging the heads, apply out_proj: out @ out_weight.T + out_bias.",
                    lambda *a, **kw: _mha_steps(*a, **kw, project_out=False)),
            Mistake("heads split with a view and no transpose",
                    "Split each of q, k, v as view(B, T, H, D).transpose(1, 2) (or use split_heads); a "
                    "direct view to (B, H, T, D) mixes tokens.",
                    lambda *a, **kw: _mha_steps(*a, **kw, split="view")),
        ),
    ),
)
