"""Exercises of notebook 08 (fast attention): merging two blocks of an online softmax.

The reference solution is built from :mod:`course_utils.fast_attention`; each mistake is one that learners
(and published code) really make: partial sums merged without rescaling, or rescaled upside down, the last
block's maximum kept instead of the larger one, NaN for a query that has seen no key yet.
"""

from __future__ import annotations

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.fast_attention import Partial, block_partial, merge_partials

__all__ = ["EXERCISES"]

NEG_INF = float("-inf")


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


# --- 08.1 merge two blocks of an online softmax -----------------------------------------------------


def _merge_solution(
    m1: torch.Tensor, l1: torch.Tensor, o1: torch.Tensor, m2: torch.Tensor, l2: torch.Tensor, o2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(merge_partials(Partial(m1, l1, o1), Partial(m2, l2, o2)))  # (..., T, 1), (..., T, 1), (..., T, Dv)


def _two_blocks(scores: torch.Tensor, v: torch.Tensor, cut: int) -> tuple:
    """The partials (m, l, o) of keys 0 .. cut-1 and cut .. S-1: the six arguments of the exercise."""
    return (*block_partial(scores[..., :cut], v[..., :cut, :]), *block_partial(scores[..., cut:], v[..., cut:, :]))


def _merge_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(17)
    plain = 2.0 * torch.randn(4, 5, generator=g)  # (T, S): maxima of the two blocks in either order
    far = torch.tensor(
        [
            [0.5, 1.0, -120.0, -119.0],  # block 2 far BELOW block 1: exp(m1 - m2) overflows
            [-150.0, -149.5, 3.0, 2.0],  # block 2 far ABOVE block 1
            [1.0, 0.0, 0.5, -0.5],
        ]
    )
    blocked = torch.randn(2, 4, 6, generator=g)  # (B, T, S) with queries that see nothing
    blocked[0, 1] = NEG_INF  # nothing visible in either block: the partials are (-inf, 0, 0) twice
    blocked[1, 2, :3] = NEG_INF  # nothing visible in the first block only
    blocked[1, 0, 3:] = NEG_INF  # nothing visible in the second block only
    return [
        (_two_blocks(plain, torch.randn(5, 2, generator=g), 2), {}),
        (_two_blocks(far, torch.randn(4, 3, generator=g), 2), {}),
        (_two_blocks(blocked, torch.randn(2, 6, 1, generator=g), 3), {}),
    ]


def _merge_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        batch = [_int(g, 1, 5) for _ in range(_int(g, 0, 3))]  # up to two leading axes (B, H)
        T, S, Dv = _int(g, 1, 41), _int(g, 2, 49), _int(g, 1, 65)
        spread = float(torch.empty(()).uniform_(1.0, 200.0, generator=g))
        scores = spread * torch.randn(*batch, T, S, generator=g)
        scores = scores.masked_fill(torch.rand(*batch, T, S, generator=g) < 0.3, NEG_INF)
        scores = scores.masked_fill(torch.rand(*batch, T, 1, generator=g) < 0.15, NEG_INF)  # rows that see nothing
        cases.append((_two_blocks(scores, torch.randn(*batch, S, Dv, generator=g), _int(g, 1, S)), {}))
    return cases


def _guarded(m: torch.Tensor) -> torch.Tensor:
    return m.masked_fill(m == NEG_INF, 0.0)


def _merge_not_rescaled(m1, l1, o1, m2, l2, o2):
    return torch.maximum(m1, m2), l1 + l2, o1 + o2  # each sum is still relative to its own block's maximum


def _merge_upside_down(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(_guarded(m) - m1), torch.exp(_guarded(m) - m2)  # exp(m_new - m_old): >= 1, grows
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


def _merge_only_l(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - _guarded(m)), torch.exp(m2 - _guarded(m))
    return m, a1 * l1 + a2 * l2, o1 + o2


def _merge_last_max(m1, l1, o1, m2, l2, o2):
    m = m2  # the newest block's maximum, not the larger of the two
    a1 = torch.exp(m1 - _guarded(m))  # exp(m1 - m2) overflows when block 1 was far higher
    return m, a1 * l1 + l2, a1 * o1 + o2


def _merge_unguarded(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)  # -inf - (-inf) = NaN where neither block saw a key
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2


EXERCISES = (
    Exercise(
        key="08.1",
        title="merge two blocks of an online softmax",
        signature="merge_blocks(m1, l1, o1, m2, l2, o2) -> (m, l, o): m, l (..., T, 1), o (..., T, Dv)",
        solution=_merge_solution,
        cases=_merge_cases,
        draw=_merge_draw,
        mistakes=(
            Mistake(
                "sums added without rescaling",
                "Each block's l and o were summed relative to that block's own maximum; once the maximum "
                "is the larger of the two, the block whose maximum was smaller must shrink by the gap "
                "before the sums can be added.",
                _merge_not_rescaled,
                fix="a1, a2 = exp(m1 - m), exp(m2 - m); l = a1 * l1 + a2 * l2; o = a1 * o1 + a2 * o2",
            ),
            Mistake(
                "rescaled upside down",
                "The factor that moves a sum from its old maximum to the new, larger one is at most 1: a "
                "block whose maximum was lower counts for less, not more.",
                _merge_upside_down,
                fix="exp(m_old - m_new), not exp(m_new - m_old)",
            ),
            Mistake(
                "o added without rescaling",
                "l is rescaled, but o was summed relative to the same old maximum as l, so it needs the same factor.",
                _merge_only_l,
                fix="o = a1 * o1 + a2 * o2 with the factors used for l",
            ),
            Mistake(
                "kept the second block's maximum",
                "The running maximum is the larger of the two maxima. Keeping the newest block's one "
                "makes the factor for the first block exponentially large when that block scored higher: "
                "it overflows.",
                _merge_last_max,
                fix="m = torch.maximum(m1, m2)",
            ),
            Mistake(
                "NaN for a query that saw no key in either block",
                "A query whose keys were all blocked in both blocks has maximum -inf twice, and "
                "-inf minus -inf is not a number. Subtract something finite for such rows (they have "
                "nothing to rescale) so that they stay (-inf, 0, 0).",
                _merge_unguarded,
                fix="m_safe = m.masked_fill(m == float('-inf'), 0.0), then exp(m1 - m_safe) and exp(m2 - m_safe)",
            ),
        ),
    ),
)
