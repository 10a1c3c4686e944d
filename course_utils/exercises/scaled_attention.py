"""Exercises of notebook 02 (scaled attention): stable softmax, scaled dot-product attention, one head, entropy.

Each mistake below is one that people really make; the cases are chosen so that every mistake gives
outputs that differ from the solution and from every other mistake (a large-logit row for the missing
max subtraction, rows of very different size for the global max, T != S for the wrong softmax axis,
C != D for scaling by the model width, an exactly one-hot row for 0 * log 0).
"""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention, softmax
from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain

__all__ = ["EXERCISES"]


# --- 02.1 stable softmax ----------------------------------------------------------------------------


def _softmax_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(2)
    small = torch.randn(3, 5, generator=g)  # (3, 5): ordinary logits
    large = torch.tensor([[100.0, 101.0, 102.0], [90.0, 80.0, 95.0]])  # exp(100) overflows float32
    mixed = torch.tensor([[60.0, 61.0, 62.0], [-60.0, -59.0, -58.0]])  # rows 120 apart
    batched = torch.randn(2, 4, 3, generator=g) * 3  # (2, 4, 3), normalised over dim=1
    # a row spanning hundreds (subtracting its min or mean overflows), a row with a -1e4 "masked" entry and
    # one with -inf: only the max keeps every exponent <= 0
    spread = torch.tensor([[0.0, 150.0, 300.0, 20.0], [-1e4, 3.0, 5.0, 4.0], [-math.inf, 1.0, 2.0, 0.5]])
    # a row 100 wide: subtracting its min overflows (exp(100)), subtracting its mean does not (exp(50))
    wide = torch.tensor([[0.0, 50.0, 100.0], [1.0, 2.0, 3.0]])
    flat = torch.tensor([3.0, -1.0, 0.5, 2.0])  # a 1-D x: one row
    columns = torch.randn(3, 2, 4, generator=g) * 3  # dim=-3: a negative axis other than the last
    single = torch.randn(1, 4, generator=g)  # dim=0 on an axis of size 1: each weight is 1
    # -inf next to logits far past exp's overflow, and a row with one finite logit
    edge = torch.tensor([[-math.inf, 300.0, 0.0, 250.0], [-math.inf, -math.inf, 95.0, -math.inf]])
    return [
        ((small,), {}),
        ((large,), {}),
        ((mixed,), {}),
        ((batched,), {"dim": 1}),
        ((spread,), {}),
        ((wide,), {}),
        ((flat,), {}),
        ((columns,), {"dim": -3}),
        ((single,), {"dim": 0}),
        ((edge,), {}),
    ]


def _softmax_dim(x: torch.Tensor, dim: int = -1) -> int:
    return dim % x.dim()


def _softmax_rows(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x with the axis `dim` last, as rows."""
    return x.movedim(dim, -1)


_SOFTMAX_EDGES = {
    "1-D x": lambda x, dim=-1: x.dim() == 1,
    "x with three axes or more": lambda x, dim=-1: x.dim() >= 3,
    "dim not the last axis": lambda x, dim=-1: _softmax_dim(x, dim) != x.dim() - 1,
    "dim = 0": lambda x, dim=-1: dim == 0,
    "a negative dim other than -1": lambda x, dim=-1: dim < -1,
    "one logit along dim": lambda x, dim=-1: x.shape[dim] == 1,
    "-inf logits": lambda x, dim=-1: bool(x.isneginf().any()),
    "-1e4 (a finite mask value)": lambda x, dim=-1: bool((x == -1e4).any()),
    "a row of logits around 100": lambda x, dim=-1: bool((_softmax_rows(x, dim) > 88).all(-1).any()),
    "a row spanning more than 88": lambda x, dim=-1: bool(
        (_softmax_rows(x, dim).nan_to_num(neginf=math.inf).amin(-1) < _softmax_rows(x, dim).amax(-1) - 88).any()
    ),
    "-inf next to a logit past exp's overflow": lambda x, dim=-1: bool(
        (_softmax_rows(x, dim).isneginf().any(-1) & (_softmax_rows(x, dim) > 88).any(-1)).any()
    ),
    "row maxima more than 88 apart": lambda x, dim=-1: bool(
        (lambda m: m.amax() - m.amin() > 88)(_softmax_rows(x, dim).amax(-1))
    ),
}


def _softmax_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        ndim = randint(g, 1, 4)
        shape = [randint(g, 1, 65 if ndim < 3 else 17) for _ in range(ndim)]
        shape[-1] = max(shape[-1], 2)
        spread = [1.0, 30.0, 200.0][randint(g, 0, 3)]
        x = spread * torch.randn(*shape, generator=g)
        x = x.masked_fill(torch.rand(*shape, generator=g) < 0.2, [-1e4, -math.inf][randint(g, 0, 2)])
        dim = randint(g, -len(shape), len(shape))
        x.select(dim, 0).copy_(spread * torch.randn(x.select(dim, 0).shape, generator=g))  # no row fully masked
        cases.append(((x,), {"dim": dim} if dim != -1 else {}))
    return cases


def _softmax_no_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x)
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_row_min(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.amin(dim=dim, keepdim=True))  # the largest exponent is the row's whole span
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_row_mean(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.mean(dim=dim, keepdim=True))  # the largest exponent is max - mean
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_global_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.max())  # one number for the whole tensor: small rows underflow to 0 / 0
    return exps / exps.sum(dim=dim, keepdim=True)


def _softmax_whole_sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum()  # sums every entry of the tensor, not one row


def _softmax_ignores_dim(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)


# --- 02.2 scaled dot-product attention --------------------------------------------------------------


def _sdpa_solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return scaled_dot_product_attention(q, k, v)


def _sdpa_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(22)
    cases = []
    sizes = (((), 3, 5, 4, 2), ((2,), 4, 6, 8, 3), ((2, 2), 5, 3, 16, 4), ((), 1, 4, 3, 1), ((2,), 2, 1, 2, 3))
    for batch, T, S, D, Dv in sizes:  # then one query (T == 1) with Dv == 1, and one key (S == 1)
        q = torch.randn(*batch, T, D, generator=g)
        k = torch.randn(*batch, S, D, generator=g)
        v = torch.randn(*batch, S, Dv, generator=g)
        cases.append(((q, k, v), {}))
    # a query aligned with the first key: a scaled score of about 283, past exp's float32 overflow
    q, k = torch.tensor([[20.0, 0.0], [0.5, -1.0]]), torch.tensor([[20.0, 0.0], [-20.0, 0.0], [0.0, 1.0]])
    cases.append(((q, k, torch.randn(3, 2, generator=g)), {}))
    return cases


def _sdpa_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 4) for _ in range(randint(g, 0, 3))]
        T, S, D, Dv = (randint(g, lo, hi) for lo, hi in ((1, 49), (2, 49), (2, 65), (1, 33)))
        q, k = 2 * torch.randn(*batch, T, D, generator=g), torch.randn(*batch, S, D, generator=g)
        cases.append(((q, k, torch.randn(*batch, S, Dv, generator=g)), {}))
    return cases


def _sdpa_with(q, k, v, scale, dim=-1, after=False):
    scores = q @ k.transpose(-2, -1)  # (..., T, S)
    if not after:
        scores = scores * scale
    weights = torch.softmax(scores, dim=dim)
    if after:
        weights = weights * scale
    return weights @ v, weights


def _sdpa_no_scale(q, k, v):
    return _sdpa_with(q, k, v, 1.0)


def _sdpa_scale_by_d(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / q.shape[-1])


def _sdpa_wrong_axis(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / math.sqrt(q.shape[-1]), dim=-2)


def _sdpa_scale_after(q, k, v):
    return _sdpa_with(q, k, v, 1.0 / math.sqrt(q.shape[-1]), after=True)


# --- 02.3 one attention head from x -----------------------------------------------------------------


def _head_solution(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    # nn.Linear's layout, as in 01.4: each weight is (out, in) = (D, C), and x @ w.T projects
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (B, T, C) @ (C, D) -> (B, T, D)
    out, _ = scaled_dot_product_attention(q, k, v)  # scale 1 / sqrt(D), the head size
    return out


def _head_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(23)
    cases = []
    # square weights (C == D) first: weights used untransposed then give numbers (x @ w and its einsum spelling
    # the same ones), which name the mistake; then C > D, where only the head size scales right; then C < D,
    # one token (T == 1) and a head of size 1 (D == 1)
    for B, T, C, D in ((2, 3, 4, 4), (1, 4, 8, 2), (2, 5, 12, 4), (2, 6, 32, 8), (1, 1, 3, 5), (2, 4, 6, 1)):
        x = torch.randn(B, T, C, generator=g)
        w_q, w_k, w_v = (torch.randn(D, C, generator=g) / math.sqrt(C) for _ in range(3))  # (D, C) each
        cases.append(((x, w_q, w_k, w_v), {}))
    # tokens that line up with each other: a scaled score of about 283, past exp's float32 overflow (notebook 02
    # taught the stable softmax, so exp(scores) / its sum is wrong here)
    x = torch.tensor([[[20.0, 0.0, 1.0], [0.0, 20.0, 1.0], [-20.0, 0.0, 1.0]]])  # (1, 3, 3)
    w = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # (D, C) = (2, 3)
    cases.append(((x, w, w.clone(), torch.randn(2, 3, generator=g)), {}))
    return cases


def _head_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, D = (randint(g, lo, hi) for lo, hi in ((1, 5), (2, 49), (1, 33)))
        C = D + randint(g, 1, 33)  # C != D: the model width is never the head size
        x = torch.randn(B, T, C, generator=g)
        cases.append(((x, *(torch.randn(D, C, generator=g) / math.sqrt(C) for _ in range(3))), {}))
    return cases


def _head_with(x, w_q, w_k, w_v, scale, swap=False, dim=-1):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    scores = (k @ q.transpose(-2, -1) if swap else q @ k.transpose(-2, -1)) * scale  # (B, T, T)
    return torch.softmax(scores, dim=dim) @ v


def _head_embed_dim(x, w_q, w_k, w_v):
    C = x.shape[-1]  # the model width, as in the "Let's build GPT" lecture code
    return _head_with(x, w_q, w_k, w_v, C**-0.5)


def _head_no_scale(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, 1.0)


def _head_over_d(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, 1.0 / w_q.shape[0])  # 1 / D, not 1 / sqrt(D): w_q is (D, C)


def _head_wrong_axis(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, w_q.shape[0] ** -0.5, dim=1)  # w_q is (D, C)


def _head_swapped(x, w_q, w_k, w_v):
    return _head_with(x, w_q, w_k, w_v, w_q.shape[0] ** -0.5, swap=True)


def _head_unstable(x, w_q, w_k, w_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    exps = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))  # overflows past a score of 88
    return exps / exps.sum(dim=-1, keepdim=True) @ v


def _head_untransposed(x, w_q, w_k, w_v):
    # the (in, out) habit: with these (D, C) weights and C != D the product cannot be formed (a shape error)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v


# --- 02.4 entropy of attention weights --------------------------------------------------------------


def _entropy_solution(weights: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(weights, weights).sum(dim=-1)  # xlogy(0, 0) = 0, as the limit says


def _entropy_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(24)
    w1 = softmax(torch.randn(3, 4, generator=g) * 2)  # (3, 4), T != S
    w2 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # exact zeros
    w3 = softmax(torch.randn(2, 2, 5, 6, generator=g))  # (B, H, T, S)
    w4 = softmax(torch.randn(1, 5, generator=g))  # one query (T == 1)
    w5 = torch.ones(2, 3, 1)  # one key (S == 1): every weight is 1, every entropy 0
    w6 = softmax(torch.randn(2, 2000, generator=g) * 0.1)  # long rows of weights near 1/2000: log(w + eps) is off
    return [((w1,), {}), ((w2,), {}), ((w3,), {}), ((w4,), {}), ((w5,), {}), ((w6,), {})]


def _entropy_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for i in range(4):
        batch = [randint(g, 1, 4) for _ in range(randint(g, 0, 3))]
        T, S = randint(g, 1, 49), randint(g, 2, 65)
        if i == 3:  # a long row, beyond the fixed case's 2,000 keys
            T, S = randint(g, 1, 4), randint(g, 2001, 4097)
        scores = 3 * torch.randn(*batch, T, S, generator=g)
        blocked = torch.rand(*batch, T, S, generator=g) < 0.3
        blocked[..., 0] = False  # every row keeps a key
        cases.append(((softmax(scores.masked_fill(blocked, -math.inf)),), {}))  # exact zeros where blocked
    return cases


def _entropy_nan_at_zero(weights):
    return -(weights * torch.log(weights)).sum(dim=-1)


def _entropy_wrong_axis(weights):
    return -torch.special.xlogy(weights, weights).sum(dim=-2)


def _entropy_no_minus(weights):
    return torch.special.xlogy(weights, weights).sum(dim=-1)


def _entropy_log2(weights):
    return -(torch.special.xlogy(weights, weights) / math.log(2)).sum(dim=-1)


EXERCISES = (
    Exercise(
        key="02.1",
        domain=Domain(magnitude={"x": 1e4}, views=True),
        title="a numerically stable softmax",
        signature="stable_softmax(x, dim=-1) -> weights, same shape as x",
        solution=softmax,
        cases=_softmax_cases,
        draw=_softmax_draw,
        edges=_SOFTMAX_EDGES,
        mistakes=(
            Mistake(
                "no max subtraction",
                "exp of a logit around 100 overflows float32 to inf, and inf / inf is nan. Shifting every "
                "logit of a row by the same number does not change the softmax: choose the shift that keeps "
                "every exponent at or below 0.",
                _softmax_no_max,
                fix="exps = torch.exp(x - x.amax(dim=dim, keepdim=True))",
            ),
            Mistake(
                "subtracting the row minimum instead of the maximum",
                "Any shift of a row leaves its softmax unchanged, but only one shift keeps every exponent "
                "at or below 0: after subtracting the smallest logit, the largest exponent is the whole "
                "span of the row, which overflows once the row spans about 90.",
                _softmax_row_min,
                fix="x - x.amax(dim=dim, keepdim=True), not x.amin(...)",
            ),
            Mistake(
                "subtracting the row mean instead of the maximum",
                "Any shift of a row leaves its softmax unchanged, but only one shift keeps every exponent "
                "at or below 0: after subtracting the average, the largest logit is still far above 0 "
                "in a row spanning hundreds, and its exponential overflows.",
                _softmax_row_mean,
                fix="x - x.amax(dim=dim, keepdim=True), not x.mean(...)",
            ),
            Mistake(
                "subtracting the global max",
                "One maximum for the whole tensor is too big for rows far below it, whose exponentials "
                "all underflow to 0 (and 0 / 0 is nan): each row needs its own maximum.",
                _softmax_global_max,
                fix="x.amax(dim=dim, keepdim=True) instead of x.max()",
            ),
            Mistake(
                "dividing by the sum of the whole tensor",
                "Each row must sum to 1 on its own, so the normaliser is a sum along `dim`, one per row, "
                "not one number for the whole tensor.",
                _softmax_whole_sum,
                fix="exps / exps.sum(dim=dim, keepdim=True)",
            ),
            Mistake(
                "ignoring the dim argument",
                "Your function always normalises the last axis, whatever `dim` says; both the max and "
                "the sum must follow `dim`.",
                _softmax_ignores_dim,
                fix="use dim=dim (not dim=-1) in both x.amax(...) and exps.sum(...)",
            ),
        ),
    ),
    Exercise(
        key="02.2",
        domain=Domain(leading={"q": 2, "k": 2, "v": 2}, views=True),
        title="scaled dot-product attention",
        signature="my_scaled_attention(q, k, v) -> (out, weights)",
        solution=_sdpa_solution,
        cases=_sdpa_cases,
        draw=_sdpa_draw,
        edges={
            "no leading axes": lambda q, k, v: q.dim() == 2,
            "one leading axis": lambda q, k, v: q.dim() == 3,
            "two leading axes": lambda q, k, v: q.dim() == 4,
            "T != S": lambda q, k, v: q.shape[-2] != k.shape[-2],
            "T == 1": lambda q, k, v: q.shape[-2] == 1,
            "S == 1": lambda q, k, v: k.shape[-2] == 1,
            "Dv == 1": lambda q, k, v: v.shape[-1] == 1,
            "D != Dv": lambda q, k, v: q.shape[-1] != v.shape[-1],
            "a scaled score past exp's float32 overflow": lambda q, k, v: bool(
                (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).amax() > 89
            ),
        },
        mistakes=(
            Mistake(
                "missing scale",
                "The dot product of two D-dimensional vectors grows with D; the scores must be scaled "
                "down by the head size before the softmax, or large heads attend almost one-hot.",
                _sdpa_no_scale,
                fix="scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
            ),
            Mistake(
                "scaling by D instead of sqrt(D)",
                "The variance of q . k grows like D, so its standard deviation grows like the square "
                "root of D: that is what to divide by.",
                _sdpa_scale_by_d,
                fix="divide by math.sqrt(D), not by D",
            ),
            Mistake(
                "softmax over the wrong axis",
                "Each query's weights over the keys must sum to 1: the keys are the last axis of the "
                "scores, not the queries.",
                _sdpa_wrong_axis,
                fix="torch.softmax(scores, dim=-1), not dim=-2",
            ),
            Mistake(
                "scaling after the softmax",
                "The scale belongs to the scores, inside the softmax; scaling the weights afterwards "
                "makes the rows stop summing to 1.",
                _sdpa_scale_after,
                fix="torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)",
            ),
        ),
    ),
    Exercise(
        key="02.3",
        title="one attention head, scaled by its head size",
        signature="head_attention(x, w_q, w_k, w_v), each w (D, C) as nn.Linear stores it -> out (B, T, D)",
        solution=_head_solution,
        cases=_head_cases,
        draw=_head_draw,
        edges={
            "C == D (square weights)": lambda x, w_q, w_k, w_v: x.shape[-1] == w_q.shape[0],
            "C > D": lambda x, w_q, w_k, w_v: x.shape[-1] > w_q.shape[0],
            "C < D": lambda x, w_q, w_k, w_v: x.shape[-1] < w_q.shape[0],
            "B == 1": lambda x, w_q, w_k, w_v: x.shape[0] == 1,
            "B > 1": lambda x, w_q, w_k, w_v: x.shape[0] > 1,
            "T == 1": lambda x, w_q, w_k, w_v: x.shape[1] == 1,
            "D == 1": lambda x, w_q, w_k, w_v: w_q.shape[0] == 1,
            "a scaled score past exp's float32 overflow": lambda x, w_q, w_k, w_v: bool(
                ((x @ w_q.T) @ (x @ w_k.T).transpose(-2, -1) / math.sqrt(w_q.shape[0]) > 88).any()
            ),
        },
        mistakes=(
            Mistake(
                "scaling by embed_dim instead of head_dim",
                "x's last axis is C, the model width; the dot products you scale are between q and k, "
                "which have D entries, the head size.",
                _head_embed_dim,
                fix="scale by q.shape[-1] ** -0.5 (the head size D), not x.shape[-1] ** -0.5",
            ),
            Mistake(
                "missing scale",
                "The scores must be scaled down by the square root of the head size before the softmax.",
                _head_no_scale,
                fix="torch.softmax(q @ k.transpose(-2, -1) * D**-0.5, dim=-1), D = q.shape[-1]",
            ),
            Mistake(
                "scaling by 1/D instead of 1/sqrt(D)",
                "A dot product of D independent terms of variance 1 has variance D, so its spread (the "
                "standard deviation) is the square root of D: that is what brings the scores back to "
                "variance 1. Dividing by D itself shrinks them too far, and the weights come out too flat.",
                _head_over_d,
                fix="scale by q.shape[-1] ** -0.5 (1 / sqrt(D)), not 1 / q.shape[-1]",
            ),
            Mistake(
                "softmax over the wrong axis",
                "The scores are (B, T, T) with the keys on the last axis; each query's weights over the "
                "keys must sum to 1.",
                _head_wrong_axis,
                fix="softmax over dim=-1, not dim=1",
            ),
            Mistake(
                "queries and keys swapped",
                "Your scores are transposed: row i must hold query i against every key, not key i against every query.",
                _head_swapped,
                fix="q @ k.transpose(-2, -1), not k @ q.transpose(-2, -1)",
            ),
            Mistake(
                "weight used untransposed",
                "The weights are stored the way nn.Linear stores its weight, (out, in) = (D, C), as in "
                "exercise 01.4; nn.Linear multiplies by the transpose of that. With C != D the product "
                "you wrote cannot even be formed.",
                _head_untransposed,
                fix="q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T",
            ),
            Mistake(
                "the softmax without subtracting the maximum",
                "Tokens that line up give scores past 88, where exp overflows float32 to infinity, and "
                "infinity over infinity is not a number. Exercise 02.1's softmax subtracts each row's maximum "
                "first (the weights are the same): use it, or PyTorch's own softmax.",
                _head_unstable,
                fix="weights = torch.softmax(scores, dim=-1), or exercise 02.1's stable_softmax(scores)",
            ),
        ),
    ),
    Exercise(
        key="02.4",
        domain=Domain(leading={"weights": 2}, views=True),
        title="entropy of attention weights",
        signature="attention_entropy(weights) -> entropy per query, in nats, shape weights.shape[:-1]",
        solution=_entropy_solution,
        cases=_entropy_cases,
        draw=_entropy_draw,
        edges={
            "no leading axes": lambda weights: weights.dim() == 2,
            "two leading axes": lambda weights: weights.dim() == 4,
            "T != S": lambda weights: weights.shape[-2] != weights.shape[-1],
            "T == 1": lambda weights: weights.shape[-2] == 1,
            "S == 1": lambda weights: weights.shape[-1] == 1,
            "weights exactly 0": lambda weights: bool((weights == 0).any()),
            "a one-hot row": lambda weights: bool((weights == 1).any()),
            "rows of 1,000 keys or more (every weight below 1e-3)": lambda weights: weights.shape[-1] >= 1000,
        },
        mistakes=(
            Mistake(
                "0 * log 0 gives nan",
                "A weight of exactly 0 makes w * log(w) = 0 * -inf = nan, but the limit of w log w at 0 "
                "is 0; the hint in the exercise names a function that knows this.",
                _entropy_nan_at_zero,
                fix="-torch.special.xlogy(weights, weights).sum(dim=-1)",
            ),
            Mistake(
                "summing over the wrong axis",
                "The entropy is of one query's weights over the keys, the last axis.",
                _entropy_wrong_axis,
                fix=".sum(dim=-1), not dim=-2",
            ),
            Mistake(
                "missing minus sign",
                "w log w is never positive, and an entropy is never negative.",
                _entropy_no_minus,
                fix="put a minus sign in front: -xlogy(w, w).sum(dim=-1)",
            ),
            Mistake(
                "log base 2 instead of natural log",
                "This course measures entropy in nats, with the natural log: a uniform row over S keys "
                "has entropy log(S), about 0.69 for two keys.",
                _entropy_log2,
                fix="drop the division by math.log(2)",
            ),
        ),
    ),
)
