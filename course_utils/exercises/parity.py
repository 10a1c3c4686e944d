"""Exercises of notebook 05 (parity with ``nn.MultiheadAttention``): keys ``"05.1"`` to ``"05.4"``.

Each reference solution is built from :mod:`course_utils`; each case builds its inputs from a fixed
seed; each mistake is one a learner really makes when moving between the course's conventions and
PyTorch's (mask polarity, row layout of ``in_proj_weight``, batch-major head order, averaging axis).
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils.checking import Exercise, Mistake
from course_utils.masking import causal_mask, convert_mask, padding_mask
from course_utils.multihead import MultiHeadAttention

__all__ = ["EXERCISES"]

HEADS = (1, 2, 3, 5, 6, 7, 24)  # head counts, not only powers of two, and more than the notebook's examples


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


# --- 05.1 slice in_proj_weight into the q, k and v weights ---------------------------------------

def _split_in_proj(m: nn.MultiheadAttention) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Our packed qkv_proj has exactly PyTorch's layout, so from_torch's copy is the reference.
    w = MultiHeadAttention.from_torch(m).qkv_proj.weight.detach()  # (3C, C)
    q_weight, k_weight, v_weight = w.chunk(3, dim=0)  # (3C, C) -> 3 x (C, C)
    return q_weight, k_weight, v_weight


def _split_cases() -> list[tuple[tuple, dict]]:
    cases = []
    for seed, (C, H, bias) in enumerate(((6, 2, True), (8, 4, False), (12, 3, True))):
        torch.manual_seed(seed)
        cases.append(((nn.MultiheadAttention(C, H, bias=bias),), {}))
    return cases


def _split_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        H = HEADS[_int(g, 0, len(HEADS))]
        C, bias = H * _int(g, 1, 9), bool(_int(g, 0, 2))
        with torch.random.fork_rng(devices=[]):  # building the module draws from the global generator: put it back
            m = nn.MultiheadAttention(C, H, bias=bias)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.randn(3 * C, C, generator=g))  # weights from the check's own generator
        cases.append(((m,), {}))
    return cases


def _split_columns(m):
    return tuple(m.in_proj_weight.detach().chunk(3, dim=1))  # cuts the input columns, not the output rows


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
    return [((torch.tensor([3, 5, 1]), 5), {}), ((torch.tensor([2, 4]), 6), {}), ((torch.tensor([4]), 7), {})]


def _kpm_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, S = _int(g, 1, 7), _int(g, 1, 49)
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
    return cases


def _attn_mask_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, H = _int(g, 1, 6), _int(g, 1, 49), HEADS[_int(g, 0, len(HEADS))]
        S = T + _int(g, 0, 17)
        if _int(g, 0, 2):
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
    return cases


def _average_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, T, S = _int(g, 1, 5), HEADS[_int(g, 0, len(HEADS))], _int(g, 1, 49), _int(g, 1, 49)
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


EXERCISES = (
    Exercise(
        key="05.1",
        title="slice in_proj_weight into q, k, v",
        signature="split_in_proj(m) -> (q_weight, k_weight, v_weight)",
        solution=_split_in_proj,
        cases=_split_cases,
        draw=_split_draw,
        mistakes=(
            Mistake("columns instead of rows",
                    "nn.Linear stores its weight as (out_features, in_features); q, k and v are stacked along "
                    "the output rows, so the cut runs across the rows.", _split_columns,
                    fix="w = m.in_proj_weight.detach(); return w[:C], w[C:2 * C], w[2 * C:]"),
            Mistake("transposed weights",
                    "Keep nn.Linear's (out, in) layout, the one this course uses for weights since notebook "
                    "01: each slice is used the way nn.Linear uses its weight.",
                    _split_transposed, fix="drop the .T on each slice"),
            Mistake("per-head interleaved layout",
                    "PyTorch stacks all of q, then all of k, then all of v (each block holds every head), not "
                    "q, k, v head after head.", _split_per_head,
                    fix="take three blocks of C rows: w[:C], w[C:2 * C], w[2 * C:]"),
            Mistake("wrong slice order (k, q, v)",
                    "The order in in_proj_weight is q, k, v: the first block belongs to the queries.",
                    _split_kqv, fix="return w[:C], w[C:2 * C], w[2 * C:] in that order"),
        ),
    ),
    Exercise(
        key="05.2",
        title="key_padding_mask from lengths",
        signature="torch_key_padding_mask(lengths, S) -> (B, S) bool, True = padding",
        solution=_torch_key_padding_mask,
        cases=_kpm_cases,
        draw=_kpm_draw,
        mistakes=(
            Mistake("polarity not inverted",
                    "nn.MultiheadAttention reads True as BLOCKED: the padding positions must be True, the "
                    "real tokens False.", _kpm_not_inverted,
                    fix="torch.arange(S)[None, :] >= lengths[:, None]"),
            Mistake("`>` instead of `>=`",
                    "Positions count from 0: a sequence of length L has exactly L real tokens, and your mask "
                    "lets one padding position through as well.", _kpm_off_by_one, fix="position `length` itself is the first padding position: compare with >=, not >"),
            Mistake("time-first layout (S, B)",
                    "key_padding_mask is (B, S) whatever batch_first says: batch_first only changes query, key "
                    "and value.", _kpm_time_first, fix="drop the transpose"),
        ),
    ),
    Exercise(
        key="05.3",
        title="course mask to a 3-D attn_mask",
        signature="to_torch_attn_mask(mask, num_heads) -> (B*H, T, S) bool, True = blocked",
        solution=_to_torch_attn_mask,
        cases=_attn_mask_cases,
        draw=_attn_mask_draw,
        mistakes=(
            Mistake("polarity not inverted",
                    "The course's mask says True = may attend; nn.MultiheadAttention's attn_mask says True = "
                    "blocked.", _attn_mask_not_inverted, fix="(~mask).repeat_interleave(num_heads, dim=0)"),
            Mistake("heads tiled instead of interleaved",
                    "The rows are grouped by sequence first: all the heads of the first sequence, then all the "
                    "heads of the second. Each sequence's mask is copied for its heads next to each other, not "
                    "the whole batch stacked once per head.",
                    _attn_mask_tiled, fix="row b*H + h is batch b, head h: repeat_interleave(num_heads, dim=0), not repeat(num_heads, 1, 1)"),
            Mistake("one copy per batch, not per head",
                    "A 3-D attn_mask needs one (T, S) mask per batch element AND head: (B*H, T, S).",
                    _attn_mask_per_batch, fix="(~mask).repeat_interleave(num_heads, dim=0)"),
            Mistake("query and key axes swapped",
                    "Keep the (T, S) order: rows are queries, columns are keys.",
                    _attn_mask_transposed, fix="drop the transpose"),
        ),
    ),
    Exercise(
        key="05.4",
        title="average the heads like need_weights",
        signature="average_heads(weights) -> (B, T, S)",
        solution=_average_heads,
        cases=_average_cases,
        draw=_average_draw,
        mistakes=(
            Mistake("summed instead of averaged",
                    "average_attn_weights=True takes the mean over heads, so each row still sums to 1.",
                    _average_sum, fix="weights.mean(dim=1), not .sum(dim=1)"),
            Mistake("averaged over the batch axis",
                    "Our weights are (B, H, T, S): it is the heads you average, not the sequences of the batch.",
                    _average_batch, fix="weights.mean(dim=1)"),
            Mistake("averaged over the key axis",
                    "Averaging each row of weights always gives 1/S; it is the heads you average over.",
                    _average_keys, fix="weights.mean(dim=1), not dim=-1"),
            Mistake("kept the head axis",
                    "nn.MultiheadAttention returns (B, T, S), with no axis left for the heads.",
                    _average_keepdim, fix="drop keepdim=True"),
        ),
    ),
)
