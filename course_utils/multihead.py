"""Multi-head attention, built up the way notebook 04 teaches it and checked in notebook 05.

Reading order: :class:`SingleHeadAttention`, :class:`MultiHeadAttentionWrapper`,
:class:`MultiHeadAttentionEinsum`, then :class:`MultiHeadAttention`, the packed module the course uses.
All four compute the same function; ``from_packed`` copies weights between them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import (
    check_bool,
    check_bool_mask,
    check_embedded,
    check_float_tensor,
    check_fraction,
    check_heads,
    check_int,
    check_matches_module,
    check_same_device,
    check_tensor,
)
from course_utils.attention import attend

__all__ = [
    "split_heads",
    "merge_heads",
    "SingleHeadAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttentionEinsum",
    "MultiHeadAttention",
]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the channels into heads and move the head axis before time.

    Shape: x (B, T, C) -> (B, H, T, D), D = C // H. Taught in notebook 04.
    """
    check_tensor("x", x, min_dim=3)
    if x.dim() != 3:
        raise ValueError(f"split_heads takes x of shape (B, T, C), got {tuple(x.shape)}")
    check_heads(x.shape[-1], num_heads)
    B, T, C = x.shape
    D = C // num_heads
    return x.view(B, T, num_heads, D).transpose(1, 2)  # (B, T, C) -> (B, T, H, D) -> (B, H, T, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Undo :func:`split_heads`: put the heads side by side again.

    Shape: x (B, H, T, D) -> (B, T, C), C = H * D. Taught in notebook 04.
    """
    check_tensor("x", x, min_dim=4)
    if x.dim() != 4:
        raise ValueError(f"merge_heads takes x of shape (B, H, T, D), got {tuple(x.shape)}")
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)


def check_attention_call(
    module: nn.Module, x: object, mask: object, need_weights: object, memory: object = None, per_head: bool = True
) -> None:
    """The door of every attention module here: ``x`` (B, T, C) of the module's width, dtype and device,
    ``need_weights`` a bool, ``memory`` None or (B, S, C) like x, and ``mask`` None or a boolean mask on x's
    device that broadcasts to the scores (B, H, T, S), or (B, T, S) with ``per_head=False``."""
    check_embedded("x", x, module.embed_dim, module)
    check_bool("need_weights", need_weights)
    if memory is not None:
        check_float_tensor("memory", memory, min_dim=3)
        B, C = x.shape[0], module.embed_dim
        if memory.dim() != 3 or memory.shape[0] != B or memory.shape[1] == 0 or memory.shape[2] != C:
            raise ValueError(
                f"memory must have shape (B={B}, S >= 1, C={C}) for x of shape {tuple(x.shape)}, "
                f"got {tuple(memory.shape)}"
            )
        check_matches_module("memory", memory, module)
    if mask is not None:
        B, T, _ = x.shape
        S = T if memory is None else memory.shape[1]
        check_bool_mask(mask, (B, int(module.num_heads), T, S) if per_head else (B, T, S))  # numpy ints too
        check_same_device(q=x, mask=mask)  # the queries are made on x's device


def _returned(out: torch.Tensor, weights: torch.Tensor, need_weights: bool):
    return (out, weights) if need_weights else out


def _like_packed(cls: type, packed: object) -> tuple[nn.Module, bool]:
    """A new ``cls`` the size, dtype and device of ``packed`` (a :class:`MultiHeadAttention`), and its ``bias``."""
    if not isinstance(packed, MultiHeadAttention):
        hint = " (convert it first with MultiHeadAttention.from_torch)" * isinstance(packed, nn.MultiheadAttention)
        raise TypeError(f"from_packed takes a course_utils MultiHeadAttention{hint}, got {type(packed).__name__}")
    bias = packed.qkv_proj.bias is not None
    return cls(packed.embed_dim, packed.num_heads, bias=bias).to(packed.qkv_proj.weight), bias


class SingleHeadAttention(nn.Module):
    """One attention head with its own query, key and value projections C -> D.

    Shape: x (B, T, C), mask bool broadcastable to (B, T, T) -> out (B, T, D), and weights (B, T, T) with
    ``need_weights``. Taught in notebook 04.
    """

    def __init__(self, embed_dim: int, head_dim: int, bias: bool = False) -> None:
        super().__init__()
        check_int("embed_dim", embed_dim)
        check_int("head_dim", head_dim)
        self.embed_dim, self.head_dim = embed_dim, head_dim
        self.q_proj = nn.Linear(embed_dim, head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, head_dim, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        check_attention_call(self, x, mask, need_weights, per_head=False)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) -> (B, T, D) each
        out, weights = attend(q, k, v, mask)  # (B, T, D), (B, T, T)
        return _returned(out, weights, need_weights)


def _mask_of_head(mask: torch.Tensor | None, h: int) -> torch.Tensor | None:
    """The part of a mask broadcastable to (B, H, T, S) that head h sees: (B or 1, T, S)."""
    if mask is None or mask.dim() < 3:
        return mask
    m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (..., T, S) -> (B|1, H|1, T|1, S|1)
    return m[:, h if m.shape[1] > 1 else 0]  # (B|1, T|1, S|1)


class MultiHeadAttentionWrapper(nn.Module):
    """H independent :class:`SingleHeadAttention` heads run one after another, concatenated, then projected.

    Shape: x (B, T, C), mask bool broadcastable to (B, H, T, T) -> out (B, T, C), and weights (B, H, T, T)
    with ``need_weights``. Taught in notebook 04.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.heads = nn.ModuleList(SingleHeadAttention(embed_dim, self.head_dim, bias) for _ in range(num_heads))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        check_attention_call(self, x, mask, need_weights)
        results = [
            head(x, _mask_of_head(mask, h), need_weights=True)  # H x ((B, T, D), (B, T, T))
            for h, head in enumerate(self.heads)
        ]
        out = torch.cat([o for o, _ in results], dim=-1)  # H x (B, T, D) -> (B, T, C)
        weights = torch.stack([w for _, w in results], dim=1)  # H x (B, T, T) -> (B, H, T, T)
        return _returned(self.out_proj(out), weights, need_weights)

    @classmethod
    def from_packed(cls, packed: MultiHeadAttention) -> MultiHeadAttentionWrapper:
        """The same function as ``packed``, its q, k, v rows cut into one head each."""
        new, bias = _like_packed(cls, packed)
        C, D = packed.embed_dim, packed.head_dim
        with torch.no_grad():
            for h, head in enumerate(new.heads):
                for i, proj in enumerate((head.q_proj, head.k_proj, head.v_proj)):
                    rows = slice(i * C + h * D, i * C + (h + 1) * D)
                    proj.weight.copy_(packed.qkv_proj.weight[rows])
                    if bias:
                        proj.bias.copy_(packed.qkv_proj.bias[rows])
            new.out_proj.load_state_dict(packed.out_proj.state_dict())
        return new


class MultiHeadAttentionEinsum(nn.Module):
    """All heads at once, with per-head projection weights (H, D, C) and ``torch.einsum``.

    Shape: x (B, T, C) -> out (B, T, C), and weights (B, H, T, T) with ``need_weights``.
    Taught in notebook 04.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        H, D, C = num_heads, self.head_dim, embed_dim
        bound = C**-0.5  # the same uniform init nn.Linear(C, D) uses
        self.w_q, self.w_k, self.w_v = (nn.Parameter(torch.empty(H, D, C).uniform_(-bound, bound)) for _ in range(3))
        if bias:
            self.b_q, self.b_k, self.b_v = (nn.Parameter(torch.empty(H, D).uniform_(-bound, bound)) for _ in range(3))
        else:
            self.b_q = self.b_k = self.b_v = None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _project(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        y = torch.einsum("hdc,btc->bhtd", w, x)  # (H, D, C), (B, T, C) -> (B, H, T, D)
        return y if b is None else y + b[None, :, None, :]  # (1, H, 1, D) broadcasts over B and T

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        check_attention_call(self, x, mask, need_weights)
        q = self._project(x, self.w_q, self.b_q)  # (B, H, T, D)
        k = self._project(x, self.w_k, self.b_k)  # (B, H, T, D)
        v = self._project(x, self.w_v, self.b_v)  # (B, H, T, D)
        out, weights = attend(q, k, v, mask)  # (B, H, T, D), (B, H, T, T)
        return _returned(self.out_proj(merge_heads(out)), weights, need_weights)  # (B, T, C)

    @classmethod
    def from_packed(cls, packed: MultiHeadAttention) -> MultiHeadAttentionEinsum:
        """The same function as ``packed``: its (3C, C) weight viewed as three (H, D, C) blocks."""
        new, bias = _like_packed(cls, packed)
        H, D, C = packed.num_heads, packed.head_dim, packed.embed_dim
        with torch.no_grad():
            w = packed.qkv_proj.weight.view(3, H, D, C)  # (3C, C) -> (3, H, D, C)
            for i, p in enumerate((new.w_q, new.w_k, new.w_v)):
                p.copy_(w[i])
            if bias:
                b = packed.qkv_proj.bias.view(3, H, D)  # (3C,) -> (3, H, D)
                for i, p in enumerate((new.b_q, new.b_k, new.b_v)):
                    p.copy_(b[i])
            new.out_proj.load_state_dict(packed.out_proj.state_dict())
        return new


class MultiHeadAttention(nn.Module):
    """Multi-head attention with one packed projection ``qkv_proj`` (q, k, v in that order) and ``out_proj``.

    The layout of ``nn.MultiheadAttention``, so :meth:`from_torch` copies weights across. With ``memory``
    (cross-attention) the keys and values come from it. A (B, S) padding mask ``m`` goes in as
    ``m[:, None, None, :]`` (not ``m[:, None, :]``: notebook 04, Pitfall 4).
    Shape: x (B, T, C), memory (B, S, C) or None (S = T), mask bool broadcastable to (B, H, T, S)
    -> out (B, T, C), and weights (B, H, T, S) with ``need_weights``. Taught in notebooks 04 and 05.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        check_heads(embed_dim, num_heads)
        check_fraction("dropout", dropout)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout = float(dropout)
        self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        *,
        memory: torch.Tensor | None = None,
    ):
        C = self.embed_dim
        if isinstance(mask, torch.Tensor) and mask.is_floating_point() and mask.dim() == 3 and mask.shape[-1] == C:
            raise TypeError(  # nn.MultiheadAttention's habit, attn(x, memory), by position
                f"mask must be boolean, got a floating tensor of shape {tuple(mask.shape)}, which looks like a "
                f"(B, S, C) memory: for cross-attention pass it by keyword, attn(x, memory=m)"
            )
        check_attention_call(self, x, mask, need_weights, memory)
        if memory is None:  # self-attention: queries, keys and values all from x
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # (B, T, C) -> (B, T, 3C) -> 3 x (B, T, C)
        else:  # cross-attention: queries from x, keys and values from the memory
            w_q, w_kv = self.qkv_proj.weight.split([C, 2 * C])  # (3C, C) -> (C, C), (2C, C)
            b = self.qkv_proj.bias
            b_q, b_kv = (None, None) if b is None else b.split([C, 2 * C])  # (3C,) -> (C,), (2C,)
            q = F.linear(x, w_q, b_q)  # (B, T, C) -> (B, T, C)
            k, v = F.linear(memory, w_kv, b_kv).chunk(2, dim=-1)  # (B, S, C) -> (B, S, 2C) -> 2 x (B, S, C)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))  # (B, T or S, C) -> (B, H, T or S, D)
        return self._attend_heads(q, k, v, mask, need_weights)

    def _attend_heads(self, q, k, v, mask=None, need_weights=False, bias=None):
        """The rest of :meth:`forward` from the heads q (B, H, T, D), k, v (B, H, S, D) on (dropout when training):
        attention, heads merged, ``out_proj``. The variants of notebook 06 change a step before it."""
        p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, dropout_p=p, bias=bias)  # (B, H, T, D), (B, H, T, S)
        return _returned(self.out_proj(merge_heads(out)), weights, need_weights)  # (B, T, C)

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """A module computing what ``m`` does, batch first: ``ours(x, memory=mem)`` is ``m(x, mem, mem)``."""
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"from_torch takes an nn.MultiheadAttention, got {type(m).__name__}")
        if not m._qkv_same_embed_dim:
            raise ValueError("from_torch needs kdim == vdim == embed_dim (one packed in_proj_weight)")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("from_torch does not support add_bias_kv or add_zero_attn")
        bias = m.in_proj_bias is not None
        new = cls(m.embed_dim, m.num_heads, bias=bias, dropout=m.dropout).to(m.in_proj_weight)
        with torch.no_grad():
            new.qkv_proj.weight.copy_(m.in_proj_weight)
            new.out_proj.weight.copy_(m.out_proj.weight)
            if bias:
                new.qkv_proj.bias.copy_(m.in_proj_bias)
                new.out_proj.bias.copy_(m.out_proj.bias)
        return new.train(m.training)
