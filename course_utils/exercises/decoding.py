"""Exercises of notebook 09 (decoding): nucleus sampling probabilities, a KV-cache append.

Each reference solution is built from :mod:`course_utils.generation` and :mod:`course_utils.variants`; each
mistake is one that learners (and published code) really make: a nucleus that drops the token crossing p (with
or without the top token kept by hand), probabilities that are not renormalised, temperature ignored,
multiplied or applied after the softmax, a cache written at the wrong offset or at an offset read off the
buffer's non-zero slots (which a reused cache fills with stale keys) instead of ``length``.
"""

from __future__ import annotations

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.generation import top_p_keep
from course_utils.variants import KVCache

__all__ = ["EXERCISES"]


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


# --- 09.1 nucleus (top-p) sampling probabilities ----------------------------------------------------


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


def _nucleus_crossing_dropped_top_kept(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) < top_p  # stops BEFORE the token that crosses p ...
    keep_sorted[..., 0] = True  # ... but the most likely token is kept by hand, so no row is left empty
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


def _nucleus_ascending(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1)  # ascending: the least likely tokens first
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


def _nucleus_not_renormalised(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    return _nucleus_with(probs, top_p_keep(probs, top_p), renormalise=False)


def _nucleus_at_temperature(logits: torch.Tensor, scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    probs = torch.softmax(scaled, dim=-1)
    return _nucleus_with(probs, top_p_keep(probs, top_p))


def _nucleus_temperature_ignored(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    return _nucleus_at_temperature(logits, logits, top_p)  # the distribution at temperature 1, always


def _nucleus_temperature_multiplied(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    return _nucleus_at_temperature(logits, logits * temperature, top_p)  # tau < 1 now flattens, tau > 1 sharpens


def _nucleus_temperature_after_softmax(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1) / temperature  # no longer a distribution; the nucleus is wrong
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < top_p
    return _nucleus_with(probs, torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted))


# --- 09.2 append to a KV cache ----------------------------------------------------------------------


def _append_solution(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    kv = KVCache(num_layers=1, capacity=cache.shape[2])
    kv.update(0, cache[:, :, :length], cache[:, :, :length])  # the positions cached so far
    k, _ = kv.update(0, new, new)  # written at length .. length + T - 1
    cache[:, :, length : length + new.shape[2]] = new  # the write into the caller's buffer the exercise asks for
    return k  # (B, H, length + T, D)


def _buffer(g: torch.Generator, B: int, H: int, capacity: int, D: int, length: int, stale: int) -> torch.Tensor:
    """A cache buffer whose first ``length`` slots hold keys and the next ``stale`` slots old keys of an earlier
    sequence (a reused buffer); the rest are zeros. Only ``length`` says where the keys end."""
    buf = torch.zeros(B, H, capacity, D)
    buf[:, :, : length + stale] = torch.randn(B, H, length + stale, D, generator=g)
    return buf


def _append_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(13)
    return [
        ((_buffer(g, 1, 2, 6, 3, 2, 0), 2, torch.randn(1, 2, 1, 3, generator=g)), {}),  # a fresh buffer
        ((_buffer(g, 2, 1, 7, 2, 0, 3), 0, torch.randn(2, 1, 3, 2, generator=g)), {}),  # reused: 3 stale slots
        ((_buffer(g, 1, 3, 8, 2, 3, 2), 3, torch.randn(1, 3, 2, 2, generator=g)), {}),  # 2 stale slots after 3
    ]


def _append_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, D, T = _int(g, 1, 4), (1, 2, 3, 5)[_int(g, 0, 4)], _int(g, 1, 65), _int(g, 1, 9)
        capacity = T + _int(g, 2, 41)
        length = _int(g, 0, capacity - T)  # one free slot after the new keys, so a write one too late still fits
        # stale keys of an earlier sequence after `length` in about half the draws, never so many that
        # length + stale + T passes the capacity (a write after them still fits)
        stale = _int(g, 1, capacity - T - length + 1) if bool(torch.rand((), generator=g) < 0.5) else 0
        cache = _buffer(g, B, H, capacity, D, length, stale)
        cases.append(((cache, length, torch.randn(B, H, T, D, generator=g)), {}))
    return cases


def _append_at_zero(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    T = new.shape[2]
    cache[:, :, :T] = new
    return cache[:, :, : length + T]


def _append_whole_buffer(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    cache[:, :, length : length + new.shape[2]] = new
    return cache


def _append_stale_view(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    cache[:, :, length : length + new.shape[2]] = new
    return cache[:, :, :length]


def _append_one_late(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    T = new.shape[2]
    cache[:, :, length + 1 : length + 1 + T] = new  # leaves slot `length` unwritten: zeros or a stale key
    return cache[:, :, : length + 1 + T]


def _append_length_from_buffer(cache: torch.Tensor, length: int, new: torch.Tensor) -> torch.Tensor:
    T = new.shape[2]
    used = int((cache.abs().sum(dim=(0, 1, 3)) != 0).sum())  # counts the stale slots of a reused buffer too
    cache[:, :, used : used + T] = new
    return cache[:, :, : used + T]


EXERCISES = (
    Exercise(
        key="09.1",
        title="nucleus (top-p) sampling probabilities",
        signature="nucleus_probs(logits, temperature, top_p) -> probs (..., V)",
        solution=_nucleus_solution,
        cases=_nucleus_cases,
        draw=_nucleus_draw,
        mistakes=(
            Mistake(
                "the token that crosses p is dropped",
                "The nucleus is the smallest set whose probability reaches p, so it includes the token "
                "that crosses p; yours stops one token short of it.",
                _nucleus_drops_crossing,
                fix="keep a token when the mass strictly before it is below p: "
                "keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p",
            ),
            Mistake(
                "the token that crosses p is dropped, and the top token kept by hand",
                "Keeping the most likely token by hand only mends the rows where it alone reaches p. The "
                "nucleus includes the token that crosses p wherever it falls in the sorted order; yours "
                "stops one token short of it in every other row.",
                _nucleus_crossing_dropped_top_kept,
                fix="keep a token when the mass strictly before it is "
                "below p, keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p, which always "
                "keeps the top token: no special case needed",
            ),
            Mistake(
                "sorted ascending",
                "The nucleus is made of the most likely tokens, so they must come first in the sort.",
                _nucleus_ascending,
                fix="probs.sort(dim=-1, descending=True)",
            ),
            Mistake(
                "not renormalised",
                "After zeroing the tokens outside the nucleus, the probabilities no longer sum to 1.",
                _nucleus_not_renormalised,
                fix="kept / kept.sum(dim=-1, keepdim=True)",
            ),
            Mistake(
                "temperature applied after the softmax",
                "The temperature divides the LOGITS, before the softmax. Dividing probabilities by it "
                "does not sharpen or flatten anything; it just stops them summing to 1.",
                _nucleus_temperature_after_softmax,
                fix="torch.softmax(logits / temperature, dim=-1)",
            ),
            Mistake(
                "temperature ignored",
                "Your probabilities are the same whatever the temperature: it must reshape the "
                "distribution (below 1 sharper, above 1 flatter) before the nucleus is chosen.",
                _nucleus_temperature_ignored,
                fix="torch.softmax(logits / temperature, dim=-1)",
            ),
            Mistake(
                "logits multiplied by the temperature",
                "The temperature divides the logits. Multiplying by it does the opposite: a temperature "
                "below 1 then flattens the distribution and one above 1 sharpens it.",
                _nucleus_temperature_multiplied,
                fix="logits / temperature, not logits * temperature",
            ),
        ),
    ),
    Exercise(
        key="09.2",
        title="append to a KV cache",
        signature="append_kv(cache, length, new) -> (B, H, length + T, D), writing into cache in place",
        solution=_append_solution,
        cases=_append_cases,
        draw=_append_draw,
        inplace="cache",
        mistakes=(
            Mistake(
                "written at position 0",
                "The new keys go after the `length` cached ones, not over the start of the buffer.",
                _append_at_zero,
                fix="cache[:, :, length:length + T] = new",
            ),
            Mistake(
                "returned the whole buffer",
                "The buffer has room for `capacity` positions, but only the first length + T hold keys; "
                "the rest are zeros, or old keys of an earlier sequence, that attention would treat as "
                "real keys.",
                _append_whole_buffer,
                fix="return cache[:, :, :length + T]",
            ),
            Mistake(
                "returned the old view, without the new tokens",
                "After writing, the valid part of the buffer has grown by the new tokens.",
                _append_stale_view,
                fix="return cache[:, :, :length + T]",
            ),
            Mistake(
                "written one position too late",
                "Positions count from 0; count which slots the cached keys already fill and where the "
                "first free one is (one too late leaves a slot unwritten: a fake key).",
                _append_one_late,
                fix="the first free slot is `length` itself: cache[:, :, length:length + T] = new",
            ),
            Mistake(
                "length inferred from the buffer's non-zero slots, not the length argument",
                "A buffer that is reused for a new sequence still holds the old keys after the cached "
                "ones, so its non-zero slots do not say where the keys end. Only the length you are "
                "given does.",
                _append_length_from_buffer,
                fix="write at `length`, the argument: "
                "cache[:, :, length:length + T] = new; return cache[:, :, :length + T]",
            ),
        ),
    ),
)
