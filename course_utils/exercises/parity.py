"""Exercises of notebook 05 (parity with ``nn.MultiheadAttention``): keys ``"05.1"`` to ``"05.5"``.

Each reference solution is built from :mod:`course_utils`; each case builds its inputs from a fixed
seed; each mistake is one a learner really makes when moving between the course's conventions and
PyTorch's (mask polarity, row layout of ``in_proj_weight``, batch-major head order, averaging axis), or
when turning self-attention into cross-attention (05.5: which sequence feeds the keys, no causal mask
across two sequences, the scale).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.exercises._draws import randint, randn
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.masking import causal_mask, convert_mask, padding_mask
from course_utils.multihead import MultiHeadAttention, merge_heads, split_heads

__all__ = ["EXERCISES"]

HEADS = (1, 2, 3, 5, 6, 7, 24)  # head counts, not only powers of two, and more than the notebook's examples


# --- 05.1 slice in_proj_weight into the q, k and v weights ---------------------------------------


def _split_in_proj(m: nn.MultiheadAttention) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Our packed qkv_proj has exactly PyTorch's layout, so from_torch's copy is the reference.
    w = MultiHeadAttention.from_torch(m).qkv_proj.weight.detach()  # (3C, C)
    q_weight, k_weight, v_weight = w.chunk(3, dim=0)  # (3C, C) -> 3 x (C, C)
    return q_weight, k_weight, v_weight


def _split_cases() -> list[tuple[tuple, dict]]:
    cases = []
    # C = 8 and 5 are not multiples of 3 (column blocks of unequal widths); one head, and no bias
    for seed, (C, H, bias) in enumerate(((6, 2, True), (8, 4, False), (12, 3, True), (5, 1, True))):
        torch.manual_seed(seed)
        cases.append(((nn.MultiheadAttention(C, H, bias=bias),), {}))
    return cases


def _split_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        H = HEADS[randint(g, 0, len(HEADS))]
        C, bias = H * randint(g, 1, 9), bool(randint(g, 0, 2))
        with torch.random.fork_rng(devices=[]):  # building the module draws from the global generator: put it back
            m = nn.MultiheadAttention(C, H, bias=bias)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.randn(3 * C, C, generator=g))  # weights from the check's own generator
        cases.append(((m,), {}))
    return cases


def _split_columns(m):
    return tuple(m.in_proj_weight.detach().chunk(3, dim=1))  # cuts the input columns, not the output rows


def _split_columns_by_c(m):
    w, C = m.in_proj_weight.detach(), m.embed_dim
    return w[:, :C], w[:, C : 2 * C], w[:, 2 * C :]  # the rows' offsets on the columns: all of w, then two empty


def _split_transposed(m):
    return tuple(w.T for w in _split_in_proj(m))  # (in, out) instead of nn.Linear's (out, in)


def _split_per_head(m):
    H, C = m.num_heads, m.embed_dim
    w = m.in_proj_weight.detach().view(H, 3, C // H, C)  # assumes [q_h0, k_h0, v_h0, q_h1, ...]
    return tuple(w[:, i].reshape(C, C) for i in range(3))


def _split_kqv(m):
    q_weight, k_weight, v_weight = _split_in_proj(m)
    return k_weight, q_weight, v_weight  # the first block taken for the keys


# --- 05.2 key_padding_mask in nn.MultiheadAttention's convention -----------------------------------


def _torch_key_padding_mask(lengths: torch.Tensor, S: int) -> torch.Tensor:
    return convert_mask(padding_mask(lengths, S), "allow", "block")  # (B, S), True = padding = blocked


def _kpm_cases() -> list[tuple[tuple, dict]]:
    return [
        ((torch.tensor([3, 5, 1]), 5), {}),  # a full sequence (length S)
        ((torch.tensor([2, 4]), 6), {}),
        ((torch.tensor([4]), 7), {}),
        ((torch.tensor([0, 2, 4]), 4), {}),  # an empty sequence (length 0) beside a full one
        ((torch.tensor([1, 0]), 1), {}),  # S == 1
    ]


def _kpm_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, S = randint(g, 1, 7), randint(g, 1, 49)
        cases.append(((torch.randint(0, S + 1, (B,), generator=g), S), {}))
    return cases


def _kpm_not_inverted(lengths, S):
    return torch.arange(S)[None, :] < lengths[:, None]  # True = real token: the course's polarity


def _kpm_off_by_one(lengths, S):
    return torch.arange(S)[None, :] > lengths[:, None]  # `>` where `>=` is needed: the first pad slips through


def _kpm_time_first(lengths, S):
    return _torch_key_padding_mask(lengths, S).T  # (S, B): batch_first=False thinking; the mask is always (B, S)


# --- 05.3 a course mask as nn.MultiheadAttention's 3-D attn_mask ----------------------------------


def _to_torch_attn_mask(mask: torch.Tensor, num_heads: int) -> torch.Tensor:
    block = convert_mask(mask, "allow", "block")  # (B, T, S), True = blocked
    return block.repeat_interleave(num_heads, dim=0)  # (B, T, S) -> (B*H, T, S), row b*H + h


def _attn_mask_cases() -> list[tuple[tuple, dict]]:
    cases = []
    for lengths, T, H in (([4, 2], 4, 2), ([3, 5, 1], 5, 2), ([2, 6], 6, 3)):
        S = T
        keys = padding_mask(lengths, S)[:, None, :]  # (B, 1, S)
        cases.append(((causal_mask(T, S) & keys, H), {}))  # (B, T, S), True = may attend
    # T != S (queries after a cache), and a pattern that is neither causal nor padding
    cases.append(((causal_mask(3, 5) & padding_mask([5, 4], 5)[:, None, :], 3), {}))
    cases.append(((torch.tensor([[[True, False, True], [False, True, True]]]), 2), {}))
    cases.append(((padding_mask([4, 2], 4)[:, None, :], 1), {}))  # one query (T == 1), one head
    return cases


def _attn_mask_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, H = randint(g, 1, 6), randint(g, 1, 49), HEADS[randint(g, 0, len(HEADS))]
        S = T + randint(g, 0, 17)
        if randint(g, 0, 2):
            mask = causal_mask(T, S) & padding_mask(torch.randint(S - T + 1, S + 1, (B,), generator=g), S)[:, None, :]
        else:
            mask = torch.rand(B, T, S, generator=g) < 0.6
        cases.append(((mask, H), {}))
    return cases


def _attn_mask_not_inverted(mask, num_heads):
    return mask.repeat_interleave(num_heads, dim=0)


def _attn_mask_tiled(mask, num_heads):
    return convert_mask(mask, "allow", "block").repeat(num_heads, 1, 1)  # head-major: row h*B + b


def _attn_mask_per_batch(mask, num_heads):
    return convert_mask(mask, "allow", "block")  # (B, T, S): one copy per batch, not per head


def _attn_mask_transposed(mask, num_heads):
    return convert_mask(mask, "allow", "block").transpose(-2, -1).repeat_interleave(num_heads, dim=0)


# --- 05.4 average per-head weights the way need_weights does --------------------------------------


def _average_heads(weights: torch.Tensor) -> torch.Tensor:
    return weights.mean(dim=1)  # (B, H, T, S) -> (B, T, S)


def _average_cases() -> list[tuple[tuple, dict]]:
    cases = []
    g = torch.Generator().manual_seed(5)
    for B, H, T in ((2, 3, 4), (3, 2, 5), (1, 4, 3)):
        x = torch.randn(B, T, 4 * H, generator=g)
        torch.manual_seed(B * 10 + H)
        m = MultiHeadAttention(4 * H, H)
        with torch.no_grad():
            _, weights = m(x, causal_mask(T), need_weights=True)  # (B, H, T, T)
        cases.append(((weights,), {}))
    # T != S (keys after a cache), one head, one query (T == 1)
    for B, H, T, S in ((2, 3, 2, 5), (2, 1, 3, 4), (1, 2, 1, 6)):
        cases.append(((torch.softmax(2 * torch.randn(B, H, T, S, generator=g), dim=-1),), {}))
    return cases


def _average_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, T, S = randint(g, 1, 5), HEADS[randint(g, 0, len(HEADS))], randint(g, 1, 49), randint(g, 1, 49)
        cases.append(((torch.softmax(3 * torch.randn(B, H, T, S, generator=g), dim=-1),), {}))
    return cases


def _average_sum(weights):
    return weights.sum(dim=1)


def _average_batch(weights):
    return weights.mean(dim=0)  # (H, T, S): averaged over the batch


def _average_keys(weights):
    return weights.mean(dim=-1)  # (B, H, T): every entry 1 / S


def _average_keepdim(weights):
    return weights.mean(dim=1, keepdim=True)  # (B, 1, T, S)


# --- 05.5 cross-attention from packed weights ------------------------------------------------------


def _cross_solution(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    m = MultiHeadAttention(x.shape[-1], num_heads)
    with torch.no_grad():
        m.qkv_proj.weight.copy_(qkv_weight)
        m.qkv_proj.bias.copy_(qkv_bias)
        m.out_proj.weight.copy_(out_weight)
        m.out_proj.bias.copy_(out_bias)
        return m(x, key_mask[:, None, None, :], memory=memory)  # (B, S) -> (B, 1, 1, S)


def _cross_args(g: torch.Generator, B: int, T: int, S: int, H: int, D: int, lengths, w: float) -> tuple:
    C = H * D
    return (
        randn(g, B, T, C),
        randn(g, B, S, C),
        padding_mask(torch.as_tensor(lengths), S),
        w * randn(g, 3 * C, C),
        0.1 * randn(g, 3 * C),
        w * randn(g, C, C),
        0.1 * randn(g, C),
        H,
    )


def _one_head_scores(x, memory, w, b):
    """The scaled scores of a one-head cross-attention: (B, T, S)."""
    C = x.shape[-1]
    q, k = x @ w[:C].T + b[:C], memory @ w[C : 2 * C].T + b[C : 2 * C]
    return q @ k.transpose(-2, -1) / math.sqrt(C)


def _cross_cases() -> list[tuple[tuple, dict]]:
    # Every memory sequence has real tokens AND padding, so an inverted mask still leaves keys to attend
    # (finite, not NaN or zeros); T == S first (keys taken from x then run, and give wrong numbers), then
    # T < S (the two causal triangles differ), then T > S.
    g = torch.Generator().manual_seed(505)
    return [
        (_cross_args(g, 2, 4, 4, 2, 4, [3, 2], 0.5), {}),  # B, T, S, H, D, lengths, weight scale
        (_cross_args(g, 2, 3, 6, 3, 4, [5, 2], 0.5), {}),
        (_cross_args(g, 1, 5, 3, 4, 2, [2], 0.5), {}),
        (_cross_args(g, 2, 1, 5, 1, 3, [4, 1], 0.5), {}),  # T == 1, one head, a memory of one real token
        (_cross_args(g, 1, 2, 3, 1, 4, [2], 8.0), {}),  # large weights: scaled scores past exp's overflow
    ]


def _cross_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, S = randint(g, 1, 5), randint(g, 1, 49), randint(g, 2, 49)
        H, D = HEADS[randint(g, 0, len(HEADS))], randint(g, 1, 6)
        lengths = torch.randint(1, S, (B,), generator=g)  # 1 .. S - 1 real tokens: padding in every sequence
        cases.append((_cross_args(g, B, T, S, H, D, lengths, 1.5 / (H * D) ** 0.5), {}))
    return cases


def _cross_steps(
    x,
    memory,
    key_mask,
    qkv_weight,
    qkv_bias,
    out_weight,
    out_bias,
    num_heads,
    *,
    kv_from="memory",
    polarity="allow",
    pad=True,
    causal=None,
    scale_by="D",
):
    """Cross-attention with one step done wrong, chosen by keyword."""
    B, T, C = x.shape
    D = C // num_heads
    w_q, w_k, w_v = qkv_weight.chunk(3)
    b_q, b_k, b_v = qkv_bias.chunk(3)
    source = memory if kv_from == "memory" else x
    S = source.shape[1]
    q = split_heads(F.linear(x, w_q, b_q), num_heads)  # (B, H, T, D)
    k, v = (split_heads(F.linear(source, w, b), num_heads) for w, b in ((w_k, b_k), (w_v, b_v)))  # (B, H, S, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D if scale_by == "D" else C)  # (B, H, T, S)
    allowed = torch.ones(B, 1, 1, S, dtype=torch.bool)
    if pad:
        allowed = key_mask[:, None, None, :] if polarity == "allow" else ~key_mask[:, None, None, :]
    if causal == "bottom-right":
        allowed = allowed & causal_mask(T, S)  # as if the queries were the last T of the memory's positions
    elif causal == "top-left":
        allowed = allowed & torch.ones(T, S, dtype=torch.bool).tril()  # is_causal=True's triangle
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (B, H, T, S)
    return F.linear(merge_heads(weights @ v), out_weight, out_bias)  # (B, T, C)


EXERCISES = (
    Exercise(
        key="05.1",
        title="slice in_proj_weight into q, k, v",
        signature="split_in_proj(m) -> (q_weight, k_weight, v_weight)",
        solution=_split_in_proj,
        cases=_split_cases,
        draw=_split_draw,
        edges={
            "C not a multiple of 3": lambda m: m.embed_dim % 3 != 0,
            "one head": lambda m: m.num_heads == 1,
            "bias=False": lambda m: m.in_proj_bias is None,
        },
        mistakes=(
            Mistake(
                "columns instead of rows",
                "nn.Linear stores its weight as (out_features, in_features); q, k and v are stacked along "
                "the output rows, so the cut runs across the rows.",
                _split_columns,
                fix="w = m.in_proj_weight.detach(); return w[:C], w[C:2 * C], w[2 * C:]",
            ),
            Mistake(
                "the row offsets used on the columns",
                "in_proj_weight is (3C, C): q, k and v are stacked along its 3C rows, while its C columns are "
                "the input features that all three read. Offsets of C and 2C belong on the first axis.",
                _split_columns_by_c,
                fix="w[:C], w[C:2 * C], w[2 * C:] (the first axis), not w[:, :C], ...",
            ),
            Mistake(
                "transposed weights",
                "Keep nn.Linear's (out, in) layout, the one this course uses for weights since notebook "
                "01: each slice is used the way nn.Linear uses its weight.",
                _split_transposed,
                fix="drop the .T on each slice",
            ),
            Mistake(
                "per-head interleaved layout",
                "PyTorch stacks all of q, then all of k, then all of v (each block holds every head), not "
                "q, k, v head after head.",
                _split_per_head,
                fix="take three blocks of C rows: w[:C], w[C:2 * C], w[2 * C:]",
            ),
            Mistake(
                "wrong slice order (k, q, v)",
                "The order in in_proj_weight is q, k, v: the first block belongs to the queries.",
                _split_kqv,
                fix="return w[:C], w[C:2 * C], w[2 * C:] in that order",
            ),
        ),
    ),
    Exercise(
        key="05.2",
        domain=Domain(ints={"lengths": (torch.int64, torch.int32)}),
        title="key_padding_mask from lengths",
        signature="torch_key_padding_mask(lengths, S) -> (B, S) bool, True = padding",
        solution=_torch_key_padding_mask,
        cases=_kpm_cases,
        draw=_kpm_draw,
        edges={
            "an empty sequence (length 0)": lambda lengths, S: bool((lengths == 0).any()),
            "a full sequence (length S)": lambda lengths, S: bool((lengths == S).any()),
            "one sequence (B == 1)": lambda lengths, S: len(lengths) == 1,
            "S == 1": lambda lengths, S: S == 1,
        },
        mistakes=(
            Mistake(
                "polarity not inverted",
                "nn.MultiheadAttention reads True as BLOCKED: the padding positions must be True, the "
                "real tokens False.",
                _kpm_not_inverted,
                fix="torch.arange(S)[None, :] >= lengths[:, None]",
            ),
            Mistake(
                "`>` instead of `>=`",
                "Positions count from 0: a sequence of length L has exactly L real tokens, and your mask "
                "lets one padding position through as well.",
                _kpm_off_by_one,
                fix="position `length` itself is the first padding position: compare with >=, not >",
            ),
            Mistake(
                "time-first layout (S, B)",
                "key_padding_mask is (B, S) whatever batch_first says: batch_first only changes query, key and value.",
                _kpm_time_first,
                fix="drop the transpose",
            ),
        ),
    ),
    Exercise(
        key="05.3",
        title="course mask to a 3-D attn_mask",
        signature="to_torch_attn_mask(mask, num_heads) -> (B*H, T, S) bool, True = blocked",
        solution=_to_torch_attn_mask,
        cases=_attn_mask_cases,
        draw=_attn_mask_draw,
        edges={
            "T != S": lambda mask, num_heads: mask.shape[-2] != mask.shape[-1],
            "T == 1": lambda mask, num_heads: mask.shape[-2] == 1,
            "B == 1": lambda mask, num_heads: mask.shape[0] == 1,
            "one head": lambda mask, num_heads: num_heads == 1,
            "a head count that is not a power of two": lambda mask, num_heads: num_heads & (num_heads - 1) != 0,
        },
        mistakes=(
            Mistake(
                "polarity not inverted",
                "The course's mask says True = may attend; nn.MultiheadAttention's attn_mask says True = blocked.",
                _attn_mask_not_inverted,
                fix="(~mask).repeat_interleave(num_heads, dim=0)",
            ),
            Mistake(
                "heads tiled instead of interleaved",
                "The rows are grouped by sequence first: all the heads of the first sequence, then all the "
                "heads of the second. Each sequence's mask is copied for its heads next to each other, not "
                "the whole batch stacked once per head.",
                _attn_mask_tiled,
                fix="row b*H + h is batch b, head h: repeat_interleave(num_heads, dim=0), not repeat(num_heads, 1, 1)",
            ),
            Mistake(
                "one copy per batch, not per head",
                "A 3-D attn_mask needs one (T, S) mask per batch element AND head: (B*H, T, S).",
                _attn_mask_per_batch,
                fix="(~mask).repeat_interleave(num_heads, dim=0)",
            ),
            Mistake(
                "query and key axes swapped",
                "Keep the (T, S) order: rows are queries, columns are keys.",
                _attn_mask_transposed,
                fix="drop the transpose",
            ),
        ),
    ),
    Exercise(
        key="05.4",
        title="average the heads like need_weights",
        signature="average_heads(weights) -> (B, T, S)",
        solution=_average_heads,
        cases=_average_cases,
        draw=_average_draw,
        edges={
            "T != S": lambda weights: weights.shape[-2] != weights.shape[-1],
            "T == 1": lambda weights: weights.shape[-2] == 1,
            "one head": lambda weights: weights.shape[1] == 1,
            "B == 1": lambda weights: weights.shape[0] == 1,
        },
        mistakes=(
            Mistake(
                "summed instead of averaged",
                "average_attn_weights=True takes the mean over heads, so each row still sums to 1.",
                _average_sum,
                fix="weights.mean(dim=1), not .sum(dim=1)",
            ),
            Mistake(
                "averaged over the batch axis",
                "Our weights are (B, H, T, S): it is the heads you average, not the sequences of the batch.",
                _average_batch,
                fix="weights.mean(dim=1)",
            ),
            Mistake(
                "averaged over the key axis",
                "Averaging each row of weights always gives 1/S; it is the heads you average over.",
                _average_keys,
                fix="weights.mean(dim=1), not dim=-1",
            ),
            Mistake(
                "kept the head axis",
                "nn.MultiheadAttention returns (B, T, S), with no axis left for the heads.",
                _average_keepdim,
                fix="drop keepdim=True",
            ),
        ),
    ),
    Exercise(
        key="05.5",
        core=False,
        title="cross-attention from packed weights",
        signature="cross_attention(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads) "
        "-> (B, T, C)",
        solution=_cross_solution,
        cases=_cross_cases,
        draw=_cross_draw,
        edges={
            "T < S": lambda x, memory, *_: x.shape[1] < memory.shape[1],
            "T > S": lambda x, memory, *_: x.shape[1] > memory.shape[1],
            "T == S": lambda x, memory, *_: x.shape[1] == memory.shape[1],
            "T == 1": lambda x, *_: x.shape[1] == 1,
            "a memory of one real token": lambda x, memory, key_mask, *_: bool((key_mask.sum(dim=-1) == 1).any()),
            "one head": lambda *a: a[-1] == 1,
            "a scaled score past exp's float32 overflow": lambda x, memory, key_mask, w, b, *a: bool(
                a[-1] == 1 and (_one_head_scores(x, memory, w, b) > 88).any()
            ),
        },
        atol=1e-4,
        mistakes=(
            Mistake(
                "keys and values projected from x instead of the memory",
                "In cross-attention only the queries come from the sequence being written; the keys and "
                "values come from the other sequence, the memory, so there are S of them, not T.",
                lambda *a: _cross_steps(*a, kv_from="x"),
                fix="k and v = F.linear(memory, ...) with the second and third blocks of qkv_weight",
            ),
            Mistake(
                "mask polarity inverted",
                "This exercise's key_mask uses the course's convention, True = a real token that may be "
                "attended; nn.MultiheadAttention's key_padding_mask is the one where True means blocked.",
                lambda *a: _cross_steps(*a, polarity="block"),
                fix="block where key_mask is False: scores.masked_fill(~key_mask[:, None, None, :], float('-inf'))",
            ),
            Mistake(
                "the memory's padding is not masked",
                "The padding at the end of each memory sequence is filler: no query may attend to it.",
                lambda *a: _cross_steps(*a, pad=False),
                fix="scores.masked_fill(~key_mask[:, None, None, :], float('-inf')) before the softmax",
            ),
            Mistake(
                "a causal mask across the two sequences",
                "Causality orders the positions of ONE sequence. The memory is finished before decoding "
                "starts, so every query may see every real memory token: only its padding is blocked.",
                lambda *a: _cross_steps(*a, causal="bottom-right"),
                fix="drop causal_mask(T, S): the only mask here is key_mask[:, None, None, :]",
            ),
            Mistake(
                "a top-left causal triangle across the two sequences",
                "Query i and memory position j are positions in two different sequences, so i < j says "
                "nothing about what query i may see: only the memory's padding is blocked.",
                lambda *a: _cross_steps(*a, causal="top-left"),
                fix="drop the triangle (or is_causal=True): the only mask is key_mask[:, None, None, :]",
            ),
            Mistake(
                "scaled by the model width instead of the head size",
                "The dot products are between vectors of one head, of size D = C // num_heads, not C.",
                lambda *a: _cross_steps(*a, scale_by="C"),
                fix="divide the scores by math.sqrt(C // num_heads)",
            ),
        ),
    ),
)
