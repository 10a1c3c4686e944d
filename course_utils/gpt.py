"""A tiny GPT, assembled from the course's own pieces: the model notebook 10 trains.

Reading order: :class:`GPTConfig` (with presets), :class:`MLP`, :class:`Block` (around notebook 07's
:class:`~course_utils.variants.GroupedQueryAttention`), :class:`GPT`. The model checks its input once, in
:meth:`GPT.forward`; its layers trust it. Shapes: S counts what a cache holds too, Hkv is num_kv_heads.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from course_utils import block as shared  # the one Block and MLP of the course's models
from course_utils._validate import (
    check_bool,
    check_choice,
    check_fraction,
    check_greater_than,
    check_heads,
    check_int,
    check_token_ids,
    from_preset,
)
from course_utils.positional import LearnedPositionalEmbedding
from course_utils.variants import ATTENTION_KERNELS, GroupedQueryAttention, KVCache, sliding_window_mask

__all__ = ["GPTConfig", "PRESETS", "MLP", "Block", "GPT"]

Positions = Literal["learned", "rope"]
AttentionImpl = Literal["course", "torch", "flash"]
NormPosition = Literal["pre", "post"]
_POSITIONS = ("learned", "rope")


# --- Configuration ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPTConfig:
    """Everything that fixes the shape of a :class:`GPT` (training settings live in ``course_utils.train``).

    ``num_kv_heads`` below ``num_heads`` gives grouped-query attention (None: as many as ``num_heads``);
    ``window`` (None: full causal) lets each token see only its last ``window`` positions (notebook 07).
    ``attention``: the course's (it returns the weights), PyTorch's fused kernel, or the course's
    FlashAttention (notebook 08, no dropout). Taught in notebook 10.
    """

    vocab_size: int = 65
    context_length: int = 256
    embed_dim: int = 384
    num_heads: int = 6
    num_layers: int = 6
    num_kv_heads: int | None = None
    window: int | None = None
    mlp_ratio: int = 4
    dropout: float = 0.0
    bias: bool = True
    positions: Positions = "learned"
    rope_base: float = 10000.0
    attention: AttentionImpl = "torch"
    norm_position: NormPosition = "pre"

    def __post_init__(self) -> None:
        # Each field stored as the plain int, float, bool or str its check returns (not np.int64, np.bool_, ...):
        # weights_only checkpoints load only those.
        for name in ("vocab_size", "context_length", "embed_dim", "num_heads", "num_layers", "mlp_ratio"):
            self._store(name, check_int(name, getattr(self, name)))
        check_heads(self.embed_dim, self.num_heads, self.num_kv_heads)
        self._store("num_kv_heads", None if self.num_kv_heads is None else int(self.num_kv_heads))
        self._store("window", None if self.window is None else check_int("window", self.window))
        self._store("dropout", check_fraction("dropout", self.dropout))
        self._store("bias", check_bool("bias", self.bias))
        check_choice("positions", self.positions, _POSITIONS)
        check_choice("attention", self.attention, ATTENTION_KERNELS)
        if self.attention == "flash" and self.dropout > 0:
            raise ValueError(
                f"attention='flash' has no dropout on the attention weights, got dropout={self.dropout}: "
                "use dropout=0.0, or attention='torch' or 'course'"
            )
        why = " (LayerNorm before each sublayer, GPT-2; or after each residual add, the original Transformer)"
        check_choice("norm_position", self.norm_position, shared.NORM_POSITIONS, why)
        self._store("rope_base", check_greater_than("rope_base", self.rope_base, 1))  # checkpoints store it
        for name in ("positions", "attention", "norm_position"):
            self._store(name, str(getattr(self, name)))
        if self.positions == "rope" and self.head_dim % 2 != 0:
            raise ValueError(
                f"rotary positions need an even head_dim, got {self.head_dim} "
                f"(embed_dim {self.embed_dim} / num_heads {self.num_heads})"
            )

    def _store(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # the dataclass is frozen

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> GPTConfig:
        """A named configuration (:data:`PRESETS`), any field replaced: ``preset("tiny", dropout=0.1)``."""
        return from_preset(cls, PRESETS, name, overrides)

    def to_dict(self) -> dict[str, Any]:
        """Plain ints, floats, strings and bools: safe to store in a ``weights_only`` checkpoint."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPTConfig:
        """The configuration :meth:`to_dict` returned (a checkpoint's)."""
        if not isinstance(d, dict):
            raise TypeError(
                f"from_dict takes a dict of {cls.__name__} fields (what to_dict returned), got {type(d).__name__}"
            )
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}")
        return cls(**d)


PRESETS: dict[str, GPTConfig] = {
    # Tests and CI: 2 layers, about 30k parameters; trains in seconds on a CPU.
    "tiny": GPTConfig(context_length=32, embed_dim=32, num_heads=4, num_layers=2, dropout=0.0),
    # A laptop CPU (2 cores, about 85 s): smaller than nanoGPT's CPU recipe (4 layers, 128 wide) and trained
    # on more tokens in less time; see benchmarks/TRAINING.md for how it was chosen.
    "cpu": GPTConfig(context_length=64, embed_dim=96, num_heads=4, num_layers=3, dropout=0.0, positions="rope"),
    # One GPU: nanoGPT's "baby Shakespeare" model (about 10.7M parameters).
    "gpu": GPTConfig(context_length=256, embed_dim=384, num_heads=6, num_layers=6, dropout=0.2),
}


# --- The model ----------------------------------------------------------------------------------------------


class MLP(shared.MLP):
    """:class:`course_utils.block.MLP` sized by a :class:`GPTConfig`: C -> mlp_ratio * C -> GELU -> C.

    Shape: x (B, T, C) -> (B, T, C). Taught in notebook 10.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config.embed_dim, config.mlp_ratio, bias=config.bias, dropout=config.dropout)


class Block(shared.Block):
    """:class:`course_utils.block.Block` around :class:`~course_utils.variants.GroupedQueryAttention`, causal,
    sized by a :class:`GPTConfig`; layer ``layer_idx`` of the model (its slot in a KV cache).

    Pre-norm x + attn(ln_1(x)), then x + mlp(ln_2(x)); or post-norm ln_1(x + attn(x)), then ln_2(x + mlp(x)).
    Shape: x (B, T, C) -> (B, T, C); ``block(x, mask=None, cache=None)``. Taught in notebook 10.
    """

    def __init__(self, config: GPTConfig, layer_idx: int = 0) -> None:
        C, rope = config.embed_dim, config.positions == "rope"
        attn = GroupedQueryAttention(
            C, config.num_heads, config.num_kv_heads, config.bias, rope, config.rope_base, config.dropout, True,
            config.attention,
        )  # fmt: skip
        super().__init__(C, attn, config.mlp_ratio, config.bias, config.dropout, config.norm_position)
        self.layer_idx = layer_idx

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None):
        self.attn.check_call(x, mask, cache, self.layer_idx, False)
        return self.forward_unchecked(x, mask, cache)

    def forward_unchecked(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None):
        h = self.ln_1(x) if self.norm_position == "pre" else x
        return self.add_branches(x, self.attn.forward_unchecked(h, mask, cache, self.layer_idx))  # (B, T, C)

    def attend(self, x: torch.Tensor, mask=None, cache: KVCache | None = None, need_weights: bool = False):
        """The attention branch alone, checked: (B, T, C) -> (B, T, C), and weights (B, H, T, S) with
        ``need_weights``."""
        h = self.ln_1(x) if self.norm_position == "pre" else x
        return self.attn(h, mask, cache, self.layer_idx, need_weights)


class GPT(nn.Module):
    """A decoder-only transformer language model, its output layer tied to the token embedding.

    With a ``cache`` (:meth:`new_cache`), ``idx`` holds only the new tokens, from position ``cache.length``.
    For ``course_utils.generation`` pass :meth:`for_generation`. Post-norm models have no final LayerNorm.
    Shape: idx (B, T), targets (B, T) or None -> logits (B, T, V), loss scalar or None. Taught in notebook 10.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"GPT takes a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.context_length = config.context_length
        self.tok_emb = nn.Embedding(config.vocab_size, config.embed_dim)
        self.pos_emb = (
            LearnedPositionalEmbedding(config.context_length, config.embed_dim)
            if config.positions == "learned"
            else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.ln_f = (
            nn.LayerNorm(config.embed_dim, bias=config.bias) if config.norm_position == "pre" else nn.Identity()
        )  # post-norm: the last block's ln_2 is the final normalisation
        self.lm_head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying: one (V, C) matrix reads and writes tokens
        self.apply(self._init_weights)
        residual_std = 0.02 / math.sqrt(2 * config.num_layers)  # two residual branches per block
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.fc_out.weight, mean=0.0, std=residual_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, LayerNorm as PyTorch makes it."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self, non_embedding: bool = False) -> int:
        """Number of trainable numbers (tied matrix once); ``non_embedding`` drops the embedding tables."""
        check_bool("non_embedding", non_embedding)
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        if non_embedding:
            n -= self.tok_emb.weight.numel()
            if self.pos_emb is not None:
                n -= self.pos_emb.embedding.weight.numel()
        return n

    def flops_per_token(self, T: int | None = None) -> float:
        """Training FLOPs per token (forward + backward): 6 N for the weights plus 6 L T C for attention.

        N is :meth:`num_parameters` less the position table; the causal mask halves attention's 12 L T C.
        Derived and counted in notebook 11, Appendix B.
        """
        c = self.config
        if T is not None:
            check_int("T", T)
        T = c.context_length if T is None else int(T)  # the default: a full context
        n = self.num_parameters() - (self.pos_emb.embedding.weight.numel() if self.pos_emb is not None else 0)
        return 6.0 * n + 6.0 * c.num_layers * T * c.embed_dim

    def _reads(self, idx: object) -> bool:
        """Whether to read the ids to check their range: not in a training step off the CPU, where the read
        would make every step wait for the device."""
        return not isinstance(idx, torch.Tensor) or idx.device.type == "cpu" or not self.training

    def check_ids(self, idx: object, start: int = 0) -> None:
        """Raise unless ``idx`` (B, T) holds token ids of this model that fit at positions ``start ..``.

        While torch.compile traces, only the fit is checked (reading a tensor in Python would split the graph).
        """
        if not torch.compiler.is_compiling():
            check_token_ids("idx", idx, self.config.vocab_size, values=self._reads(idx))
        T = idx.shape[1]
        if T == 0:
            raise ValueError(f"idx must hold at least one token, got shape {tuple(idx.shape)}")
        if start + T > self.config.context_length:
            raise ValueError(
                f"positions {start}..{start + T - 1} do not fit in context_length = {self.config.context_length}; "
                "crop the input (generation keeps the last context_length tokens)"
            )

    def _embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        """Token plus position embeddings of checked ids at positions ``start ..``: (B, T) -> (B, T, C)."""
        B, T = idx.shape
        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        if self.pos_emb is not None:
            # What self.pos_emb(x, positions) computes, without its per-call checks (done at the entry): they read
            # a tensor's value in Python, which stalls a GPU and splits a torch.compile graph in four.
            x = x + self.pos_emb.embedding.weight[start : start + T]  # (B, T, C) + (T, C)
        return self.drop(x)

    def _window_mask(self, T: int, start: int, device: torch.device) -> torch.Tensor | None:
        """None (each layer's own causal triangle), or with a ``window`` the (T, S) mask of positions start .."""
        w = self.config.window
        return None if w is None else sliding_window_mask(T, w, start + T, device=device)

    def new_cache(self) -> KVCache:
        """An empty KV cache for this model: one slot per layer, room for ``context_length`` positions."""
        return KVCache(self.config.num_layers, self.config.context_length)

    def for_generation(self) -> nn.Module:
        """This model (parameters shared) behind the protocol ``forward(idx, cache=None) -> logits``."""
        return _LogitsOnly(self)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None):
        if isinstance(targets, KVCache):
            raise TypeError(
                "got a KVCache as targets (the second argument): pass it as cache=..., or give "
                "course_utils.generation model.for_generation(), whose forward is (idx, cache)"
            )
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (model.new_cache()) or None, got {type(cache).__name__}")
        if cache is not None and cache.num_layers != self.config.num_layers:
            raise ValueError(
                f"the cache has {cache.num_layers} layer(s), the model {self.config.num_layers}: use model.new_cache()"
            )
        start = 0 if cache is None else cache.length  # idx's first position, read before any layer appends
        self.check_ids(idx, start)
        if targets is not None and not torch.compiler.is_compiling():
            check_token_ids("targets", targets, self.config.vocab_size, ignore_index=-100, values=self._reads(idx))
            if targets.shape != idx.shape:
                raise ValueError(
                    f"targets must have the shape of idx {tuple(idx.shape)} (the next token at every "
                    f"position), got {tuple(targets.shape)}"
                )
        x = self._embed(idx, start)  # (B, T, C)
        mask = self._window_mask(idx.shape[1], start, idx.device)
        for block in self.blocks:
            x = block.forward_unchecked(x, mask, cache)  # (B, T, C): the layers trust the checks above
        logits = self.lm_head(self.ln_f(x))  # (B, T, C) -> (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long())  # mean over B * T tokens
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """The attention weights of every layer, computed with the course's attention, in the current mode.

        Shape: idx (B, T) -> num_layers tensors (B, H, T, T), as bertviz takes them. Taught in notebook 11.
        """
        self.check_ids(idx)
        x = self._embed(idx, 0)  # (B, T, C)
        mask = self._window_mask(idx.shape[1], 0, idx.device)
        maps = []
        for block in self.blocks:
            a, weights = block.attend(x, mask, need_weights=True)  # (B, T, C), (B, H, T, T)
            x = block.add_branches(x, a)  # (B, T, C)
            maps.append(weights)
        return maps


class _LogitsOnly(nn.Module):
    """A :class:`GPT` through the generation protocol: ``forward(idx, cache=None) -> logits (B, T, V)``."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__()
        self.gpt = gpt
        self.context_length = gpt.context_length

    def new_cache(self) -> KVCache:
        return self.gpt.new_cache()

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        return self.gpt(idx, cache=cache)[0]
