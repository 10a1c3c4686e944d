"""Exercises of notebook 11 (inside the trained GPT): weigh attention by what it moves, write a post-norm block,
roll attention out through the layers.

Each reference solution is built from :mod:`course_utils.inspect_gpt` and :mod:`course_utils.gpt`; each mistake
is one that shows up in real code: a value's norm taken over the wrong axis or of the wrong key, squared, or
broadcast against the weights without an axis for the queries; a block normalised in pre-norm order or on its
branch only, a residual left out, the LayerNorms swapped; a rollout multiplied in the wrong order, without the
residual's identity or its halving, of the last layer only, or of heads fused by their maximum or rolled out apart.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.gpt import MLP, Block, GPTConfig
from course_utils.inspect_gpt import attention_rollout, weighted_value_norms
from course_utils.variants import GroupedQueryAttention

__all__ = ["EXERCISES"]


# --- 11.1 value-weighted attention norms ------------------------------------------------------------


def _weighted_norms_solution(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return weighted_value_norms(weights, v)  # (B, H, T, S)


def _weighted_norms_case(
    g: torch.Generator, B: int, H: int, T: int, S: int, D: int, causal: bool = True
) -> tuple[tuple, dict]:
    scores = torch.randn(B, H, T, S, generator=g) * 2.0
    visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # causal, bottom-right aligned when T < S
    if not causal:  # every key visible (an encoder, or a cross-attention): T > S is possible too
        visible = torch.ones(T, S, dtype=torch.bool)
    weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)  # (B, H, T, S)
    scale = 0.1 + 4.0 * torch.rand(B, H, S, 1, generator=g)  # values whose norms differ by key, as they do
    return (weights, torch.randn(B, H, S, D, generator=g) * scale), {}


def _weighted_norms_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(95)
    return [
        _weighted_norms_case(g, 2, 3, 6, 6, 4),
        _weighted_norms_case(g, 1, 2, 5, 5, 8),
        _weighted_norms_case(g, 2, 2, 3, 7, 4),  # T < S: three new queries after a cache of four keys
        _weighted_norms_case(g, 1, 1, 1, 5, 1),  # one query, one head, values of one channel
        _weighted_norms_case(g, 2, 3, 4, 1, 3, causal=False),  # one key (every weight 1), T > S
    ]


def _weighted_norms_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        T = randint(g, 1, 49)
        S = T + (randint(g, 0, 17) if bool(torch.rand((), generator=g) < 0.5) else 0)
        cases.append(_weighted_norms_case(g, randint(g, 1, 4), randint(g, 1, 13), T, S, randint(g, 1, 65)))
    return cases


def _weighted_norms_weights_only(weights, v):
    return weights.clone()  # the weights, as if every value had norm 1


def _weighted_norms_squared(weights, v):
    return weights * (v**2).sum(dim=-1).unsqueeze(-2)  # squared norm: no square root


def _weighted_norms_query_value(weights, v):
    return weights * v.norm(dim=-1).unsqueeze(-1)  # (B, H, S, 1): the norm of value i, broadcast along the row


def _weighted_norms_over_positions(weights, v):
    return weights * v.norm(dim=-2).unsqueeze(-2)  # norm over the S positions: (B, H, 1, D), one per channel


def _weighted_norms_not_unsqueezed(weights, v):
    return weights * v.norm(dim=-1)  # (B, H, T, S) * (B, H, S): lines S up with S, but H with T and B with H


def _weighted_norms_of_the_sum(weights, v):
    return (weights @ v).norm(dim=-1)  # (B, H, T): the norm of the output, not of each key's term


# --- 11.4 a post-norm block -------------------------------------------------------------------------


def _post_norm_solution(
    x: torch.Tensor, attn: torch.nn.Module, mlp: torch.nn.Module, ln_1: torch.nn.Module, ln_2: torch.nn.Module
) -> torch.Tensor:
    C = x.shape[-1]
    config = GPTConfig(
        vocab_size=2,
        context_length=x.shape[-2],
        embed_dim=C,
        num_heads=attn.num_heads,
        num_layers=1,
        norm_position="post",
    )
    block = Block(config)
    block.attn, block.mlp, block.ln_1, block.ln_2 = attn, mlp, ln_1, ln_2  # the given sublayers, not copies
    return block(x)  # (B, T, C)


def _sublayers(g: torch.Generator, C: int, H: int, T: int) -> tuple[torch.nn.Module, ...]:
    """A causal attention, an MLP and two LayerNorms of width C, every parameter drawn from ``g``.

    Large enough weights that each branch changes x visibly, and LayerNorm gains and biases away from 1 and 0,
    so that using one LayerNorm for the other, or leaving one out, changes the result."""
    config = GPTConfig(vocab_size=2, context_length=T, embed_dim=C, num_heads=H, num_layers=1)
    attn = GroupedQueryAttention(C, H, bias=True, causal=True)  # the GPT's layer, as GPTConfig's defaults make it
    mods = (attn, MLP(config), torch.nn.LayerNorm(C), torch.nn.LayerNorm(C))
    with torch.no_grad():
        for m in mods[:2]:
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 / math.sqrt(C) if p.dim() > 1 else 0.1))
        for ln in mods[2:]:
            ln.weight.copy_(1.0 + 0.5 * torch.randn(C, generator=g))
            ln.bias.copy_(0.3 * torch.randn(C, generator=g))
    return mods


def _post_norm_case(g: torch.Generator, B: int, T: int, C: int, H: int) -> tuple[tuple, dict]:
    x = 2.0 * torch.randn(B, T, C, generator=g) + 1.0  # not normalised already: LayerNorm changes it
    return (x, *_sublayers(g, C, H, T)), {}


def _post_norm_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(94)
    return [
        _post_norm_case(g, 2, 5, 8, 2),
        _post_norm_case(g, 1, 7, 12, 3),
        _post_norm_case(g, 3, 4, 16, 4),
        _post_norm_case(g, 2, 1, 6, 1),  # one token, one head
    ]


def _post_norm_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        H = randint(g, 1, 7)
        cases.append(_post_norm_case(g, randint(g, 1, 5), randint(g, 1, 41), H * randint(g, 1, 13), H))
    return cases


def _post_norm_pre_order(x, attn, mlp, ln_1, ln_2):
    x = x + attn(ln_1(x))  # pre-norm: the LayerNorm reads the branch's input
    return x + mlp(ln_2(x))


def _post_norm_branch_only(x, attn, mlp, ln_1, ln_2):
    h = x + ln_1(attn(x))  # the branch's output normalised, the sum left as it is
    return h + ln_2(mlp(h))


def _post_norm_no_residual(x, attn, mlp, ln_1, ln_2):
    h = ln_1(attn(x))  # x itself never added back
    return ln_2(mlp(h))


def _post_norm_mlp_reads_x(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x))
    return ln_2(h + mlp(x))  # the second sublayer reads the block's input, not the first sum


def _post_norm_norms_swapped(x, attn, mlp, ln_1, ln_2):
    h = ln_2(x + attn(x))
    return ln_1(h + mlp(h))


# --- 11.5 attention rollout ----------------------------------------------------------------------------------


def _rollout_solution(weights: torch.Tensor) -> torch.Tensor:
    return attention_rollout(list(weights))[-1]  # L x (B, H, T, T) -> (B, T, T), through every layer


def _maps(g: torch.Generator, L: int, B: int, H: int, T: int, dtype=torch.float32) -> torch.Tensor:
    """Random causal attention weights (L, B, H, T, T), rows summing to 1."""
    scores = torch.randn(L, B, H, T, T, generator=g, dtype=dtype) * 2
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1)


def _rollout_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(15)
    return [
        ((_maps(g, 3, 2, 4, 5),), {}),  # three layers: the order of the product matters
        ((_maps(g, 2, 1, 1, 6),), {}),  # one head, one sequence
        ((_maps(g, 1, 3, 2, 4, torch.float64),), {}),  # one layer: no product at all
        ((_maps(g, 2, 2, 3, 2),), {}),  # T = 2, the shortest a map may be
    ]


def _rollout_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    return [
        ((_maps(g, randint(g, 4, 7), randint(g, 4, 6), randint(g, 5, 8), randint(g, 7, 30)),), {}) for _ in range(3)
    ]


def _averaged(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    return [(eye + w.mean(dim=1)) / 2 for w in weights]  # L x (B, T, T)


def _rollout_wrong_order(weights):
    out = None
    for a in _averaged(weights):
        out = a if out is None else out @ a  # A_0 A_1 ...: the first layer applied last
    return out


def _rollout_no_residual(weights):
    out = None
    for w in weights:
        a = w.mean(dim=1)  # the residual connection left out
        out = a if out is None else a @ out
    return out


def _rollout_not_halved(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    out = None
    for w in weights:
        a = eye + w.mean(dim=1)  # rows now sum to 2
        out = a if out is None else a @ out
    return out


def _rollout_last_layer_only(weights):
    return _averaged(weights)[-1]  # one layer's map with the residual, not the product


def _rollout_max_over_heads(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    out = None
    for w in weights:
        a = (eye + w.amax(dim=1)) / 2  # the heads fused by their maximum
        out = a if out is None else a @ out
    return out


def _rollout_heads_rolled_apart(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    out = None
    for w in weights:
        a = (eye + w) / 2  # (B, H, T, T): each head rolled out through the same head of every layer
        out = a if out is None else a @ out
    return out.mean(dim=1)


EXERCISES = (
    Exercise(
        key="11.1",
        title="value-weighted attention norms",
        signature="weighted_norms(weights, v) -> (B, H, T, S), entry [b, h, i, j] = ||weights[b, h, i, j] * "
        "v[b, h, j]||",
        solution=_weighted_norms_solution,
        cases=_weighted_norms_cases,
        draw=_weighted_norms_draw,
        edges={
            "T == S": lambda w, v: w.shape[2] == w.shape[3],
            "T < S": lambda w, v: w.shape[2] < w.shape[3],
            "T > S": lambda w, v: w.shape[2] > w.shape[3],
            "T == 1": lambda w, v: w.shape[2] == 1,
            "S == 1": lambda w, v: w.shape[3] == 1,
            "D == 1": lambda w, v: v.shape[3] == 1,
            "B == 1": lambda w, v: w.shape[0] == 1,
            "H == 1": lambda w, v: w.shape[1] == 1,
            "B, H and T all different": lambda w, v: len(set(w.shape[:3])) == 3,
            "weights of 0 (keys masked out)": lambda w, v: bool((w == 0).any()),
        },
        mistakes=(
            Mistake(
                "the weights alone",
                "That is the attention map itself. The point is to scale each weight by the size of the "
                "value it multiplies.",
                _weighted_norms_weights_only,
                fix="weights * v.norm(dim=-1).unsqueeze(-2)",
            ),
            Mistake(
                "the squared norm",
                "The length of a vector is the square root of the sum of its squares.",
                _weighted_norms_squared,
                fix="v.norm(dim=-1), not (v ** 2).sum(-1)",
            ),
            Mistake(
                "the value of the query's position, not the key's",
                "Entry (i, j) multiplies value j, the key's, so each key's norm must run along a row "
                "(the last axis), the same for every query.",
                _weighted_norms_query_value,
                fix="v.norm(dim=-1).unsqueeze(-2): (B, H, 1, S)",
            ),
            Mistake(
                "a norm over the positions, not the channels",
                "A value vector lives along the last axis of v (its D channels); the norm sums over those, "
                "giving one number per key.",
                _weighted_norms_over_positions,
                fix="v.norm(dim=-1), not v.norm(dim=-2)",
            ),
            Mistake(
                "the norm of the sum",
                "The norm of weights @ v is the size of the whole output: one number per query. The "
                "exercise asks for each key's term on its own, one number per (query, key).",
                _weighted_norms_of_the_sum,
                fix="weights * v.norm(dim=-1).unsqueeze(-2)",
            ),
            Mistake(
                "the norms broadcast against the wrong axes",
                "The norms are (B, H, S), one per key, and the weights (B, H, T, S). Broadcasting lines "
                "shapes up from the right, so the norms' H meets the weights' T and their B meets H. The "
                "norms need an axis of size 1 where the queries are, so that every query's row gets the "
                "same norms.",
                _weighted_norms_not_unsqueezed,
                fix="weights * v.norm(dim=-1).unsqueeze(-2): (B, H, T, S) * (B, H, 1, S)",
            ),
        ),
    ),
    Exercise(
        key="11.4",
        title="a post-norm block",
        signature="post_norm_block(x, attn, mlp, ln_1, ln_2) -> (B, T, C): ln_1 after the attention's residual "
        "add, ln_2 after the MLP's",
        solution=_post_norm_solution,
        cases=_post_norm_cases,
        draw=_post_norm_draw,
        edges={
            "B == 1": lambda x, attn, mlp, ln_1, ln_2: x.shape[0] == 1,
            "T == 1": lambda x, attn, mlp, ln_1, ln_2: x.shape[1] == 1,
            "one head": lambda x, attn, mlp, ln_1, ln_2: attn.num_heads == 1,
            "C not a power of two": lambda x, attn, mlp, ln_1, ln_2: x.shape[2] & (x.shape[2] - 1) != 0,
        },
        mistakes=(
            Mistake(
                "pre-norm order",
                "That is the pre-norm block the course's GPT uses. Post-norm normalises AFTER each residual "
                "add: the sublayer reads the stream as it is, and the LayerNorm reads the sum.",
                _post_norm_pre_order,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
            Mistake(
                "the LayerNorm on the branch only",
                "The LayerNorm takes the sum of the stream and the branch, not the branch alone: the output "
                "of a post-norm block is normalised as a whole.",
                _post_norm_branch_only,
                fix="h = ln_1(x + attn(x)), not x + ln_1(attn(x))",
            ),
            Mistake(
                "a residual left out",
                "Each sublayer's input is added back to its output before the LayerNorm; without it the "
                "block forgets its input.",
                _post_norm_no_residual,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
            Mistake(
                "the MLP reads the block's input",
                "The two sublayers run one after the other: the MLP reads, and adds back to, the stream "
                "after the first LayerNorm.",
                _post_norm_mlp_reads_x,
                fix="return ln_2(h + mlp(h)) with h = ln_1(x + attn(x))",
            ),
            Mistake(
                "the LayerNorms swapped",
                "Each LayerNorm belongs to one sublayer and has its own gain and bias: the first follows "
                "the attention, the second the MLP.",
                _post_norm_norms_swapped,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
        ),
    ),
    Exercise(
        key="11.5",
        domain=Domain(float64=("weights",)),
        title="attention rollout",
        signature="rollout(weights) -> (B, T, T): weights (L, B, H, T, T), layer l's maps at weights[l]; "
        "A_l = (I + mean over heads of weights[l]) / 2, and the rollout is A_{L-1} ... A_1 A_0; T >= 2",
        solution=_rollout_solution,
        cases=_rollout_cases,
        draw=_rollout_draw,
        edges={
            "L == 1 (one layer)": lambda w: w.shape[0] == 1,
            "L >= 3": lambda w: w.shape[0] >= 3,
            "H == 1": lambda w: w.shape[2] == 1,
            "B == 1": lambda w: w.shape[1] == 1,
            "T == 2 (the shortest map)": lambda w: w.shape[-1] == 2,
            "float64 weights": lambda w: w.dtype == torch.float64,
        },
        mistakes=(
            Mistake(
                "multiplied in the wrong order",
                "Layer 0 acts first, so its matrix sits on the right: each new layer multiplies the rollout so far "
                "from the left.",
                _rollout_wrong_order,
                fix="out = a if out is None else a @ out",
            ),
            Mistake(
                "the residual connection left out",
                "Each layer adds its attention's output to the stream it read: half of what a position carries "
                "is itself. That is the identity in (I + W) / 2.",
                _rollout_no_residual,
                fix="a = (eye + w.mean(dim=1)) / 2",
            ),
            Mistake(
                "the identity added but not halved",
                "I + W has rows summing to 2, and the product's rows to 2 ** L; halve it so every row stays a "
                "distribution.",
                _rollout_not_halved,
                fix="a = (eye + w.mean(dim=1)) / 2",
            ),
            Mistake(
                "the last layer only",
                "The rollout traces the last layer back to the input through every layer below it: a product of "
                "all L matrices.",
                _rollout_last_layer_only,
                fix="multiply every layer's (I + W) / 2, layer 0 on the right",
            ),
            Mistake(
                "the heads fused by their maximum",
                "The statement averages each layer's heads (the heads' outputs are summed into one stream); a "
                "maximum over heads is another variant, and its rows no longer sum to 1.",
                _rollout_max_over_heads,
                fix="w.mean(dim=1)",
            ),
            Mistake(
                "each head rolled out on its own",
                "Heads of layer l + 1 read the whole stream, every head of layer l mixed: average the heads "
                "first, then multiply the layers.",
                _rollout_heads_rolled_apart,
                fix="a = (eye + w.mean(dim=1)) / 2, then the product",
            ),
        ),
    ),
)
