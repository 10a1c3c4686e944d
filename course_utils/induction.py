"""Induction heads (notebook 12): a two-layer attention-only transformer learns to continue a repeated sequence.

The data, the model and its training; the loss on each repeat; per-head scores, ablation and circuits, which work
on any model whose attention layers are the course's ``MultiHeadAttention`` (the tiny GPT too); the checkpoint.
Shapes: B batch, N tokens per repeat, T = 2N positions, C embed_dim, H num_heads, D head_dim, L num_layers,
V vocab_size.
"""

from __future__ import annotations

if __name__ == "__main__":  # Ctrl+C or SIGTERM while PyTorch loads (seconds): one line, not a traceback
    from course_utils._start import quiet_start_up

    quiet_start_up()

import argparse
import contextlib
import dataclasses
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._start import StopSignals, exit_now, pasteable
from course_utils._validate import (
    check_float_tensor,
    check_fraction,
    check_generator,
    check_heads,
    check_int,
    check_positive_number,
    check_tensor,
    check_token_ids,
)
from course_utils.attention import scaled_dot_product_attention
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention, split_heads
from course_utils.positional import LearnedPositionalEmbedding
from course_utils.train import (
    CheckpointError,
    RunSetupError,
    check_out_file,
    evaluating,
    model_file,
    save_checkpoint,
)
from course_utils.train_cli import check_numbers

__all__ = [
    "repeated_tokens",
    "InductionConfig",
    "AttentionOnlyTransformer",
    "train_induction",
    "repeat_losses",
    "previous_token_score",
    "induction_score",
    "head_scores",
    "attention_layers",
    "ablate_heads",
    "heads_above",
    "ablation_losses",
    "residual_stream",
    "key_query_ablation",
    "ov_circuit",
    "copying_score",
    "head_logits",
    "direct_logit_effect",
    "save_induction_model",
    "load_induction_model",
]


# --- The data: random tokens, then the same tokens again ----------------------------------------------------


def repeated_tokens(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator | None, min_len: int | None = None
) -> torch.Tensor:
    """``batch_size`` rows of ``seq_len`` uniformly random token ids, each row followed by itself.

    With ``min_len``, row r repeats a stretch of its own random length n_r in ``min_len`` .. N instead, as many
    times as fits in 2N positions. Shape: -> (B, 2N), torch.long. Taught in notebook 12.
    """
    B, N, V = check_int("batch_size", batch_size), check_int("seq_len", seq_len), check_int("vocab_size", vocab_size)
    check_generator("generator", generator)
    if min_len is not None:
        check_int("min_len", min_len, maximum=N)
    stretch = torch.randint(0, V, (B, N), generator=generator)  # (B, N); row r uses its first n_r tokens
    if min_len is None:
        return torch.cat([stretch, stretch], dim=1)  # (B, N) -> (B, 2N)
    n = torch.randint(min_len, N + 1, (B, 1), generator=generator)  # (B, 1): each row's period
    return stretch.gather(1, torch.arange(2 * N) % n)  # (B, 2N): position j holds token j mod n_r


# --- The model: attention and nothing else ------------------------------------------------------------------


@dataclass(frozen=True)
class InductionConfig:
    """The shape of an :class:`AttentionOnlyTransformer` and of its data (sequences of ``seq_len``, twice).
    Taught in notebook 12."""

    vocab_size: int = 64
    seq_len: int = 24
    embed_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_int(f.name, getattr(self, f.name))
        check_heads(self.embed_dim, self.num_heads)

    @property
    def context_length(self) -> int:
        return 2 * self.seq_len


class AttentionOnlyTransformer(nn.Module):
    """Token and learned position embeddings, ``num_layers`` pre-norm causal attention layers (each adds
    ``attn(LayerNorm(x))`` to the stream), no MLP; a final LayerNorm and an unembedding.
    Shape: idx (B, T) -> logits (B, T, V), T <= 2N. Taught in notebook 12.
    """

    def __init__(self, config: InductionConfig) -> None:
        super().__init__()
        if not isinstance(config, InductionConfig):
            raise TypeError(f"AttentionOnlyTransformer takes an InductionConfig, got {type(config).__name__}")
        self.config = config
        C = config.embed_dim
        self.tok_emb = nn.Embedding(config.vocab_size, C)
        self.pos_emb = LearnedPositionalEmbedding(config.context_length, C)
        self.norms = nn.ModuleList(nn.LayerNorm(C) for _ in range(config.num_layers))
        self.attns = nn.ModuleList(MultiHeadAttention(C, config.num_heads) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, need_weights: bool = False):
        """Logits (B, T, V); with ``need_weights`` also each layer's attention weights, L x (B, H, T, T)."""
        check_token_ids("idx", idx, self.config.vocab_size)  # the position embedding refuses T > 2N
        x, maps = self._layers(idx, self.config.num_layers)  # (B, T, C), L x (B, H, T, T)
        logits = self.lm_head(self.ln_f(x))  # (B, T, C) -> (B, T, V)
        return (logits, maps) if need_weights else logits

    def _layers(self, idx: torch.Tensor, upto: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The residual stream after the first ``upto`` layers, and their attention weights."""
        x = self.pos_emb(self.tok_emb(idx))  # (B, T) -> (B, T, C)
        mask = causal_mask(idx.shape[1], device=idx.device)  # (T, T)
        maps = []
        for norm, attn in list(zip(self.norms, self.attns))[:upto]:
            a, weights = attn(norm(x), mask, need_weights=True)  # (B, T, C), (B, H, T, T)
            x = x + a  # (B, T, C)
            maps.append(weights)
        return x, maps

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's attention weights, as ``GPT.attention_maps`` gives them: L x (B, H, T, T)."""
        return self(idx, need_weights=True)[1]


# --- Training, and the loss on each repeat ------------------------------------------------------------------


def repeat_losses(model: nn.Module, tokens: torch.Tensor, seq_len: int) -> tuple[float, float]:
    """Mean cross-entropy (nats) on the first repeat and on the second, in eval mode, without gradients.

    First repeat: targets 1 .. N-1; second repeat: targets N+1 .. 2N-1 (token N is left out of both).
    Shape: tokens (B, 2N) -> two floats. Taught in notebook 12.
    """
    N = _check_two_repeats(tokens, seq_len, minimum=2)
    with evaluating(model):
        logits = model(tokens)  # (B, 2N, V); the tiny GPT returns (logits, loss)
        logits = logits[0] if isinstance(logits, tuple) else logits
        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), tokens[:, 1:], reduction="none")
    return per_token[:, : N - 1].mean().item(), per_token[:, N:].mean().item()  # targets 1..N-1, N+1..2N-1


def train_induction(
    config: InductionConfig,
    max_steps: int = 600,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    seed: int = 0,
    eval_interval: int = 25,
    min_len: int | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[AttentionOnlyTransformer, list[dict[str, float]]]:
    """Train with AdamW on fresh batches of :func:`repeated_tokens` (periods ``min_len`` .. N; None: N // 2 .. N).

    ``seed`` fixes the initial weights and every batch (the caller's random state is left alone). Every
    ``eval_interval`` steps, and at 0 and ``max_steps``, the repeat losses and :func:`head_scores` on one held-out
    batch of 256 are recorded, and passed to ``callback`` with the seconds so far. Returns the model (eval mode) and
    the records ``{"step", "first", "second", "prev", "ind"}`` (the scores as nested lists). Taught in notebook 12.
    """
    check_int("max_steps", max_steps, minimum=0)
    check_int("eval_interval", eval_interval)
    check_positive_number("learning_rate", learning_rate)
    check_int("seed", seed, minimum=0)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function taking one event dict, or None, got {type(callback).__name__}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AttentionOnlyTransformer(config)
    min_len = max(1, config.seq_len // 2) if min_len is None else check_int("min_len", min_len, maximum=config.seq_len)
    gen = torch.Generator().manual_seed(seed)
    held_out = repeated_tokens(256, config.seq_len, config.vocab_size, gen)  # (256, 2N)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    history: list[dict[str, float]] = []
    start = time.perf_counter()

    def record(step: int) -> None:
        first, second = repeat_losses(model, held_out, config.seq_len)
        prev, ind = head_scores(model, held_out, config.seq_len)  # (L, H) each, on the same batch
        history.append({"step": step, "first": first, "second": second, "prev": prev.tolist(), "ind": ind.tolist()})
        if callback is not None:
            callback({**history[-1], "seconds": time.perf_counter() - start})

    model.train()
    done = 0  # updates done
    try:
        for step in range(max_steps):
            if step % eval_interval == 0:  # evaluate
                record(step)
            tokens = repeated_tokens(batch_size, config.seq_len, config.vocab_size, gen, min_len)  # (B, 2N)
            logits = model(tokens[:, :-1])  # forward: (B, 2N - 1, V)
            loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])  # next token at every position
            optimizer.zero_grad(set_to_none=True)  # backward, update
            loss.backward()
            optimizer.step()
            done = step + 1
        record(max_steps)  # the final evaluation: a Ctrl+C here names the last step too
    except KeyboardInterrupt as interrupt:
        interrupt.step = done  # the updates done when Ctrl+C came, for the command's one line
        raise
    return model.eval(), history


# --- Scores per head ----------------------------------------------------------------------------------------


def _check_weights(weights: object) -> None:
    check_float_tensor("weights", weights, min_dim=4)
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must have shape (B, H, T, T), got {tuple(weights.shape)}")
    if weights.shape[0] == 0 or weights.shape[1] == 0:  # a mean over no sequence or no head: nan, or nothing
        raise ValueError(f"weights must hold at least one sequence and one head, got shape {tuple(weights.shape)}")


def _check_two_repeats(tokens: object, seq_len: object, minimum: int = 1) -> int:
    """seq_len as an int, once tokens is known to be (B, 2 * seq_len) token ids (their range: the model's)."""
    check_token_ids("tokens", tokens, 0, values=False)
    N = check_int("seq_len", seq_len, minimum=minimum)
    if tokens.shape[1] != 2 * N:
        raise ValueError(f"tokens must have 2 * seq_len = {2 * N} positions (two repeats), got {tuple(tokens.shape)}")
    return N


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Each head's mean weight from position i to i - 1, over i = 1 .. T-1 and the batch.

    Shape: weights (B, H, T, T), T >= 2 -> (H,). Taught in notebook 12.
    """
    _check_weights(weights)
    if weights.shape[-1] < 2:
        raise ValueError(f"weights need T >= 2 positions for a previous token, got shape {tuple(weights.shape)}")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (B, H, T-1) -> (H,)


def induction_score(weights: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Each head's mean weight from a token's second occurrence to the token after its first occurrence.

    Query i = N .. 2N-1 to key i - N + 1, averaged over those N queries and the batch.
    Shape: weights (B, H, 2N, 2N) -> (H,). Taught in notebook 12.
    """
    _check_weights(weights)
    N = check_int("seq_len", seq_len)
    if weights.shape[-1] != 2 * N:
        raise ValueError(f"weights must cover 2 * seq_len = {2 * N} positions, got shape {tuple(weights.shape)}")
    stripe = weights.diagonal(offset=1 - N, dim1=-2, dim2=-1)[..., 1:]  # (B, H, N): query i, key i - N + 1, i >= N
    return stripe.mean(dim=(0, -1))  # (B, H, N) -> (H,)


def head_scores(model: nn.Module, tokens: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Previous-token and induction scores of every head, from ``model.attention_maps(tokens)``.

    Works for :class:`AttentionOnlyTransformer` and the tiny GPT. Shape: tokens (B, 2N) -> two (L, H).
    Taught in notebook 12.
    """
    _check_two_repeats(tokens, seq_len)
    with evaluating(model):
        maps = model.attention_maps(tokens)  # L x (B, H, 2N, 2N)
    prev = torch.stack([previous_token_score(w) for w in maps])  # (L, H)
    ind = torch.stack([induction_score(w, seq_len) for w in maps])  # (L, H)
    return prev, ind


# --- Ablation: switch one head off --------------------------------------------------------------------------


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The model's attention modules in the order they run (the tiny GPT's subclass them too)."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise TypeError(f"{type(model).__name__} holds no course_utils MultiHeadAttention layer to ablate")
    return layers


@contextlib.contextmanager
def ablate_heads(model: nn.Module, heads: Iterable[tuple[int, int]]) -> Iterator[nn.Module]:
    """Inside the ``with`` block, heads (layer, head) add nothing to the residual stream.

    A head's D channels of the merged (B, T, C) tensor are zeroed just before ``out_proj``; the hooks are removed
    on leaving the block. Taught in notebook 12.
    """
    layers = attention_layers(model)
    silent = [torch.zeros(attn.num_heads, attn.head_dim, dtype=torch.bool) for attn in layers]  # L x (H, D)
    for pair in heads:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(f"heads must be (layer, head) pairs, got {pair!r}")
        layer = check_int("layer", pair[0], minimum=0, maximum=len(layers) - 1)
        silent[layer][check_int("head", pair[1], minimum=0, maximum=layers[layer].num_heads - 1)] = True

    def zero_heads(off: torch.Tensor) -> Callable:  # off (C,): head h is channels h*D .. (h+1)*D - 1 of merged
        # merged (B, T, C) is set to 0 there, not multiplied by 0: inf * 0 would be NaN
        return lambda module, args: (args[0].masked_fill(off.to(args[0].device), 0.0),)

    hooks = [attn.out_proj.register_forward_pre_hook(zero_heads(off.flatten())) for attn, off in zip(layers, silent)]
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()


def heads_above(scores: torch.Tensor, threshold: float) -> list[tuple[int, int]]:
    """Every (layer, head) whose score is above ``threshold``, in order: the set of heads that share one job.

    ``scores`` are shares of attention weight, in [0, 1], and ``threshold`` is in [0, 1).
    Shape: scores (L, H) -> list of pairs. Taught in notebook 12.
    """
    check_tensor("scores", scores, min_dim=2)
    if scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"scores must be a floating-point (L, H) tensor, got {scores.dtype} {tuple(scores.shape)}")
    if scores.numel() == 0:
        raise ValueError(f"scores must not be empty, got shape {tuple(scores.shape)}")
    outside = ~((scores >= 0) & (scores <= 1))  # NaN is outside too: it is above no threshold, silently
    if outside.any():
        raise ValueError(
            f"scores must be in [0, 1] (a share of attention weight), got {scores[outside][0].item():g} "
            f"at {tuple(outside.nonzero()[0].tolist())}"
        )
    check_fraction("threshold", threshold)  # [0, 1): no score is above 1
    return [(int(layer), int(head)) for layer, head in (scores > threshold).nonzero().tolist()]


def ablation_losses(model: nn.Module, tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The second-repeat loss with each head ablated alone: entry (l, h) is :func:`repeat_losses`' second
    value inside ``ablate_heads(model, [(l, h)])``. Shape: tokens (B, 2N) -> (L, H). Taught in notebook 12.
    """
    layers = attention_layers(model)
    out = torch.zeros(len(layers), max(a.num_heads for a in layers))  # (L, H)
    for layer, attn in enumerate(layers):
        for head in range(attn.num_heads):
            with ablate_heads(model, [(layer, head)]):
                out[layer, head] = repeat_losses(model, tokens, seq_len)[1]
    return out


def residual_stream(model: AttentionOnlyTransformer, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """The residual stream that attention layer ``layer`` reads (before its LayerNorm); ablations in force apply.

    Shape: tokens (B, T) -> (B, T, C). Taught in notebook 12.
    """
    layer, _ = _check_head(model, layer, 0)
    check_token_ids("tokens", tokens, model.config.vocab_size)
    return model._layers(tokens, layer)[0]  # (B, T, C)


@torch.no_grad()
def key_query_ablation(
    model: AttentionOnlyTransformer, tokens: torch.Tensor, seq_len: int, heads: Iterable[tuple[int, int]], layer: int
) -> dict[str, torch.Tensor]:
    """Induction scores of layer ``layer``'s heads when ``heads`` (earlier layers) are ablated for its keys only,
    for its queries only, or not at all: which input of the later head the earlier heads feed.

    Returns ``{"intact", "keys", "queries"}``, each (H,). Shape: tokens (B, 2N). Taught in notebook 12.
    """
    _check_two_repeats(tokens, seq_len)
    heads = list(heads)
    if any(isinstance(pair, tuple) and len(pair) == 2 and pair[0] >= layer for pair in heads):
        raise ValueError(f"heads must sit in layers before layer {layer}, got {heads}")
    intact = residual_stream(model, tokens, layer)  # (B, T, C)
    with ablate_heads(model, heads):
        ablated = residual_stream(model, tokens, layer)  # (B, T, C)
    attn, norm = model.attns[layer], model.norms[layer]

    def queries_and_keys(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, _ = attn.qkv_proj(norm(x)).chunk(3, dim=-1)  # (B, T, C) -> 3 x (B, T, C)
        return split_heads(q, attn.num_heads), split_heads(k, attn.num_heads)  # (B, H, T, D) each

    (q, k), (q_ablated, k_ablated) = queries_and_keys(intact), queries_and_keys(ablated)
    mask = causal_mask(tokens.shape[1], device=tokens.device)  # (T, T)
    scores = {}
    for name, qq, kk in (("intact", q, k), ("keys", q, k_ablated), ("queries", q_ablated, k)):
        _, weights = scaled_dot_product_attention(qq, kk, kk, mask)  # (B, H, T, T); the values do not matter
        scores[name] = induction_score(weights, seq_len)  # (H,)
    return scores


# --- What a head writes: its OV circuit, and its direct effect on the logits --------------------------------


def _check_head(model: object, layer: object, head: object) -> tuple[int, int]:
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    layer = check_int("layer", layer, minimum=0, maximum=model.config.num_layers - 1)
    return layer, check_int("head", head, minimum=0, maximum=model.config.num_heads - 1)


@torch.no_grad()
def ov_circuit(model: AttentionOnlyTransformer, layer: int, head: int) -> torch.Tensor:
    """The (V, V) map from a token a head attends to, to the logits it writes: W_E W_V^T W_O^T W_U^T.

    Row ``s`` holds the logits head (``layer``, ``head``) adds when it reads token ``s`` straight from the embedding.
    The LayerNorms are taken as their linear part (centring and scale; no division, no bias). Computed in float64.
    Shape: -> (V, V). Taught in notebook 12.
    """
    layer, head = _check_head(model, layer, head)
    C, D = model.config.embed_dim, model.config.embed_dim // model.config.num_heads
    centre = torch.eye(C, dtype=torch.float64) - 1.0 / C  # (C, C): x - mean(x)
    attn = model.attns[layer]
    w_v = attn.qkv_proj.weight[2 * C + head * D : 2 * C + (head + 1) * D].double()  # (D, C): this head's values
    w_o = attn.out_proj.weight[:, head * D : (head + 1) * D].double()  # (C, D): its share of the output projection
    w_e = model.tok_emb.weight.double() @ centre * model.norms[layer].weight.double()  # (V, C) into the head
    w_u = model.lm_head.weight.double() @ (centre * model.ln_f.weight.double()[:, None]).T  # (V, C) out of ln_f
    return w_e @ w_v.T @ w_o.T @ w_u.T  # (V, C) (C, D) (D, C) (C, V) -> (V, V)


def copying_score(circuit: torch.Tensor) -> float:
    """Elhage et al.'s (2021) copying score of an OV circuit: sum(eigenvalues) / sum(|eigenvalues|), in -1 .. 1.

    Near 1: the map copies the token it reads; near -1, it suppresses it. Shape: circuit (V, V) -> a float.
    Taught in notebook 12.
    """
    check_tensor("circuit", circuit, min_dim=2)
    if circuit.dim() != 2 or circuit.shape[0] != circuit.shape[1] or not circuit.is_floating_point():
        raise ValueError(f"circuit must be a square floating-point (V, V) matrix, got {tuple(circuit.shape)}")
    if circuit.numel() == 0:
        raise ValueError(f"circuit must not be empty, got shape {tuple(circuit.shape)}")
    if not torch.isfinite(circuit).all():  # LAPACK would abort the process on a NaN, not raise
        raise ValueError(f"circuit must hold finite numbers, got {circuit[~torch.isfinite(circuit)][0].item()}")
    eig = torch.linalg.eigvals(circuit.double())  # (V,) complex
    total = eig.abs().sum()
    if total == 0:
        raise ValueError("circuit's eigenvalues are all 0: its copying score is undefined (0 / 0)")
    return (eig.sum().real / total).item()


@torch.no_grad()
def head_logits(model: AttentionOnlyTransformer, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """What each head of ``layer`` adds to the logits directly, through the final LayerNorm and the unembedding.

    The final LayerNorm's division is frozen at the whole stream's value, so the logits are a sum with one term
    per head, which this returns. Shape: tokens (B, T) -> (B, H, T, V). Taught in notebook 12.
    """
    layer, _ = _check_head(model, layer, 0)
    check_token_ids("tokens", tokens, model.config.vocab_size)
    attn, ln_f = model.attns[layer], model.ln_f
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        attn.out_proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("merged", args[0])),
        ln_f.register_forward_pre_hook(lambda m, args: seen.__setitem__("final", args[0])),
    ]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    B, T, C = seen["merged"].shape
    H = attn.num_heads
    per_head = seen["merged"].view(B, T, H, C // H).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
    w_o = attn.out_proj.weight.view(C, H, C // H).permute(1, 2, 0)  # (C, C) -> (H, D, C)
    written = per_head @ w_o[None]  # (B, H, T, D) @ (1, H, D, C) -> (B, H, T, C)
    final = seen["final"]  # (B, T, C)
    scale = (final.var(dim=-1, unbiased=False, keepdim=True) + ln_f.eps).rsqrt()  # (B, T, 1), frozen
    normed = (written - written.mean(dim=-1, keepdim=True)) * scale[:, None] * ln_f.weight  # (B, H, T, C)
    return model.lm_head(normed)  # (B, H, T, V)


def direct_logit_effect(
    model: AttentionOnlyTransformer, tokens: torch.Tensor, seq_len: int, layer: int
) -> torch.Tensor:
    """How much each head of ``layer`` raises the logit of the token that comes next, on the second repeat.

    From :func:`head_logits` at the queries N .. 2N-2: the logit of the true next token minus the mean logit,
    averaged over the queries and the batch. Shape: tokens (B, 2N) -> (H,). Taught in notebook 12.
    """
    N = _check_two_repeats(tokens, seq_len)
    if N < 2:  # with N = 1 no query of the second repeat is followed by a token: a mean over nothing
        raise ValueError(f"seq_len must be at least 2 (a query of the second repeat with a next token), got {N}")
    logits = head_logits(model, tokens, layer)[:, :, N : 2 * N - 1]  # (B, H, N - 1, V)
    target = tokens[:, None, N + 1 :, None].expand(-1, logits.shape[1], -1, -1)  # (B, H, N - 1, 1)
    lift = logits.gather(-1, target)[..., 0] - logits.mean(dim=-1)  # (B, H, N - 1)
    return lift.mean(dim=(0, -1))  # (H,)


# --- A trained model on disk (checkpoints/induction.pt), and the command that makes it ----------------------

_FORMAT = "course-induction-1"
PROG = "python -m course_utils.induction"


def save_induction_model(
    path: str | os.PathLike, model: AttentionOnlyTransformer, history: list[dict], provenance: dict
) -> None:
    """Write the weights, configuration, loss history and provenance, loadable with ``weights_only=True``."""
    save_checkpoint(
        path,
        {
            "format": _FORMAT,
            "config": dataclasses.asdict(model.config),
            "model": model.state_dict(),
            "history": history,
            "provenance": provenance,
        },
    )


def load_induction_model(path: str | os.PathLike) -> tuple[AttentionOnlyTransformer, dict]:
    """The model (eval mode) and the rest of what :func:`save_induction_model` wrote. Taught in notebook 12.

    A missing file raises FileNotFoundError; a file that is damaged, cut short or of another kind, ValueError.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint file at {path} (expected a file written by save_induction_model)")
    state, kind = model_file(path)
    if state is None or state["format"] != _FORMAT:
        why = f"it holds {kind}" if state else "damaged, cut short, or not a model of this course"
        raise ValueError(f"{path} is not a model written by save_induction_model ({_FORMAT}): {why}")
    try:
        model = AttentionOnlyTransformer(InductionConfig(**state["config"]))
        model.load_state_dict(state["model"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        detail = " ".join(str(e).split())  # load_state_dict's message spans lines: one line here
        raise ValueError(f"{path} is a damaged {_FORMAT} checkpoint: {type(e).__name__}: {detail}") from e
    return model.eval(), state


def _check_out(out: str, seed: int, max_steps: int) -> None:
    """RunSetupError if the numbers or OUT cannot be used (one line): a file at OUT is replaced only if it is this
    command's own earlier run (the same seed and steps) and writable."""
    check_numbers(seed, max_steps)
    state = check_out_file(out, "OUT", _FORMAT, "checkpoints/induction.pt")
    prov = state.get("provenance", {}) if state else {}
    if state and (prov.get("seed"), prov.get("steps")) != (seed, max_steps):
        raise RunSetupError(
            f"OUT {out} already holds another run's induction model (--seed {prov.get('seed')} --max-steps "
            f"{prov.get('steps')}), not --seed {seed} --max-steps {max_steps}: choose another OUT, or move it away"
        )


def _progress(event: dict[str, Any], max_steps: int) -> str:
    """One line per record: the losses on each repeat and the best previous-token and induction scores."""
    prev, ind = max(max(row) for row in event["prev"]), max(max(row) for row in event["ind"])
    return (
        f"step {event['step']} of {max_steps}: loss {event['first']:.2f} on the first repeat, "
        f"{event['second']:.2f} on the second; best previous-token score {prev:.2f}, best induction score "
        f"{ind:.2f} ({event['seconds']:.0f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m course_utils.induction OUT [--max-steps N] [--seed S]``: train with the defaults, save to OUT.
    Exit codes: 0 saved; 2 refused before training (one line); 1 OUT could not be written (a full disk); 130
    stopped by Ctrl+C, 143 by SIGTERM (OUT as it was, or saved whole if the signal came while saving)."""
    with StopSignals(restore=argv is not None) as stop:
        return _main(sys.argv[1:] if argv is None else list(argv), stop)


def _main(argv: list[str], stop: StopSignals) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=main.__doc__, allow_abbrev=False)
    parser.add_argument(
        "out",
        metavar="OUT",
        help="the checkpoint file to write, e.g. checkpoints/induction.pt; a file already there is replaced only if "
        "it is this command's own run (the same --seed and --max-steps) and writable",
    )
    parser.add_argument(
        "--max-steps", type=int, default=600, metavar="N", help="optimizer steps in all, at least 1 (default 600)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the initial weights and every batch (default 0)"
    )
    args = parser.parse_args(argv)
    config = InductionConfig()
    try:  # before training, not after minutes of it
        _check_out(args.out, args.seed, args.max_steps)  # the string: "new/" names a folder
        out = Path(args.out)
    except RunSetupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while OUT was read (a slow disk): before, a traceback
        return stop.report(f"before training; nothing was written to {args.out}")
    torch.set_num_threads(1)  # one thread: the run the README records, repeatable on one machine
    start, existed = time.perf_counter(), out.exists()
    try:
        model, history = train_induction(
            config,
            max_steps=args.max_steps,
            seed=args.seed,
            callback=lambda e: print(_progress(e, args.max_steps), flush=True),
        )
    except KeyboardInterrupt as interrupt:
        kept = f"{out} is unchanged" if existed else f"nothing was written to {out}"
        again = pasteable("course_utils.induction", argv)  # the interpreter that ran: `python` may lack torch
        return stop.report(
            f"at step {getattr(interrupt, 'step', 0)} of {args.max_steps}; {kept} (this command saves only at the "
            f"end, a minute or two on a CPU): {again} trains it again from the start"
        )
    stop.deferred = True  # trained: a signal from here on waits until OUT is saved whole
    seconds = time.perf_counter() - start
    provenance = {
        "command": f"{PROG} " + " ".join(argv),
        "seed": args.seed,
        "steps": args.max_steps,  # the record's key since the shipped checkpoint: a file format does not change
        "train_s": round(seconds, 1),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
    }
    try:
        save_induction_model(out, model, history, provenance)
    except CheckpointError as err:  # a full disk: before, torch's traceback
        print(f"error: {err}", file=sys.stderr)
        return 1
    steps = f"{args.max_steps} step{'s' if args.max_steps != 1 else ''}"
    print(f"saved {out}: {steps}, seed {args.seed}, trained in {seconds:.0f} s", flush=True)
    if stop.signal:
        return stop.report(f"after step {args.max_steps} of {args.max_steps}, while saving: {out} is saved whole")
    return 0


if __name__ == "__main__":
    exit_now(main())
