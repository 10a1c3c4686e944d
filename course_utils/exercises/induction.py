"""Exercises of notebook 12 on induction heads: the induction score of an attention pattern, one head ablated, and
the previous-token heads found from their maps (the set above a threshold, since two heads may share the job).

Each reference solution is built from :mod:`course_utils.induction` and :mod:`course_utils.multihead`; each
mistake is one that shows up in real code: the target position off by one either way, the queries of the first
repeat scored, the mean taken over the heads instead of the batch or over everything, a sum for a mean; a head
zeroed after the output projection, a position zeroed instead of a head, the heads merged without moving the head
axis, only the ablated head kept, the bias forgotten; the diagonal of the token itself or of the next one, only the
top head kept, the first query counted, a score at the threshold counted as above it.

These were 11.2 and 11.3 until the section moved to notebook 12 (``RETIRED`` says so for the old keys).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.induction import induction_score, previous_token_score
from course_utils.multihead import merge_heads

__all__ = ["EXERCISES"]


# --- 12.1 the induction score of an attention pattern -------------------------------------------------------


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


# --- 12.2 one head ablated ---------------------------------------------------------------------------------


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


# --- 12.3 the previous-token heads, found from their maps -----------------------------------------------------


def _prev_heads_solution(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    return previous_token_score(weights) > threshold  # (H,) bool


def _planted(g: torch.Generator, B: int, H: int, T: int, strengths: list[float], causal: bool = True) -> torch.Tensor:
    """Random attention weights (B, H, T, T) whose head h puts ``strengths[h]`` of every row i >= 1 on key i - 1
    and spreads the rest at random (a causal spread puts nothing above the diagonal)."""
    scores = torch.randn(B, H, T, T, generator=g)
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    rest = scores.softmax(dim=-1)  # (B, H, T, T)
    prev = torch.zeros(T, T)
    prev[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # (T, T): the key just before each query
    s = torch.tensor(strengths)[None, :, None, None]  # (1, H, 1, 1)
    w = s * prev + (1 - s) * rest
    w[..., 0, :] = rest[..., 0, :]  # query 0 has no previous token
    return w


def _prev_heads_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(13)
    tie = torch.zeros(1, 4, 3, 3)
    tie[..., 0, 0] = 1.0
    for h, p in enumerate((0.5, 0.75, 0.25, 0.5)):  # previous-token weight p, the rest (1 - p) on the query itself
        for i in (1, 2):
            tie[0, h, i, i - 1], tie[0, h, i, i] = p, 1.0 - p
    two = torch.zeros(3, 1, 2, 2)
    two[..., 0, 0] = 1.0
    two[..., 1, :] = torch.tensor([0.6, 0.4])  # T = 2: one previous-token weight per sequence
    # The sequences of a batch differ: head 0 scores 0.9 and 0.5 (mean 0.7, above 0.6), head 1 0.7 and 0.25
    # (mean 0.475, below): a verdict per sequence, then all() or any() over the batch, gets one of them wrong.
    uneven = torch.zeros(2, 2, 5, 5)
    uneven[..., 0, 0] = 1.0
    for b, strengths in enumerate(((0.9, 0.7), (0.5, 0.25))):
        for h, p in enumerate(strengths):  # previous-token weight p, the rest (1 - p) on the query itself
            for i in range(1, 5):
                uneven[b, h, i, i - 1], uneven[b, h, i, i] = p, 1.0 - p
    return [
        ((_planted(g, 2, 3, 6, [0.6, 0.05, 0.55]), 0.3), {}),  # two heads share the job; B != H
        ((_planted(g, 1, 2, 5, [0.1, 0.7], causal=False), 0.4), {}),  # keys after the query too
        ((two, 0.5), {}),  # T = 2: score 0.6 over the one query that has a previous token
        ((tie, 0.5), {}),  # heads 0 and 3 score exactly 0.5: not above the threshold
        ((_planted(g, 2, 2, 4, [0.0, 0.0]), 0.9), {}),  # no previous-token head at all
        ((uneven, 0.6), {}),  # the batch's sequences disagree: the verdict is on the mean over the batch
    ]


def _prev_heads_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        B, H, T = randint(g, 4, 7), randint(g, 5, 9), randint(g, 7, 40)
        strengths = (torch.rand(H, generator=g) * (torch.rand(H, generator=g) < 0.5)).tolist()  # some heads 0
        threshold = 0.2 + 0.4 * torch.rand(1, generator=g).item()
        cases.append(((_planted(g, B, H, T, strengths, causal=bool(randint(g, 0, 2))), threshold), {}))
    return cases


def _prev_heads_itself(weights, threshold):
    return weights.diagonal(dim1=-2, dim2=-1).mean(dim=(0, -1)) > threshold  # each token reading itself


def _prev_heads_next(weights, threshold):
    return weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, -1)) > threshold  # the key after, not before


def _prev_heads_top_only(weights, threshold):
    score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (H,)
    found = torch.zeros_like(score, dtype=torch.bool)
    found[score.argmax()] = bool(score.max() > threshold)  # one head, even where two share the job
    return found


def _prev_heads_first_query_counted(weights, threshold):
    T = weights.shape[-1]
    i = torch.arange(T)
    return (
        weights[..., i, (i - 1) % T].mean(dim=(0, -1)) > threshold
    )  # query 0 reads key -1, the last: 0 in a causal map


def _prev_heads_at_or_above(weights, threshold):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1)) >= threshold


def _prev_heads_over_heads(weights, threshold):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(1, -1)) > threshold  # (B,): the batch kept


def _prev_heads_every_sequence(weights, threshold):
    per_sequence = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # (B, H): one score per sequence
    return (per_sequence > threshold).all(dim=0)  # a head must pass in every sequence, not on the mean


def _prev_heads_scores(weights, threshold):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # the scores, not the verdict


EXERCISES = (
    Exercise(
        key="12.1",
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
        key="12.2",
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
    Exercise(
        key="12.3",
        domain=Domain(views=True),
        title="the previous-token heads, found from their maps",
        signature="previous_token_heads(weights, threshold) -> (H,) bool: weights (B, H, T, T), T >= 2; True where "
        "the head's previous-token score (its mean weight from query i to key i - 1, over i = 1 .. T-1 and the "
        "batch) is above threshold",
        solution=_prev_heads_solution,
        cases=_prev_heads_cases,
        draw=_prev_heads_draw,
        edges={
            "T == 2 (one query with a previous token)": lambda w, t: w.shape[-1] == 2,
            "B == 1": lambda w, t: w.shape[0] == 1,
            "H == 1": lambda w, t: w.shape[1] == 1,
            "B != H": lambda w, t: w.shape[0] != w.shape[1],
            "causal weights": lambda w, t: bool((w.triu(1) == 0).all()),
            "weights on keys after the query": lambda w, t: bool((w.triu(1) > 0).any()),
            "two heads above the threshold (a shared job)": lambda w, t: int(_prev_heads_solution(w, t).sum()) >= 2,
            "no head above the threshold": lambda w, t: not bool(_prev_heads_solution(w, t).any()),
            "a score exactly at the threshold": lambda w, t: bool((previous_token_score(w) == t).any()),
        },
        mistakes=(
            Mistake(
                "the main diagonal: each token reading itself",
                "A previous-token head at query i reads key i - 1: the diagonal just below the main one.",
                _prev_heads_itself,
                fix="weights.diagonal(offset=-1, dim1=-2, dim2=-1)",
            ),
            Mistake(
                "the next token, not the previous one",
                "Rows are queries and columns keys: key i - 1 is one column to the LEFT of the main diagonal, "
                "below it, where a causal map has its weights.",
                _prev_heads_next,
                fix="offset=-1, not offset=1",
            ),
            Mistake(
                "only the top head",
                "Two heads can share the previous-token job; the answer is every head above the threshold, "
                "not the best one.",
                _prev_heads_top_only,
                fix="return score > threshold, one verdict per head",
            ),
            Mistake(
                "the first query counted",
                "Query 0 has no previous token: average over queries 1 .. T-1 only, or a head that always reads "
                "the previous token scores (T - 1) / T instead of 1.",
                _prev_heads_first_query_counted,
                fix="weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))",
            ),
            Mistake(
                "at the threshold counted as above it",
                "The statement asks for a score above the threshold: a head scoring exactly the threshold is "
                "not a previous-token head.",
                _prev_heads_at_or_above,
                fix="score > threshold, not >=",
            ),
            Mistake(
                "averaged over the heads, not the batch",
                "The answer has one verdict per head: average over the sequences of the batch and the queries, "
                "and keep the head axis.",
                _prev_heads_over_heads,
                fix=".mean(dim=(0, -1))",
            ),
            Mistake(
                "a verdict per sequence, not on the batch's mean",
                "The score is one mean over the batch and the queries: a head whose weight is high in some "
                "sequences and low in others is judged on that mean, not on whether every sequence passes.",
                _prev_heads_every_sequence,
                fix="weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1)) > threshold",
            ),
            Mistake(
                "the scores returned, not the verdict",
                "The scores are the first step; the answer is a boolean per head, whether its score is above "
                "the threshold.",
                _prev_heads_scores,
                fix="return score > threshold",
            ),
        ),
    ),
)
