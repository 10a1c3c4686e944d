"""Exercises of notebook 06 (positional encodings): the sinusoidal table, RoPE, the causal ALiBi bias.

Each reference solution comes from :mod:`course_utils.positional`; each mistake is one seen in real code:
sin and cos swapped, the frequency exponent i / C instead of 2i / C, positions counted from 1, the two
RoPE pairings mixed up, a rotation in the wrong direction, the absolute positions of a cache ignored, ALiBi
slopes reversed or with the wrong sign, and the causal part forgotten.
"""

from __future__ import annotations

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.masking import causal_mask, convert_mask
from course_utils.positional import alibi_bias, apply_rope, sinusoidal_encoding

__all__ = ["EXERCISES"]


# ---------------------------------------------------------------- 06.1 sinusoidal encoding


def _sin_cases():
    return [((4, 6), {}), ((7, 8), {}), ((3, 2), {})]


def _sin_steps(T, C, swap=False, exponent="2i/C", start=0, layout="interleaved"):
    t = torch.arange(start, start + T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(C // 2, dtype=torch.float64)[None, :]  # (1, C/2)
    power = 2 * i / C if exponent == "2i/C" else i / C
    angles = t / 10000.0 ** power  # (T, C/2)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if layout == "halves":
        return torch.cat([first, second], dim=-1).float()
    return torch.stack([first, second], dim=-1).reshape(T, C).float()


# ---------------------------------------------------------------- 06.2 RoPE


def _rope_cases():
    g = torch.Generator().manual_seed(6)
    return [
        ((torch.randn(1, 1, 4, 4, generator=g), torch.arange(4)), {}),
        ((torch.randn(2, 2, 5, 6, generator=g), torch.arange(3, 8)), {}),
        ((torch.randn(1, 2, 3, 8, generator=g), torch.tensor([10, 11, 12])), {}),
    ]


def _rope_steps(x, positions, sign=1.0, pairing="interleaved", exponent="2i/D", use_positions=True):
    T, D = x.shape[-2], x.shape[-1]
    pos = positions if use_positions else torch.arange(T)
    i = torch.arange(D // 2, dtype=torch.float64)
    theta = 10000.0 ** -(2 * i / D if exponent == "2i/D" else i / D)  # (D/2,)
    angles = sign * pos.double()[:, None] * theta  # (T, D/2)
    cos, sin = angles.cos().float(), angles.sin().float()
    if pairing == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# ---------------------------------------------------------------- 06.3 causal ALiBi bias


def _alibi_solution(H, T):
    return alibi_bias(H, T) + convert_mask(causal_mask(T), "allow", "additive")  # (H, T, T), -inf above


def _alibi_cases():
    return [((8, 5), {}), ((4, 3), {}), ((2, 4), {})]


def _alibi_steps(H, T, sign=-1.0, order="steepest first", first_exponent=1, causal=True):
    slopes = torch.tensor([2.0 ** (-8.0 * (h + first_exponent) / H) for h in range(H)])  # (H,)
    if order == "reversed":
        slopes = slopes.flip(0)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    bias = sign * slopes[:, None, None] * (i - j).float()  # (H, T, T)
    if causal:
        bias = bias.masked_fill(j > i, float("-inf"))
    return bias


EXERCISES = (
    Exercise(
        key="06.1",
        title="sinusoidal encoding",
        signature="my_sinusoidal_encoding(T, C) -> (T, C)",
        solution=sinusoidal_encoding,
        cases=_sin_cases,
        mistakes=(
            Mistake("sin and cos swapped",
                    "Even channels 2i hold the sine, odd channels 2i+1 the cosine: row 0 must be (0, 1, 0, 1, ...).",
                    lambda T, C: _sin_steps(T, C, swap=True)),
            Mistake("the frequency exponent is i / C instead of 2i / C",
                    "Pair i uses omega_i = 10000 ** (-2i / C), with i counting pairs (0 .. C/2 - 1); with i / C the "
                    "slowest frequency is only 10000 ** -0.5.",
                    lambda T, C: _sin_steps(T, C, exponent="i/C")),
            Mistake("positions counted from 1",
                    "The first position is t = 0: torch.arange(T), not torch.arange(1, T + 1).",
                    lambda T, C: _sin_steps(T, C, start=1)),
            Mistake("sines and cosines in two halves",
                    "Interleave them (sin, cos, sin, cos, ...): stack the two (T, C/2) tables on a new last axis "
                    "and reshape to (T, C), rather than concatenating them.",
                    lambda T, C: _sin_steps(T, C, layout="halves")),
        ),
    ),
    Exercise(
        key="06.2",
        title="apply_rope (interleaved pairs)",
        signature="my_apply_rope(x, positions) -> (B, H, T, D)",
        solution=lambda x, positions: apply_rope(x, positions, pairing="interleaved"),
        cases=_rope_cases,
        mistakes=(
            Mistake("the rotation goes the wrong way",
                    "Rotate counter-clockwise: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos). Your signs give a "
                    "rotation by -angle.",
                    lambda x, p: _rope_steps(x, p, sign=-1.0)),
            Mistake("the half pairing instead of the interleaved one",
                    "This exercise pairs neighbouring channels (0, 1), (2, 3), ...: x[..., 0::2] with x[..., 1::2], "
                    "not the first half with the second half (that is the GPT-NeoX convention).",
                    lambda x, p: _rope_steps(x, p, pairing="half")),
            Mistake("the frequency exponent is i / D instead of 2i / D",
                    "Pair i turns with theta_i = 10000 ** (-2i / D), i = 0 .. D/2 - 1.",
                    lambda x, p: _rope_steps(x, p, exponent="i/D")),
            Mistake("the positions argument is ignored",
                    "Rotate row r by positions[r], not by r: new tokens decoded with a cache sit at positions "
                    "t0, t0 + 1, ..., not at 0, 1, ...",
                    lambda x, p: _rope_steps(x, p, use_positions=False)),
        ),
    ),
    Exercise(
        key="06.3",
        title="causal ALiBi bias",
        signature="my_alibi_bias(H, T) -> (H, T, T)",
        solution=_alibi_solution,
        cases=_alibi_cases,
        mistakes=(
            Mistake("the penalty has the wrong sign",
                    "ALiBi subtracts slope * distance: far keys must get lower scores, so the entries below the "
                    "diagonal are -m (i - j) <= 0.",
                    lambda H, T: _alibi_steps(H, T, sign=1.0)),
            Mistake("the slopes are in the wrong order",
                    "Head 0 gets the steepest slope 2^(-8/H) and the last head the gentlest 2^(-8); yours run the "
                    "other way.",
                    lambda H, T: _alibi_steps(H, T, order="reversed")),
            Mistake("the slopes start at 1",
                    "Slope h is 2^(-8 (h + 1) / H) for h = 0 .. H-1, so the first is 2^(-8/H), not 2^0 = 1.",
                    lambda H, T: _alibi_steps(H, T, first_exponent=0)),
            Mistake("the causal part is forgotten",
                    "Future keys (j > i) must be blocked: put -inf there. Without it, -m (i - j) becomes a "
                    "*bonus* for future keys.",
                    lambda H, T: _alibi_steps(H, T, causal=False)),
        ),
    ),
)
