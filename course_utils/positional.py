"""Positional encodings, in reading order: learned, sinusoidal, RoPE, ALiBi, and attention with ALiBi.

Taught in notebook 06; attention with RoPE is ``variants.GroupedQueryAttention(rope=True)``. RoPE turns
counter-clockwise with the ``"half"`` pairing (i, i + D/2).
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import nn

from course_utils._validate import (
    MAX_POSITIONS,
    check_choice,
    check_float_tensor,
    check_greater_than,
    check_int,
    check_last_positions,
    check_positions,
)
from course_utils.multihead import MultiHeadAttention, check_attention_call, split_heads

__all__ = [
    "LearnedPositionalEmbedding",
    "sinusoidal_frequencies",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "apply_rope",
    "RotaryTable",
    "rope_pairing_permutation",
    "alibi_slopes",
    "alibi_bias",
    "ALiBiMultiHeadAttention",
    "Pairing",
]

Pairing = Literal["interleaved", "half"]
_PAIRINGS = get_args(Pairing)


def check_even(name: str, n: int, why: str = "RoPE rotates pairs of channels") -> None:
    """Raise ValueError unless ``n`` is even; ``why`` says what comes in pairs."""
    if n % 2 != 0:
        raise ValueError(f"{name} must be even ({why}), got {n}")


# --- Learned absolute positions (GPT-2 style) ---------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """A trainable vector per position 0 .. context_length - 1, added to the token embeddings.

    Raises ValueError for a position >= ``context_length``.
    Shape: x (B, T, C), positions (T,) integers or None -> (B, T, C). Taught in notebook 06.
    """

    def __init__(self, context_length: int, embed_dim: int) -> None:
        super().__init__()
        check_int("context_length", context_length)
        check_int("embed_dim", embed_dim)
        self.context_length, self.embed_dim = context_length, embed_dim
        self.embedding = nn.Embedding(context_length, embed_dim)  # weight: (context_length, C)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        check_float_tensor("x", x, min_dim=2)
        if x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must end in embed_dim = {self.embed_dim} channels, got shape {tuple(x.shape)}")
        T = x.shape[-2]
        if positions is not None:
            check_positions(positions, T)
        last = T - 1 if positions is None or not positions.numel() else int(positions.max())  # x may be on meta
        positions = torch.arange(T, device=x.device) if positions is None else positions.to(x.device, torch.long)
        if last >= self.context_length:
            raise ValueError(
                f"position {last} is beyond context_length = {self.context_length}: a learned "
                f"position embedding only has rows for positions 0 .. {self.context_length - 1}"
            )
        return x + self.embedding(positions)  # (B, T, C) + (T, C) -> (B, T, C)


# --- Sinusoidal encoding (Vaswani et al. 2017) --------------------------------------------------------------


def sinusoidal_frequencies(C: int, base: float = 10000.0) -> torch.Tensor:
    """The angular frequencies omega_i = base ** (-2i / C), i = 0 .. C/2 - 1, fastest first.

    Shape: -> (C // 2,) float64. Taught in notebook 06.
    """
    check_int("C", C, minimum=2)
    check_even("C", C, "the channels come in (sin, cos) pairs")
    check_greater_than("base", base, 1)
    return base ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)  # (C/2,)


def sinusoidal_encoding(T: int, C: int, base: float = 10000.0) -> torch.Tensor:
    """PE[t, 2i] = sin(t * omega_i), PE[t, 2i+1] = cos(t * omega_i), for positions t = 0 .. T-1.

    Shape: -> (T, C) float32. Taught in notebook 06.
    """
    check_int("T", T)
    omega = sinusoidal_frequencies(C, base)  # (C/2,)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * omega[None, :]  # (T, 1) * (1, C/2) -> (T, C/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, C/2, 2): (sin, cos) side by side
    return pe.reshape(T, C).float()  # (T, C), channels sin, cos, sin, cos, ...


def sinusoidal_shift_matrix(k: int, C: int, base: float = 10000.0) -> torch.Tensor:
    """The matrix M_k with PE[t + k] = M_k @ PE[t] for every t: a 2x2 rotation per frequency pair.

    Shape: -> (C, C) float64, block diagonal. Taught in notebook 06.
    """
    check_int("k", k, minimum=None, expected="an int (an offset in positions)")
    omega = sinusoidal_frequencies(C, base)  # (C/2,)
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (C/2,) each
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (C/2, 2, 2)
    return torch.block_diag(*blocks)  # (C, C)


# --- Rotary position embeddings (RoPE, Su et al. 2021) ------------------------------------------------------


def _rotate_channels(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pairing: str) -> torch.Tensor:
    """The rotation given cos and sin (T, D/2), for both pairings, in the promoted dtype."""
    D = x.shape[-1]
    if pairing == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each: channels 0, 2, 4, ... and 1, 3, 5, ...
        r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos  # counter-clockwise in each pair's plane
        return torch.stack([r1, r2], dim=-1).flatten(-2)  # (..., T, D/2, 2) -> (..., T, D), interleaved again
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]  # (..., T, D/2) each: first half and second half
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, D): two slices, no strides


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    base: float = 10000.0,
    pairing: Pairing = "half",
) -> torch.Tensor:
    """Rotary position embedding: rotate channel pair i of position t by the angle t * theta_i.

    theta_i = base ** (-2i / D); ``positions`` default to 0 .. T-1. ``pairing``: ``"half"`` (i, i + D/2; the
    course's) or ``"interleaved"`` (2i, 2i+1; RoFormer's).
    Shape: x (..., T, D), D even; positions (T,) integers or None -> (..., T, D). Taught in notebook 06.
    """
    check_float_tensor("x", x, min_dim=2)
    check_choice("pairing", pairing, _PAIRINGS)
    check_even("the last dimension D of x", x.shape[-1])
    if x.shape[-1] == 0:
        raise ValueError(f"the last dimension D of x (head_dim) must be at least 2, got shape {tuple(x.shape)}")
    T, D = x.shape[-2:]
    if positions is not None:
        check_positions(positions, T)
    positions = torch.arange(T, device=x.device) if positions is None else positions.to(x.device)  # (T,)
    theta = sinusoidal_frequencies(D, base).to(x.device)  # (D/2,), float64 for accurate angles
    angles = positions.to(torch.float64)[:, None] * theta[None, :]  # (T, 1) * (1, D/2) -> (T, D/2)
    out = _rotate_channels(x, angles.cos(), angles.sin(), pairing)  # (..., T, D), float64
    return out.to(x.dtype)  # the angles were float64 (accurate at large positions); back to x's dtype


class RotaryTable:
    """RoPE for a model that rotates at every layer and step: the cos and sin of its angles, made once.

    ``rotate(x, start)`` is ``apply_rope(x, torch.arange(start, start + T), base, pairing)`` up to rounding,
    in x's dtype but at least float32. Shape: x (..., T, D) -> (..., T, D). Taught in notebook 06.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, length: int = 0, pairing: Pairing = "half") -> None:
        check_int("head_dim", head_dim, minimum=2)
        check_even("head_dim", head_dim)
        check_int("length", length, minimum=0)
        check_choice("pairing", pairing, _PAIRINGS)
        check_greater_than("base", base, 1)
        self.head_dim, self.base, self.length, self.pairing = int(head_dim), float(base), int(length), pairing
        self.theta = sinusoidal_frequencies(self.head_dim, self.base)  # (D/2,) float64, made (and checked) once
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (device, dtype) -> cos, sin

    def __repr__(self) -> str:
        return (
            f"RotaryTable(head_dim={self.head_dim}, base={self.base:g}, length={self.length}, pairing={self.pairing!r})"
        )

    def cos_sin(self, n: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles of positions 0 .. n-1, (n, D/2) each, in ``dtype`` on ``device``."""
        key = (torch.device(device), dtype)
        table = self._tables.get(key)
        if table is None or table[0].shape[0] < n:
            angles = torch.arange(max(n, self.length), dtype=torch.float64)[:, None] * self.theta[None, :]  # (N, D/2)
            table = (angles.cos().to(device=device, dtype=dtype), angles.sin().to(device=device, dtype=dtype))
            self._tables[key] = table
        return table[0][:n], table[1][:n]

    def rotate(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x rotated at positions start .. start + T - 1 (a KV cache's new tokens start at its length)."""
        check_float_tensor("x", x, min_dim=2)
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x must end in head_dim = {self.head_dim} channels, got shape {tuple(x.shape)}")
        check_int("start", start, minimum=0)
        if start > MAX_POSITIONS:  # the table holds start + T rows
            raise ValueError(f"start must be at most {MAX_POSITIONS} (the table holds start + T rows), got {start}")
        return self.rotate_unchecked(x, start)

    def rotate_unchecked(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """:meth:`rotate` for a model that checked its input at its door."""
        T = x.shape[-2]
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        cos, sin = self.cos_sin(start + T, x.device, wide.dtype)
        out = _rotate_channels(wide, cos[start : start + T], sin[start : start + T], self.pairing)  # (..., T, D)
        return out.to(x.dtype)


def rope_pairing_permutation(D: int) -> torch.Tensor:
    """The channel order ``perm`` that turns the interleaved pairing into the half pairing.

    ``apply_rope(x[..., perm], pairing="half") == apply_rope(x, pairing="interleaved")[..., perm]``.
    Shape: -> (D,) LongTensor [0, 2, ..., D-2, 1, 3, ..., D-1]. Taught in notebook 06.
    """
    check_int("D", D, minimum=2)
    check_even("D", D)
    return torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # (D,)


# --- ALiBi: attention with linear biases (Press et al. 2022) ------------------------------------------------


def _slopes_power_of_two(n: int) -> list[float]:
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]  # 2^(-8/n), 2^(-16/n), ..., 2^-8


def alibi_slopes(H: int) -> torch.Tensor:
    """One slope per head, 2^(-8/H), 2^(-16/H), ..., 2^(-8), steepest first.

    When H is not a power of two, the paper's reference rule. Shape: -> (H,) float32. Taught in notebook 06.
    """
    check_int("H", H)
    n = 2 ** int(math.floor(math.log2(H)))
    slopes = _slopes_power_of_two(n) + _slopes_power_of_two(2 * n)[0::2][: H - n]
    return torch.tensor(slopes, dtype=torch.float32)  # (H,)


def alibi_bias(H: int, T: int, S: int | None = None) -> torch.Tensor:
    """ALiBi's additive bias -slope_h * |i - j|, for the ``bias=`` of the course's attention.

    With T < S the queries are the last T of the S positions, as in ``causal_mask(T, S)``.
    Shape: -> (H, T, S) float32, S defaults to T. Taught in notebook 06.
    """
    S = T if S is None else S
    check_int("H", H)
    check_int("T", T)
    check_int("S", S)
    check_last_positions(T, S, "alibi_bias")
    query_pos = torch.arange(S - T, S)  # (T,): absolute positions of the queries
    distance = (query_pos[:, None] - torch.arange(S)[None, :]).abs()  # (T, 1) - (1, S) -> (T, S)
    return alibi_slopes(H)[:, None, None] * (-distance)[None].float()  # (H, 1, 1) * (1, T, S) -> (H, T, S)


# --- Attention with ALiBi: one step changed, everything else from MultiHeadAttention -----------------------


class ALiBiMultiHeadAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` with ALiBi: a per-head linear distance penalty added to the scores.

    Shape: x (B, T, C), mask bool broadcastable to (B, H, T, T) -> out (B, T, C), and weights (B, H, T, T)
    with ``need_weights``. Taught in notebook 06.
    """

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        check_attention_call(self, x, mask, need_weights)
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # (B, T, C) -> (B, T, 3C) -> 3 x (B, T, C)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))  # (B, T, C) -> (B, H, T, D)
        bias = alibi_bias(self.num_heads, x.shape[1]).to(x)  # (H, T, T): the one new step
        return self._attend_heads(q, k, v, mask, need_weights, bias=bias)  # (B, T, C)
