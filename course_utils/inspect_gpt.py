"""Looking inside the tiny GPT, in reading order: gradients at initialisation, sinks, weights against values,
attention rolled out through the layers.

Taught in notebook 11. Shapes: L is num_layers.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils._validate import check_float_tensor, check_fraction, check_int, check_tensor, check_token_ids
from course_utils.gpt import GPT
from course_utils.multihead import split_heads

__all__ = [
    "layer_grad_norms",
    "xavier_init_",
    "first_key_share",
    "uniform_first_key_share",
    "attention_and_values",
    "weighted_value_norms",
    "top_key_disagreement",
    "rank_correlation",
    "selected_key_ratios",
    "attention_rollout",
]


def _check_gpt(model: object) -> GPT:
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a course_utils.gpt.GPT, got {type(model).__name__}")
    return model


# --- Gradients per layer at initialisation ------------------------------------------------------------------


def layer_grad_norms(model: GPT, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The norm of the loss's gradient with respect to each block's ``mlp.fc_out.weight``, first block first
    (``.grad`` is left alone). Shape: idx, targets (B, T) -> (L,) float32 on the CPU. Taught in notebook 11.
    """
    model = _check_gpt(model)
    params = [block.mlp.fc_out.weight for block in model.blocks]
    with torch.enable_grad():
        _, loss = model(idx, targets)
        grads = torch.autograd.grad(loss, params)
    return torch.stack([g.detach().float().norm() for g in grads]).cpu()  # (L,)


@torch.no_grad()
def xavier_init_(model: GPT) -> GPT:
    """Re-initialise ``model`` in place as Xiong et al. (2020) analyse it, and return it: linear weights
    Xavier-uniform, biases 0, embeddings N(0, 1/C), LayerNorms at gain 1 and bias 0. Taught in notebook 11.
    """
    model = _check_gpt(model)
    C = model.config.embed_dim
    for m in model.modules():
        if isinstance(m, nn.Linear) and m.weight is not model.tok_emb.weight:
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=C**-0.5)
        elif isinstance(m, nn.LayerNorm):
            m.reset_parameters()
    return model


# --- Attention sinks: how much weight goes to the first position --------------------------------------------


def _check_weights(name: str, w: object) -> torch.Tensor:
    check_float_tensor(name, w)
    if w.dim() != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(
            f"{name} must be self-attention weights (B, H, T, T), as GPT.attention_maps returns "
            f"for each layer, got shape {tuple(w.shape)}"
        )
    if w.shape[-1] < 2:
        raise ValueError(f"{name} must cover at least 2 positions (query 0 can only read key 0), got T = {w.shape[-1]}")
    return w


def _check_weights_and_norms(weights: object, norms: object) -> tuple[torch.Tensor, torch.Tensor]:
    w = _check_weights("weights", weights)
    check_float_tensor("norms", norms)
    if norms.shape != w.shape:
        raise ValueError(
            f"norms must have the weights' shape {tuple(w.shape)} (weighted_value_norms of these "
            f"weights), got {tuple(norms.shape)}"
        )
    return w, norms


def first_key_share(weights: torch.Tensor) -> torch.Tensor:
    """The mean weight that queries 1 .. T-1 give to key 0, per head (query 0 can only read key 0).

    Shape: weights (B, H, T, T) causal -> (H,). Taught in notebook 11.
    """
    w = _check_weights("weights", weights)
    return w[:, :, 1:, 0].mean(dim=(0, 2))  # (B, H, T - 1) -> (H,)


def uniform_first_key_share(T: int) -> float:
    """:func:`first_key_share` of a head that spreads evenly: the mean of 1 / (i + 1), i = 1 .. T-1."""
    T = check_int("T", T, minimum=2)
    return sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)


# --- Weights against what they move: ||w_ij f(x_j)|| (Kobayashi et al. 2020) --------------------------------


@torch.no_grad()
def attention_and_values(model: GPT, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's attention weights and each head's values ``W_O[:, h D:(h + 1) D] v_j`` (no bias) as they reach
    the residual stream; grouped-query attention is refused.
    Shape: idx (B, T) -> L pairs (weights (B, H, T, T), values (B, H, T, C)). Taught in notebook 11.
    """
    model = _check_gpt(model)
    if model.config.num_kv_heads not in (None, model.config.num_heads):
        raise ValueError(
            "attention_and_values needs multi-head attention in every block (num_kv_heads None or "
            "equal to num_heads); this model uses grouped-query attention"
        )
    check_token_ids("idx", idx, model.config.vocab_size)
    inputs: list[torch.Tensor] = []  # what each block's attention reads: ln_1(x) pre-norm, x post-norm
    hooks = [
        block.attn.register_forward_pre_hook(lambda module, args: inputs.append(args[0])) for block in model.blocks
    ]
    try:
        maps = model.attention_maps(idx)  # L x (B, H, T, T)
    finally:
        for hook in hooks:
            hook.remove()
    C, H = model.config.embed_dim, model.config.num_heads
    out = []
    for block, h, weights in zip(model.blocks, inputs, maps):
        v = split_heads(block.attn.qkv_proj(h).chunk(3, dim=-1)[2], H)  # (B, T, C) -> (B, H, T, D)
        w_o = block.attn.out_proj.weight.view(C, H, C // H)  # (C, C) -> (C, H, D): head h's columns
        values = torch.einsum("bhjd,chd->bhjc", v, w_o)  # (B, H, T, C)
        out.append((weights, values))
    return out


def weighted_value_norms(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``||weights[..., i, j] * values[..., j, :]||``: how far key j actually moves query i's output.

    Shape: weights (..., T, S), values (..., S, E) -> (..., T, S). Exercise 11.1; taught in notebook 11.
    """
    check_float_tensor("weights", weights, min_dim=2)
    check_float_tensor("values", values, min_dim=2)
    if weights.shape[:-2] != values.shape[:-2] or weights.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"weights (..., T, S) and values (..., S, E) must agree on the leading dims and on S, got "
            f"{tuple(weights.shape)} and {tuple(values.shape)}"
        )
    return weights * values.norm(dim=-1).unsqueeze(-2)  # (..., T, S) * (..., 1, S)


def top_key_disagreement(weights: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """The share of rows (queries 1 .. T-1) whose largest weight and largest weighted norm are different keys.

    Shape: weights, norms (B, H, T, T) -> (H,). Taught in notebook 11.
    """
    w, n = _check_weights_and_norms(weights, norms)
    differs = w[:, :, 1:].argmax(dim=-1) != n[:, :, 1:].argmax(dim=-1)  # (B, H, T - 1)
    return differs.float().mean(dim=(0, 2))  # (H,)


def rank_correlation(weights: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """Spearman's rank correlation of each row's weights and weighted norms, averaged per head.

    Rows 0 and 1 are left out. Shape: weights, norms (B, H, T, T) -> (H,). Taught in notebook 11.
    """
    w, n = _check_weights_and_norms(weights, norms)
    T = w.shape[-1]
    if T < 3:
        raise ValueError(f"rank_correlation needs T >= 3 (rows with at least 3 keys), got T = {T}")
    per_row = []
    for i in range(2, T):
        ranks = [t[..., i, : i + 1].double().argsort(dim=-1).argsort(dim=-1).double() for t in (w, n)]  # (B, H, i+1)
        a, b = (r - r.mean(dim=-1, keepdim=True) for r in ranks)
        per_row.append((a * b).sum(dim=-1) / (a.norm(dim=-1) * b.norm(dim=-1)))  # (B, H)
    return torch.stack(per_row, dim=-1).mean(dim=(0, 2)).to(w.dtype)  # (B, H, T - 2) -> (H,)


def selected_key_ratios(
    weights: torch.Tensor, values: torch.Tensor, selected: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight drawn by the ``selected`` keys (averaged over the queries that see them) and their value lengths,
    each over the other keys', per head.
    Shape: weights (B, H, T, T), values (B, H, T, E), selected (B, T) bool -> two (H,) ratios. Taught in notebook 11.
    """
    w = _check_weights("weights", weights)
    B, H, T, _ = w.shape
    check_float_tensor("values", values)
    if values.dim() != 4 or values.shape[:3] != (B, H, T):
        raise ValueError(f"values must be (B, H, T, E) = ({B}, {H}, {T}, E) as in weights, got {tuple(values.shape)}")
    check_tensor("selected", selected)
    if selected.dtype != torch.bool or selected.shape != (B, T):
        got = f"{tuple(selected.shape)} {selected.dtype}"
        raise ValueError(f"selected must be a bool tensor (B, T) = ({B}, {T}), got {got}")
    if bool(selected.all()) or not bool(selected.any()):
        raise ValueError("selected must mark some keys and leave others unmarked: a ratio needs both")
    seeing = T - torch.arange(T, device=w.device)  # (T,): queries i >= j that can see key j
    drawn = w.sum(dim=-2) / seeing  # (B, H, T)
    length = values.norm(dim=-1)  # (B, H, T)
    chosen = selected[:, None, :].to(w.dtype)  # (B, 1, T)

    def ratio(x: torch.Tensor) -> torch.Tensor:
        inside = (x * chosen).sum(dim=(0, 2)) / chosen.sum()  # (H,)
        outside = (x * (1 - chosen)).sum(dim=(0, 2)) / (1 - chosen).sum()  # (H,)
        return inside / outside

    return ratio(drawn), ratio(length)


# --- Attention rolled out through the layers (Abnar and Zuidema 2020) ---------------------------------------


def attention_rollout(maps: list[torch.Tensor], residual: float = 0.5) -> list[torch.Tensor]:
    """How much each input position reaches each query through layers 0 .. l, one (B, T, T) map per layer l.

    ``A_l = residual * I + (1 - residual) * mean_h(W_l)``, ``R_l = A_l @ R_{l-1}`` with ``R_0 = A_0``.
    Shape: maps, L x (B, H, T, T) as GPT.attention_maps returns them -> L x (B, T, T). Taught in notebook 11.
    """
    if not isinstance(maps, (list, tuple)) or not maps:
        got = f"an empty {type(maps).__name__}" if isinstance(maps, (list, tuple)) else type(maps).__name__
        raise TypeError(f"maps must be a non-empty list of (B, H, T, T) weights, one per layer, got {got}")
    residual = check_fraction("residual", residual, one_allowed=True)
    checked = [_check_weights(f"maps[{layer}]", w) for layer, w in enumerate(maps)]
    B, _, T, _ = checked[0].shape
    for layer, w in enumerate(checked):
        if w.shape[0] != B or w.shape[-1] != T:
            raise ValueError(
                f"every layer's weights must share B and T: maps[0] is {tuple(checked[0].shape)}, "
                f"maps[{layer}] is {tuple(w.shape)}"
            )
    eye = torch.eye(T, dtype=checked[0].dtype, device=checked[0].device)  # (T, T)
    rolled, out = None, []
    for w in checked:
        a = residual * eye + (1 - residual) * w.mean(dim=1)  # (B, H, T, T) -> (B, T, T)
        rolled = a if rolled is None else a @ rolled  # (B, T, T) @ (B, T, T) -> (B, T, T)
        out.append(rolled)
    return out
