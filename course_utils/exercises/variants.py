"""Exercises of notebook 07 (attention variants): a sliding-window mask, KV heads for GQA, nucleus sampling
probabilities, a KV-cache append.

Each reference solution is built from :mod:`course_utils.variants` and :mod:`course_utils.generation`; each
mistake is one that learners (and published code) really make: a window one key too wide or not causal,
``repeat`` where ``repeat_interleave`` belongs, a nucleus that drops the token crossing p, probabilities that
are not renormalised, temperature applied after the softmax, a cache written at the wrong offset.
"""

from __future__ import annotations

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.generation import top_p_keep
from course_utils.variants import KVCache, repeat_kv, sliding_window_mask

__all__ = ["EXERCISES"]


# --- 07.1 sliding-window mask -----------------------------------------------------------------------

def _window_solution(T: int, window: int) -> torch.Tensor:
    return sliding_window_mask(T, window)  # (T, T)


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


def _window_cases() -> list[tuple[tuple, dict]]:
    return [((5, 2), {}), ((7, 3), {}), ((4, 1), {}), ((4, 6), {})]


def _window_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        T = _int(g, 1, 49)  # up to 48: beyond the notebook's examples, so no size can be hard-coded
        cases.append(((T, _int(g, 1, T + 3)), {}))
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
        ((torch.randn(2, 3, 2, 2, generator=g), 6), {}),
        ((torch.randn(1, 1, 3, 2, generator=g), 4), {}),  # multi-query: one KV head for all
    ]


def _repeat_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        Hkv, group = _int(g, 1, 5), (1, 2, 3, 5, 6)[_int(g, 0, 5)]  # up to 24 query heads
        k = torch.randn(_int(g, 1, 4), Hkv, _int(g, 1, 49), _int(g, 1, 65), generator=g)
        cases.append(((k, Hkv * group), {}))
    return cases


def _repeat_tiled(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat(1, num_heads // k.shape[1], 1, 1)  # heads 0, 1, 0, 1: a different model


def _repeat_time_axis(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat_interleave(num_heads // k.shape[1], dim=2)


def _repeat_by_num_heads(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return k.repeat_interleave(num_heads, dim=1)


# --- 07.3 nucleus (top-p) sampling probabilities ----------------------------------------------------

def _nucleus_solution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)  # (..., V)
    kept = probs * top_p_keep(probs, top_p)
    return kept / kept.sum(dim=-1, keepdim=True)  # (..., V)


def _nucleus_cases() -> list[tuple[tuple, dict]]:
    # No case puts top_p exactly on the mass before a token: there the verdict would depend on the order in
    # which the learner's code adds the probabilities (float rounding), not on the definition.
    g = torch.Generator().manual_seed(11)
    return [
        ((2.0 * torch.randn(2, 6, generator=g), 1.0, 0.8), {}),
        ((3.0 * torch.randn(3, 8, generator=g), 0.7, 0.5), {}),
        ((torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]]), 2.0, 0.9), {}),
    ]


def _nucleus_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [_int(g, 1, 6) for _ in range(_int(g, 1, 3))]
        V = _int(g, 2, 65)
        logits = 3 * torch.randn(*batch, V, generator=g)
        filtered = torch.rand(*batch, V, generator=g) < 0.2  # some tokens already removed (top-k): -inf
        filtered[..., 0] = False
        logits = logits.masked_fill(filtered, float("-inf"))
        temperature = float(torch.empty(()).uniform_(0.3, 2.0, generator=g))
        cases.append(((logits, temperature, float(torch.empty(()).uniform_(0.05, 0.99, generator=g))), {}))
    return cases


def _nucleus_with(probs: torch.Tensor, keep: torch.Tensor, renormalise: bool = True) -> torch.Tensor:
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True) if renormalise else kept


def _nucleus_drops_crossing(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) <= top_p  # stops BEFORE the token that crosses p
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


def _nucleus_ascending(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1)  # ascending: the least likely tokens first
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


def _nucleus_not_renormalised(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    return _nucleus_with(probs, top_p_keep(probs, top_p), renormalise=False)


def _nucleus_temperature_after_softmax(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1) / temperature  # no longer a distribution; the nucleus is wrong
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


# --- 07.4 append to a KV cache ----------------------------------------------------------------------

def _append_solution(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    kv = KVCache(num_layers=1, capacity=cache.shape[2])
    kv.update(0, cache[:, :, :length], cache[:, :, :length])  # the positions cached so far
    k, _ = kv.update(0, new, new)  # written at length .. length + T - 1
    cache[:, :, length:length + new.shape[2]] = new  # the write into the caller's buffer the exercise asks for
    return k  # (B, H, length + T, D)


def _append_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(13)

    def buffer(B: int, H: int, capacity: int, D: int, length: int) -> torch.Tensor:
        buf = torch.zeros(B, H, capacity, D)
        buf[:, :, :length] = torch.randn(B, H, length, D, generator=g)
        return buf

    return [
        ((buffer(1, 2, 6, 3, 2), 2, torch.randn(1, 2, 1, 3, generator=g)), {}),
        ((buffer(2, 1, 5, 2, 0), 0, torch.randn(2, 1, 3, 2, generator=g)), {}),
        ((buffer(1, 3, 8, 2, 3), 3, torch.randn(1, 3, 2, 2, generator=g)), {}),
    ]


def _append_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, D, T = _int(g, 1, 4), (1, 2, 3, 5)[_int(g, 0, 4)], _int(g, 1, 65), _int(g, 1, 9)
        capacity = T + _int(g, 2, 41)
        length = _int(g, 0, capacity - T)  # one free slot after the new keys, so a write one too late still fits
        cache = torch.zeros(B, H, capacity, D)
        cache[:, :, :length] = torch.randn(B, H, length, D, generator=g)
        cases.append(((cache, length, torch.randn(B, H, T, D, generator=g)), {}))
    return cases


def _append_at_zero(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    T = new.shape[2]
    cache[:, :, :T] = new
    return cache[:, :, :length + T]


def _append_whole_buffer(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    cache[:, :, length:length + new.shape[2]] = new
    return cache


def _append_stale_view(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    cache[:, :, length:length + new.shape[2]] = new
    return cache[:, :, :length]


def _append_one_late(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    T = new.shape[2]
    cache[:, :, length + 1:length + 1 + T] = new  # leaves a row of zeros at position `length`
    return cache[:, :, :length + 1 + T]


EXERCISES = (
    Exercise(
        key="07.1",
        title="sliding-window mask",
        signature="my_sliding_window_mask(T, window) -> bool (T, T), True = may attend",
        solution=_window_solution,
        cases=_window_cases,
        draw=_window_draw,
        mistakes=(
            Mistake("window one key too wide",
                    "Each query sees exactly `window` keys, itself included; yours sees one more.",
                    _window_one_too_wide, fix="(i - j >= 0) & (i - j < window), not i - j <= window"),
            Mistake("window not causal",
                    "A window symmetric around the query also lets it see the next tokens, the future; only "
                    "keys at or before the query may stay.",
                    _window_not_causal, fix="(offset >= 0) & (offset < window) with offset = i - j, not |i - j|"),
            Mistake("band above the diagonal (future keys)",
                    "Your band lies above the diagonal: each query sees the keys after it, the future, instead "
                    "of the ones before it.",
                    _window_future, fix="the distance i - j (query minus key) must be in 0 .. window - 1: "
                    "offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]"),
            Mistake("window without the query itself",
                    "A query may attend to its own position; your window stops one key before it.",
                    _window_without_self, fix="(offset >= 0) & (offset < window), not 1 <= offset <= window"),
        ),
    ),
    Exercise(
        key="07.2",
        title="repeat KV heads for grouped-query attention",
        signature="my_repeat_kv(k, num_heads) -> (B, H, S, D) from k (B, Hkv, S, D)",
        solution=_repeat_solution,
        cases=_repeat_cases,
        draw=_repeat_draw,
        mistakes=(
            Mistake("repeat instead of repeat_interleave",
                    "Neighbouring query heads form a group that shares one KV head, so the copies of a KV head "
                    "must sit next to each other (0, 0, 1, 1), not take turns (0, 1, 0, 1).",
                    _repeat_tiled, fix="query head h reads KV head h // (H // Hkv): "
                    "k.repeat_interleave(num_heads // k.shape[1], dim=1), not k.repeat(...)"),
            Mistake("repeated along the time axis",
                    "Only the number of heads should grow; repeating another axis makes the sequence longer "
                    "instead.",
                    _repeat_time_axis, fix="repeat_interleave(..., dim=1), not dim=2"),
            Mistake("repeated num_heads times instead of num_heads // num_kv_heads",
                    "Each KV head serves a group of query heads; the result must have num_heads heads in "
                    "all, not num_heads copies of each KV head.",
                    _repeat_by_num_heads, fix="k.repeat_interleave(num_heads // k.shape[1], dim=1)"),
        ),
    ),
    Exercise(
        key="07.3",
        title="nucleus (top-p) sampling probabilities",
        signature="nucleus_probs(logits, temperature, top_p) -> probs (..., V)",
        solution=_nucleus_solution,
        cases=_nucleus_cases,
        draw=_nucleus_draw,
        mistakes=(
            Mistake("the token that crosses p is dropped",
                    "The nucleus is the smallest set whose probability reaches p, so it includes the token "
                    "that crosses p; yours stops one token short of it.",
                    _nucleus_drops_crossing, fix="keep a token when the mass strictly before it is below p: "
                    "keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p"),
            Mistake("sorted ascending",
                    "The nucleus is made of the most likely tokens, so they must come first in the sort.",
                    _nucleus_ascending, fix="probs.sort(dim=-1, descending=True)"),
            Mistake("not renormalised",
                    "After zeroing the tokens outside the nucleus, the probabilities no longer sum to 1.",
                    _nucleus_not_renormalised, fix="kept / kept.sum(dim=-1, keepdim=True)"),
            Mistake("temperature applied after the softmax",
                    "The temperature divides the LOGITS, before the softmax. Dividing probabilities by it "
                    "does not sharpen or flatten anything; it just stops them summing to 1.",
                    _nucleus_temperature_after_softmax, fix="torch.softmax(logits / temperature, dim=-1)"),
        ),
    ),
    Exercise(
        key="07.4",
        title="append to a KV cache",
        signature="append_kv(cache, length, new) -> (B, H, length + T, D), writing into cache in place",
        solution=_append_solution,
        cases=_append_cases,
        draw=_append_draw,
        inplace="cache",
        mistakes=(
            Mistake("written at position 0",
                    "The new keys go after the `length` cached ones, not over the start of the buffer.",
                    _append_at_zero, fix="cache[:, :, length:length + T] = new"),
            Mistake("returned the whole buffer",
                    "The buffer has room for `capacity` positions, but only the first length + T hold keys; "
                    "the rest are zeros that attention would treat as real keys.",
                    _append_whole_buffer, fix="return cache[:, :, :length + T]"),
            Mistake("returned the old view, without the new tokens",
                    "After writing, the valid part of the buffer has grown by the new tokens.",
                    _append_stale_view, fix="return cache[:, :, :length + T]"),
            Mistake("written one position too late",
                    "Positions count from 0; count which slots the cached keys already fill and where the "
                    "first empty one is (one too late leaves a row of zeros, a fake key).",
                    _append_one_late, fix="the first free slot is `length` itself: cache[:, :, length:length + T] = new"),
        ),
    ),
)
