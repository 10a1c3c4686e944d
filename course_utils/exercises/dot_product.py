"""Exercises of notebook 01 (the dot-product toy): one soft lookup, many queries, self-attention.

Each reference solution is built from :mod:`course_utils.attention`; each mistake is one learners
really make. The cases are chosen so that every mistake gives outputs unlike the solution's and
unlike every other mistake's (``tests/test_exercises.py`` proves it).
"""

from __future__ import annotations

import torch

from course_utils.attention import attention_matmul, simple_self_attention
from course_utils.checking import Exercise, Mistake

__all__ = ["EXERCISES"]


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# ---------------------------------------------------------------- 01.1 one query, a soft lookup


def _lookup_solution(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    v = values if values.dim() == 2 else values[:, None]  # (S,) -> (S, 1)
    out = attention_matmul(query[None], keys, v)[0]  # (1, D), (S, D), (S, Dv) -> (Dv,)
    return out if values.dim() == 2 else out[0]


def _lookup_raw_scores(query, keys, values):
    scores = keys @ query  # (S,)
    return scores @ values


def _lookup_no_exp(query, keys, values):
    scores = keys @ query  # (S,)
    return (scores / scores.sum()) @ values


def _lookup_weights_keys(query, keys, values):
    weights = torch.softmax(keys @ query, dim=-1)  # (S,)
    return weights @ keys


def _lookup_hard(query, keys, values):
    return values[(keys @ query).argmax()]


def _lookup_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(101)
    toy = (torch.tensor([1.0, 0.0]), torch.tensor([[0.95, 0.05], [0.1, 0.9], [0.8, 0.2]]),
           torch.tensor([0.0, 1.0, 0.0]))
    return [
        (toy, {}),
        ((_randn(g, 4), _randn(g, 5, 4), _randn(g, 5, 4)), {}),
        ((_randn(g, 3), _randn(g, 7, 3), _randn(g, 7, 2)), {}),
    ]


# ---------------------------------------------------------------- 01.2 many queries, matrix form


def _many_solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return attention_matmul(q, k, v)


def _many_wrong_axis(q, k, v):
    return torch.softmax(q @ k.T, dim=0) @ v


def _many_no_transpose(q, k, v):
    return torch.softmax(q @ k, dim=-1) @ v


def _many_raw_scores(q, k, v):
    return (q @ k.T) @ v


def _many_weights_keys(q, k, v):
    return torch.softmax(q @ k.T, dim=-1) @ k


def _many_cases() -> list[tuple[tuple, dict]]:
    # S == D in every case, so that forgetting to transpose k runs silently (as it does in real code
    # whenever the sizes happen to agree) instead of crashing.
    g = torch.Generator().manual_seed(102)
    return [
        ((_randn(g, 4, 3), _randn(g, 3, 3), _randn(g, 3, 2)), {}),
        ((_randn(g, 2, 5), _randn(g, 5, 5), _randn(g, 5, 5)), {}),
        ((_randn(g, 6, 4), _randn(g, 4, 4), _randn(g, 4, 3)), {}),
    ]


# ---------------------------------------------------------------- 01.3 simple self-attention


def _self_solution(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return simple_self_attention(x)


def _self_no_softmax(x):
    scores = x @ x.T  # (T, T)
    return scores @ x, scores


def _self_wrong_axis(x):
    weights = torch.softmax(x @ x.T, dim=0)  # columns sum to 1, not rows
    return weights @ x, weights


def _self_no_exp(x):
    scores = x @ x.T
    weights = scores / scores.sum(dim=-1, keepdim=True)
    return weights @ x, weights


def _self_hard(x):
    scores = x @ x.T
    weights = torch.nn.functional.one_hot(scores.argmax(dim=-1), x.shape[0]).to(x.dtype)
    return weights @ x, weights


def _self_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(103)
    return [((_randn(g, 4, 3),), {}), ((_randn(g, 6, 2),), {}), ((_randn(g, 3, 5),), {})]


# ---------------------------------------------------------------- 01.4 learned projections


def _qkv_solution(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    # nn.Linear stores its weight as (out_features, in_features) and computes x @ weight.T
    return attention_matmul(x @ w_q.T, x @ w_k.T, x @ w_v.T)  # (T, C) -> (T, D) each -> (T, D)


def _qkv_no_transpose(x, w_q, w_k, w_v):
    return attention_matmul(x @ w_q, x @ w_k, x @ w_v)


def _qkv_values_unprojected(x, w_q, w_k, w_v):
    return attention_matmul(x @ w_q.T, x @ w_k.T, x)


def _qkv_keys_with_w_q(x, w_q, w_k, w_v):
    return attention_matmul(x @ w_q.T, x @ w_q.T, x @ w_v.T)


def _qkv_queries_keys_swapped(x, w_q, w_k, w_v):
    return attention_matmul(x @ w_k.T, x @ w_q.T, x @ w_v.T)


def _qkv_cases() -> list[tuple[tuple, dict]]:
    # Square weights (D == C), so that forgetting the .T runs silently instead of crashing.
    g = torch.Generator().manual_seed(104)
    cases = []
    for T, C in ((4, 3), (5, 2), (3, 4)):
        cases.append(((_randn(g, T, C), _randn(g, C, C), _randn(g, C, C), _randn(g, C, C)), {}))
    return cases


EXERCISES = (
    Exercise(
        key="01.1",
        title="a soft lookup for one query",
        signature="soft_lookup(query, keys, values) -> out",
        solution=_lookup_solution,
        cases=_lookup_cases,
        mistakes=(
            Mistake("raw scores, no softmax",
                    "The dot products are scores, not weights: pass them through torch.softmax first, "
                    "so the weights are positive and sum to 1.", _lookup_raw_scores),
            Mistake("normalised without exp",
                    "Dividing the scores by their sum is not a softmax: scores can be negative or sum to "
                    "almost 0. Take torch.exp of the scores first (or call torch.softmax).", _lookup_no_exp),
            Mistake("weighted the keys instead of the values",
                    "Keys are only for matching; what you read out is the values: weights @ values.",
                    _lookup_weights_keys),
            Mistake("hard lookup (argmax)",
                    "Picking the best key's value is a dict lookup, not attention: mix every value, "
                    "weighted by softmax(scores).", _lookup_hard),
        ),
    ),
    Exercise(
        key="01.2",
        title="attention for many queries, as matrices",
        signature="attention_many(q, k, v) -> out",
        solution=_many_solution,
        cases=_many_cases,
        mistakes=(
            Mistake("softmax over the wrong axis",
                    "scores has one row per query; each query's weights must sum to 1, so take the softmax "
                    "along the keys: dim=-1, not dim=0.", _many_wrong_axis),
            Mistake("keys not transposed",
                    "q is (T, D) and k is (S, D): the scores are q @ k.T, (T, D) @ (D, S) -> (T, S). "
                    "q @ k only runs because S == D here.", _many_no_transpose),
            Mistake("raw scores, no softmax",
                    "Turn the scores into weights with torch.softmax(scores, dim=-1) before multiplying "
                    "by v.", _many_raw_scores),
            Mistake("weighted the keys instead of the values",
                    "The output mixes the values: weights @ v, not weights @ k.", _many_weights_keys),
        ),
    ),
    Exercise(
        key="01.3",
        title="simple self-attention, no learned weights",
        signature="my_self_attention(x) -> (out, weights)",
        solution=_self_solution,
        cases=_self_cases,
        mistakes=(
            Mistake("raw scores, no softmax",
                    "x @ x.T are scores; the weights are torch.softmax(scores, dim=-1), and out = weights @ x.",
                    _self_no_softmax),
            Mistake("softmax over the wrong axis",
                    "x @ x.T is symmetric, so dim=0 looks plausible, but it makes the columns sum to 1. "
                    "Each row (one query) must sum to 1: dim=-1.", _self_wrong_axis),
            Mistake("normalised without exp",
                    "Dividing each row by its sum is not a softmax (dot products can be negative). "
                    "Use torch.softmax(scores, dim=-1).", _self_no_exp),
            Mistake("hard lookup (argmax)",
                    "One-hot weights on the best match are a hard lookup; attention keeps every token, "
                    "weighted by the softmax of its score.", _self_hard),
        ),
    ),
    Exercise(
        key="01.4",
        title="self-attention with W_Q, W_K, W_V",
        signature="qkv_attention(x, w_q, w_k, w_v) -> out",
        solution=_qkv_solution,
        cases=_qkv_cases,
        mistakes=(
            Mistake("weight used untransposed",
                    "The weights are stored like nn.Linear.weight, (out, in) = (D, C): project with "
                    "x @ w_q.T (that is what nn.Linear computes). x @ w_q only runs because D == C here.",
                    _qkv_no_transpose),
            Mistake("values not projected",
                    "The values get their own projection too: v = x @ w_v.T, then out = weights @ v.",
                    _qkv_values_unprojected),
            Mistake("keys projected with W_Q",
                    "Queries and keys need different projections: k = x @ w_k.T. With one matrix for both, "
                    "the scores are symmetric again.", _qkv_keys_with_w_q),
            Mistake("queries and keys swapped",
                    "q = x @ w_q.T asks, k = x @ w_k.T answers; swapping them transposes the scores.",
                    _qkv_queries_keys_swapped),
        ),
    ),
)
