"""course_utils.inspect_gpt: each helper against a direct computation, over random shapes, and its error messages.

(What the helpers find on the shipped model is pinned in tests/test_claims_gpt.py.)
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import refusals_test, seeds
from test_gpt import make as tiny  # the tiny GPT of test_gpt.py: 11 tokens, 2 layers of 4 heads

from course_utils.inspect_gpt import (
    attention_and_values,
    attention_rollout,
    first_key_share,
    layer_grad_norms,
    rank_correlation,
    selected_key_ratios,
    top_key_disagreement,
    uniform_first_key_share,
    weighted_value_norms,
    xavier_init_,
)
from course_utils.masking import causal_mask

pytestmark = pytest.mark.usefixtures("one_thread")


def causal_weights(B: int, H: int, T: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, H, T, T, generator=g) * 2
    return torch.softmax(scores.masked_fill(~causal_mask(T), -math.inf), dim=-1)  # (B, H, T, T)


@given(
    seed=seeds,
    B=st.integers(1, 3),
    H=st.integers(1, 5),
    T=st.integers(1, 9),
    extra=st.integers(0, 4),
    D=st.integers(1, 9),
)
def test_weighted_value_norms_is_the_norm_of_each_term(seed, B, H, T, extra, D):
    g = torch.Generator().manual_seed(seed)
    S = T + extra
    weights = torch.softmax(torch.randn(B, H, T, S, generator=g), dim=-1)
    values = torch.randn(B, H, S, D, generator=g) * (0.1 + 3 * torch.rand(B, H, S, 1, generator=g))
    terms = weights[..., None] * values[:, :, None, :, :]  # (B, H, T, S, D): each key's term of each output
    torch.testing.assert_close(weighted_value_norms(weights, values), terms.norm(dim=-1))


def test_first_key_share_of_an_even_head_is_the_uniform_share():
    T = 12
    even = causal_mask(T).float()
    even = (even / even.sum(-1, keepdim=True)).expand(2, 3, T, T)  # (B, H, T, T): every visible key alike
    torch.testing.assert_close(first_key_share(even), torch.full((3,), uniform_first_key_share(T)))
    sink = torch.zeros(1, 1, T, T)
    sink[..., 0] = 1.0  # every query reads position 0 only
    assert first_key_share(sink).item() == 1.0
    assert uniform_first_key_share(2) == 0.5


@given(seed=seeds, T=st.integers(3, 12))
def test_identical_pictures_agree_completely(seed, T):
    w = causal_weights(2, 3, T, seed)
    assert torch.equal(top_key_disagreement(w, w), torch.zeros(3))
    torch.testing.assert_close(rank_correlation(w, w), torch.ones(3))
    reversed_order = causal_mask(T).float() / (w + 1.0)  # the reverse order of each row's visible keys
    torch.testing.assert_close(rank_correlation(w, reversed_order), -torch.ones(3))


def test_top_key_disagreement_counts_rows_whose_brightest_key_moves():
    w = causal_weights(1, 1, 4, 0)
    n = w.clone()
    n[0, 0, 3] = torch.tensor([0.0, 0.0, 0.0, 1.0]) if w[0, 0, 3].argmax() != 3 else torch.tensor([1.0, 0, 0, 0])
    assert top_key_disagreement(w, n).item() == pytest.approx(1 / 3)  # rows 1, 2, 3: one of them differs


def test_selected_key_ratios_compare_with_the_other_keys():
    B, H, T = 1, 2, 4
    weights = causal_mask(T).float()
    weights = (weights / weights.sum(-1, keepdim=True)).expand(B, H, T, T)
    values = torch.ones(B, H, T, 3)
    values[:, 1, 1] *= 2.0  # head 1: key 1's value is twice as long
    selected = torch.tensor([[False, True, False, False]])
    drawn, length = selected_key_ratios(weights, values, selected)
    seen = weights.sum(-2)[0, 0] / (T - torch.arange(T))  # mean weight per query that can see the key
    torch.testing.assert_close(drawn, (seen[1] / seen[[0, 2, 3]].mean()).expand(2))
    torch.testing.assert_close(length, torch.tensor([1.0, 2.0]))


def test_attention_and_values_give_the_models_maps_and_rebuild_the_branch():
    for norm in ("pre", "post"):
        model = tiny(norm_position=norm, positions="rope")
        idx = torch.randint(11, (2, 16), generator=torch.Generator().manual_seed(1))
        pairs = attention_and_values(model, idx)
        assert len(pairs) == 2 and pairs[0][1].shape == (2, 4, 16, 16)
        x = model._embed(idx, 0)
        for block, (w, f), m in zip(model.blocks, pairs, model.attention_maps(idx)):
            torch.testing.assert_close(w, m)
            with torch.no_grad():
                branch = block.attend(x)
                torch.testing.assert_close(
                    torch.einsum("bhij,bhjc->bic", w, f) + block.attn.out_proj.bias, branch, atol=1e-6, rtol=1e-5
                )
                x = block.add_branches(x, branch)
    assert all(not h for b in model.blocks for h in (b.attn._forward_pre_hooks,)), "hooks removed"


def test_xavier_init_has_the_variances_it_says():
    model = xavier_init_(tiny(num_layers=4, embed_dim=64, vocab_size=200, context_length=8))
    fc = model.blocks[3].mlp.fc_out.weight  # (64, 256)
    assert fc.var().item() == pytest.approx(2 / (64 + 256), rel=0.1)
    assert model.tok_emb.weight.var().item() == pytest.approx(1 / 64, rel=0.1)
    assert model.lm_head.weight is model.tok_emb.weight
    assert all((b.attn.qkv_proj.bias == 0).all() for b in model.blocks)


def _rollout_by_loops(maps: list[torch.Tensor], residual: float) -> list[torch.Tensor]:
    """Abnar and Zuidema's rollout written out entry by entry, for one batch element at a time."""
    B, _, T, _ = maps[0].shape
    out, rolled = [], None
    for w in maps:
        a = torch.zeros(B, T, T, dtype=torch.float64)
        for b in range(B):
            for i in range(T):
                for j in range(T):
                    a[b, i, j] = (1 - residual) * w[b, :, i, j].double().mean() + (residual if i == j else 0.0)
        if rolled is None:
            rolled = a
        else:
            nxt = torch.zeros_like(a)
            for b in range(B):
                for i in range(T):
                    for j in range(T):
                        nxt[b, i, j] = sum(a[b, i, k] * rolled[b, k, j] for k in range(T))
            rolled = nxt
        out.append(rolled)
    return out


@given(
    seed=seeds,
    B=st.integers(1, 2),
    H=st.integers(1, 3),
    T=st.integers(2, 6),
    L=st.integers(1, 3),
    residual=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
)
def test_attention_rollout_is_the_product_of_residual_mixed_head_means(seed, B, H, T, L, residual):
    maps = [causal_weights(B, H, T, seed + layer) for layer in range(L)]
    rolled = attention_rollout(maps, residual=residual)
    assert len(rolled) == L
    for got, want in zip(rolled, _rollout_by_loops(maps, residual)):
        assert got.shape == (B, T, T)
        torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(got.sum(-1), torch.ones(B, T))  # rows are still distributions
        assert (got.triu(1) == 0).all()  # causal maps roll out causal: nothing reaches back from the future


def test_attention_rollout_of_layer_0_is_the_mixed_map_and_residual_1_is_the_identity():
    maps = [causal_weights(2, 3, 5, seed) for seed in (0, 1)]
    rolled = attention_rollout(maps)
    torch.testing.assert_close(rolled[0], 0.5 * torch.eye(5) + 0.5 * maps[0].mean(dim=1))
    torch.testing.assert_close(rolled[1], (0.5 * torch.eye(5) + 0.5 * maps[1].mean(dim=1)) @ rolled[0])
    assert all(torch.equal(r, torch.eye(5).expand(2, 5, 5)) for r in attention_rollout(maps, residual=1.0))
    # a head that reads only the previous position, twice: rollout sees two positions back, the raw map one
    prev = torch.zeros(1, 1, 4, 4)
    prev[0, 0, 0, 0] = 1.0
    prev[0, 0, torch.arange(1, 4), torch.arange(0, 3)] = 1.0
    two = attention_rollout([prev, prev], residual=0.0)[1][0]
    assert two[3, 1] == 1.0 and prev[0, 0, 3, 1] == 0.0


IDS, W3 = torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 1, 3, 3)  # token ids (B, T); weights (B, H, T, T)
W234, V3, MARKED = torch.ones(2, 3, 4), torch.ones(1, 1, 3, 2), torch.ones(1, 3, dtype=torch.bool)  # V3: W3's values


# (call, exception type, a pattern the message must match)
MESSAGES = [
    (lambda: layer_grad_norms("model", None, None), TypeError, "model must be a course_utils.gpt.GPT, got str"),
    (lambda: xavier_init_(torch.nn.Linear(2, 2)), TypeError, "model must be a course_utils.gpt.GPT, got Linear"),
    (lambda: first_key_share(W234), ValueError, r"weights must be self-attention weights \(B, H, T, T\)"),
    (lambda: first_key_share(torch.ones(1, 1, 1, 1)), ValueError, "at least 2 positions"),
    (lambda: first_key_share([[1.0]]), TypeError, "weights must be a torch.Tensor, got list"),
    (
        lambda: first_key_share(torch.ones(1, 1, 2, 2, dtype=torch.long)),
        TypeError,
        "must be a floating-point tensor",
    ),
    (lambda: uniform_first_key_share(1), ValueError, "T must be at least 2, got 1"),
    (lambda: uniform_first_key_share(2.0), TypeError, "T must be an int"),
    (
        lambda: weighted_value_norms(W234, torch.ones(2, 5, 6)),
        ValueError,
        r"must agree on the leading dims and on S, got \(2, 3, 4\) and \(2, 5, 6\)",
    ),
    (lambda: weighted_value_norms("w", torch.ones(2, 2)), TypeError, "weights must be a torch.Tensor, got str"),
    (
        lambda: weighted_value_norms(torch.ones(3), torch.ones(3, 2)),
        ValueError,
        "weights must have at least 2 dimensions",
    ),
    (
        lambda: top_key_disagreement(W3, torch.ones(1, 2, 3, 3)),
        ValueError,
        r"norms must have the weights' shape \(1, 1, 3, 3\) \(weighted_value_norms of these weights\), "
        r"got \(1, 2, 3, 3\)",
    ),
    (
        lambda: top_key_disagreement(W3, torch.ones(1, 3)),
        ValueError,
        r"norms must have the weights' shape \(1, 1, 3, 3\)",
    ),  # was: "norms must be self-attention weights"
    (lambda: rank_correlation(W3, [1.0]), TypeError, "norms must be a torch.Tensor, got list"),
    (
        lambda: weighted_value_norms(W234, torch.ones(2, 4, 6, dtype=torch.long)),
        TypeError,
        "values must be a floating-point tensor, got dtype torch.int64",
    ),  # was torch's linalg.vector_norm message
    (lambda: rank_correlation(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2)), ValueError, "needs T >= 3"),
    (lambda: selected_key_ratios(W3, V3, MARKED), ValueError, "selected must mark some keys and leave others unmarked"),
    (
        lambda: selected_key_ratios(W3, V3, torch.ones(1, 3)),
        ValueError,
        r"selected must be a bool tensor \(B, T\) = \(1, 3\)",
    ),
    (
        lambda: selected_key_ratios(W3, V3[:, [0, 0]], MARKED),
        ValueError,
        r"values must be \(B, H, T, E\) = \(1, 1, 3, E\)",
    ),
    (
        lambda: selected_key_ratios(W3, V3.long(), MARKED),
        TypeError,
        "values must be a floating-point tensor, got dtype torch.int64",
    ),  # was torch's linalg.vector_norm message
    (
        lambda: attention_and_values(tiny(num_kv_heads=2), IDS),
        ValueError,
        "this model uses grouped-query attention",
    ),
    (lambda: attention_and_values(tiny(), torch.full((1, 4), 11)), ValueError, "idx"),
    (lambda: attention_rollout([]), TypeError, "maps must be a non-empty list of .* got an empty list"),
    (lambda: attention_rollout(W3), TypeError, "maps must be a non-empty list .* got Tensor"),
    (
        lambda: attention_rollout([W3, torch.ones(1, 1, 4, 4)]),
        ValueError,
        r"every layer's weights must share B and T: maps\[0\] is \(1, 1, 3, 3\), maps\[1\] is \(1, 1, 4, 4\)",
    ),
    (lambda: attention_rollout([torch.ones(1, 3, 3)]), ValueError, r"maps\[0\] must be self-attention weights"),
    (lambda: attention_rollout([W3], residual=1.5), ValueError, r"residual must be in \[0, 1\]"),
]
test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True)
