"""Tests for course_utils.multihead: head splitting, the four attention modules, parity with nn.MultiheadAttention."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import DTYPES, CountProducts, dtypes, refusals_test, seeds, tol
from torch import nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.masking import causal_mask, combine_masks, convert_mask, padding_mask
from course_utils.multihead import (
    MultiHeadAttention,
    MultiHeadAttentionEinsum,
    MultiHeadAttentionWrapper,
    SingleHeadAttention,
    merge_heads,
    split_heads,
)

ROOT = Path(__file__).resolve().parent.parent


def randomize_biases(module: nn.Module) -> None:
    """nn.MultiheadAttention starts its biases at 0, which would hide a bias that is copied wrong."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bias" in name:
                p.normal_()


# ---------------------------------------------------------------- split_heads / merge_heads


@settings(deadline=None, max_examples=25)
@given(B=st.integers(1, 3), T=st.integers(1, 5), H=st.integers(1, 4), D=st.integers(1, 4), seed=seeds)
def test_split_heads_matches_reshape_and_round_trips(B, T, H, D, seed):
    x = torch.randn(B, T, H * D, generator=torch.Generator().manual_seed(seed))
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, D)
    torch.testing.assert_close(heads, x.reshape(B, T, H, D).permute(0, 2, 1, 3), atol=0, rtol=0)
    for h in range(H):  # head h holds channels h*D .. (h+1)*D - 1
        torch.testing.assert_close(heads[:, h], x[..., h * D : (h + 1) * D], atol=0, rtol=0)
    torch.testing.assert_close(merge_heads(heads), x, atol=0, rtol=0)
    y = torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(seed + 1))
    torch.testing.assert_close(split_heads(merge_heads(y), H), y, atol=0, rtol=0)


def test_merge_heads_works_on_non_contiguous_input():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 4).transpose(1, 2)  # (B, H, T, D), not contiguous
    assert not x.is_contiguous()
    torch.testing.assert_close(merge_heads(x), x.transpose(1, 2).reshape(2, 5, 12), atol=0, rtol=0)


# ---------------------------------------------------------------- parity with nn.MultiheadAttention


@st.composite
def mha_setups(draw, cross: bool = False):
    """Self-attention, or cross-attention (``cross``): T queries from x, S keys and values from a memory of another
    length (T != S allowed). Every query keeps at least one key: no row is fully masked."""
    B, T, H, D = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    S = draw(st.integers(1, 6)) if cross else T
    return dict(
        B=B,
        T=T,
        S=S,
        H=H,
        D=D,
        lengths=[draw(st.integers(1, S)) for _ in range(B)],  # >= 1 real token: key 0 is always real
        bias=draw(st.booleans()),
        batch_first=draw(st.booleans()),
        masks=draw(st.sampled_from(["none", "attn", "padding", "both"])),
        dtype=draw(dtypes),
        seed=draw(seeds),
        cross=cross,
    )


def torch_and_ours(s):
    """nn.MultiheadAttention (random biases), ours copied from it, x (B, T, C) and the memory (B, S, C) or None."""
    torch.manual_seed(s["seed"])
    C = s["H"] * s["D"]
    ref = nn.MultiheadAttention(C, s["H"], bias=s["bias"], batch_first=s["batch_first"], dtype=s["dtype"]).eval()
    randomize_biases(ref)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(s["B"], s["T"], C, dtype=s["dtype"])
    memory = torch.randn(s["B"], s["S"], C, dtype=s["dtype"]) if s["cross"] else None
    return ref, ours, x, memory


def masks_for(s):
    """The same masks in both conventions: ours (True = may attend, (B, H, T, S)) and nn.MultiheadAttention's.

    The attn mask is causal for self-attention; for cross-attention a random (T, S) one where key 0 stays visible."""
    if s["cross"]:
        attn = torch.rand(s["T"], s["S"], generator=torch.Generator().manual_seed(s["seed"])) < 0.6
        attn[:, 0] = True
    else:
        attn = causal_mask(s["T"])
    attn = attn if s["masks"] in ("attn", "both") else None
    pad = padding_mask(s["lengths"], s["S"]) if s["masks"] in ("padding", "both") else None
    ours = combine_masks(attn, None if pad is None else pad[:, None, None, :])
    torch_kwargs = dict(
        attn_mask=None if attn is None else convert_mask(attn, "allow", "block"),
        key_padding_mask=None if pad is None else convert_mask(pad, "allow", "block"),
    )
    return ours, torch_kwargs


def run_torch(ref, x, memory, torch_kwargs, **kwargs):
    kv = x if memory is None else memory
    q, kv = (x, kv) if ref.batch_first else (x.transpose(0, 1), kv.transpose(0, 1))  # (B, T, C) or (T, B, C)
    out, weights = ref(q, kv, kv, **torch_kwargs, **kwargs)
    return (out if ref.batch_first else out.transpose(0, 1)), weights


@given(s=mha_setups())
def test_from_torch_matches_nn_multihead_attention(s):
    ref, ours, x, _ = torch_and_ours(s)
    assert not ours.training and ours.qkv_proj.weight.dtype == s["dtype"]
    _matches_nn_multihead_attention(s, ref, ours, x, None)


@given(s=mha_setups(cross=True))
def test_cross_attention_matches_nn_multihead_attention_fed_from_two_sources(s):
    _matches_nn_multihead_attention(s, *torch_and_ours(s))


def _matches_nn_multihead_attention(s, ref, ours, x, memory):
    """Output, per-head and averaged weights, the output without weights; rows of the weights sum to 1."""
    mask, torch_kwargs = masks_for(s)
    out, weights = ours(x, mask, need_weights=True, memory=memory)
    B, H, T, S, tol_ = s["B"], s["H"], s["T"], s["S"], tol(s["dtype"])
    assert out.shape == x.shape and weights.shape == (B, H, T, S)
    ref_out, ref_avg = run_torch(ref, x, memory, torch_kwargs, need_weights=True, average_attn_weights=True)
    torch.testing.assert_close(out, ref_out, **tol_)
    torch.testing.assert_close(weights.mean(dim=1), ref_avg, **tol_)
    _, ref_heads = run_torch(ref, x, memory, torch_kwargs, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(weights, ref_heads, **tol_)
    ref_out_fast, _ = run_torch(ref, x, memory, torch_kwargs, need_weights=False)
    torch.testing.assert_close(ours(x, mask, memory=memory), ref_out_fast, **tol_)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T, dtype=s["dtype"]), **tol_)


@pytest.mark.parametrize("cross", [False, True])
def test_gradients_match_nn_multihead_attention(cross):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    randomize_biases(ref)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 3 if cross else 5, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True) if cross else None
    mask = padding_mask([5, 2], 5)[:, None, None, :] if cross else causal_mask(5)
    inputs = (x, memory) if cross else (x,)
    g_ours = torch.autograd.grad(
        ours(x, mask, memory=memory).square().sum(),
        (*inputs, ours.qkv_proj.weight, ours.qkv_proj.bias, ours.out_proj.bias),
    )
    kv = memory if cross else x
    out_ref, _ = ref(x, kv, kv, **_torch_masks(mask, cross), need_weights=False)
    g_ref = torch.autograd.grad(
        out_ref.square().sum(), (*inputs, ref.in_proj_weight, ref.in_proj_bias, ref.out_proj.bias)
    )
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, b)


def _torch_masks(mask, cross):
    if cross:
        return {"key_padding_mask": ~mask[:, 0, 0]}
    return {"attn_mask": convert_mask(mask, "allow", "block")}


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_is_cross_attention_with_memory_x(bias):
    packed = make_packed(C=12, H=3, bias=bias)
    x = torch.randn(2, 5, 12)
    out, weights = packed(x, causal_mask(5), need_weights=True)
    out_m, weights_m = packed(x, causal_mask(5), need_weights=True, memory=x)
    torch.testing.assert_close(out_m, out)
    torch.testing.assert_close(weights_m, weights)
    # the memory, not x, feeds the keys and values: another memory changes the output
    assert (packed(x, memory=torch.randn(2, 5, 12)) - packed(x)).abs().max() > 1e-3


def test_from_torch_copies_mode_dropout_and_bias_flag():
    ref = nn.MultiheadAttention(6, 3, dropout=0.25, bias=False)
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.training and ours.dropout == 0.25 and ours.qkv_proj.bias is None and ours.out_proj.bias is None
    assert not MultiHeadAttention.from_torch(ref.eval()).training
    torch.testing.assert_close(ours.qkv_proj.weight, ref.in_proj_weight, atol=0, rtol=0)
    torch.testing.assert_close(ours.out_proj.weight, ref.out_proj.weight, atol=0, rtol=0)


# ---------------------------------------------------------------- the four modules agree


def make_packed(C=8, H=2, bias=True, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    packed = MultiHeadAttention(C, H, bias=bias).to(dtype)
    randomize_biases(packed)
    return packed


@pytest.mark.parametrize("cls", [MultiHeadAttentionEinsum, MultiHeadAttentionWrapper])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_mask", [False, True])
def test_from_packed_agrees_with_multihead_attention(cls, bias, dtype, use_mask):
    packed = make_packed(C=12, H=3, bias=bias, dtype=dtype)
    other = cls.from_packed(packed)
    assert all(p.dtype == dtype for p in other.parameters())
    assert sum(p.numel() for p in other.parameters()) == sum(p.numel() for p in packed.parameters())
    x = torch.randn(2, 5, 12, dtype=dtype)
    mask = causal_mask(5) if use_mask else None
    out, weights = other(x, mask, need_weights=True)
    ref_out, ref_weights = packed(x, mask, need_weights=True)
    assert weights.shape == (2, 3, 5, 5)
    torch.testing.assert_close(out, ref_out, **tol(dtype))
    torch.testing.assert_close(weights, ref_weights, **tol(dtype))
    torch.testing.assert_close(other(x, mask), out, atol=0, rtol=0)  # need_weights only changes what is returned


@pytest.mark.parametrize("module", ["packed", "wrapper", "einsum"])
def test_a_3d_mask_is_refused_even_where_b_equals_h(module):
    """Issue #25: with B == H a (B, 1, S) padding mask broadcast silently onto the heads (notebook 04, Pitfall 4);
    a 3-D mask is now refused against (B, H, T, S) scores with B == H, and its 4-D forms run; with B != H an
    (H, T, S) mask is one per head, as broadcasting reads it."""
    packed = make_packed()  # H = 2
    layer = {
        "packed": packed,
        "wrapper": MultiHeadAttentionWrapper.from_packed(packed),
        "einsum": MultiHeadAttentionEinsum.from_packed(packed),
    }[module]
    x = torch.randn(2, 4, 8)  # B = 2 = H
    pad = padding_mask([4, 2], 4)  # (B, S)
    for mask in (pad[:, None, :], causal_mask(4).expand(2, 4, 4)):
        with pytest.raises(ValueError, match=r"mask of shape \(2, (1|4), 4\) is ambiguous .* mask\[:, None\]"):
            layer(x, mask)
    torch.testing.assert_close(layer(x, pad[:, None, None, :]), packed(x, pad[:, None, None, :]))
    torch.testing.assert_close(layer(x, causal_mask(4)[None]), packed(x, causal_mask(4)))  # (1, T, S): one for all
    per_head = torch.rand(2, 4, 4, generator=torch.Generator().manual_seed(0)) < 0.5  # (H, T, S), H = 2
    per_head[..., 0] = True
    x3 = torch.randn(3, 4, 8)  # B = 3 != H
    torch.testing.assert_close(layer(x3, per_head), packed(x3, per_head[None]))


def test_single_head_attention_is_sdpa_on_its_projections():
    torch.manual_seed(0)
    head = SingleHeadAttention(8, 3, bias=True)
    x = torch.randn(2, 5, 8)
    mask = causal_mask(5)
    out, weights = head(x, mask, need_weights=True)
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 5)
    ref_out, ref_weights = scaled_dot_product_attention(head.q_proj(x), head.k_proj(x), head.v_proj(x), mask)
    torch.testing.assert_close(out, ref_out, atol=0, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=0, rtol=0)
    assert SingleHeadAttention(8, 3).q_proj.bias is None  # bias=False by default


def test_one_head_multihead_is_single_head_plus_out_proj():
    packed = make_packed(C=6, H=1)
    x = torch.randn(2, 4, 6)
    wrapper = MultiHeadAttentionWrapper.from_packed(packed)
    torch.testing.assert_close(wrapper.out_proj(wrapper.heads[0](x)), packed(x))


# ---------------------------------------------------------------- claims: permutation, rows, dropout


FACTORIES = {
    "SingleHeadAttention": lambda: SingleHeadAttention(8, 4, bias=True),
    "MultiHeadAttentionWrapper": lambda: MultiHeadAttentionWrapper(8, 2),
    "MultiHeadAttentionEinsum": lambda: MultiHeadAttentionEinsum(8, 2),
    "MultiHeadAttention": lambda: MultiHeadAttention(8, 2),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_permutation_equivariance_without_positions(name):
    torch.manual_seed(0)
    module = FACTORIES[name]()
    x = torch.randn(2, 6, 8)
    perm = torch.randperm(6)
    out, weights = module(x, need_weights=True)
    out_p, weights_p = module(x[:, perm], need_weights=True)
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(weights_p, weights[..., perm, :][..., :, perm])
    # With a causal mask, order matters: the same permutation changes the result.
    out_c = module(x, causal_mask(6))
    out_cp = module(x[:, perm], causal_mask(6))
    assert (out_cp - out_c[:, perm]).abs().max() > 1e-3


@pytest.mark.parametrize("name", list(FACTORIES))
def test_weights_rows_sum_to_one(name):
    torch.manual_seed(0)
    _, weights = FACTORIES[name]()(torch.randn(3, 5, 8), need_weights=True)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_multihead_attention_dropout_eval_is_deterministic_and_train_is_not():
    torch.manual_seed(0)
    drop = MultiHeadAttention(8, 2, dropout=0.5)
    plain = MultiHeadAttention(8, 2)
    plain.load_state_dict(drop.state_dict())
    x = torch.randn(2, 6, 8)
    drop.eval()
    torch.manual_seed(1)
    a = drop(x)
    torch.manual_seed(2)
    b = drop(x)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    torch.testing.assert_close(a, plain(x), atol=0, rtol=0)
    drop.train()
    torch.manual_seed(1)
    c, w_c = drop(x, need_weights=True)
    torch.manual_seed(2)
    d = drop(x)
    assert (c - d).abs().max() > 1e-3
    _, w_plain = plain(x, need_weights=True)
    kept = w_c != 0
    assert 0 < kept.float().mean().item() < 1
    torch.testing.assert_close(w_c[kept], w_plain[kept] / 0.5)


# ---------------------------------------------------------------- error messages


MODULE_CLASSES = [MultiHeadAttention, MultiHeadAttentionEinsum, MultiHeadAttentionWrapper]
X, MEMORY = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
MHA = MultiHeadAttention(8, 2)
BAD_SIZES = [
    ((10, 3), ValueError, "embed_dim (10) must be divisible by num_heads (3)"),
    ((8, -2), ValueError, "num_heads must be at least 1, got -2"),
]  # fmt: skip
BAD_INPUTS = [  # (x, mask) -> error, words: the same at every layer's door
    ((torch.zeros(4, 8), None), ValueError, "x must have at least 3 dimensions, got shape (4, 8)"),
    ((torch.zeros(2, 4, 6), None), ValueError, "x must have shape (B, T, C=8), got (2, 4, 6)"),
    ((torch.zeros(1, 2, 4, 8), None), ValueError, "x must have shape (B, T, C=8), got (1, 2, 4, 8)"),
    ((torch.zeros(2, 4, 8), torch.ones(3, 1, 4, 4, dtype=torch.bool)), ValueError,
     "does not broadcast to the scores' shape"),
    ((torch.zeros(2, 4, 8), torch.ones(4, 4, dtype=torch.bool, device="meta")), ValueError,
     "q, mask must be on one device, got q on cpu, mask on meta"),
    ((X.bfloat16(), None), TypeError, "x is bfloat16 but the module's weights are float32"),
    ((X.to("meta"), None), ValueError, "x is on meta but the module's weights are on cpu"),
]  # fmt: skip
FROM_PACKED = "from_packed takes a course_utils MultiHeadAttention"

# (call, exception type, words the message must contain): the messages tests/bad_inputs.json does not pin already
MESSAGES = [
    *[(lambda c=c, a=a: c(*a), error, words) for c in MODULE_CLASSES for a, error, words in BAD_SIZES],
    *[
        (lambda p=p: MultiHeadAttention(8, 2, dropout=p), ValueError, f"dropout must be in [0, 1), got {p}")
        for p in (1.0, -0.5)
    ],
    (lambda: MultiHeadAttention(8, 2, dropout="0.1"), TypeError, "dropout must be a number in [0, 1), got '0.1' (str)"),
    *[(lambda m=m, xm=xm: m()(*xm), error, words) for m in FACTORIES.values() for xm, error, words in BAD_INPUTS],
    (lambda: MHA(X, need_weights="no"), TypeError, "need_weights must be True or False, got 'no' (str)"),
    # cross-attention: the memory and a mask against its length
    (lambda: MHA(X, memory=torch.randn(5, 8)), ValueError, "memory must have at least 3 dimensions, got shape (5, 8)"),
    *[
        (
            lambda shape=shape: MHA(X, memory=torch.randn(shape)),
            ValueError,
            f"memory must have shape (B=2, S >= 1, C=8) for x of shape (2, 3, 8), got {shape}",
        )
        for shape in ((3, 5, 8), (2, 0, 8), (2, 5, 6), (1, 2, 5, 8))  # batch, empty, kdim != embed_dim, 4-D
    ],
    (lambda: MHA(X, memory=MEMORY.to("meta")), ValueError, "memory is on meta but the module's weights are on cpu"),
    (lambda: MHA(X, causal_mask(3), memory=MEMORY), ValueError,
     "mask of shape (3, 3) does not broadcast to the scores' shape (2, 2, 3, 5)"),
    (lambda: MHA(X, None, False, MEMORY), TypeError, "positional argument"),  # memory is keyword-only
    (lambda: MHA(X, MEMORY), TypeError,
     "got a floating tensor of shape (2, 5, 8), which looks like a (B, S, C) memory: for cross-attention pass "
     "it by keyword, attn(x, memory=m)"),
    # split_heads, merge_heads
    (lambda: split_heads(torch.zeros(4, 6), 2), ValueError, "x must have at least 3 dimensions, got shape (4, 6)"),
    (lambda: split_heads(torch.zeros(1, 4, 6), 4), ValueError, "embed_dim (6) must be divisible by num_heads (4)"),
    (lambda: merge_heads(torch.zeros(2, 4, 6)), ValueError, "x must have at least 4 dimensions, got shape (2, 4, 6)"),
    # copying weights between the modules
    (lambda: MultiHeadAttention.from_torch(nn.Linear(4, 4)), TypeError,
     "from_torch takes an nn.MultiheadAttention, got Linear"),
    (lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4)), ValueError,
     "from_torch needs kdim == vdim == embed_dim (one packed in_proj_weight)"),
    *[
        (
            lambda kw=kw: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, **kw)),
            ValueError,
            "from_torch does not support add_bias_kv or add_zero_attn",
        )
        for kw in ({"add_bias_kv": True}, {"add_zero_attn": True})
    ],
    *[
        row
        for cls in (MultiHeadAttentionWrapper, MultiHeadAttentionEinsum)
        for row in [
            (
                lambda cls=cls: cls.from_packed(nn.MultiheadAttention(8, 2)),
                TypeError,
                FROM_PACKED + " (convert it first with MultiHeadAttention.from_torch), got MultiheadAttention",
            ),
            (lambda cls=cls: cls.from_packed(nn.Linear(8, 8)), TypeError, FROM_PACKED + ", got Linear"),
        ]
    ],
]  # fmt: skip


test_each_bad_input_gets_its_message = refusals_test(MESSAGES)


def test_good_masks_and_memories_pass_the_door():
    assert MHA(X, torch.ones(3, 5, dtype=torch.bool), memory=MEMORY).shape == (2, 3, 8)
    assert MHA(X, memory=MEMORY).shape == (2, 3, 8)


@pytest.mark.parametrize("make", ["MultiHeadAttention", "MultiHeadAttentionEinsum"])
def test_a_numpy_head_count_works_with_a_mask(make):
    """np.arange in a head-count sweep: the entry check once passed the numpy int to torch.broadcast_shapes,
    which failed deep inside torch (a #20 review); the layer must run as it did before."""
    np = pytest.importorskip("numpy")
    import course_utils.multihead as MH

    torch.manual_seed(0)
    layer = getattr(MH, make)(8, np.int64(2))
    out = layer(torch.randn(2, 5, 8), causal_mask(5))
    assert out.shape == (2, 5, 8)


# ---------------------------------------------------------------- notebook 04: how many matrix products


def _notebook_04_function(name: str):
    """A function of notebook 04 as its source defines it (the notebook's own loop, not a copy)."""
    tree = ast.parse((ROOT / "course_source" / "04_multihead_einsum.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = {"math": math, "torch": torch}
    exec(compile(ast.Module([node], type_ignores=[]), "04_multihead_einsum.py", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("H", [1, 2, 3, 4, 6])
def test_notebook_04_the_loop_over_heads_launches_5h_plus_1_products_the_packed_module_4(H):
    """'it launches `5 * H + 1` small matrix products ... 16 for H = 3'; 'the same work in four big products,
    whatever H'"""
    C, D = 12, 12 // H
    g = torch.Generator().manual_seed(H)
    x = torch.randn(2, 5, C, generator=g)
    heads_w = [[torch.randn(D, C, generator=g) for _ in range(3)] for _ in range(H)]
    counted = {}
    for name, run in [
        ("notebook loop", lambda: _notebook_04_function("mha_loop")(x, heads_w, torch.randn(C, C, generator=g))),
        ("wrapper", lambda: MultiHeadAttentionWrapper(C, H)(x)),
        ("packed", lambda: MultiHeadAttention(C, H)(x)),
    ]:
        with torch.no_grad(), CountProducts() as count:
            run()
        counted[name] = count.products
    assert counted == {"notebook loop": 5 * H + 1, "wrapper": 5 * H + 1, "packed": 4}
