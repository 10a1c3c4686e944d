"""Attention variants: fewer KV heads, local windows, low-rank and attention-free mixing, a KV cache.

Reading order: grouped-query attention, sliding windows, Linformer and AFT, chunked top-k (notebook 07);
the :class:`KVCache` (09; :class:`~course_utils.gpt.GPT` is the model that uses it). Causal linear attention,
in brief in notebook 07, is in :mod:`course_utils.linear_attention` with its gated forms (notebook 13).
Shapes: Hkv is num_kv_heads, Dv the values' width where it differs from D; masks are True = may attend.

The cache protocol, which :mod:`course_utils.generation` relies on: a model has ``context_length``,
``new_cache() -> KVCache`` and ``forward(idx (B, T), cache=None) -> logits (B, T, V)``. With a cache,
``idx`` holds only the new tokens, at positions ``cache.length ..``; layer ``i`` calls
``k, v = cache.update(i, k_new, v_new)`` and attends with ``causal_mask(T, S)``, S = ``cache.length + T``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import (
    broadcast_shapes,
    check_bool,
    check_bool_mask,
    check_choice,
    check_embedded,
    check_float_tensor,
    check_greater_than,
    check_heads,
    check_int,
    check_last_positions,
    check_qkv,
    check_same_device,
    check_scores_mask,
    check_tensor,
    is_integer_tensor,
)
from course_utils.attention import attend
from course_utils.fast_attention import flash_attention
from course_utils.masking import causal_mask, combine_masks
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import RotaryTable

__all__ = [
    "repeat_kv",
    "GroupedQueryAttention",
    "kv_cache_bytes",
    "sliding_window_mask",
    "sliding_window_attention",
    "linformer_attention",
    "aft_full",
    "aft_local_bias",
    "aft_simple",
    "topk_attention",
    "KVCache",
]


ATTENTION_KERNELS = ("course", "torch", "flash")


# --- 1. Grouped-query attention (Ainslie et al. 2023); multi-query attention (Shazeer 2019) -----------------


def repeat_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Repeat each KV head H // Hkv times in place, so query head h reads KV head h // (H // Hkv).

    Shape: x (B, Hkv, S, D) -> (B, H, S, D). Taught in notebook 07.
    """
    check_tensor("x", x, min_dim=4)
    if x.dim() != 4:
        raise ValueError(f"repeat_kv takes x of shape (B, Hkv, S, D), got {tuple(x.shape)}")
    check_int("num_heads", num_heads)
    check_heads(num_heads, num_heads, x.shape[1])  # embed_dim = num_heads: only "Hkv divides H" can fail
    return x.repeat_interleave(num_heads // x.shape[1], dim=1)  # (B, Hkv, S, D) -> (B, H, S, D)


def _triangle(T: int, S: int, device: torch.device) -> torch.Tensor:
    """:func:`~course_utils.masking.causal_mask` (T, S) without its checks, for a layer that checked its input."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


class GroupedQueryAttention(MultiHeadAttention):
    """Self-attention with H query heads sharing Hkv key/value heads: the attention layer of every decoder here.

    Hkv = ``num_kv_heads`` (None: H, multi-head attention; 1: multi-query) sizes the packed ``qkv_proj``,
    (H + 2 Hkv) D rows, q then k then v. ``rope=True`` rotates q and k at their absolute positions; with a
    :class:`KVCache`, ``x`` holds only the new tokens and ``layer`` picks the cache's slot. ``causal=True``: with
    no ``mask``, query i sees keys up to its own position. ``attention``: the course's kernel (it returns the
    weights), PyTorch's fused one, or the course's FlashAttention (notebook 08, no dropout).
    Shape: x (B, T, C), mask bool broadcastable to (B, H, T, S) -> out (B, T, C), and weights (B, H, T, S)
    (after dropout) with ``need_weights``. Taught in notebook 07; the GPT's layer in notebook 10.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias: bool = False,
        rope: bool = False,
        rope_base: float = 10000.0,
        dropout: float = 0.0,
        causal: bool = False,
        attention: str = "course",
    ) -> None:
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads  # the default: multi-head attention
        for name, flag in (("bias", bias), ("rope", rope), ("causal", causal)):
            check_bool(name, flag)
        check_greater_than("rope_base", rope_base, 1)
        check_choice("attention", attention, ATTENTION_KERNELS)
        check_heads(embed_dim, num_heads, num_kv_heads)
        if attention == "flash" and dropout:
            raise ValueError(f"attention='flash' has no dropout on the attention weights, got dropout={dropout}")
        super().__init__(embed_dim, num_heads, bias=bias, dropout=dropout)
        H, D = num_heads, self.head_dim
        self.num_kv_heads, self.causal, self.attention = int(num_kv_heads), causal, attention
        if num_kv_heads != H:  # fewer key and value rows in the packed projection
            self.qkv_proj = nn.Linear(embed_dim, (H + 2 * num_kv_heads) * D, bias=bias)
        self.rotary = RotaryTable(D, rope_base) if rope else None  # refuses an odd head_dim

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ):
        self.check_call(x, mask, cache, layer, need_weights)
        return self.forward_unchecked(x, mask, cache, layer, need_weights)

    def check_call(self, x: object, mask: object, cache: object, layer: object, need_weights: object) -> None:
        """The layer's door: x (B, T, C) like its weights, ``cache`` None or a KVCache with slot ``layer``,
        ``mask`` None or boolean on x's device, broadcasting to (B, H, T, S), S = what the slot holds + T."""
        check_embedded("x", x, self.embed_dim, self)
        check_bool("need_weights", need_weights)
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
        held = 0 if cache is None else cache.filled(layer)  # filled checks that the cache has slot ``layer``
        if mask is not None:
            B, T, _ = x.shape
            check_bool_mask(mask, (B, self.num_heads, T, held + T))
            check_same_device(x=x, mask=mask)

    def forward_unchecked(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ):
        """:meth:`forward` for a model that checked its input at its door."""
        B, T, C = x.shape
        H, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv_proj(x).split([H * D, Hkv * D, Hkv * D], dim=-1)  # (B, T, C) -> (B, T, (H + 2Hkv) D)
        q, k, v = (t.view(B, T, -1, D).transpose(1, 2) for t in qkv)  # (B, H, T, D), (B, Hkv, T, D) twice
        if self.rotary is not None:  # the new tokens sit at positions start .. start + T - 1
            start = 0 if cache is None else cache._lengths[layer]
            q, k = self.rotary.rotate_unchecked(q, start), self.rotary.rotate_unchecked(k, start)
        if cache is not None:
            k, v = cache._append(layer, k, v)  # (B, Hkv, S, D): earlier keys and values, then these
        if Hkv != H:  # query head h reads KV head h // (H // Hkv)
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)  # (B, H, S, D)
        S = k.shape[-2]
        causal = mask is None and self.causal and T > 1  # no mask given: query i sees the last T of S keys to its own
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights or self.attention == "course":
            mask = _triangle(T, S, x.device) if causal else mask  # (T, S), bottom-right aligned
            out, weights = attend(q, k, v, mask, dropout_p=p)  # (B, H, T, D), (B, H, T, S)
        elif self.attention == "flash":  # no dropout_p: the constructor refuses dropout with it
            out = flash_attention(q, k, v, mask, is_causal=causal)  # (B, H, T, D); causal is bottom-right
        elif causal and T != S:  # is_causal aligns the triangle top-left, wrong when T < S: pass it explicitly
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=_triangle(T, S, x.device), dropout_p=p)
        else:  # PyTorch's fused kernel builds the triangle itself
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        out = out.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)
        out = self.out_proj(out)  # (B, T, C)
        return (out, weights) if need_weights else out

    @classmethod
    def from_multihead(cls, mha: MultiHeadAttention) -> GroupedQueryAttention:
        """The same function as a ``MultiHeadAttention``: one packed qkv_proj, so the weights copy straight."""
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"from_multihead takes a course_utils MultiHeadAttention, got {type(mha).__name__}")
        bias = mha.qkv_proj.bias is not None
        new = cls(mha.embed_dim, mha.num_heads, bias=bias, dropout=mha.dropout).to(mha.qkv_proj.weight)
        new.load_state_dict(mha.state_dict())  # qkv_proj (3C, C) and out_proj: the same names and shapes
        return new


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    num_tokens: int = 1,
    batch_size: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes a KV cache needs: 2 (keys and values) times every argument's product. Taught in notebook 07."""
    for name, n in locals().items():  # every argument, by its name: each a positive int
        check_int(name, n)
    return 2 * num_layers * num_kv_heads * head_dim * num_tokens * batch_size * bytes_per_element


# --- 2. Sliding-window (local) attention (Longformer, Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023) ---


def sliding_window_mask(
    T: int, window: int, S: int | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Causal local mask: query i (at position S - T + i) sees its last ``window`` positions, itself included.

    ``window`` counts keys (Mistral's W is ``window = W + 1``). Shape: -> (T, S), S defaults to T.
    Taught in notebook 07.
    """
    check_int("window", window)
    mask = causal_mask(T, S, device=device)  # (T, S), validates T and S
    S = mask.shape[1]
    return mask & ~torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T - window)


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, chunk_size: int = 128, scale: float | None = None
) -> torch.Tensor:
    """:func:`scaled_dot_product_attention` with :func:`sliding_window_mask`, a chunk of queries at a time.

    Shape: q, k, v (..., T, D) -> out (..., T, D). Taught in notebook 07.
    """
    check_qkv(q, k, v, scale)
    check_int("window", window)
    check_int("chunk_size", chunk_size)
    if k.shape[-2] != q.shape[-2] or v.shape[-2] != q.shape[-2]:
        raise ValueError(
            f"sliding_window_attention is self-attention: q, k, v need the same length T, "
            f"got {q.shape[-2]}, {k.shape[-2]}, {v.shape[-2]}"
        )
    T = q.shape[-2]
    if T == 0:  # no query: an empty output, as F.scaled_dot_product_attention gives
        return v.new_zeros(*broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]), 0, v.shape[-1])
    outs = []
    for i0 in range(0, T, chunk_size):
        i1 = min(i0 + chunk_size, T)
        j0 = max(0, i0 - window + 1)  # the earliest key any query of this chunk may see
        local = sliding_window_mask(i1 - i0, window, i1 - j0, device=q.device)  # (Tc, Sc): queries i0 .. i1 - 1
        out, _ = attend(q[..., i0:i1, :], k[..., j0:i1, :], v[..., j0:i1, :], local, scale=scale)  # (..., Tc, D)
        outs.append(out)
    return torch.cat(outs, dim=-2)  # (..., T, D)


# --- 3. Low rank along the sequence (Linformer, Wang et al. 2020) and attention-free (AFT, Zhai et al. 2021) ---


def linformer_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    proj_k: torch.Tensor,
    proj_v: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Linformer: project the S keys and values down to R rows, then attend to those (not causal).

    Projections longer than S are cut to their first S columns. Taught in notebook 07.
    Shape: q (..., T, D), k, v (..., S, D), proj_k, proj_v (R, S' >= S) -> out (..., T, D).
    """
    check_qkv(q, k, v, scale)
    S = k.shape[-2]
    for name, p in (("proj_k", proj_k), ("proj_v", proj_v)):
        check_tensor(name, p, min_dim=2)
        if p.dim() != 2 or p.shape[1] < S:
            raise ValueError(f"{name} must have shape (R, S') with S' >= S = {S}, got {tuple(p.shape)}")
        if p.dtype != k.dtype:
            raise TypeError(
                f"{name} must have the dtype of q, k and v ({k.dtype}), got {p.dtype}: "
                f"convert it with {name}.to(k.dtype)"
            )
    if proj_k.shape[0] != proj_v.shape[0]:
        raise ValueError(
            f"proj_k and proj_v must have the same number of rows R (the projected length), got "
            f"{tuple(proj_k.shape)} and {tuple(proj_v.shape)}"
        )
    check_same_device(k=k, proj_k=proj_k, proj_v=proj_v)
    k_low = proj_k[:, :S] @ k  # (R, S) @ (..., S, D) -> (..., R, D)
    v_low = proj_v[:, :S] @ v  # (R, S) @ (..., S, D) -> (..., R, D)
    out, _ = attend(q, k_low, v_low, scale=scale)  # (..., T, D)
    return out


def aft_full(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """AFT-full: out_t = sigmoid(q_t) * sum_s softmax_s(k_s + w_ts) v_s, per channel.

    A query that may see no key gets 0. Taught in notebook 07.
    Shape: q (B, T, C), k, v (B, S, C), w (T, S), mask bool broadcastable to (T, S) -> out (B, T, C).
    """
    check_aft_qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    check_float_tensor("w", w, min_dim=2)
    if tuple(w.shape) != (T, S):
        raise ValueError(f"w must have shape (T, S) = ({T}, {S}), got {tuple(w.shape)}")
    if mask is not None:
        check_bool_mask(mask, (T, S))
    check_same_device(q=q, w=w, mask=mask)
    logits = k[..., None, :, :] + w[:, :, None]  # (B, 1, S, C) + (T, S, 1) -> (B, T, S, C)
    if mask is not None:
        m = mask[..., None]  # (T, S, 1): the same for every channel
        logits = logits.masked_fill(~m, float("-inf"))
        sees_nothing = ~mask.any(dim=-1)[..., None, None]  # (T, 1, 1)
        logits = logits.masked_fill(sees_nothing, 0.0)  # no -inf-only rows: softmax would give NaN
    weights = torch.softmax(logits, dim=-2)  # (B, T, S, C): over the keys, per channel
    if mask is not None:
        weights = weights.masked_fill(sees_nothing, 0.0)
    mixed = (weights * v[..., None, :, :]).sum(dim=-2)  # (B, T, S, C) * (B, 1, S, C) -> (B, T, C)
    return torch.sigmoid(q) * mixed  # (B, T, C)


def aft_local_bias(w: torch.Tensor, window: int) -> torch.Tensor:
    """AFT-local's position biases: w inside the window |t - s| < window, 0 (not -inf) outside it.

    Shape: w (T, S) -> (T, S). Taught in notebook 07.
    """
    check_float_tensor("w", w, min_dim=2)
    check_int("window", window)
    T, S = w.shape[-2:]
    i = torch.arange(T, device=w.device)[:, None] + (S - T)  # (T, 1) absolute query positions
    j = torch.arange(S, device=w.device)[None, :]  # (1, S)
    return torch.where((i - j).abs() < window, w, torch.zeros_like(w))  # (T, S)


def check_aft_qkv(q: object, k: object, v: object) -> None:
    """Raise unless q (B, T, C), k and v (B, S, C) fit, with as many channels in q as in v (AFT's door)."""
    check_qkv(q, k, v)
    if q.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"q and v must have the same number of channels C, got q {tuple(q.shape)} and v {tuple(v.shape)}"
        )


def aft_simple(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """AFT-simple (no position biases): out_t = sigmoid(q_t) * sum_s softmax_s(k)_s v_s; not causal.

    Shape: q (B, T, C), k, v (B, S, C) -> out (B, T, C). Taught in notebook 07.
    """
    check_aft_qkv(q, k, v)
    weights = torch.softmax(k, dim=-2)  # (B, S, C): over positions, not channels
    mixed = (weights * v).sum(dim=-2, keepdim=True)  # (B, 1, C)
    return torch.sigmoid(q) * mixed  # (B, T, C)


# --- 4. Chunked top-k (sparse) attention --------------------------------------------------------------------


def topk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    top_k: int,
    mask: torch.Tensor | None = None,
    chunk_size: int = 128,
    scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Each query attends only to its ``top_k`` highest-scoring visible keys; queries go in chunks.

    Peak memory O(chunk_size * S); ``top_k >= S`` is plain attention; ``causal`` adds ``causal_mask(T, S)``.
    Shape: q (..., T, D), k, v (..., S, D), mask bool broadcastable to (..., T, S) -> out (..., T, D).
    Taught in notebook 07.
    """
    check_qkv(q, k, v, scale)
    check_int("top_k", top_k)
    check_int("chunk_size", chunk_size)
    check_bool("causal", causal)
    if mask is not None:
        check_scores_mask(mask, q, k)
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    if causal:
        check_last_positions(T, S, "causal")
    if T == 0:  # no query: an empty output, as F.scaled_dot_product_attention gives
        return v.new_zeros(*broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]), 0, v.shape[-1])
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kk = min(top_k, S)
    outs = []
    for i0 in range(0, T, chunk_size):
        i1 = min(i0 + chunk_size, T)
        qc = q[..., i0:i1, :]  # (..., Tc, D)
        scores = qc @ k.transpose(-2, -1) * scale  # (..., Tc, S)
        m = mask
        if mask is not None and mask.dim() >= 2 and mask.shape[-2] > 1:
            m = mask[..., i0:i1, :]  # (..., Tc, S): this chunk's rows of the mask
        if causal:  # rows i0 .. i1 - 1 of causal_mask(T, S)
            m = combine_masks(m, torch.ones(i1 - i0, S, dtype=torch.bool, device=q.device).tril(S - T + i0))
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        idx = scores.topk(kk, dim=-1).indices  # (..., Tc, k)
        keep = torch.zeros(scores.shape, dtype=torch.bool, device=q.device).scatter_(-1, idx, True)
        keep = combine_masks(keep, m)  # a masked key never comes back, even among the "top" -inf's
        out, _ = attend(qc, k, v, keep, scale=scale)  # (..., Tc, D)
        outs.append(out)
    return torch.cat(outs, dim=-2)  # (..., T, D)


# --- 5. The KV cache ----------------------------------------------------------------------------------------


class KVCache:
    """Keys and values of every layer for the positions seen so far, in buffers of fixed capacity.

    Buffers are allocated on the first :meth:`update`, in its dtype and on its device; ``length`` grows once
    every layer has appended the new positions. Shape: per layer (B, Hkv, capacity, D), the first ``length``
    valid. Taught in notebook 09.
    """

    def __init__(self, num_layers: int, capacity: int) -> None:
        check_int("num_layers", num_layers)
        check_int("capacity", capacity)
        self.num_layers, self.capacity = int(num_layers), int(capacity)
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self._lengths = [0] * num_layers

    @property
    def length(self) -> int:
        """Positions stored by every layer: the absolute position of the next token."""
        return min(self._lengths)

    def filled(self, layer: int) -> int:
        """Positions ``layer`` holds: ``length``, or one step more while a step's layers append in turn."""
        check_int("layer", layer, minimum=0, maximum=self.num_layers - 1)
        return self._lengths[layer]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (B, Hkv, T, D) to ``layer``; return all its keys and values (B, Hkv, S, D)."""
        check_int("layer", layer, minimum=0, maximum=self.num_layers - 1)
        for name, t in (("k", k), ("v", v)):
            check_float_tensor(name, t, min_dim=4)
            if t.dim() != 4:
                raise ValueError(f"{name} must have shape (B, Hkv, T, D), got {tuple(t.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if v.dtype != k.dtype:
            raise TypeError(f"k and v must have one dtype, got {k.dtype} and {v.dtype}")
        check_same_device(k=k, v=v)
        return self._append(layer, k, v)

    def _append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`update` for a layer that made k and v itself: only what the cache's state can refuse."""
        held, (B, Hkv, T, D) = self.keys[layer], k.shape
        if held is not None and (held.dtype != k.dtype or held.device != k.device):
            raise TypeError(
                f"layer {layer} caches {held.dtype} on {held.device}, got new keys of {k.dtype} on {k.device}: "
                "start a new cache after changing the model's dtype or device"
            )
        if held is not None and (held.shape[:2] != (B, Hkv) or held.shape[3] != D):
            raise ValueError(
                f"layer {layer} caches (B, Hkv, D) = {(held.shape[0], held.shape[1], held.shape[3])}, "
                f"got new keys of shape {tuple(k.shape)}"
            )
        start = self._lengths[layer]
        if start > self.length:
            raise RuntimeError(
                f"layer {layer} appended twice in one step: it holds {start} positions, "
                f"another layer only {self.length}"
            )
        if start + T > self.capacity:
            raise ValueError(
                f"KV cache overflow: capacity (context_length) is {self.capacity} positions, {start} are cached and "
                f"{T} more were appended; start a new cache or crop the sequence"
            )
        end = start + T
        if held is None:  # the first update allocates the buffers, in k's dtype and on its device
            self.keys[layer] = k.new_zeros(B, Hkv, self.capacity, D)
            self.values[layer] = v.new_zeros(B, Hkv, self.capacity, D)
        buf_k, buf_v = self.keys[layer], self.values[layer]
        buf_k[:, :, start:end] = k  # write the new positions in place: no copy of the old ones
        buf_v[:, :, start:end] = v
        self._lengths[layer] = end
        return buf_k[:, :, :end], buf_v[:, :, :end]  # (B, Hkv, S, D) views

    def reorder(self, indices: torch.Tensor) -> None:
        """Keep the batch rows ``indices`` (B',) of every layer, in that order (beam search)."""
        check_tensor("indices", indices)
        if indices.dim() != 1 or not is_integer_tensor(indices):
            raise TypeError(
                f"indices must be a 1-D integer tensor of batch rows, got dtype {indices.dtype}, "
                f"shape {tuple(indices.shape)}"
            )
        B = next((t.shape[0] for t in self.keys if t is not None), None)
        if B is not None and indices.numel() and not (0 <= int(indices.min()) and int(indices.max()) < B):
            raise ValueError(f"indices must be batch rows in [0, {B}), got {indices.tolist()}")
        for i in range(self.num_layers):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i].index_select(0, indices.to(self.keys[i].device))
                self.values[i] = self.values[i].index_select(0, indices.to(self.values[i].device))

    def memory_bytes(self) -> int:
        """Bytes held by the allocated buffers (the full capacity, not just ``length``)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)

    def __repr__(self) -> str:
        return f"KVCache(num_layers={self.num_layers}, capacity={self.capacity}, length={self.length})"
