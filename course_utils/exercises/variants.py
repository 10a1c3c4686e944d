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


def _window_cases() -> list[tuple[tuple, dict]]:
    return [((5, 2), {}), ((7, 3), {}), ((4, 1), {}), ((4, 6), {})]


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
    g = torch.Generator().manual_seed(11)
    return [
        ((2.0 * torch.randn(2, 6, generator=g), 1.0, 0.8), {}),
        ((3.0 * torch.randn(3, 8, generator=g), 0.7, 0.5), {}),
        ((torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]]), 2.0, 0.9), {}),
    ]


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
        mistakes=(
            Mistake("window one key too wide",
                    "Query i sees exactly `window` keys, itself included: i - window + 1 .. i. "
                    "Use i - j < window, not i - j <= window.",
                    _window_one_too_wide),
            Mistake("window not causal",
                    "|i - j| < window also lets query i see the next window - 1 tokens. Keep only j <= i "
                    "(combine the band with the causal mask).",
                    _window_not_causal),
            Mistake("band above the diagonal (future keys)",
                    "Your band lies above the diagonal: query i sees keys i .. i + window - 1, the future. "
                    "Flip the sign: it is i - j that must be in 0 .. window - 1.",
                    _window_future),
            Mistake("window without the query itself",
                    "A query may attend to its own position: the window is i - window + 1 .. i, "
                    "not i - window .. i - 1.",
                    _window_without_self),
        ),
    ),
    Exercise(
        key="07.2",
        title="repeat KV heads for grouped-query attention",
        signature="my_repeat_kv(k, num_heads) -> (B, H, S, D) from k (B, Hkv, S, D)",
        solution=_repeat_solution,
        cases=_repeat_cases,
        mistakes=(
            Mistake("repeat instead of repeat_interleave",
                    "Query head h reads KV head h // (H // Hkv), so the copies of one KV head must sit side "
                    "by side (0, 0, 1, 1): use repeat_interleave, not repeat (0, 1, 0, 1).",
                    _repeat_tiled),
            Mistake("repeated along the time axis",
                    "The heads are axis 1 of (B, Hkv, S, D); repeating axis 2 makes the sequence longer instead.",
                    _repeat_time_axis),
            Mistake("repeated num_heads times instead of num_heads // num_kv_heads",
                    "Each KV head serves a group of H // Hkv query heads; repeat it that many times so the "
                    "result has H heads, not Hkv * H.",
                    _repeat_by_num_heads),
        ),
    ),
    Exercise(
        key="07.3",
        title="nucleus (top-p) sampling probabilities",
        signature="nucleus_probs(logits, temperature, top_p) -> probs (..., V)",
        solution=_nucleus_solution,
        cases=_nucleus_cases,
        mistakes=(
            Mistake("the token that crosses p is dropped",
                    "The nucleus is the smallest set whose probability reaches p, so it includes the token "
                    "that crosses p: keep a token if the mass strictly BEFORE it is < p "
                    "(cumsum - probs < p), not if the cumsum including it is <= p.",
                    _nucleus_drops_crossing),
            Mistake("sorted ascending",
                    "Sort the probabilities in descending order (descending=True): the nucleus is made of "
                    "the most likely tokens, not the least likely.",
                    _nucleus_ascending),
            Mistake("not renormalised",
                    "After zeroing the tokens outside the nucleus, divide by the kept mass so the "
                    "probabilities sum to 1 again.",
                    _nucleus_not_renormalised),
            Mistake("temperature applied after the softmax",
                    "Divide the LOGITS by the temperature, then take the softmax. Dividing probabilities by "
                    "it does not sharpen or flatten anything; it just stops them summing to 1.",
                    _nucleus_temperature_after_softmax),
        ),
    ),
    Exercise(
        key="07.4",
        title="append to a KV cache",
        signature="append_kv(cache, length, new) -> (B, H, length + T, D)",
        solution=_append_solution,
        cases=_append_cases,
        inplace="cache",  # the buffer after the call is compared with the solution's
        mistakes=(
            Mistake("written at position 0",
                    "The new keys go after the `length` cached ones: write them at "
                    "cache[:, :, length:length + T], not at the start.",
                    _append_at_zero),
            Mistake("returned the whole buffer",
                    "The buffer has room for `capacity` positions, but only the first length + T hold keys; "
                    "the rest are zeros that attention would treat as real keys. Return cache[:, :, :length + T].",
                    _append_whole_buffer),
            Mistake("returned the old view, without the new tokens",
                    "After writing, the valid part has grown to length + T: return cache[:, :, :length + T].",
                    _append_stale_view),
            Mistake("written one position too late",
                    "Positions count from 0, so the `length` cached keys fill 0 .. length - 1 and the first free "
                    "slot is `length` itself, not length + 1 (which leaves a row of zeros, a fake key).",
                    _append_one_late),
        ),
    ),
)
