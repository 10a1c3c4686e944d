"""Exercises of notebook 01 (the dot-product toy): one soft lookup, many queries, self-attention.

Each reference solution is built from :mod:`course_utils.attention`; each mistake is one learners
really make. The cases are chosen so that every mistake gives outputs unlike the solution's and
unlike every other mistake's (``tests/test_exercises.py`` proves it).
"""

from __future__ import annotations

import torch

from course_utils.attention import attention_matmul, simple_self_attention
from course_utils.exercises._draws import randint, randn
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain

__all__ = ["EXERCISES"]


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


def _lookup_hand_softmax(query, keys, values):
    e = torch.exp(keys @ query)  # no maximum subtracted: exp(225) overflows float32 to inf, and inf / inf is NaN
    return (e / e.sum()) @ values


def _lookup_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(101)
    toy = (
        torch.tensor([1.0, 0.0]),
        torch.tensor([[0.95, 0.05], [0.1, 0.9], [0.8, 0.2]]),
        torch.tensor([0.0, 1.0, 0.0]),
    )
    return [
        (toy, {}),
        ((randn(g, 4), randn(g, 5, 4), randn(g, 5, 4)), {}),
        ((randn(g, 3), randn(g, 7, 3), randn(g, 7, 2)), {}),
        ((randn(g, 2), randn(g, 6, 2), randn(g, 6)), {}),  # a number again, with S != 3
        # a long query aligned with one key: scores 225, -225, 0, 3 (a row spanning 450), which only a softmax
        # that subtracts the row maximum survives
        (
            (
                torch.tensor([15.0, 0.0]),
                torch.tensor([[15.0, 0.0], [-15.0, 0.0], [0.0, 1.0], [0.2, -0.5]]),
                randn(g, 4, 3),
            ),
            {},
        ),
        ((randn(g, 3), randn(g, 5, 3), randn(g, 5, 1)), {}),  # Dv == 1: a (1,) vector, not a number
        ((randn(g, 1), randn(g, 1, 1), randn(g, 1, 3)), {}),  # one key (S == 1), D == 1
    ]


def _lookup_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        S, D, Dv = (randint(g, lo, hi) for lo, hi in ((2, 49), (1, 65), (1, 33)))
        scale = float(torch.empty(()).uniform_(0.5, 3.0, generator=g)) / max(1.0, D / 8) ** 0.5  # sharper weights
        values = randn(g, S) if bool(torch.rand((), generator=g) < 0.5) else randn(g, S, Dv)
        cases.append(((scale * randn(g, D), randn(g, S, D), values), {}))
    return cases


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


def _many_hand_softmax(q, k, v):
    e = torch.exp(q @ k.T)  # no maximum subtracted: overflows to inf on a large score
    return (e / e.sum(dim=-1, keepdim=True)) @ v


def _many_cases() -> list[tuple[tuple, dict]]:
    # S == D in the first four cases, so that forgetting to transpose k runs silently (as it does in real code
    # whenever the sizes happen to agree) instead of crashing.
    g = torch.Generator().manual_seed(102)
    return [
        ((randn(g, 4, 3), randn(g, 3, 3), randn(g, 3, 2)), {}),
        ((randn(g, 2, 5), randn(g, 5, 5), randn(g, 5, 5)), {}),
        ((randn(g, 6, 4), randn(g, 4, 4), randn(g, 4, 3)), {}),
        # the first query long and aligned with the first key: a score of 240 in a row spanning hundreds
        (
            (
                torch.cat([torch.tensor([[16.0, 0.0, 0.0]]), randn(g, 2, 3)]),
                torch.cat([torch.tensor([[15.0, 0.0, 0.0]]), randn(g, 2, 3)]),
                randn(g, 3, 2),
            ),
            {},
        ),
        ((randn(g, 3, 4), randn(g, 6, 4), randn(g, 6, 2)), {}),  # S != D: q @ k cannot even run
        ((randn(g, 1, 2), randn(g, 4, 2), randn(g, 4, 1)), {}),  # one query (T == 1), Dv == 1
        ((randn(g, 3, 2), randn(g, 1, 2), randn(g, 1, 3)), {}),  # one key (S == 1)
    ]


def _many_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):  # T, S, D and Dv drawn: S == D only by chance
        T, S, D, Dv = (randint(g, lo, hi) for lo, hi in ((1, 49), (1, 49), (2, 65), (1, 33)))
        cases.append(((randn(g, T, D), randn(g, S, D) / max(1.0, D / 8) ** 0.5, randn(g, S, Dv)), {}))
    return cases


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


def _self_hand_softmax(x):
    e = torch.exp(x @ x.T)  # no maximum subtracted: a token's score with itself overflows to inf
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ x, weights


def _self_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(103)
    # the last: a token 15 long, whose score with itself is about 225 in a row spanning hundreds
    loud = torch.cat([randn(g, 3, 2), torch.tensor([[15.0, 1.0]])])
    return [
        ((randn(g, 4, 3),), {}),
        ((randn(g, 6, 2),), {}),
        ((randn(g, 3, 5),), {}),
        ((loud,), {}),
        ((randn(g, 1, 3),), {}),  # one token (T == 1)
        ((randn(g, 5, 1),), {}),  # one channel (C == 1)
    ]


def _self_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        T, C = randint(g, 2, 49), randint(g, 1, 65)
        cases.append(((randn(g, T, C) / max(1.0, C / 8) ** 0.5,), {}))
    return cases


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
    # Square weights (D == C) first, so that a forgotten .T gives numbers to compare (x @ w and its einsum
    # spelling give the same ones, and the first failing case names the mistake); then D > C and D < C, where it
    # cannot run at all; then one token (T == 1) and a head of size 1 (D == 1).
    g = torch.Generator().manual_seed(104)
    cases = []
    for T, C, D in ((4, 3, 3), (5, 2, 2), (3, 4, 4), (4, 3, 5), (5, 6, 2), (1, 4, 3), (3, 4, 1)):
        cases.append(((randn(g, T, C), randn(g, D, C), randn(g, D, C), randn(g, D, C)), {}))
    # the top of the stated range (entries up to 10) with small weights: scores stay moderate (below 60)
    x = torch.tensor([[9.0, -4.0], [1.0, 6.0], [-7.0, 2.0]])  # (3, 2)
    w_q, w_k = torch.tensor([[0.3, 0.1], [-0.2, 0.3]]), torch.tensor([[0.2, -0.1], [0.1, 0.3]])
    cases.append(((x, w_q, w_k, randn(g, 2, 2)), {}))
    return cases


def _qkv_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):  # T, C and D drawn: the weights are rarely square
        T, C, D = (randint(g, lo, hi) for lo, hi in ((1, 49), (2, 65), (1, 65)))
        cases.append(((randn(g, T, C), *(randn(g, D, C) / C**0.5 for _ in range(3))), {}))
    return cases


EXERCISES = (
    Exercise(
        key="01.1",
        title="a soft lookup for one query",
        signature="soft_lookup(query, keys, values) -> out",
        solution=_lookup_solution,
        cases=_lookup_cases,
        draw=_lookup_draw,
        edges={
            "values (S,): a number": lambda query, keys, values: values.dim() == 1,
            "values (S, Dv)": lambda query, keys, values: values.dim() == 2,
            "Dv == 1": lambda query, keys, values: values.dim() == 2 and values.shape[1] == 1,
            "D != Dv": lambda query, keys, values: values.dim() == 2 and values.shape[1] != query.shape[0],
            "S == 1": lambda query, keys, values: keys.shape[0] == 1,
            "D == 1": lambda query, keys, values: query.shape[0] == 1,
            "a score past exp's float32 overflow": lambda query, keys, values: bool((keys @ query).amax() > 89),
        },
        mistakes=(
            Mistake(
                "raw scores, no softmax",
                "The dot products are scores, not weights: weights are positive and sum to 1, which "
                "the scores are not until a softmax makes them so.",
                _lookup_raw_scores,
                fix="weights = torch.softmax(keys @ query, dim=-1), then return weights @ values",
            ),
            Mistake(
                "normalised without exp",
                "Dividing the scores by their sum is not a softmax: scores can be negative or sum to "
                "almost 0, so the 'weights' can be negative or huge.",
                _lookup_no_exp,
                fix="exponentiate first: torch.softmax(scores, dim=-1) instead of scores / scores.sum()",
            ),
            Mistake(
                "weighted the keys instead of the values",
                "Keys are only for matching; what you read out is a mix of the values.",
                _lookup_weights_keys,
                fix="return weights @ values, not weights @ keys",
            ),
            Mistake(
                "hard lookup (argmax)",
                "Picking the best key's value is a dict lookup, not attention: every value contributes, "
                "weighted by how well its key matches.",
                _lookup_hard,
                fix="return torch.softmax(keys @ query, dim=-1) @ values instead of values[scores.argmax()]",
            ),
            Mistake(
                "softmax written by hand without subtracting the maximum",
                "PyTorch's softmax subtracts each row's maximum before exponentiating, so its exponentials never "
                "exceed 1 and never overflow; a hand-written one overflows to infinity on a large score "
                "(infinity over infinity is NaN). Notebook 02 explains why the shift changes nothing else.",
                _lookup_hand_softmax,
                fix="weights = torch.softmax(keys @ query, dim=-1) (or exp(scores - scores.max()) divided by its sum)",
            ),
        ),
    ),
    Exercise(
        key="01.2",
        title="attention for many queries, as matrices",
        signature="attention_many(q, k, v) -> out",
        solution=_many_solution,
        cases=_many_cases,
        draw=_many_draw,
        edges={
            "T != S": lambda q, k, v: q.shape[0] != k.shape[0],
            "T == 1": lambda q, k, v: q.shape[0] == 1,
            "S == 1": lambda q, k, v: k.shape[0] == 1,
            "Dv == 1": lambda q, k, v: v.shape[1] == 1,
            "D != Dv": lambda q, k, v: q.shape[1] != v.shape[1],
            "S == D (q @ k runs)": lambda q, k, v: k.shape[0] == k.shape[1],
            "S != D": lambda q, k, v: k.shape[0] != k.shape[1],
            "a score past exp's float32 overflow": lambda q, k, v: bool((q @ k.T).amax() > 89),
        },
        mistakes=(
            Mistake(
                "softmax over the wrong axis",
                "scores has one row per query and one column per key; each query's weights must sum "
                "to 1, so normalise along the keys.",
                _many_wrong_axis,
                fix="torch.softmax(scores, dim=-1), not dim=0",
            ),
            Mistake(
                "keys not transposed",
                "q is (T, D) and k is (S, D): to pair every query with every key the key matrix has to "
                "be turned on its side. q @ k runs only when S happens to equal D, and even then computes "
                "something else.",
                _many_no_transpose,
                fix="scores = q @ k.T",
            ),
            Mistake(
                "raw scores, no softmax",
                "The scores have to become weights (positive, each row summing to 1) before they mix the values.",
                _many_raw_scores,
                fix="weights = torch.softmax(q @ k.T, dim=-1); return weights @ v",
            ),
            Mistake(
                "weighted the keys instead of the values",
                "The output mixes the values; the keys are only for matching.",
                _many_weights_keys,
                fix="return weights @ v, not weights @ k",
            ),
            Mistake(
                "softmax written by hand without subtracting the maximum",
                "PyTorch's softmax subtracts each row's maximum before exponentiating, so its exponentials never "
                "exceed 1 and never overflow; a hand-written one overflows to infinity on a large score "
                "(infinity over infinity is NaN). Notebook 02 explains why the shift changes nothing else.",
                _many_hand_softmax,
                fix="weights = torch.softmax(q @ k.T, dim=-1) (or subtract scores.amax(dim=-1, "
                "keepdim=True) before the exp)",
            ),
        ),
    ),
    Exercise(
        key="01.3",
        title="simple self-attention, no learned weights",
        signature="my_self_attention(x) -> (out, weights)",
        solution=_self_solution,
        cases=_self_cases,
        draw=_self_draw,
        edges={
            "T != C": lambda x: x.shape[0] != x.shape[1],
            "T == 1": lambda x: x.shape[0] == 1,
            "C == 1": lambda x: x.shape[1] == 1,
            "a score past exp's float32 overflow": lambda x: bool((x @ x.T).amax() > 89),
        },
        mistakes=(
            Mistake(
                "raw scores, no softmax",
                "The dot products of the tokens are scores; the weights are their softmax, one row per "
                "query, and both the output and the weights you return use them.",
                _self_no_softmax,
                fix="weights = torch.softmax(x @ x.T, dim=-1); return weights @ x, weights",
            ),
            Mistake(
                "softmax over the wrong axis",
                "The scores are symmetric, so either axis looks plausible, but each row (one query) "
                "must sum to 1, not each column.",
                _self_wrong_axis,
                fix="torch.softmax(x @ x.T, dim=-1), not dim=0",
            ),
            Mistake(
                "normalised without exp",
                "Dividing each row by its sum is not a softmax: dot products can be negative, so the "
                "'weights' can be negative too.",
                _self_no_exp,
                fix="weights = torch.softmax(scores, dim=-1) instead of scores / scores.sum(dim=-1, keepdim=True)",
            ),
            Mistake(
                "hard lookup (argmax)",
                "One-hot weights on the best match are a hard lookup; attention keeps every token, "
                "weighted by how well it matches.",
                _self_hard,
                fix="weights = torch.softmax(x @ x.T, dim=-1) instead of a one-hot of the argmax",
            ),
            Mistake(
                "softmax written by hand without subtracting the maximum",
                "PyTorch's softmax subtracts each row's maximum before exponentiating, so its exponentials never "
                "exceed 1 and never overflow; a hand-written one overflows to infinity on a large score "
                "(infinity over infinity is NaN). Notebook 02 explains why the shift changes nothing else.",
                _self_hand_softmax,
                fix="weights = torch.softmax(x @ x.T, dim=-1) (or subtract scores.amax(dim=-1, "
                "keepdim=True) before the exp)",
            ),
        ),
    ),
    Exercise(
        key="01.4",
        domain=Domain(magnitude={"x": 10.0}),
        title="self-attention with W_Q, W_K, W_V",
        signature="qkv_attention(x, w_q, w_k, w_v) -> out",
        solution=_qkv_solution,
        cases=_qkv_cases,
        draw=_qkv_draw,
        edges={
            "D == C (square weights)": lambda x, w_q, w_k, w_v: w_q.shape[0] == x.shape[1],
            "D > C": lambda x, w_q, w_k, w_v: w_q.shape[0] > x.shape[1],
            "D < C": lambda x, w_q, w_k, w_v: w_q.shape[0] < x.shape[1],
            "T == 1": lambda x, w_q, w_k, w_v: x.shape[0] == 1,
            "D == 1": lambda x, w_q, w_k, w_v: w_q.shape[0] == 1,
            "T != D": lambda x, w_q, w_k, w_v: x.shape[0] != w_q.shape[0],
        },
        mistakes=(
            Mistake(
                "weight used untransposed",
                "The weights are stored the way nn.Linear stores its weight, (out, in) = (D, C); "
                "nn.Linear multiplies by the transpose of that. Your product runs only when the weights "
                "happen to be square, and even then computes something else.",
                _qkv_no_transpose,
                fix="q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T",
            ),
            Mistake(
                "values not projected",
                "The values get their own learned projection too, just like the queries and keys.",
                _qkv_values_unprojected,
                fix="v = x @ w_v.T, then out = weights @ v",
            ),
            Mistake(
                "keys projected with W_Q",
                "Queries and keys need different projections; with one matrix for both, the scores "
                "are symmetric again, as without any weights.",
                _qkv_keys_with_w_q,
                fix="k = x @ w_k.T",
            ),
            Mistake(
                "queries and keys swapped",
                "W_Q makes what a token asks, W_K what it answers to; swapping them transposes the scores.",
                _qkv_queries_keys_swapped,
                fix="q = x @ w_q.T and k = x @ w_k.T",
            ),
        ),
    ),
)
