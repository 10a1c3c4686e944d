"""Exercises of notebook 09 (decoding): nucleus sampling probabilities, a KV-cache append, one step of beam search.

The references of 09.1 and 09.2 are built from :mod:`course_utils.generation` and :mod:`course_utils.variants`;
09.3's is written out here, as ``generation.beam_search`` does its step inline, with nothing to reuse. Each
mistake is one that learners (and published code) really make: a nucleus that drops the token crossing p (with
or without the top token kept by hand), probabilities that are not renormalised, temperature ignored,
multiplied or applied after the softmax, a cache written at the wrong offset or at an offset read off the
buffer's non-zero slots (which a reused cache fills with stale keys) instead of ``length``; in beam search, the
beam's score not added or multiplied in, one extension kept per beam, the flat index split the wrong way or by the
number of beams, the winners not sorted best first.
"""

from __future__ import annotations

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.generation import top_p_keep
from course_utils.variants import KVCache

__all__ = ["EXERCISES"]


# --- 09.1 nucleus (top-p) sampling probabilities ----------------------------------------------------


def _nucleus_solution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)  # (..., V)
    kept = probs * top_p_keep(probs, top_p)
    return kept / kept.sum(dim=-1, keepdim=True)  # (..., V)


def _nucleus_cases() -> list[tuple[tuple, dict]]:
    # No case puts top_p exactly on the mass before a token: there the verdict would depend on the order in
    # which the learner's code adds the probabilities (float rounding), not on the definition.
    g = torch.Generator().manual_seed(11)
    # (B, H, V) next: sorting, summing or scattering along dim=1 instead of the last axis is named by its values;
    # it holds a token already removed (-inf), a row whose top token alone reaches p, and one that keeps every token
    three = 1.5 * torch.randn(2, 3, 7, generator=g)
    three[0, 1, 2] = float("-inf")
    three[1, 0] = torch.tensor([9.0, 0.0, -1.0, 0.5, -2.0, 1.0, -0.5])  # the top token alone is past p
    three[1, 2] = torch.tensor([0.1, 0.0, -0.1, 0.05, 0.0, -0.05, 0.02])  # nearly flat: every token is kept
    return [
        ((2.0 * torch.randn(2, 6, generator=g), 1.0, 0.8), {}),
        ((3.0 * torch.randn(3, 8, generator=g), 0.7, 0.5), {}),
        ((torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]]), 2.0, 0.9), {}),
        ((three, 1.3, 0.97), {}),
        ((torch.tensor([150.0, 149.0, 0.0, -3.0]), 0.5, 0.6), {}),  # one row (V,): logits past exp's overflow
        # a high temperature over logits 120 apart: softmax(logits) underflows to 0 where softmax(logits / T) does
        # not, so tempering the probabilities afterwards (softmax(logits) ** (1 / T)) is wrong here
        ((torch.tensor([[0.0, -120.0, -130.0, -5.0]]), 100.0, 0.99), {}),
    ]


def _nucleus_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [randint(g, 1, 6) for _ in range(randint(g, 1, 3))]
        V = randint(g, 2, 65)
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
        ((_buffer(g, 2, 2, 9, 1, 1, 5), 1, torch.randn(2, 2, 2, 1, generator=g)), {}),  # stale keys after the new
        ((_buffer(g, 1, 2, 7, 3, 4, 3), 4, torch.randn(1, 2, 3, 3, generator=g)), {}),  # filled to the last slot
        # a non-contiguous buffer and new keys with H > 1: a write through .reshape lands in a copy, not in the
        # caller's cache, and new.view(...) breaks
        ((_buffer(g, 3, 2, 8, 4, 3, 1).transpose(0, 1), 3, torch.randn(2, 3, 4, 2, generator=g).mT), {}),
    ]


def _append_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, D, T = randint(g, 1, 4), (1, 2, 3, 5)[randint(g, 0, 4)], randint(g, 1, 65), randint(g, 1, 9)
        capacity = T + randint(g, 2, 41)
        length = randint(g, 0, capacity - T)  # one free slot after the new keys, so a write one too late still fits
        # stale keys of an earlier sequence after `length` in about half the draws, never so many that
        # length + stale + T passes the capacity (a write after them still fits)
        stale = randint(g, 1, capacity - T - length + 1) if bool(torch.rand((), generator=g) < 0.5) else 0
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


# --- 09.3 one step of beam search -------------------------------------------------------------------


def _beam_solution(
    beam_scores: torch.Tensor, next_log_probs: torch.Tensor, beam_width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    V = next_log_probs.shape[-1]
    total = (beam_scores[:, None] + next_log_probs).flatten()  # (K * V,): every one-token extension of every beam
    scores, flat = total.topk(beam_width)  # (W,), best first
    return scores, flat // V, flat % V  # which beam each extends, and with which token


def _distinct_at_the_top(beam_scores: torch.Tensor, next_log_probs: torch.Tensor, beam_width: int) -> bool:
    """Whether the beam_width + 1 best totals (all of them if there are fewer) are distinct: no tie decides."""
    total = (beam_scores[:, None] + next_log_probs).flatten().sort(descending=True).values
    return bool((total[: beam_width + 1].diff() < 0).all())


def _beam_cases() -> list[tuple[tuple, dict]]:
    # The first case has beam_width <= K, two winners from one beam, winners neither in index order nor its
    # reverse, and a ranking that the next token's log-probabilities alone would change.
    logits = torch.tensor(
        [[-2.9, -0.3, -3.1, -1.9, -2.2], [-0.2, -3.5, -2.8, -1.9, -3.0], [-1.6, -0.4, -2.4, -1.2, -2.7]]
    )
    first = torch.log_softmax(logits, dim=-1)  # (3, 5)
    g = torch.Generator().manual_seed(23)

    def logp(K: int, V: int) -> torch.Tensor:
        return torch.log_softmax(2.0 * torch.randn(K, V, generator=g), dim=-1)  # (K, V)

    return [
        ((torch.tensor([-1.0, -2.6, -0.5]), first, 3), {}),  # V != K, beam_width <= K
        ((torch.tensor([-0.7]), logp(1, 6), 4), {}),  # K == 1 (one beam, as at the first step), beam_width > K
        ((torch.tensor([-3.2, -1.1, -2.0, -4.4]), logp(4, 3), 1), {}),  # beam_width == 1
        ((torch.tensor([-1.5, -2.3]), logp(2, 3), 6), {}),  # beam_width == K * V: every extension, sorted
        ((torch.tensor([-2.2, -0.4, -1.3, -3.0, -0.9]), logp(5, 2), 7), {}),  # K > V == 2, K < beam_width < K * V
        # a long sequence's totals: exp(-150) underflows float32 to 0, so totals as products of probabilities fail
        ((torch.tensor([-150.0, -161.0, -155.5]), logp(3, 4), 3), {}),
    ]


def _beam_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    while len(cases) < 4:
        K, V = randint(g, 1, 9), randint(g, 2, 51)
        beam_width = randint(g, 1, K * V + 1) if randint(g, 0, 2) else randint(g, 1, min(K * V, 8) + 1)
        beam_scores = -torch.empty(K).uniform_(0.1, 12.0, generator=g)  # totals of earlier steps: negative
        next_log_probs = torch.log_softmax(2.0 * torch.randn(K, V, generator=g), dim=-1)
        if _distinct_at_the_top(beam_scores, next_log_probs, beam_width):  # a tie is drawn again
            cases.append(((beam_scores, next_log_probs, beam_width), {}))
    return cases


def _beam_ranked(total: torch.Tensor, beam_width: int, V: int, order: str = "best first"):
    """The beam_width best of the (K, V) totals: (their totals, beams, tokens) in the given order."""
    scores, flat = total.flatten().topk(beam_width)
    if order == "index":
        flat = flat.sort().values
        scores = total.flatten()[flat]
    elif order == "worst first":
        scores, flat = scores.flip(0), flat.flip(0)
    return scores, flat // V, flat % V


def _beam_no_score(beam_scores, next_log_probs, beam_width):
    return _beam_ranked(next_log_probs, beam_width, next_log_probs.shape[-1])  # the next token's log-prob alone


def _beam_multiplied(beam_scores, next_log_probs, beam_width):
    return _beam_ranked(beam_scores[:, None] * next_log_probs, beam_width, next_log_probs.shape[-1])


def _beam_one_per_beam(beam_scores, next_log_probs, beam_width):
    best, token = (beam_scores[:, None] + next_log_probs).max(dim=-1)  # (K,): each beam's best extension only
    scores, beams = best.topk(beam_width)  # fails when beam_width > K
    return scores, beams, token[beams]


def _beam_decoded_swapped(beam_scores, next_log_probs, beam_width):
    V = next_log_probs.shape[-1]
    scores, flat = (beam_scores[:, None] + next_log_probs).flatten().topk(beam_width)
    return scores, flat % V, flat // V


def _beam_decoded_by_k(beam_scores, next_log_probs, beam_width):
    K = next_log_probs.shape[0]
    scores, flat = (beam_scores[:, None] + next_log_probs).flatten().topk(beam_width)
    return scores, flat // K, flat % K  # the number of beams where the vocabulary size belongs


def _beam_in_index_order(beam_scores, next_log_probs, beam_width):
    total = beam_scores[:, None] + next_log_probs
    return _beam_ranked(total, beam_width, next_log_probs.shape[-1], order="index")


def _beam_worst_first(beam_scores, next_log_probs, beam_width):
    total = beam_scores[:, None] + next_log_probs
    return _beam_ranked(total, beam_width, next_log_probs.shape[-1], order="worst first")


EXERCISES = (
    Exercise(
        key="09.1",
        domain=Domain(leading={"logits": 1}, views=True),
        title="nucleus (top-p) sampling probabilities",
        signature="nucleus_probs(logits, temperature, top_p) -> probs (..., V)",
        solution=_nucleus_solution,
        cases=_nucleus_cases,
        draw=_nucleus_draw,
        edges={
            "one row (V,), no leading axis": lambda logits, t, p: logits.dim() == 1,
            "one leading axis": lambda logits, t, p: logits.dim() == 2,
            "two leading axes or more": lambda logits, t, p: logits.dim() >= 3,
            "temperature 1": lambda logits, t, p: t == 1.0,
            "temperature below 1": lambda logits, t, p: t < 1.0,
            "temperature above 1": lambda logits, t, p: t > 1.0,
            "a temperature that keeps a token softmax(logits) underflows to 0": lambda logits, t, p: bool(
                ((torch.softmax(logits, dim=-1) == 0) & (_nucleus_solution(logits, t, p) > 1e-3)).any()
            ),
            "a token already removed (-inf)": lambda logits, t, p: bool((logits == float("-inf")).any()),
            "logits past exp's float32 overflow": lambda logits, t, p: bool((logits / t > 89).any()),
            "a row whose top token alone reaches top_p": lambda logits, t, p: bool(
                (torch.softmax(logits / t, dim=-1).amax(dim=-1) >= p).any()
            ),
            "a row that keeps every token": lambda logits, t, p: bool(
                (_nucleus_solution(logits, t, p) > 0).all(dim=-1).any()
            ),
        },
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
        domain=Domain(views=True),
        title="append to a KV cache",
        signature="append_kv(cache, length, new) -> (B, H, length + T, D), writing into cache in place",
        solution=_append_solution,
        cases=_append_cases,
        draw=_append_draw,
        edges={
            "length == 0 (nothing cached yet)": lambda cache, length, new: length == 0,
            "T == 1 (one new token)": lambda cache, length, new: new.shape[2] == 1,
            "T > 1 (a prompt)": lambda cache, length, new: new.shape[2] > 1,
            "length + T == capacity (the buffer filled to its last slot)": lambda cache, length, new: (
                length + new.shape[2] == cache.shape[2]
            ),
            "a fresh buffer (zeros after length)": lambda cache, length, new: bool((cache[:, :, length:] == 0).all()),
            "an earlier sequence's keys at length": lambda cache, length, new: bool(
                (cache[:, :, length : length + 1] != 0).any()
            ),
            "an earlier sequence's keys after the new ones (to be left as they are)": lambda cache, length, new: bool(
                (cache[:, :, length + new.shape[2] :] != 0).any()
            ),
            "H == 1": lambda cache, length, new: cache.shape[1] == 1,
            "D == 1": lambda cache, length, new: cache.shape[3] == 1,
            "B > 1": lambda cache, length, new: cache.shape[0] > 1,
        },
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
    Exercise(
        key="09.3",
        core=False,
        title="one step of beam search",
        signature=(
            "beam_step(beam_scores, next_log_probs, beam_width) -> (scores, beams, tokens): beam_scores (K,), "
            "next_log_probs (K, V); scores (beam_width,) float32, beams and tokens (beam_width,) int64, "
            "best first"
        ),
        solution=_beam_solution,
        cases=_beam_cases,
        draw=_beam_draw,
        minutes=10,
        edges={
            "K == 1": lambda b, lp, w: lp.shape[0] == 1,
            "totals below -104, where exp underflows float32 to 0": lambda b, lp, w: bool((b < -104).all()),
            "V > K": lambda b, lp, w: lp.shape[1] > lp.shape[0],
            "K > V": lambda b, lp, w: lp.shape[0] > lp.shape[1],
            "beam_width == 1": lambda b, lp, w: w == 1,
            "beam_width == K * V": lambda b, lp, w: w == lp.numel(),
            "K < beam_width < K * V": lambda b, lp, w: lp.shape[0] < w < lp.numel(),
            "two winners from one beam, beam_width <= K": lambda b, lp, w: (
                1 < w <= lp.shape[0] and len(set(_beam_solution(b, lp, w)[1].tolist())) < w
            ),
        },
        mistakes=(
            Mistake(
                "the beam's score not added",
                "A candidate is a whole sequence: its score is the total log-probability of the beam it "
                "extends plus the new token's. Ranked by the new token alone, a likely token after an unlikely "
                "beam beats the continuation of a much better beam.",
                _beam_no_score,
                fix="total = beam_scores[:, None] + next_log_probs",
            ),
            Mistake(
                "log-probabilities multiplied",
                "Probabilities multiply, so their logarithms add. Multiplying two negative log-probabilities "
                "gives a positive number that grows the less likely the sequence is.",
                _beam_multiplied,
                fix="total = beam_scores[:, None] + next_log_probs, not beam_scores[:, None] * next_log_probs",
            ),
            Mistake(
                "one extension per beam",
                "The best extensions are chosen over all K times V candidates together: a good beam may have "
                "several of them, a poor one none. Keeping each beam's best token only loses the second best "
                "token of the best beam, and leaves fewer than beam_width candidates when there are fewer beams.",
                _beam_one_per_beam,
                fix="scores, flat = total.flatten().topk(beam_width); beams, tokens = flat // V, flat % V",
            ),
            Mistake(
                "the flat index decoded the wrong way round",
                "Flattening (K, V) row by row puts beam b's token t at b times V plus t: the beam is the "
                "quotient by the vocabulary size, the token the remainder.",
                _beam_decoded_swapped,
                fix="beams, tokens = flat // V, flat % V",
            ),
            Mistake(
                "the flat index decoded with the number of beams",
                "Each beam's row of the flattened totals is V long, one entry per token of the vocabulary, so "
                "the flat index is split by the vocabulary size, not by the number of beams.",
                _beam_decoded_by_k,
                fix="beams, tokens = flat // V, flat % V with V = next_log_probs.shape[-1]",
            ),
            Mistake(
                "the winners in index order, not best first",
                "The right candidates, but in the order they sit in the (K, V) table. The next step, and "
                "whoever reads the result, expects the best extension first.",
                _beam_in_index_order,
                fix="scores, flat = total.flatten().topk(beam_width), which sorts best first",
            ),
            Mistake(
                "the winners sorted worst first",
                "The right candidates, but worst first: the result lists them from the highest total down, as "
                "the beams of the next step are ranked.",
                _beam_worst_first,
                fix="total.flatten().sort(descending=True), or topk, which sorts best first",
            ),
        ),
    ),
)
