"""Exercises of notebook 07 (attention variants): a sliding-window mask, KV heads for GQA and AFT-simple.

Each reference solution is built from :mod:`course_utils.variants`; each mistake is one that learners (and
published code) really make: a window one key too wide or not causal, ``repeat`` where ``repeat_interleave``
belongs, AFT's softmax over the wrong axis, without its sigmoid gate, or written as ``exp(k) / sum exp(k)``,
which overflows. (Notebook 07's old exercises on nucleus sampling and the KV cache are 09.1 and 09.2; its
recurrent step of linear attention is 13.4.)
"""

from __future__ import annotations

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.variants import aft_simple, repeat_kv, sliding_window_mask

__all__ = ["EXERCISES"]


# --- 07.1 sliding-window mask -----------------------------------------------------------------------


def _window_solution(T: int, window: int) -> torch.Tensor:
    return sliding_window_mask(T, window)  # (T, T)


def _window_cases() -> list[tuple[tuple, dict]]:
    return [((5, 2), {}), ((7, 3), {}), ((4, 1), {}), ((4, 6), {}), ((3, 3), {}), ((1, 1), {})]


def _window_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        T = randint(g, 1, 49)  # up to 48: beyond the notebook's examples, so no size can be hard-coded
        cases.append(((T, randint(g, 1, T + 3)), {}))
    return cases


def _offsets(T: int) -> torch.Tensor:
    return torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T): i - j


def _window_one_too_wide(T: int, window: int) -> torch.Tensor:
    d = _offsets(T)
    return (d >= 0) & (d <= window)  # window + 1 keys


def _window_not_causal(T: int, window: int) -> torch.Tensor:
    return _offsets(T).abs() < window


def _window_future(T: int, window: int) -> torch.Tensor:
    d = _offsets(T)
    return (d <= 0) & (-d < window)  # the band above the diagonal: the NEXT window keys


def _window_without_self(T: int, window: int) -> torch.Tensor:
    d = _offsets(T)
    return (d >= 1) & (d <= window)  # keys i - window .. i - 1


# --- 07.2 repeat KV heads for GQA -------------------------------------------------------------------


def _repeat_solution(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return repeat_kv(k, num_heads)  # (B, H, S, D)


def _repeat_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(7)
    return [
        ((torch.randn(1, 2, 3, 4, generator=g), 4), {}),
        ((torch.randn(2, 3, 2, 2, generator=g), 9), {}),  # groups of 3
        ((torch.randn(1, 1, 3, 2, generator=g), 4), {}),  # multi-query: one KV head for all
        ((torch.randn(2, 3, 1, 1, generator=g), 3), {}),  # as many KV heads as query heads; S == 1, D == 1
    ]


def _repeat_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        Hkv, group = randint(g, 1, 5), (1, 2, 3, 5, 6)[randint(g, 0, 5)]  # up to 24 query heads
        k = torch.randn(randint(g, 1, 4), Hkv, randint(g, 1, 49), randint(g, 1, 65), generator=g)
        cases.append(((k, Hkv * group), {}))
    return cases


def _repeat_tiled(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat(1, num_heads // k.shape[1], 1, 1)  # heads 0, 1, 0, 1: a different model


def _repeat_time_axis(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat_interleave(num_heads // k.shape[1], dim=2)


def _repeat_by_num_heads(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat_interleave(num_heads, dim=1)


# --- 07.3 AFT-simple --------------------------------------------------------------------------------


def _aft_solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return aft_simple(q, k, v)  # (B, T, C)


def _aft_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(19)
    return [
        ((torch.randn(1, 3, 2, generator=g), torch.randn(1, 4, 2, generator=g), torch.randn(1, 4, 2, generator=g)), {}),
        (
            (
                torch.randn(2, 2, 3, generator=g),
                100.0 * torch.randn(2, 5, 3, generator=g),  # logits of trained models
                torch.randn(2, 5, 3, generator=g),
            ),
            {},
        ),
        ((torch.randn(1, 4, 4, generator=g), torch.randn(1, 4, 4, generator=g), torch.randn(1, 4, 4, generator=g)), {}),
        (  # every logit of the first channel below -88 (exp gives 0 / 0); one query, one position
            (
                torch.randn(2, 1, 2, generator=g),
                torch.tensor([[[-120.0, 3.0]], [[-95.0, -2.0]]]),
                torch.randn(2, 1, 2, generator=g),
            ),
            {},
        ),
        ((torch.randn(1, 2, 1, generator=g), torch.randn(1, 3, 1, generator=g), torch.randn(1, 3, 1, generator=g)), {}),
    ]


def _aft_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, T, S, C = randint(g, 1, 5), randint(g, 1, 49), randint(g, 1, 49), randint(g, 1, 65)
        spread = float(torch.empty(()).uniform_(0.5, 150.0, generator=g))
        cases.append(
            (
                (
                    torch.randn(B, T, C, generator=g),
                    spread * torch.randn(B, S, C, generator=g),
                    torch.randn(B, S, C, generator=g),
                ),
                {},
            )
        )
    return cases


def _aft_over_channels(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(k, dim=-1)  # over the channels of each position: the wrong axis
    return torch.sigmoid(q) * (weights * v).sum(dim=-2, keepdim=True)


def _aft_no_sigmoid(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return q * (torch.softmax(k, dim=-2) * v).sum(dim=-2, keepdim=True)  # the gate is q itself


def _aft_exp_no_max(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    e = torch.exp(k)  # inf for logits above about 88, and inf / inf = NaN
    return torch.sigmoid(q) * (e * v).sum(dim=-2, keepdim=True) / e.sum(dim=-2, keepdim=True)


def _aft_plain_average(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(q) * v.mean(dim=-2, keepdim=True)  # every position weighted alike: k never used


EXERCISES = (
    Exercise(
        key="07.1",
        title="sliding-window mask",
        signature="my_sliding_window_mask(T, window) -> bool (T, T), True = may attend",
        solution=_window_solution,
        cases=_window_cases,
        draw=_window_draw,
        edges={
            "window == 1": lambda T, window: window == 1,
            "window == T": lambda T, window: window == T,
            "window > T": lambda T, window: window > T,
            "T == 1": lambda T, window: T == 1,
        },
        mistakes=(
            Mistake(
                "window one key too wide",
                "Each query sees exactly `window` keys, itself included; yours sees one more.",
                _window_one_too_wide,
                fix="(i - j >= 0) & (i - j < window), not i - j <= window",
            ),
            Mistake(
                "window not causal",
                "A window symmetric around the query also lets it see the next tokens, the future; only "
                "keys at or before the query may stay.",
                _window_not_causal,
                fix="(offset >= 0) & (offset < window) with offset = i - j, not |i - j|",
            ),
            Mistake(
                "band above the diagonal (future keys)",
                "Your band lies above the diagonal: each query sees the keys after it, the future, instead "
                "of the ones before it.",
                _window_future,
                fix="the distance i - j (query minus key) must be in 0 .. window - 1: "
                "offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]",
            ),
            Mistake(
                "window without the query itself",
                "A query may attend to its own position; your window stops one key before it.",
                _window_without_self,
                fix="(offset >= 0) & (offset < window), not 1 <= offset <= window",
            ),
        ),
    ),
    Exercise(
        key="07.2",
        title="repeat KV heads for grouped-query attention",
        signature="my_repeat_kv(k, num_heads) -> (B, H, S, D) from k (B, Hkv, S, D)",
        solution=_repeat_solution,
        cases=_repeat_cases,
        draw=_repeat_draw,
        edges={
            "one KV head (multi-query)": lambda k, num_heads: k.shape[1] == 1,
            "as many KV heads as query heads": lambda k, num_heads: k.shape[1] == num_heads,
            "a group size that is not a power of two": lambda k, num_heads: (
                (g := num_heads // k.shape[1]) & (g - 1) != 0
            ),
            "S == 1": lambda k, num_heads: k.shape[2] == 1,
            "B > 1": lambda k, num_heads: k.shape[0] > 1,
        },
        mistakes=(
            Mistake(
                "repeat instead of repeat_interleave",
                "Neighbouring query heads form a group that shares one KV head, so the copies of a KV head "
                "must sit next to each other (0, 0, 1, 1), not take turns (0, 1, 0, 1).",
                _repeat_tiled,
                fix="query head h reads KV head h // (H // Hkv): "
                "k.repeat_interleave(num_heads // k.shape[1], dim=1), not k.repeat(...)",
            ),
            Mistake(
                "repeated along the time axis",
                "Only the number of heads should grow; repeating another axis makes the sequence longer instead.",
                _repeat_time_axis,
                fix="repeat_interleave(..., dim=1), not dim=2",
            ),
            Mistake(
                "repeated num_heads times instead of num_heads // num_kv_heads",
                "Each KV head serves a group of query heads; the result must have num_heads heads in "
                "all, not num_heads copies of each KV head.",
                _repeat_by_num_heads,
                fix="k.repeat_interleave(num_heads // k.shape[1], dim=1)",
            ),
        ),
    ),
    Exercise(
        key="07.3",
        title="AFT-simple",
        signature="my_aft_simple(q, k, v) -> (B, T, C) from q (B, T, C), k, v (B, S, C)",
        solution=_aft_solution,
        cases=_aft_cases,
        draw=_aft_draw,
        edges={
            "T != S": lambda q, k, v: q.shape[1] != k.shape[1],
            "T == S": lambda q, k, v: q.shape[1] == k.shape[1],
            "T == 1": lambda q, k, v: q.shape[1] == 1,
            "S == 1": lambda q, k, v: k.shape[1] == 1,
            "C == 1": lambda q, k, v: q.shape[-1] == 1,
            "a key logit above 88": lambda q, k, v: bool((k > 88).any()),
            "a channel whose key logits are all below -88": lambda q, k, v: bool((k < -88).all(dim=1).any()),
        },
        mistakes=(
            Mistake(
                "softmax over the channels instead of the positions",
                "AFT mixes the values of different positions, channel by channel: for each channel the "
                "weights are a distribution over the S positions, so they must sum to 1 along the "
                "sequence axis.",
                _aft_over_channels,
                fix="torch.softmax(k, dim=-2): axis -2 is the sequence (B, S, C)",
            ),
            Mistake(
                "gate without the sigmoid",
                "The query only gates the mix, by a number between 0 and 1 for each channel; the raw query "
                "can be negative or large.",
                _aft_no_sigmoid,
                fix="torch.sigmoid(q) * mixed",
            ),
            Mistake(
                "exp without subtracting the maximum",
                "Written as exponentials divided by their sum, the weights overflow to inf / inf = NaN "
                "once a key logit is above about 88 in float32. A softmax subtracts each channel's "
                "maximum first, which changes nothing mathematically.",
                _aft_exp_no_max,
                fix="weights = torch.softmax(k, dim=-2) (or subtract k.amax(dim=-2, keepdim=True) before the exp)",
            ),
            Mistake(
                "plain average of the values",
                "The keys decide how much each position counts: the weights come from a softmax of k over "
                "the positions, not a uniform average.",
                _aft_plain_average,
                fix="mixed = (torch.softmax(k, dim=-2) * v).sum(dim=-2, keepdim=True)",
            ),
        ),
    ),
)
