"""Tests for course_utils.positional: each claim notebook 06 makes about positions is checked here."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from strategies import refusals_test, seeds

from course_utils.attention import scaled_dot_product_attention
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import (
    ALiBiMultiHeadAttention,
    LearnedPositionalEmbedding,
    RotaryTable,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_pairing_permutation,
    sinusoidal_encoding,
    sinusoidal_frequencies,
    sinusoidal_shift_matrix,
)
from course_utils.variants import GroupedQueryAttention


def randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------- the problem: no positions at all


@pytest.mark.parametrize(
    "make", [lambda: GroupedQueryAttention(8, 2, rope=True), lambda: ALiBiMultiHeadAttention(8, 2)]
)
def test_attention_with_rope_or_alibi_is_not_permutation_equivariant(make):
    torch.manual_seed(0)
    m = make().double()
    x = randn(0, 1, 6, 8)
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    assert (m(x[:, perm]) - m(x)[:, perm]).abs().max() > 1e-3


# ---------------------------------------------------------------- learned positions


def test_learned_embedding_adds_one_row_per_position():
    torch.manual_seed(0)
    pe = LearnedPositionalEmbedding(context_length=10, embed_dim=4)
    x = torch.randn(2, 6, 4)
    out = pe(x)
    assert out.shape == (2, 6, 4)
    torch.testing.assert_close(out, x + pe.embedding.weight[:6])
    torch.testing.assert_close(pe(x, torch.arange(3, 9)), x + pe.embedding.weight[3:9])


# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_encoding_by_hand():
    pe = sinusoidal_encoding(3, 4, base=100.0)  # omega = 1, 100 ** (-2/4) = 0.1
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.1), math.cos(0.1)],
            [math.sin(2), math.cos(2), math.sin(0.2), math.cos(0.2)],
        ]
    )
    assert pe.shape == (3, 4) and pe.dtype == torch.float32
    torch.testing.assert_close(pe, expected)


@given(T=st.integers(1, 50), half_C=st.integers(1, 16))
def test_sinusoidal_encoding_matches_the_formula(T, half_C):
    C = 2 * half_C
    pe = sinusoidal_encoding(T, C)
    t, i = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(half_C, dtype=torch.float64)[None, :]
    angle = t / 10000.0 ** (2 * i / C)
    torch.testing.assert_close(pe[:, 0::2], angle.sin().float())
    torch.testing.assert_close(pe[:, 1::2], angle.cos().float())
    torch.testing.assert_close(sinusoidal_frequencies(C), 10000.0 ** (-2 * i[0] / C))


def test_sinusoidal_rows_have_constant_norm_and_similarity_depends_on_distance_only():
    pe = sinusoidal_encoding(64, 32).double()
    torch.testing.assert_close(pe.norm(dim=-1), torch.full((64,), 4.0, dtype=torch.float64))  # sqrt(C/2)
    sim = pe @ pe.T  # (T, T)
    for k in (1, 5, 20):
        diag = torch.diagonal(sim, offset=k)
        torch.testing.assert_close(diag, diag[0].expand_as(diag), atol=1e-5, rtol=0)


@given(k=st.integers(-20, 20), half_C=st.integers(1, 8))
def test_a_fixed_offset_is_a_linear_map(k, half_C):
    C = 2 * half_C
    T = 30
    pe = sinusoidal_encoding(T + 40, C).double()
    M = sinusoidal_shift_matrix(k, C)  # (C, C)
    t = torch.arange(20, T)
    torch.testing.assert_close(pe[t] @ M.T, pe[t + k], atol=1e-5, rtol=0)  # PE[t + k] = M_k PE[t]
    torch.testing.assert_close(M @ M.T, torch.eye(C, dtype=torch.float64))  # a rotation


# ---------------------------------------------------------------- RoPE


def test_apply_rope_by_hand():
    x = torch.tensor([[[[1.0, 0.0, 1.0, 0.0]] * 3]])  # (1, 1, 3, 4)
    out = apply_rope(x, base=100.0, pairing="interleaved")  # theta = 1, 0.1; pairs (0, 1) and (2, 3)
    expected = torch.tensor([[math.cos(t), math.sin(t), math.cos(0.1 * t), math.sin(0.1 * t)] for t in range(3)])
    torch.testing.assert_close(out[0, 0], expected)
    e0 = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(1, 1, 3, 4)
    half = apply_rope(e0, base=100.0, pairing="half")  # pairs (0, 2) and (1, 3): channel 0 turns towards 2
    torch.testing.assert_close(half[0, 0, 1], torch.tensor([math.cos(1), 0.0, math.sin(1), 0.0]))
    torch.testing.assert_close(apply_rope(e0, base=100.0), half, rtol=0, atol=0)  # "half" is the default


@given(
    B=st.integers(1, 2),
    H=st.integers(1, 3),
    T=st.integers(1, 8),
    half_D=st.integers(1, 6),
    offset=st.integers(0, 1000),
    pairing=st.sampled_from(["interleaved", "half"]),
    seed=seeds,
)
def test_rope_scores_depend_only_on_relative_position(B, H, T, half_D, offset, pairing, seed):
    """Shifting every query and key position by the same offset leaves every score unchanged."""
    D = 2 * half_D
    q, k = randn(seed, B, H, T, D), randn(seed + 1, B, H, T, D)
    pos = torch.arange(T)
    scores = apply_rope(q, pos, pairing=pairing) @ apply_rope(k, pos, pairing=pairing).transpose(-2, -1)
    shifted = apply_rope(q, pos + offset, pairing=pairing) @ apply_rope(k, pos + offset, pairing=pairing).transpose(
        -2, -1
    )
    torch.testing.assert_close(shifted, scores, atol=1e-9, rtol=1e-7)


@given(T=st.integers(1, 10), half_D=st.integers(1, 8), seed=seeds, pairing=st.sampled_from(["interleaved", "half"]))
def test_rope_preserves_norms_and_position_zero(T, half_D, seed, pairing):
    x = randn(seed, 2, 3, T, 2 * half_D)
    out = apply_rope(x, pairing=pairing)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(out[..., 0, :], x[..., 0, :])  # position 0 is not rotated


@given(T=st.integers(1, 8), half_D=st.integers(1, 8), seed=seeds)
def test_the_two_pairings_are_the_same_rotation_up_to_a_permutation(T, half_D, seed):
    D = 2 * half_D
    x = randn(seed, 2, 2, T, D)
    perm = rope_pairing_permutation(D)
    torch.testing.assert_close(
        apply_rope(x[..., perm], pairing="half"), apply_rope(x, pairing="interleaved")[..., perm]
    )
    if D > 2:  # without the permutation they differ
        assert (apply_rope(x, pairing="half") - apply_rope(x, pairing="interleaved")).abs().max() > 1e-6 or T == 1


def test_rope_pairing_permutation_by_hand():
    assert rope_pairing_permutation(6).tolist() == [0, 2, 4, 1, 3, 5]


@given(T=st.integers(1, 8), t0=st.integers(0, 50), seed=seeds, pairing=st.sampled_from(["interleaved", "half"]))
def test_rope_with_an_offset_is_the_slice_of_the_full_rotation(T, t0, seed, pairing):
    """A KV cache rotates new keys at their absolute positions: the same numbers as rotating everything."""
    full = randn(seed, 1, 2, t0 + T, 6)
    rotated_all = apply_rope(full, pairing=pairing)
    rotated_new = apply_rope(full[..., t0:, :], positions=torch.arange(t0, t0 + T), pairing=pairing)
    torch.testing.assert_close(rotated_new, rotated_all[..., t0:, :])


def test_rope_float32_is_accurate_at_large_positions():
    x = randn(0, 1, 1, 4, 8, dtype=torch.float32)
    pos = torch.arange(100_000, 100_004)
    torch.testing.assert_close(apply_rope(x, pos), apply_rope(x.double(), pos).float())


# ---------------------------------------------------------------- RotaryTable: apply_rope with cached angles


@given(
    B=st.integers(1, 2),
    H=st.integers(1, 3),
    T=st.integers(1, 9),
    half_D=st.integers(1, 8),
    start=st.integers(0, 70),
    length=st.integers(0, 40),
    base=st.sampled_from([100.0, 10000.0, 500000.0]),
    pairing=st.sampled_from(["interleaved", "half"]),
    seed=seeds,
)
def test_rotary_table_is_apply_rope_at_absolute_positions(B, H, T, half_D, start, length, base, pairing, seed):
    """rotate(x, start) == apply_rope(x, arange(start, start + T)), float32 and float64, past the table's length."""
    D = 2 * half_D
    table = RotaryTable(D, base, length, pairing)
    positions = torch.arange(start, start + T)
    for dtype in (torch.float32, torch.float64):
        x = randn(seed, B, H, T, D, dtype=dtype)
        out = table.rotate(x, start)
        assert out.dtype == dtype and out.shape == x.shape
        torch.testing.assert_close(out, apply_rope(x, positions, base, pairing))


def test_rotary_table_computes_its_angles_once_and_grows_when_asked_for_more():
    table = RotaryTable(8, length=16)
    cos, _ = table.cos_sin(4, torch.device("cpu"), torch.float32)
    assert cos.shape == (4, 4)
    again, _ = table.cos_sin(16, torch.device("cpu"), torch.float32)
    assert again.data_ptr() == cos.data_ptr()  # one table of 16 rows, sliced
    longer, _ = table.cos_sin(40, torch.device("cpu"), torch.float32)
    assert longer.shape == (40, 4) and longer.data_ptr() != cos.data_ptr()
    torch.testing.assert_close(longer[:16], again, rtol=0, atol=0)


# ---------------------------------------------------------------- ALiBi


def test_alibi_slopes_by_hand_8_heads_the_papers_geometric_sequence_and_6_interleaved():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([1 / 2**h for h in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]))


def _reference_slopes(n: int) -> list[float]:
    """The recipe of the ALiBi paper's reference code.

    Press et al., github.com/ofirpress/attention_with_linear_biases.
    """

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("H", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20])
def test_alibi_slopes_match_the_reference_recipe(H):
    torch.testing.assert_close(alibi_slopes(H), torch.tensor(_reference_slopes(H)))


def test_alibi_bias_by_hand():
    bias = alibi_bias(2, 3)  # slopes 2^-4, 2^-8
    assert bias.shape == (2, 3, 3)
    distance = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    torch.testing.assert_close(bias[0], -distance / 16)
    torch.testing.assert_close(bias[1], -distance / 256)


@pytest.mark.parametrize("T, S", [(1, 5), (3, 5), (5, 5)])
def test_alibi_bias_is_bottom_right_aligned_like_causal_mask(T, S):
    bias = alibi_bias(4, T, S)
    assert bias.shape == (4, T, S)
    torch.testing.assert_close(bias, alibi_bias(4, S)[:, S - T :])  # the last T query rows of the square
    zero_distance = bias[0] == 0  # where query position == key position: the last allowed key of each row
    last_allowed = causal_mask(T, S) & ~torch.cat([causal_mask(T, S)[:, 1:], torch.zeros(T, 1, dtype=torch.bool)], 1)
    assert torch.equal(zero_distance, last_allowed)


def test_alibi_bias_under_a_causal_mask_is_minus_slope_times_distance():
    """The softmax ignores a constant per row: -m (i - j) and the paper's +m j give the same weights."""
    H, T = 4, 6
    scores = randn(0, H, T, T)
    mask = causal_mask(T)
    i, j = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(T, dtype=torch.float64)
    slopes = alibi_slopes(H).double()[:, None, None]  # (H, 1, 1)
    ours = torch.softmax((scores + alibi_bias(H, T).double()).masked_fill(~mask, float("-inf")), dim=-1)
    causal = torch.softmax((scores - slopes * (i - j)).masked_fill(~mask, float("-inf")), dim=-1)
    paper = torch.softmax((scores + slopes * j).masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(ours, causal)
    torch.testing.assert_close(ours, paper)


# ---------------------------------------------------------------- the attention modules


def test_rotary_attention_is_multihead_attention_with_rotated_queries_and_keys():
    torch.manual_seed(0)
    rope = GroupedQueryAttention(12, 3, bias=True, rope=True).double()
    plain = MultiHeadAttention(12, 3).double()
    plain.load_state_dict(rope.state_dict())  # the same parameters: RoPE adds none
    x = randn(1, 2, 5, 12)
    mask = causal_mask(5)
    out, w = rope(x, mask, need_weights=True)
    q, k, v = (t.view(2, 5, 3, 4).transpose(1, 2) for t in rope.qkv_proj(x).chunk(3, -1))
    q, k = apply_rope(q, pairing="half"), apply_rope(k, pairing="half")  # the module's pairing
    o, w_ref = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(w, w_ref)
    torch.testing.assert_close(out, rope.out_proj(o.transpose(1, 2).reshape(2, 5, 12)))
    torch.testing.assert_close(out[:, :1], plain(x, mask)[:, :1])  # position 0 is not rotated, sees only itself


def test_alibi_attention_is_multihead_attention_with_a_bias():
    torch.manual_seed(0)
    alibi = ALiBiMultiHeadAttention(8, 4).double()
    x = randn(4, 2, 6, 8)
    out, w = alibi(x, causal_mask(6), need_weights=True)
    q, k, v = (t.view(2, 6, 4, 2).transpose(1, 2) for t in alibi.qkv_proj(x).chunk(3, -1))
    o, w_ref = scaled_dot_product_attention(q, k, v, causal_mask(6), bias=alibi_bias(4, 6).double())
    torch.testing.assert_close(w, w_ref)
    torch.testing.assert_close(out, alibi.out_proj(o.transpose(1, 2).reshape(2, 6, 8)))
    assert alibi(randn(5, 1, 300, 8)).shape == (1, 300, 8)  # no limit on the length


# ---------------------------------------------------------------- every message a learner can meet, as one table

PE, TABLE, X4 = LearnedPositionalEmbedding(8, 4), RotaryTable(8), torch.randn(1, 1, 3, 4)
PAIRS = "(RoPE rotates pairs of channels)"
ATTENTIONS = {"rotary": GroupedQueryAttention(8, 2, rope=True), "alibi": ALiBiMultiHeadAttention(8, 2)}
X = torch.randn(2, 4, 8)

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    (lambda: apply_rope(torch.randn(2, 3, 4), positions=torch.arange(3, device="meta")), ValueError,
     "positions is on the meta device, which holds no values to check"),
    (lambda: RotaryTable(8).rotate(torch.randn(1, 2, 8), start=10**12), ValueError,
     "start must be at most 16777216 (the table holds start + T rows), got 1000000000000"),
    (lambda: apply_rope(torch.randn(2, 3, 0)), ValueError,
     "the last dimension D of x (head_dim) must be at least 2, got shape (2, 3, 0)"),
    (lambda: PE(torch.randn(1, 9, 4)), ValueError,
     "position 8 is beyond context_length = 8: a learned position embedding only has rows for positions 0 .. 7"),
    (lambda: PE(torch.randn(1, 2, 4), torch.tensor([10, 11])), ValueError, "position 11 is beyond context_length = 8"),
    (lambda: PE(torch.randn(1, 3, 5)), ValueError, "x must end in embed_dim = 4 channels, got shape (1, 3, 5)"),
    (lambda: sinusoidal_encoding(4, 5), ValueError, "C must be even (the channels come in (sin, cos) pairs), got 5"),
    (lambda: sinusoidal_encoding(4, 4, base=0.5), ValueError, "base must be a number greater than 1, got 0.5"),
    (lambda: sinusoidal_encoding(8, 16, base="abc"), TypeError,
     "base must be a number greater than 1, got 'abc' (str)"),
    (lambda: sinusoidal_encoding(8, 16, base=math.inf), ValueError, "base must be a number greater than 1, got inf"),
    (lambda: apply_rope(torch.randn(1, 1, 3, 5)), ValueError, f"the last dimension D of x must be even {PAIRS}, got 5"),
    (lambda: apply_rope(X4, torch.arange(4)), ValueError,
     "positions must have shape (T,) = (3,), one per position of x, got (4,)"),
    (lambda: apply_rope(X4, torch.tensor([-1, 0, 1])), ValueError, "positions must be >= 0, got a minimum of -1"),
    (lambda: apply_rope(X4, pairing="neox"), ValueError, "pairing must be one of ('interleaved', 'half'), got 'neox'"),
    (lambda: rope_pairing_permutation(3), ValueError, f"D must be even {PAIRS}, got 3"),
    (lambda: RotaryTable(5), ValueError, f"head_dim must be even {PAIRS}, got 5"),
    (lambda: RotaryTable(8, base=1.0), ValueError, "base must be a number greater than 1, got 1.0"),
    (lambda: RotaryTable(8, pairing="neox"), ValueError, "pairing must be one of ('interleaved', 'half'), got 'neox'"),
    (lambda: TABLE.rotate(torch.randn(1, 3, 6)), ValueError,
     "x must end in head_dim = 8 channels, got shape (1, 3, 6)"),
    (lambda: TABLE.rotate(torch.randn(1, 3, 8), -2), ValueError, "start must be at least 0, got -2"),
    (lambda: alibi_bias(2, 5, 3), ValueError,
     "alibi_bias needs T <= S (the queries are the last T of the S positions), got T=5, S=3"),
    (lambda: GroupedQueryAttention(6, 2, rope=True), ValueError, f"head_dim must be even {PAIRS}, got 3"),
    (lambda: ALiBiMultiHeadAttention(10, 3), ValueError, "embed_dim (10) must be divisible by num_heads (3)"),
    *[
        row
        for module in ATTENTIONS.values()
        for row in [
            (
                lambda m=module: m(X, torch.ones(3, 1, 4, 4, dtype=torch.bool)),
                ValueError,
                "mask of shape (3, 1, 4, 4) does not broadcast to the scores' shape",
            ),
            (
                lambda m=module: m(X, torch.ones(4, 4, dtype=torch.bool, device="meta")),
                ValueError,
                "mask must be on one device, got",  # "q, mask" for ALiBi, "x, mask" for GroupedQueryAttention
            ),
        ]
    ],
]  # fmt: skip


def test_learned_positions_take_any_integer_positions_and_run_on_meta():
    torch.manual_seed(0)
    emb, x = LearnedPositionalEmbedding(6, 8), torch.randn(1, 3, 8)
    torch.testing.assert_close(emb(x, positions=torch.arange(3, dtype=torch.uint8)), emb(x))
    assert emb.to("meta")(x.to("meta")).shape == (1, 3, 8)


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_good_calls_pass_the_doors():
    assert PE(torch.randn(1, 8, 4)).shape == (1, 8, 4)  # the last position still has a row
    assert repr(TABLE) == "RotaryTable(head_dim=8, base=10000, length=0, pairing='half')"
    for module in ATTENTIONS.values():
        assert module(X, causal_mask(4)).shape == (2, 4, 8)
