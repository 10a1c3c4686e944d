"""Exercises of notebook 06 (positional encodings): the sinusoidal table, RoPE, the causal ALiBi bias.

Each reference solution comes from :mod:`course_utils.positional`; each mistake is one seen in real code:
sin and cos swapped, the frequency exponent i / C instead of 2i / C, positions counted from 1, the two
RoPE pairings mixed up, a rotation in the wrong direction, the absolute positions of a cache ignored, ALiBi
slopes reversed or with the wrong sign, and the causal part forgotten.
"""

from __future__ import annotations

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.masking import causal_mask, convert_mask
from course_utils.positional import alibi_bias, apply_rope, sinusoidal_encoding

__all__ = ["EXERCISES"]


# ---------------------------------------------------------------- 06.1 sinusoidal encoding


def _sin_cases():
    return [((4, 6), {}), ((7, 8), {}), ((3, 2), {}), ((1, 10), {})]


def _sin_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    return [((randint(g, 1, 65), 2 * randint(g, 1, 33)), {}) for _ in range(4)]  # T up to 64, C up to 64


def _sin_steps(T, C, swap=False, exponent="2i/C", start=0, layout="interleaved"):
    t = torch.arange(start, start + T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(C // 2, dtype=torch.float64)[None, :]  # (1, C/2)
    power = 2 * i / C if exponent == "2i/C" else i / C
    angles = t / 10000.0**power  # (T, C/2)
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
        # positions that are not consecutive (a gap, a repeat, a step back), two of them large; float64, D == 2
        ((torch.randn(2, 1, 5, 2, dtype=torch.float64, generator=g), torch.tensor([2, 9, 9, 4, 3000])), {}),
        ((torch.randn(1, 3, 4, 6, generator=g), torch.tensor([0, 5, 1, 1_000_003])), {}),
        ((torch.randn(1, 1, 1, 4, generator=g), torch.tensor([7])), {}),  # one row (T == 1)
    ]


def _rope_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        B, H, T, D = randint(g, 1, 4), (1, 2, 3, 5, 24)[randint(g, 0, 5)], randint(g, 1, 49), 2 * randint(g, 1, 33)
        start = randint(g, 0, 30)  # rows after a cache start later than 0
        cases.append(((torch.randn(B, H, T, D, generator=g), torch.arange(start, start + T)), {}))
    return cases


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
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# ---------------------------------------------------------------- 06.3 causal ALiBi bias


def _alibi_solution(H, T):
    return alibi_bias(H, T) + convert_mask(causal_mask(T), "allow", "additive")  # (H, T, T), -inf above


def _alibi_cases():
    # 16 heads over 3 tokens: slopes that are not whole powers of 2 (2^-0.5, 2^-1.5, ...) show in the biases
    return [((8, 5), {}), ((4, 3), {}), ((2, 4), {}), ((1, 3), {}), ((16, 1), {}), ((16, 3), {})]


def _alibi_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    return [((2 ** randint(g, 0, 6), randint(g, 1, 49)), {}) for _ in range(4)]  # H a power of two (up to 32), as asked


def _alibi_steps(H, T, sign=-1.0, order="steepest first", first_exponent=1, causal=True, blocked=float("-inf")):
    slopes = torch.tensor([2.0 ** (-8.0 * (h + first_exponent) / H) for h in range(H)])  # (H,)
    if order == "reversed":
        slopes = slopes.flip(0)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    bias = sign * slopes[:, None, None] * (i - j).float()  # (H, T, T)
    if causal:
        bias = bias.masked_fill(j > i, blocked)
    return bias


EXERCISES = (
    Exercise(
        key="06.1",
        title="sinusoidal encoding",
        signature="my_sinusoidal_encoding(T, C) -> float32 (T, C)",
        solution=sinusoidal_encoding,
        cases=_sin_cases,
        draw=_sin_draw,
        edges={
            "T == 1": lambda T, C: T == 1,
            "C == 2": lambda T, C: C == 2,
            "C / 2 odd": lambda T, C: (C // 2) % 2 == 1,
            "T > C": lambda T, C: T > C,
            "T < C": lambda T, C: T < C,
        },
        mistakes=(
            Mistake(
                "sin and cos swapped",
                "Even channels 2i hold the sine, odd channels 2i+1 the cosine: at position 0 the row "
                "reads 0, 1, 0, 1, ...",
                lambda T, C: _sin_steps(T, C, swap=True),
                fix="torch.stack([angles.sin(), angles.cos()], dim=-1)",
            ),
            Mistake(
                "the frequency exponent is i / C instead of 2i / C",
                "i counts pairs of channels, and each pair spans two channels of the width; with your "
                "exponent the frequencies fall off half as fast, so the slowest one is far too fast.",
                lambda T, C: _sin_steps(T, C, exponent="i/C"),
                fix="omega_i = 10000^(-2i / C): 10000.0 ** (-torch.arange(0, C, 2) / C), the exponents 0, 2, "
                "4, ... over C",
            ),
            Mistake(
                "positions counted from 1",
                "The first position is t = 0.",
                lambda T, C: _sin_steps(T, C, start=1),
                fix="torch.arange(T), not torch.arange(1, T + 1)",
            ),
            Mistake(
                "sines and cosines in two halves",
                "The sines and cosines alternate channel by channel (sin, cos, sin, cos, ...); yours are "
                "all the sines, then all the cosines.",
                lambda T, C: _sin_steps(T, C, layout="halves"),
                fix="torch.stack([sin, cos], dim=-1).reshape(T, C), not torch.cat([sin, cos], dim=-1)",
            ),
        ),
    ),
    Exercise(
        key="06.2",
        domain=Domain(float64=("x",)),
        title="apply_rope (interleaved pairs)",
        signature="my_apply_rope(x, positions) -> (B, H, T, D), x's dtype",
        solution=lambda x, positions: apply_rope(x, positions, pairing="interleaved"),
        cases=_rope_cases,
        draw=_rope_draw,
        edges={
            "positions not starting at 0": lambda x, positions: int(positions[0]) != 0,
            "positions not consecutive": lambda x, positions: bool((positions.diff() != 1).any()),
            "large positions (10^6)": lambda x, positions: int(positions.max()) >= 10**6,
            "T == 1": lambda x, positions: x.shape[-2] == 1,
            "D == 2": lambda x, positions: x.shape[-1] == 2,
            "x float64": lambda x, positions: x.dtype == torch.float64,
        },
        mistakes=(
            Mistake(
                "the rotation goes the wrong way",
                "The rotation must be counter-clockwise; your signs rotate each pair by minus the angle.",
                lambda x, p: _rope_steps(x, p, sign=-1.0),
                fix="(x1, x2) -> (x1 * cos - x2 * sin, x1 * sin + x2 * cos)",
            ),
            Mistake(
                "the half pairing instead of the interleaved one",
                "This exercise pairs neighbouring channels (0, 1), (2, 3), ..., not the first half with "
                "the second half (that is the GPT-NeoX convention).",
                lambda x, p: _rope_steps(x, p, pairing="half"),
                fix="x1, x2 = x[..., 0::2], x[..., 1::2]",
            ),
            Mistake(
                "the frequency exponent is i / D instead of 2i / D",
                "i counts pairs of channels, and each pair spans two channels of the head; with your "
                "exponent the frequencies fall off half as fast.",
                lambda x, p: _rope_steps(x, p, exponent="i/D"),
                fix="theta_i = 10000^(-2i / D): 10000.0 ** (-torch.arange(0, D, 2) / D)",
            ),
            Mistake(
                "the positions argument is ignored",
                "Each row turns by its own absolute position: new tokens decoded with a cache sit at "
                "positions t0, t0 + 1, ..., not at 0, 1, ...",
                lambda x, p: _rope_steps(x, p, use_positions=False),
                fix="angles = positions.double()[:, None] * theta, not torch.arange(T)",
            ),
        ),
    ),
    Exercise(
        key="06.3",
        title="causal ALiBi bias",
        signature="my_alibi_bias(H, T) -> float32 (H, T, T), -inf above the diagonal",
        solution=_alibi_solution,
        cases=_alibi_cases,
        draw=_alibi_draw,
        edges={
            "one head": lambda H, T: H == 1,
            "T == 1": lambda H, T: T == 1,
            "H > 8": lambda H, T: H > 8,
            "H > 8 over more than one token": lambda H, T: H > 8 and T > 1,
        },
        mistakes=(
            Mistake(
                "the penalty has the wrong sign",
                "ALiBi lowers the scores of far keys: the entries below the diagonal must be <= 0.",
                lambda H, T: _alibi_steps(H, T, sign=1.0),
                fix="bias = -slopes[:, None, None] * (i - j)",
            ),
            Mistake(
                "the slopes are in the wrong order",
                "Head 0 gets the steepest slope and the last head the gentlest; yours run the other way.",
                lambda H, T: _alibi_steps(H, T, order="reversed"),
                fix="slopes = [2 ** (-8 * (h + 1) / H) for h in range(H)], not reversed",
            ),
            Mistake(
                "the slopes start at 1",
                "With the heads counted from 0, your first head gets slope 2^0 = 1; in the formula even the "
                "steepest slope, head 0's, is already below 1.",
                lambda H, T: _alibi_steps(H, T, first_exponent=0),
                fix="(h + 1) in the exponent, not h",
            ),
            Mistake(
                "the causal part is forgotten",
                "Future keys must be blocked; without that, the distance penalty becomes a bonus for future keys.",
                lambda H, T: _alibi_steps(H, T, causal=False),
                fix='bias.masked_fill(j > i, float("-inf"))',
            ),
            Mistake(
                "a large negative number instead of -inf",
                "A very negative number blocks a key in a softmax just as well, but this exercise asks for "
                "the additive causal mask, which is -inf exactly (adding another bias to -inf keeps it "
                "blocked; a finite number can be pulled back up).",
                lambda H, T: _alibi_steps(H, T, blocked=-1e9),
                fix='float("-inf"), not -1e9',
            ),
        ),
    ),
)
