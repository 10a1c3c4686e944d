"""Exercises of notebook 11 on induction heads: the induction score of an attention pattern, and one head ablated.

Each reference solution is built from :mod:`course_utils.induction` and :mod:`course_utils.multihead`; each
mistake is one that shows up in real code: the target position off by one either way, the queries of the first
repeat scored, the mean taken over the heads instead of the batch or over everything, a sum for a mean; a head
zeroed after the output projection, a position zeroed instead of a head, the heads merged without moving the head
axis, only the ablated head kept, the bias forgotten.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils._exercise_engine import Exercise, Mistake
from course_utils._exercise_engine.domain import Domain
from course_utils.exercises._draws import randint
from course_utils.induction import induction_score
from course_utils.multihead import merge_heads

__all__ = ["EXERCISES"]


# --- 11.2 the induction score of an attention pattern -------------------------------------------------------


def _score_solution(weights: torch.Tensor, seq_len: int) -> torch.Tensor:
    return induction_score(weights, seq_len)


def _pattern(g: torch.Generator, B: int, H: int, N: int, dtype: torch.dtype, causal: bool) -> torch.Tensor:
    """Random attention weights (B, H, 2N, 2N), rows summing to 1; causal ones put nothing above the diagonal."""
    T = 2 * N
    scores = torch.randn(B, H, T, T, generator=g, dtype=dtype) * 3
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


def _score_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(11)
    N = 3
    perfect = torch.zeros(2 * N, 2 * N)
    perfect[torch.arange(N), 0] = 1.0  # the first repeat reads position 0
    i = torch.arange(N, 2 * N)
    perfect[i, i - N + 1] = 1.0  # the second repeat reads the token after the first copy
    uniform = torch.ones(2 * N, 2 * N).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    mixed = torch.stack([torch.stack([perfect, uniform]), torch.stack([uniform, perfect])])  # (2, 2, 6, 6)
    return [
        ((_pattern(g, 2, 3, 4, torch.float32, causal=True), 4), {}),  # B != H
        ((_pattern(g, 3, 1, 5, torch.float32, causal=False), 5), {}),  # one head; keys after the query too
        ((_pattern(g, 1, 2, 1, torch.float64, causal=False), 1), {}),  # N = 1: the smallest repeat
        ((mixed, N), {}),  # a perfect induction head beside an even one
    ]


def _score_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        B, H, N = randint(g, 1, 7), randint(g, 1, 9), randint(g, 1, 49)
        dtype = (torch.float32, torch.float64)[randint(g, 0, 2)]
        cases.append(((_pattern(g, B, H, N, dtype, causal=bool(randint(g, 0, 2))), N), {}))
    return cases


def _score_the_copy_itself(weights, seq_len):
    N = seq_len
    i = torch.arange(N, 2 * N)
    return weights[..., i, i - N].mean(dim=(0, -1))  # the earlier copy of the same token, not the one after it


def _score_two_after(weights, seq_len):
    N = seq_len
    i = torch.arange(N, 2 * N)
    return weights[..., i, (i - N + 2).clamp(max=2 * N - 1)].mean(dim=(0, -1))  # two after the copy


def _score_first_repeat(weights, seq_len):
    N = seq_len
    i = torch.arange(0, N)
    return weights[..., i, i + 1].mean(dim=(0, -1))  # queries of the first repeat, one key ahead


def _score_mean_over_heads(weights, seq_len):
    N = seq_len
    i = torch.arange(N, 2 * N)
    return weights[..., i, i - N + 1].mean(dim=(1, -1))  # (B,): one number per sequence, heads mixed


def _score_mean_over_everything(weights, seq_len):
    N = seq_len
    i = torch.arange(N, 2 * N)
    return weights[..., i, i - N + 1].mean()  # one number: the heads are mixed together


def _score_sum_over_queries(weights, seq_len):
    N = seq_len
    i = torch.arange(N, 2 * N)
    return weights[..., i, i - N + 1].sum(dim=-1).mean(dim=0)  # grows with N


def _score_whole_block(weights, seq_len):
    N = seq_len
    return weights[..., N:, 1 : N + 1].mean(dim=(0, -2, -1))  # every weight of the block, not its diagonal


def _score_diagonal_one_extra(weights, seq_len):
    N = seq_len
    return weights.diagonal(offset=1 - N, dim1=-2, dim2=-1).mean(dim=(0, -1))  # from query N - 1: N + 1 entries


# --- 11.3 one head ablated ---------------------------------------------------------------------------------


def _ablated_solution(
    heads_out: torch.Tensor, out_weight: torch.Tensor, out_bias: torch.Tensor, head: int
) -> torch.Tensor:
    keep = torch.ones(heads_out.shape[1], dtype=heads_out.dtype)  # (H,)
    keep[head] = 0.0
    merged = merge_heads(heads_out * keep[:, None, None])  # (B, H, T, D) -> (B, T, C)
    return F.linear(merged, out_weight, out_bias)  # (B, T, C)


def _ablated_case(g: torch.Generator, B: int, H: int, T: int, D: int, head: int, dtype=torch.float32):
    C = H * D
    heads_out = torch.randn(B, H, T, D, generator=g, dtype=dtype)
    out_weight = torch.randn(C, C, generator=g, dtype=dtype) / C**0.5
    out_bias = torch.randn(C, generator=g, dtype=dtype)
    return ((heads_out, out_weight, out_bias, head), {})


def _ablated_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(12)
    return [
        _ablated_case(g, 2, 3, 4, 5, 1),  # B, H, T, D all different
        _ablated_case(g, 1, 4, 6, 2, 3),  # the last head
        _ablated_case(g, 3, 2, 1, 3, 0, torch.float64),  # T = 1, the first head
        _ablated_case(g, 1, 1, 3, 4, 0),  # the only head: what is left is the bias
        _ablated_case(g, 2, 3, 5, 1, 2),  # heads of one channel (D == 1)
    ]


def _ablated_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        H = randint(g, 1, 9)
        dtype = (torch.float32, torch.float64)[randint(g, 0, 2)]
        cases.append(
            _ablated_case(g, randint(g, 1, 5), H, randint(g, 1, 40), randint(g, 1, 9), randint(g, 0, H), dtype)
        )
    return cases


def _project(heads_out, out_weight, out_bias):
    B, H, T, D = heads_out.shape
    return heads_out.transpose(1, 2).reshape(B, T, H * D) @ out_weight.T + out_bias


def _ablated_untransposed(heads_out, out_weight, out_bias, head):
    keep = torch.ones(heads_out.shape[1], dtype=heads_out.dtype)
    keep[head] = 0.0
    return merge_heads(heads_out * keep[:, None, None]) @ out_weight + out_bias  # W, not W.T


def _ablated_after_projection(heads_out, out_weight, out_bias, head):
    D = heads_out.shape[-1]
    out = _project(heads_out, out_weight, out_bias).clone()
    out[..., head * D : (head + 1) * D] = 0.0  # channels of the mixed output, after the projection
    return out


def _ablated_a_position(heads_out, out_weight, out_bias, head):
    kept = heads_out.clone()
    kept[:, :, min(head, kept.shape[2] - 1)] = 0.0  # a position of every head, not a head
    return _project(kept, out_weight, out_bias)


def _ablated_merged_without_transpose(heads_out, out_weight, out_bias, head):
    B, H, T, D = heads_out.shape
    kept = heads_out.clone()
    kept[:, head] = 0.0
    return kept.reshape(B, T, H * D) @ out_weight.T + out_bias  # (B, H, T, D) read as if it were (B, T, H, D)


def _ablated_only_this_head(heads_out, out_weight, out_bias, head):
    kept = torch.zeros_like(heads_out)
    kept[:, head] = heads_out[:, head]  # every OTHER head switched off
    return _project(kept, out_weight, out_bias)


def _ablated_no_bias(heads_out, out_weight, out_bias, head):
    kept = heads_out.clone()
    kept[:, head] = 0.0
    return _project(kept, out_weight, torch.zeros_like(out_bias))


def _ablated_bias_zeroed_too(heads_out, out_weight, out_bias, head):
    kept = heads_out.clone()
    kept[:, head] = 0.0
    bias = out_bias.clone()
    D = heads_out.shape[-1]
    bias[head * D : (head + 1) * D] = 0.0  # the bias belongs to no head
    return _project(kept, out_weight, bias)


EXERCISES = (
    Exercise(
        key="11.2",
        domain=Domain(float64=("weights",)),
        title="the induction score of an attention pattern",
        signature="induction_score(weights, seq_len) -> (H,): weights (B, H, 2N, 2N) on a sequence of N tokens "
        "repeated twice; each head's mean weight from a token's second occurrence to the token after its first",
        solution=_score_solution,
        cases=_score_cases,
        draw=_score_draw,
        edges={
            "N == 1 (the smallest repeat)": lambda w, n: n == 1,
            "B == 1": lambda w, n: w.shape[0] == 1,
            "H == 1": lambda w, n: w.shape[1] == 1,
            "B != H": lambda w, n: w.shape[0] != w.shape[1],
            "B == H": lambda w, n: w.shape[0] == w.shape[1],
            "causal weights": lambda w, n: bool((w.triu(1) == 0).all()),
            "weights on keys after the query": lambda w, n: bool((w.triu(1) > 0).any()),
            "float64 weights": lambda w, n: w.dtype == torch.float64,
            "a perfect induction head": lambda w, n: bool(
                (w[..., torch.arange(n, 2 * n), torch.arange(1, n + 1)] == 1).all(dim=-1).any()
            ),
        },
        mistakes=(
            Mistake(
                "off by one: the earlier copy itself",
                "Query i (second repeat) holds the same token as position i - N. An induction head reads the "
                "token AFTER that copy, the one it predicts comes next: one position further right.",
                _score_the_copy_itself,
                fix="weights[..., i, i - N + 1] with i = torch.arange(N, 2 * N)",
            ),
            Mistake(
                "off by one: two after the copy",
                "The target key is the token right after the first copy, one position to the right of the "
                "copy, not two.",
                _score_two_after,
                fix="weights[..., i, i - N + 1] with i = torch.arange(N, 2 * N)",
            ),
            Mistake(
                "the first repeat scored",
                "In the first repeat no token has been seen before, so there is nothing to look back to; the "
                "queries that count are those of the second repeat, positions N to 2N - 1.",
                _score_first_repeat,
                fix="i = torch.arange(N, 2 * N); weights[..., i, i - N + 1]",
            ),
            Mistake(
                "averaged over the heads, not the batch",
                "The answer has one number per head: average over the sequences of the batch and over the "
                "queries, and keep the head axis.",
                _score_mean_over_heads,
                fix=".mean(dim=(0, -1)): batch and queries, not heads",
            ),
            Mistake(
                "averaged over everything",
                "The answer has one number per head: a single number mixes every head together.",
                _score_mean_over_everything,
                fix=".mean(dim=(0, -1)) keeps the head axis",
            ),
            Mistake(
                "a sum over the queries, not a mean",
                "A score of 1 means a perfect induction head whatever the length; summing over the N queries "
                "makes it grow with N.",
                _score_sum_over_queries,
                fix=".mean(dim=(0, -1)), not .sum(dim=-1)",
            ),
            Mistake(
                "the whole block averaged, not its diagonal",
                "The block of the second repeat's queries against the keys one after the first copy holds N "
                "times N weights, but only one per query is the induction weight: the one to the key right after "
                "that query's own earlier copy, on the block's diagonal.",
                _score_whole_block,
                fix="weights[..., N:, 1 : N + 1].diagonal(dim1=-2, dim2=-1).mean(dim=(0, -1))",
            ),
            Mistake(
                "the diagonal taken whole (one entry too many)",
                "The diagonal one below the copy's offset starts at query N - 1, which is still in the first "
                "repeat: it holds N + 1 entries, and only the last N are queries of the second repeat.",
                _score_diagonal_one_extra,
                fix="weights.diagonal(offset=1 - N, dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, -1))",
            ),
        ),
    ),
    Exercise(
        key="11.3",
        domain=Domain(float64=("heads_out", "out_weight", "out_bias")),
        title="one head ablated",
        signature="ablated_output(heads_out, out_weight, out_bias, head) -> (B, T, C): heads_out (B, H, T, D), "
        "head `head` zeroed, the heads merged to (B, T, C = H * D), then the output projection",
        solution=_ablated_solution,
        cases=_ablated_cases,
        draw=_ablated_draw,
        edges={
            "the first head": lambda h, w, b, head: head == 0,
            "the last head": lambda h, w, b, head: head == h.shape[1] - 1 and h.shape[1] > 1,
            "H == 1 (the only head)": lambda h, w, b, head: h.shape[1] == 1,
            "T == 1": lambda h, w, b, head: h.shape[2] == 1,
            "D == 1": lambda h, w, b, head: h.shape[3] == 1,
            "B == 1": lambda h, w, b, head: h.shape[0] == 1,
            "B, H, T and D all different": lambda h, w, b, head: len(set(h.shape)) == 4,
            "float64": lambda h, w, b, head: h.dtype == torch.float64,
        },
        mistakes=(
            Mistake(
                "out_weight used untransposed",
                "out_weight is stored as nn.Linear stores its weight, (out, in) = (C, C), and nn.Linear multiplies "
                "by its transpose. A square matrix fits either way round, so the shapes cannot tell you.",
                _ablated_untransposed,
                fix="F.linear(merged, out_weight, out_bias), i.e. merged @ out_weight.T + out_bias",
            ),
            Mistake(
                "zeroed after the output projection",
                "The output projection mixes every head into every channel, so after it no channel belongs "
                "to one head: switch the head off before projecting.",
                _ablated_after_projection,
                fix="zero heads_out[:, head] first, then merge and project",
            ),
            Mistake(
                "a position zeroed, not a head",
                "heads_out is (B, H, T, D): the head is the second axis; the third is the position.",
                _ablated_a_position,
                fix="heads_out[:, head] = 0 (on a copy), not heads_out[:, :, head]",
            ),
            Mistake(
                "heads merged without moving the head axis",
                "Merging puts each position's heads side by side: the head axis must move next to D before "
                "the reshape, or rows of different positions are glued together.",
                _ablated_merged_without_transpose,
                fix="x.transpose(1, 2).reshape(B, T, H * D)",
            ),
            Mistake(
                "only the ablated head kept",
                "Ablating a head switches THAT head off and keeps all the others.",
                _ablated_only_this_head,
                fix="zero heads_out[:, head] and keep the rest",
            ),
            Mistake(
                "the bias left out",
                "Ablation removes one head's contribution; the output projection still adds its bias.",
                _ablated_no_bias,
                fix="merged @ out_weight.T + out_bias",
            ),
            Mistake(
                "the head's share of the bias zeroed too",
                "The bias is added after the heads are mixed: it belongs to no head, so it stays whole.",
                _ablated_bias_zeroed_too,
                fix="merged @ out_weight.T + out_bias, with the whole bias",
            ),
        ),
    ),
)
