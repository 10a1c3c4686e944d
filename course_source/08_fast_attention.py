# %% [markdown]
# # 08 Fast attention: the online softmax, tiled attention and what they save
#
# Plain attention builds the whole `(T, S)` matrix of scores, then of weights: at 8192 tokens a gigabyte
# per matrix for four heads in float32. Fused kernels such as FlashAttention compute the *exact* same
# result without ever holding it. This notebook derives
# how, in plain PyTorch: a softmax that streams over blocks of scores (the **online softmax**), and
# attention computed one tile of queries and keys at a time (**tiled attention**). It then asks what
# tiling saves in training as well as at inference, derives attention's **backward pass** by hand, and
# writes the **tiled backward** that trains with FlashAttention's recompute.
#
# **What you will learn**
#
# - the online softmax: a running maximum and a running sum, rescaled by `exp(m_old - m_new)` whenever
#   the maximum grows, and how two blocks' partial results merge exactly;
# - tiled attention, the algorithm of FlashAttention: exact, with causal and boolean masks and fully
#   masked rows, checked against `F.scaled_dot_product_attention`, never building the `(T, S)` matrix;
# - why that saving is for inference, counted: under autograd the tiles are kept for the backward pass;
# - the backward pass of attention by hand (`dv = Pᵀ dO`, `dS = P ⊙ (dP - Δ)`, ...), equal to autograd;
# - FlashAttention's recompute (Dao et al. 2022) as a tiled backward loop in FlashAttention-2's order (Dao 2023),
#   which trains in memory linear in T for about 2.5 times the forward pass's arithmetic;
# - in an appendix, measured time and memory curves of naive, tiled and fused attention and notebook 07's variants.
#
# **Prerequisites**: notebooks 02 (scaled attention, the stable softmax), 03 (masking: `causal_mask(T, S)`)
# and 04 (multi-head attention); notebook 07 for the appendix.
#
# **Time**: about 80 minutes. **Runs on**: CPU (the whole notebook takes well under a minute); the tiled
# attention cells use `device`, so on a GPU they run there.
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `D` head_dim,
# `Dv` value width. Masks are boolean, `True` = may attend.

# %%
# NBVAL_IGNORE_OUTPUT
import json
import math
import runpy
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import course_utils
from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.fast_attention import (
    block_partial,
    finish,
    flash_attention,
    merge_partials,
    online_softmax,
    saved_for_backward,
    tiled_attention,
)
from course_utils.masking import causal_mask

device = setup_notebook(seed=0)
ROOT = Path(course_utils.__file__).resolve().parent.parent
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The online softmax
#
# A softmax needs two numbers per row before it can give any weight: the maximum $m = \max_j x_j$ (subtracted
# so that no `exp` overflows, notebook 02) and the sum $\ell = \sum_j e^{x_j - m}$. The weights are
# $p_j = e^{x_j - m} / \ell$.
# It looks as if the whole row must be in memory to find them. It need not be (Milakov & Gimelshein 2018).
# Read the row in blocks and keep only a running $m$ and $\ell$ (`l` in the code). When a block brings a larger
# maximum $m_\text{new}$, the sum so far was taken relative to the old one, so multiply it by
# $e^{m_\text{old} - m_\text{new}}$ (at most 1, it never overflows), then add the new block's terms:
#
# $$\ell_\text{new} = \ell_\text{old}\, e^{m_\text{old} - m_\text{new}} + \sum_{j \in \text{block}} e^{x_j - m_\text{new}}$$

# %%
x = torch.tensor([1.0, 3.0, 0.5, 2.0, 6.0, 1.0, 7.5, -1.0, 2.5, 0.0])  # one row of scores, S = 10
m, l = float("-inf"), 0.0  # nothing seen yet
for j0 in range(0, len(x), 4):  # blocks of 4 entries
    block = x[j0:j0 + 4]
    m_new = max(m, block.max().item())
    rescale = math.exp(m - m_new)  # exp(-inf) = 0 for the first block
    l = l * rescale + torch.exp(block - m_new).sum().item()
    print(f"block {block.tolist()}: m {m} -> {m_new}, old sum x {rescale:.4f}, l = {l:.3f}")
    m = m_new
weights = torch.exp(x - m) / l  # (S,): a second pass over the row, with the final m and l
print("equals torch.softmax to 1e-6:", (weights - torch.softmax(x, dim=-1)).abs().max().item() < 1e-6)

# %% [markdown]
# `course_utils.fast_attention.online_softmax` does the same for any batch of rows, and gives NaN for a row
# that is all `-inf`, as `torch.softmax` does:

# %%
g = torch.Generator().manual_seed(0)
rows = 50.0 * torch.randn(3, 1000, generator=g)  # (3, S): scores up to a few hundred
for block_size in (1, 7, 128, 5000):
    print(f"block_size={block_size:>4}: equals torch.softmax to 1e-6:",
          (online_softmax(rows, block_size) - torch.softmax(rows, dim=-1)).abs().max().item() < 1e-6)

# %% [markdown]
# ## 2. Partial results that merge exactly
#
# Attention does not need the weights themselves, only `weights @ v`. So next to `m` and `l`, keep
# $o = \sum_j e^{s_j - m} v_j$, over the keys seen so far: not yet divided by $\ell$. A block of
# keys leaves such a **partial** $(m, \ell, o)$ for every query, and two partials merge exactly:
#
# $$m = \max(m_1, m_2), \quad a_1 = e^{m_1 - m}, \quad a_2 = e^{m_2 - m}, \quad
# \ell = a_1 \ell_1 + a_2 \ell_2, \quad o = a_1 o_1 + a_2 o_2,$$
#
# and the output is $o / \ell$. Split the 9 keys of three queries in two blocks, merge, compare:

# %%
g = torch.Generator().manual_seed(1)
q, k, v = torch.randn(3, 4, generator=g), torch.randn(9, 4, generator=g), torch.randn(9, 2, generator=g)
scores = q @ k.T / math.sqrt(4)  # (T, S) = (3, 9), only to split it here
left, right = block_partial(scores[:, :5], v[:5]), block_partial(scores[:, 5:], v[5:])  # keys 0-4, 5-8
print("partial of keys 0-4: m", tuple(left.m.shape), "l", tuple(left.l.shape), "o", tuple(left.o.shape))
merged = merge_partials(left, right)
reference, _ = scaled_dot_product_attention(q, k, v)  # (T, Dv)
print("o / l after the merge equals attention over all 9 keys, to 1e-6:",
      (finish(merged) - reference).abs().max().item() < 1e-6)

# %% [markdown]
# One case needs care. A query whose keys in a block are all masked has scores of `-inf` there: its
# partial is $(m, \ell, o) = (-\infty, 0, 0)$. Merging two of those computes $e^{-\infty - (-\infty)}$, which is
# NaN.
# Subtracting a finite number instead of `m` for such rows (0, say) keeps them at `(-inf, 0, 0)`, and
# their output at 0, what `F.scaled_dot_product_attention` returns for a query that may see nothing:

# %%
blocked = torch.full((1, 2), float("-inf"))  # one query, two keys, both masked
nothing = block_partial(blocked, v[:2])
m = torch.maximum(nothing.m, nothing.m)
print("without care: exp(m1 - m) =", torch.exp(nothing.m - m).item())
print("with the guard: merged (m, l, o) =", [t.flatten().tolist() for t in merge_partials(nothing, nothing)],
      "-> output", finish(merge_partials(nothing, nothing)).flatten().tolist())

# %% [markdown]
# ## 3. Tiled attention
#
# Now apply the merge tile after tile. Cut the queries into tiles of `q_tile` rows and the keys and values
# into tiles of `kv_tile`. For each query tile, start from the empty partial and merge in one key tile at a
# time: the scores in memory are never more than `(q_tile, kv_tile)`, whatever T and S are. For one head,
# with loops:

# %%
def tiled_attention_loops(q, k, v, q_tile, kv_tile, causal=False):
    """One head: q (T, D), k (S, D), v (S, Dv) -> (T, Dv). Only one (q_tile, kv_tile) tile of scores at a time."""
    T, S, D = q.shape[0], k.shape[0], q.shape[1]
    out = torch.empty(T, v.shape[1], device=q.device)
    for i0 in range(0, T, q_tile):
        qi = q[i0:i0 + q_tile] / math.sqrt(D)  # (Tq, D)
        m = torch.full((len(qi), 1), float("-inf"), device=q.device)  # running maximum per query
        l = torch.zeros(len(qi), 1, device=q.device)  # running sum of exp(score - m)
        o = torch.zeros(len(qi), v.shape[1], device=q.device)  # running sum of exp(score - m) * v
        for j0 in range(0, S, kv_tile):
            s = qi @ k[j0:j0 + kv_tile].T  # (Tq, Sk): one tile of scores
            if causal:  # query i sits at position S - T + i and may see keys up to it (causal_mask(T, S))
                future = torch.arange(j0, j0 + s.shape[1], device=q.device)[None, :] > \
                    torch.arange(i0, i0 + len(qi), device=q.device)[:, None] + S - T
                s = s.masked_fill(future, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (Tq, 1)
            safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # rows with no visible key yet
            p, rescale = torch.exp(s - safe), torch.exp(m - safe)  # (Tq, Sk), (Tq, 1)
            l = rescale * l + p.sum(dim=-1, keepdim=True)
            o = rescale * o + p @ v[j0:j0 + kv_tile]  # (Tq, Dv)
            m = m_new
        out[i0:i0 + q_tile] = o / l
    return out


g = torch.Generator().manual_seed(2)
q, k, v = (torch.randn(50, 16, generator=g).to(device) for _ in range(3))  # (T, D): T = S = 50
for q_tile, kv_tile in ((1, 1), (8, 16), (7, 13), (64, 64)):
    for causal in (False, True):
        ours = tiled_attention_loops(q, k, v, q_tile, kv_tile, causal)
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        print(f"tiles ({q_tile:>2}, {kv_tile:>2}), causal={causal!s:>5}: equals torch to 1e-5:",
              (ours - theirs).abs().max().item() < 1e-5)

# %% [markdown]
# Tiles of 7 and 13 do not divide 50: the last tile is shorter. This is the algorithm of
# **FlashAttention** (Dao et al. 2022) and, earlier, of Rabe & Staats (2021), who showed that attention
# needs far less memory than its `(T, S)` matrix. FlashAttention runs it as one fused GPU kernel: only
# tiles of the scores and weights exist, in fast on-chip memory; only the output goes back to the large,
# slow GPU memory, with a number or two per query for the backward pass (section 6). The first
# FlashAttention puts k and v in the outer loop, rewriting the output once per k/v tile; FlashAttention-2
# puts the queries outside, as here, and runs the query tiles in parallel. Dao et al. count Θ(T²D²/M) reads
# and writes of GPU memory for on-chip memory of M numbers, against Θ(TD + T²) for plain attention, which
# those reads and writes limit on a GPU. On a CPU, `F.scaled_dot_product_attention` runs a compiled blocked
# version too (`_scaled_dot_product_flash_attention_for_cpu` in PyTorch's profiler).
#
# With a causal mask, whole tiles lie in the future of every query of their tile: they need not be
# computed at all. For 16 positions in tiles of 4:

# %%
T_pic, tile = 16, 4
n = T_pic // tile
state = torch.zeros(n, n)  # 0: skipped (all future), 1: computed and partly masked, 2: computed in full
for a in range(n):
    for b in range(n):
        state[a, b] = 0 if b > a else 1 if b == a else 2
fig, ax = plt.subplots(figsize=(3.2, 3.2))
ax.imshow(state, cmap="Blues", vmin=0, vmax=2.5)
for a in range(n):
    for b in range(n):
        ax.text(b, a, ["skip", "mask", "full"][int(state[a, b])], ha="center", va="center", fontsize=8)
ax.set(xticks=range(n), yticks=range(n), xlabel="key tile", ylabel="query tile",
       title=f"causal, T = S = {T_pic}, tiles of {tile}")
plt.show()
print(f"tiles computed: {int((state > 0).sum())} of {n * n}")

# %% [markdown]
# `course_utils.fast_attention.tiled_attention` is the same loop for any batch and heads `(..., T, D)`,
# with `is_causal` (aligned bottom-right like `causal_mask(T, S)`, so T < S works for a cache), an
# optional boolean mask, skipped future tiles, and output 0 for a query that may see nothing, as
# `F.scaled_dot_product_attention` gives:

# %%
g = torch.Generator().manual_seed(3)
q = torch.randn(2, 4, 37, 16, generator=g).to(device)  # (B, H, T, D)
k, v = torch.randn(2, 4, 60, 16, generator=g).to(device), torch.randn(2, 4, 60, 8, generator=g).to(device)
mask = (torch.rand(2, 1, 37, 60, generator=g) < 0.8).to(device)  # (B, 1, T, S)
mask[0, 0, 5] = False  # query 5 of the first sequence may see nothing
cases = {"no mask": {}, "causal": {"is_causal": True}, "mask": {"mask": mask},
         "mask and causal": {"mask": mask, "is_causal": True}}
for name, kwargs in cases.items():
    ours = tiled_attention(q, k, v, q_tile=16, kv_tile=16, **kwargs)
    full_mask = kwargs.get("mask", torch.ones(37, 60, dtype=torch.bool, device=device))
    if kwargs.get("is_causal"):
        full_mask = full_mask & causal_mask(37, 60, device=device)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=full_mask)
    print(f"{name:>15}: out {tuple(ours.shape)}, equals torch to 1e-5:",
          (ours - theirs).abs().max().item() < 1e-5)
print("query with no visible key gives 0:", ours[0, :, 5].abs().max().item() == 0.0)

# %% [markdown]
# What it holds at once: one `(q_tile, kv_tile)` tile of scores per batch entry and head, against the
# whole `(T, S)` matrix for plain attention. At T = S = 8192 with 4 heads, in float32:

# %%
T_big, heads = 8192, 4
print(f"(T, S) scores: {heads * T_big * T_big * 4 / 1e6:8.1f} MB, and the weights again")
print(f"one tile:      {heads * 256 * 256 * 4 / 1e6:8.1f} MB with tiles of 256 x 256")

# %% [markdown]
# The work is the same, O(T × S × D) (less with causal skipping): tiling saves memory and memory
# traffic, not arithmetic. The appendix measures both on this CPU.

# %% [markdown]
# ## 4. What tiling saves, and when: inference and training
#
# That saving holds when nothing needs the tiles afterwards: at inference. In training, autograd keeps
# what each operation needs for the backward pass, and a loop over tiles is many small operations: every
# tile's scores, exponentials and rescaled sums are kept. Count the bytes autograd keeps
# (`saved_tensors_hooks` sees each saved tensor), for T = S = 1024, 4 heads of 64, in float32:

# %%
def saved_megabytes(attention, q, k, v, **kwargs):
    """MB that autograd keeps for the backward pass of one call, each storage counted once."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attention(q, k, v, **kwargs)
    return sum(kept.values()) / 1e6


def plain_attention(q, k, v, is_causal=False):
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
    return scaled_dot_product_attention(q, k, v, mask=mask)[0]


g = torch.Generator().manual_seed(6)
qg, kg, vg = (torch.randn(1, 4, 1024, 64, generator=g, requires_grad=True) for _ in range(3))
kept_mb = {}
for causal in (False, True):
    for name, attention in (("plain", plain_attention), ("tiled", tiled_attention)):
        kept_mb[name, causal] = saved_megabytes(attention, qg, kg, vg, is_causal=causal)
        print(f"causal={causal!s:>5} {name}: {kept_mb[name, causal]:5.0f} MB kept for backward")
print(f"q, k, v and the output together: {4 * 4 * 1024 * 64 * 4 / 1e6:.1f} MB")

# %% [markdown]
# Tiled attention under autograd keeps *more* than plain attention, which keeps its `(T, S)` weights
# once: the tiles of scores and of exponentials together cover the whole `(T, S)` matrix, and the
# running sums are kept at every step. With a causal mask the skipped tiles are not kept and plain attention
# keeps its mask too, so tiled comes out a little ahead. Either way the saving of section 3 is **for
# inference**. To train in memory linear in T, the backward pass can keep only q, k, v, the output and one
# number per query, and recompute each tile's weights (Rabe & Staats instead checkpoint each chunk). That is
# FlashAttention; it needs the backward pass written out by hand.

# %% [markdown]
# ## 5. The backward pass of attention, by hand
#
# Autograd differentiates attention as a chain of generic operations and keeps what each needs. Written
# out for one head, the backward pass is four matrix products and one row-wise step. With the scores
# $S = \text{scale} \cdot q k^\top$, the weights $P = \operatorname{softmax}(S)$ (row by row) and the output
# $O = P v$, and $dO$ the gradient of the loss with respect to $O$:
#
# - $O$ is linear in $v$: $\boldsymbol{dv = P^\top dO}$, `(S, T) @ (T, Dv)`;
# - and linear in $P$: $\boldsymbol{dP = dO\, v^\top}$, `(T, Dv) @ (Dv, S)`;
# - the softmax couples a row: for one row $p = \operatorname{softmax}(s)$, $\partial p_j / \partial s_k =
#   p_j (\delta_{jk} - p_k)$, the Jacobian $J = \operatorname{diag}(p) - p p^\top$. The chain rule gives
#   $ds = J^\top dp$, and $J$ is symmetric, so $ds = p \odot dp - p\,(p \cdot dp) = p \odot (dp - p \cdot dp)$.
#   For every row: $\boldsymbol{dS = P \odot (dP - \Delta)}$, $\Delta_i = \sum_j P_{ij}\, dP_{ij}$;
# - the scores are linear in $q$ and $k$: $\boldsymbol{dq = \text{scale} \cdot dS\, k}$ and
#   $\boldsymbol{dk = \text{scale} \cdot dS^\top q}$.
#
# One identity makes this cheap:
#
# $$\sum_j P_{ij}\, dP_{ij} = \sum_j P_{ij}\, (dO_i \cdot v_j) = dO_i \cdot O_i,$$
#
# because $dP_{ij} = dO_i \cdot v_j$ and $O_i = \sum_j P_{ij} v_j$. So
# $\boldsymbol{\Delta = \operatorname{rowsum}(dO \odot O)}$, from the output without $P$ (FlashAttention,
# Dao et al. 2022, appendix B). Each step against autograd, in float64, the Jacobian of row 0 built in full:

# %%
g = torch.Generator().manual_seed(7)
T, S, D, Dv = 5, 7, 4, 3
q, k = torch.randn(T, D, generator=g, dtype=torch.float64), torch.randn(S, D, generator=g, dtype=torch.float64)
v = torch.randn(S, Dv, generator=g, dtype=torch.float64)
q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
scale = 1 / math.sqrt(D)
out = torch.softmax(scale * q @ k.T, dim=-1) @ v  # (T, Dv)
d_out = torch.randn(T, Dv, generator=g, dtype=torch.float64)  # dL/dO, as if from the layers above
out.backward(d_out)  # autograd's dq, dk, dv land in q.grad, k.grad, v.grad

with torch.no_grad():
    P = torch.softmax(scale * q @ k.T, dim=-1)  # (T, S)
    dv = P.T @ d_out  # (S, T) @ (T, Dv) -> (S, Dv)
    dP = d_out @ v.T  # (T, Dv) @ (Dv, S) -> (T, S)
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # (T, 1): from the output, without P
    dS = P * (dP - delta)  # (T, S)
    J = torch.diag(P[0]) - torch.outer(P[0], P[0])  # (S, S): the softmax's Jacobian for row 0
    print("row 0: Jᵀ dP equals P ⊙ (dP - Δ) to 1e-12:", torch.allclose(J.T @ dP[0], dS[0], rtol=0, atol=1e-12))
    dq, dk = scale * dS @ k, scale * dS.T @ q  # (T, D), (S, D)
    print("Δ = rowsum(dO ⊙ O) equals rowsum(P ⊙ dP) to 1e-12:", torch.allclose(delta, (P * dP).sum(-1, True),
                                                                            rtol=0, atol=1e-12))
    for name, ours, theirs in (("dv", dv, v.grad), ("dq", dq, q.grad), ("dk", dk, k.grad)):
        print(f"{name} {tuple(ours.shape)} equals autograd to 1e-12:", torch.allclose(ours, theirs, rtol=0, atol=1e-12))

# %% [markdown]
# Masks change nothing in the formulas. A blocked entry has `P = 0`, so `dS = 0` there: it passes no
# gradient to its query or its key. A query that may see no key has a row of zeros in `P` and an output
# of 0, so its `dq` is 0. `course_utils.fast_attention.attention_backward` is these formulas for any batch
# and heads; against autograd through the masked attention of notebook 03:

# %%
mask = torch.rand(T, S, generator=g) < 0.6  # (T, S), True = may attend
mask[2] = False  # query 2 may see nothing
qm, km, vm = (x.detach().clone().requires_grad_() for x in (q, k, v))
out_m, _ = scaled_dot_product_attention(qm, km, vm, mask=mask)  # (T, Dv), 0 for query 2
out_m.backward(d_out)
grads = course_utils.fast_attention.attention_backward(
    qm.detach(), km.detach(), vm.detach(), out_m.detach(), d_out, scale, mask=mask
)
for name, ours, theirs in zip(("dq", "dk", "dv"), grads, (qm.grad, km.grad, vm.grad)):
    print(f"{name} with a mask equals autograd to 1e-12:", torch.allclose(ours, theirs, rtol=0, atol=1e-12))
print("query 2 (sees no key) gets dq = 0:", bool((grads[0][2] == 0).all()))

# %% [markdown]
# ## 6. FlashAttention's recompute: training in linear memory
#
# The backward pass needs `P` only tile by tile, and a tile of `P` is cheap to make again: its scores
# $\text{scale} \cdot q_i k_j^\top$ from the tiles of $q$ and $k$, then $e^{\text{scores} - L}$ with
# $\boldsymbol{L = m + \log \ell}$, each query's logsumexp, known when the forward pass ends.
# Recomputing instead of storing, and `Δ` from `dO ⊙ O`, are FlashAttention's (Dao et al. 2022, section 3.1
# and appendix B); it kept `m` and `ℓ`. FlashAttention-2 (Dao 2023) keeps `L` alone, puts the queries outside
# in the forward (section 3) and splits the work across thread blocks along the sequence.
# `course_utils.fast_attention.flash_attention` (its backward loops query tiles outside: the same sums) is a
# `torch.autograd.Function` with the contract such Functions and their public test suites share:
# `ctx.save_for_backward` holds exactly q, k, v, the output and `L` of shape `(..., T)`, read as
# `out.grad_fn.saved_tensors`:

# %%
g = torch.Generator().manual_seed(8)
T, S, D = 13, 17, 4
q, k, v = (torch.randn(n, D, generator=g, dtype=torch.float64, requires_grad=True) for n in (T, S, S))
out = flash_attention(q, k, v, is_causal=True)  # (T, D)
saved = out.grad_fn.saved_tensors
print("saved:", [tuple(t.shape) for t in saved])
lse = saved[4]  # (T,): L, one number per query
scores = (q @ k.T / math.sqrt(D)).masked_fill(~causal_mask(T, S), float("-inf"))  # (T, S), here only to check
print("L equals logsumexp of the visible scores to 1e-12:",
      torch.allclose(lse, torch.logsumexp(scores, dim=-1), rtol=0, atol=1e-12))

# %% [markdown]
# The backward loop, in FlashAttention-2's order: `Δ` once, before the loop; the key tiles outside, so each
# tile's `dk` and `dv` are summed over the query tiles and written once (on a GPU they stay on chip); `dq`
# collects a share from every key tile; each tile's `P` recomputed from `q`, `k` and `L`, with no softmax; and
# the tiles past the causal diagonal skipped. For one head:

# %%
def flash_backward_loops(q, k, v, out, d_out, lse, q_tile, kv_tile, causal=False):
    """One head: dq, dk, dv of the shapes of q (T, D), k (S, D), v (S, Dv), and the tiles visited."""
    T, S, D = q.shape[0], k.shape[0], q.shape[1]
    scale = 1 / math.sqrt(D)
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # (T, 1): Δ, once
    dq, dk, dv, visited = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), []
    for j0 in range(0, S, kv_tile):  # key tiles outside
        k_j, v_j = k[j0:j0 + kv_tile], v[j0:j0 + kv_tile]  # (Sk, D), (Sk, Dv)
        dk_j, dv_j = torch.zeros_like(k_j), torch.zeros_like(v_j)
        for i0 in range(0, T, q_tile):
            if causal and j0 > S - T + i0 + q_tile - 1:  # after the tile's last query (at S - T + i): skip
                continue
            visited.append((i0 // q_tile, j0 // kv_tile))
            q_i, do_i = q[i0:i0 + q_tile], d_out[i0:i0 + q_tile]  # (Tq, D), (Tq, Dv)
            s = scale * q_i @ k_j.T  # (Tq, Sk): the scores again
            if causal:
                rows = torch.arange(i0, i0 + len(q_i))[:, None] + S - T  # (Tq, 1) query positions
                s = s.masked_fill(torch.arange(j0, j0 + len(k_j)) > rows, float("-inf"))
            p = torch.exp(s - lse[i0:i0 + q_tile, None])  # (Tq, Sk): P from L, no softmax
            dv_j += p.T @ do_i  # (Sk, Tq) @ (Tq, Dv)
            ds = p * (do_i @ v_j.T - delta[i0:i0 + q_tile])  # (Tq, Sk): dS = P ⊙ (dP - Δ)
            dq[i0:i0 + q_tile] += scale * ds @ k_j  # accumulated across key tiles
            dk_j += scale * ds.T @ q_i  # (Sk, Tq) @ (Tq, D)
        dk[j0:j0 + kv_tile], dv[j0:j0 + kv_tile] = dk_j, dv_j  # written once
    return dq, dk, dv, visited


for T, S, causal in ((13, 13, False), (17, 11, False), (13, 13, True), (11, 17, True)):
    q, k, v = (torch.randn(n, 4, generator=g, dtype=torch.float64, requires_grad=True) for n in (T, S, S))
    out = flash_attention(q, k, v, is_causal=causal)
    d_out = torch.randn(T, 4, generator=g, dtype=torch.float64)
    *ours, visited = flash_backward_loops(q.detach(), k.detach(), v.detach(), out.detach(), d_out,
                                          out.grad_fn.saved_tensors[4], q_tile=4, kv_tile=3, causal=causal)
    mask = causal_mask(T, S) if causal else None
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), (q, k, v), d_out)
    print(f"T={T}, S={S}, causal={causal!s:>5}, tiles (4, 3): dq, dk, dv equal autograd to 1e-10:",
          all(torch.allclose(a, b, rtol=0, atol=1e-10) for a, b in zip(ours, theirs)))

# %% [markdown]
# Tiles of 4 and 3 divide none of these lengths. The tiles the last, causal call with T < S visited, in order
# (the queries sit at the last T positions, so the diagonal starts at key S - T):

# %%
order = torch.zeros(math.ceil(11 / 4), math.ceil(17 / 3))  # (query tiles, key tiles); 0: skipped
for n_visit, (a, b) in enumerate(visited, start=1):
    order[a, b] = n_visit
fig, ax = plt.subplots(figsize=(4.2, 2.4))
ax.imshow(order > 0, cmap="Blues", vmin=0, vmax=1.6)
for (a, b), n_visit in zip(*(order.nonzero().tolist(), order[order > 0].int().tolist())):
    ax.text(b, a, n_visit, ha="center", va="center", fontsize=8)
ax.set(xlabel="key tile (outer loop)", ylabel="query tile", title="causal backward, T = 11, S = 17, tiles (4, 3)")
plt.show()
print(f"tiles visited: {len(visited)} of {order.numel()}")

# %% [markdown]
# **What it costs.** Per tile the forward pass does two matrix products (`q kᵀ`, `P v`), the backward five
# (`q kᵀ` again, `Pᵀ dO`, `dO vᵀ`, `dS k`, `dSᵀ q`), each `2 × Tq × Sk × D` FLOPs when `D = Dv`: the
# backward is **5 / 2 = 2.5 times** the forward's arithmetic, the recompute included. Measured here (nbval
# ignores timings; the elementwise work moves it off 2.5):

# %%
# NBVAL_IGNORE_OUTPUT
qt, kt, vt = (torch.randn(1, 4, 1024, 64, requires_grad=True) for _ in range(3))
forward_s, backward_s = [], []
for _ in range(3):
    start = time.perf_counter()
    out_t = flash_attention(qt, kt, vt, is_causal=True)
    forward_s.append(time.perf_counter() - start)
    start = time.perf_counter()
    out_t.sum().backward()
    backward_s.append(time.perf_counter() - start)
print(f"backward / forward time: {min(backward_s) / min(forward_s):.1f}x (counted FLOPs: 2.5x)")

# %% [markdown]
# What autograd keeps, as in section 4:

# %%
for causal in (False, True):
    kept_mb["flash", causal] = saved_megabytes(flash_attention, qg, kg, vg, is_causal=causal)
    print(f"causal={causal!s:>5}: plain {kept_mb['plain', causal]:4.0f} MB, tiled {kept_mb['tiled', causal]:4.0f} MB,"
          f" flash {kept_mb['flash', causal]:4.0f} MB kept for backward")
qf, kf, vf = (x.detach().clone().requires_grad_() for x in (qg, kg, vg))
flash_attention(qf, kf, vf, is_causal=True, q_tile=96, kv_tile=160).sum().backward()
qs, ks, vs = (x.detach().clone().requires_grad_() for x in (qg, kg, vg))
F.scaled_dot_product_attention(qs, ks, vs, is_causal=True).sum().backward()
print("flash gradients equal F.scaled_dot_product_attention's to 1e-4:",
      all(torch.allclose(a.grad, b.grad, rtol=0, atol=1e-4) for a, b in ((qf, qs), (kf, ks), (vf, vs))))

# %% [markdown]
# Flash keeps only its inputs, its output and `L` (a `(T, S)` mask, if given, is held too; `is_causal` needs
# none): it grows like T, not T². `benchmarks/flash_attention.py` measures the peak memory and the time of a
# forward and backward pass at T = 1k to 8k; the saved run:

# %%
flash_run = json.loads((ROOT / "benchmarks" / "results" / "flash_attention_cpu.json").read_text())
print({key: flash_run["meta"][key] for key in ("device", "date", "command")})
fig, (ax_s, ax_p) = plt.subplots(1, 2, figsize=(11, 3.6))
for method, style in (("plain", "s-"), ("tiled", "^-"), ("flash", "o-"), ("sdpa", "x--")):
    rows_f = [r for r in flash_run["results"] if r["method"] == method]
    ax_s.plot([r["T"] for r in rows_f], [r["saved_mb"] for r in rows_f], style, label=method)
    ax_p.plot([r["T"] for r in rows_f], [r["peak_mb"] for r in rows_f], style, label=method)
for ax, label in ((ax_s, "kept for backward (MB, counted)"), (ax_p, "peak memory growth (MB, measured)")):
    ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel=label)
    ax.set_xticks([1024, 2048, 4096, 8192], ["1k", "2k", "4k", "8k"])
    ax.minorticks_off()
ax_s.legend(fontsize=8)
fig.tight_layout()
plt.show()
by_f = {(r["method"], r["T"]): r for r in flash_run["results"]}
for T_f in (1024, 8192):
    flash_t, tiled_t = by_f["flash", T_f], by_f["tiled", T_f]
    print(f"T = {T_f}: flash keeps x{flash_t['saved_mb_vs_sdpa']:.2f} and peaks at x{flash_t['peak_mb_vs_sdpa']:.2f}"
          f" of sdpa's memory, in x{flash_t['cpu_s_vs_sdpa']:.1f} its time; tiled peaks at"
          f" x{tiled_t['peak_mb_vs_sdpa']:.0f}")
for method in ("flash", "sdpa", "plain"):
    growth = {key: [round(by_f[method, 2 * t][key] / by_f[method, t][key], 2) for t in (1024, 2048, 4096)]
              for key in ("saved_mb", "peak_mb")}
    print(f"{method:>5}, per doubling of T: kept x", growth["saved_mb"], "peak x", growth["peak_mb"])

# %% [markdown]
# What flash and PyTorch's fused kernel keep doubles with each doubling of T: slope 1 on the log-log axes,
# linear. Their measured peaks grow by less than that (x1.47, x1.66, x1.73 for flash), because a few fixed
# MB of tiles and buffers weigh less and less: the slope tends to 1. Plain attention's grows about 4x, slope
# 2. Flash keeps exactly what the fused kernel keeps in about one and a half times its time on this CPU:
# each tile step is a separate PyTorch operation, where the compiled kernel does them in one pass.
#
# A CPU run shows the memory that training keeps, the same on any device. It cannot show why FlashAttention
# is *faster* on a GPU: there the tiles sit in small on-chip memory, and what is saved is traffic to the
# slow HBM, which limits plain attention. A loop of PyTorch operations cannot keep a tile in cache from one
# operation to the next: the ratios measure that, not IO-awareness.

# %% [markdown]
# ## 7. Check against `course_utils`
#
# The inline versions of this notebook against the package:

# %%
torch.testing.assert_close(weights, online_softmax(x, 4))
torch.testing.assert_close(finish(merged), reference)
g = torch.Generator().manual_seed(4)
q1, k1, v1 = torch.randn(21, 8, generator=g), torch.randn(30, 8, generator=g), torch.randn(30, 3, generator=g)
for causal in (False, True):
    torch.testing.assert_close(tiled_attention_loops(q1, k1, v1, 5, 7, causal),
                               tiled_attention(q1, k1, v1, is_causal=causal, q_tile=5, kv_tile=7))
q1g, k1g, v1g = (x.clone().requires_grad_() for x in (q1, k1, v1))
for attention in (plain_attention, tiled_attention, flash_attention):  # section 4's count
    assert saved_megabytes(attention, q1g, k1g, v1g) == saved_for_backward(attention, q1g, k1g, v1g) / 1e6
for causal in (False, True):  # section 6's loop against flash_attention's own backward pass
    out1 = flash_attention(q1g, k1g, v1g, is_causal=causal)
    d_out1 = torch.randn(out1.shape, generator=g)
    *ours, _ = flash_backward_loops(q1, k1, v1, out1.detach(), d_out1, out1.grad_fn.saved_tensors[4], 5, 7, causal)
    for a, b in zip(ours, torch.autograd.grad(out1, (q1g, k1g, v1g), d_out1)):
        torch.testing.assert_close(a, b)
print("matches course_utils (and F.scaled_dot_product_attention)")

# %% [markdown]
# ## Exercises
#
# The cell below each exercise checks your function and names the mistake it looks like. Use plain
# tensor operations. Results keep the inputs' dtype; leave the inputs unchanged. The checks also
# draw fresh inputs.
#
# ### Exercise 08.1: merge two blocks of an online softmax (8 min, core)
#
# Two blocks of keys have left, for each query, the partials `(m1, l1, o1)` and `(m2, l2, o2)` of section
# 2: `m` and `l` of shape `(..., T, 1)`, `o` of shape `(..., T, Dv)`. Write `merge_blocks(m1, l1, o1, m2,
# l2, o2)` that returns the partial `(m, l, o)` of both blocks together, with `m` the larger maximum. A
# query that saw no key in either block has `(-inf, 0, 0)` twice and must get `(-inf, 0, 0)` back, not
# NaN. The checks include blocks whose scores differ by more than a hundred.

# %%
# Inputs: `m1`, `l1`, `o1`, `m2`, `l2`, `o2` may have 0 to 3 leading axes (the `...`); tensors may be
# non-contiguous views.
def merge_blocks(m1, l1, o1, m2, l2, o2):
    ### BEGIN SOLUTION
    m = torch.maximum(m1, m2)  # (..., T, 1)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)  # queries that saw no key: nothing to rescale
    a1, a2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)  # (..., T, 1), each at most 1
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2
    ### END SOLUTION


check("08.1", merge_blocks)

# %% [markdown]
# ### Exercise 08.2: the backward pass of attention (15 min, optional)
#
# Write `attention_backward(q, k, v, o, do, scale)` that returns `(dq, dk, dv)`, the gradients of one
# attention call `o = softmax(scale · q kᵀ) v` given `do`, the gradient of the loss with respect to `o`.
# Shapes: q `(..., T, D)`, k `(..., S, D)`, v `(..., S, Dv)`, o and do `(..., T, Dv)`; the same leading
# axes on all. Use the formulas of section 5, not autograd.

# %%
# Inputs: `q`, `k`, `v`, `o`, `do` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous
# views.
def attention_backward(q, k, v, o, do, scale):
    ### BEGIN SOLUTION
    P = torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)  # (..., T, S)
    dv = P.transpose(-2, -1) @ do  # (..., S, Dv)
    dP = do @ v.transpose(-2, -1)  # (..., T, S)
    dS = P * (dP - (do * o).sum(dim=-1, keepdim=True))  # (..., T, S)
    return scale * dS @ k, scale * dS.transpose(-2, -1) @ q, dv
    ### END SOLUTION


check("08.2", attention_backward)

# %% [markdown]
# ### Exercise 08.3: a tile's weights recomputed from the logsumexp (10 min, core)
#
# Write `tile_weights(q, k, lse, scale)` that returns the attention weights `P` of a tile, `(..., T, S)`,
# recomputed from the queries `q (..., T, D)`, the keys `k (..., S, D)` of the tile and each query's
# logsumexp of its scaled scores `scale · q kᵀ` over ALL its keys, `lse (..., T)`, as FlashAttention's
# backward pass does (section 6): without a softmax over the tile. A row of `P` need not sum to 1; every
# query sees all its keys, so its `lse` is finite and at least each of its scores in the tile. The checks
# include scores far past where `exp` overflows float32.

# %%
# Inputs: `q`, `k`, `lse` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous views.
def tile_weights(q, k, lse, scale):
    ### BEGIN SOLUTION
    scores = scale * q @ k.transpose(-2, -1)  # (..., T, S), as in the forward pass
    return torch.exp(scores - lse.unsqueeze(-1))  # L as (..., T, 1), one per query: P = exp(s - L)
    ### END SOLUTION


check("08.3", tile_weights)

# %% [markdown]
# ### Exercise 08.4: the tiled backward pass, in FlashAttention-2's order (20 min, optional)
#
# Write `flash_backward(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal)` that returns `(dq, dk,
# dv)` as section 6's loop does: key tiles outside, `Δ` once, each tile's weights from `lse` (`L`), tiles
# past the causal diagonal skipped; no autograd, no `(T, S)` matrix (the check refuses it). Shapes:
# q `(..., T, D)`, k `(..., S, D)`, v `(..., S, Dv)`, out, dout `(..., T, Dv)`, lse `(..., T)`. With
# `is_causal` (then T <= S), query i sits at S - T + i (`causal_mask(T, S)`). Checked in float64 to
# 1e-10.

# %%
# Inputs: `q`, `k`, `v`, `out`, `dout`, `lse` may have 0 to 3 leading axes (the `...`); `q`, `k`, `v`, `out`,
# `dout`, `lse` may be float64 (the result is then float64, to float64's precision); tensors may be
# non-contiguous views.
def flash_backward(q, k, v, out, dout, lse, scale, q_tile, kv_tile, is_causal):
    ### BEGIN SOLUTION
    T, S = q.shape[-2], k.shape[-2]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (dout * out).sum(dim=-1, keepdim=True)  # (..., T, 1): Δ, once
    for j0 in range(0, S, kv_tile):  # key tiles outside
        k_t, v_t = k[..., j0:j0 + kv_tile, :], v[..., j0:j0 + kv_tile, :]  # (..., Sk, D), (..., Sk, Dv)
        dk_t, dv_t = torch.zeros_like(k_t), torch.zeros_like(v_t)
        for i0 in range(0, T, q_tile):
            if is_causal and j0 > S - T + i0 + q_tile - 1:  # after the tile's last query: skip
                continue
            q_t, do_t = q[..., i0:i0 + q_tile, :], dout[..., i0:i0 + q_tile, :]  # (..., Tq, D), (..., Tq, Dv)
            s = scale * q_t @ k_t.transpose(-2, -1)  # (..., Tq, Sk)
            if is_causal:
                rows = torch.arange(i0, i0 + s.shape[-2])[:, None] + S - T  # (Tq, 1) query positions
                s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows, float("-inf"))
            p = torch.exp(s - lse[..., i0:i0 + q_tile, None])  # (..., Tq, Sk)
            dv_t += p.transpose(-2, -1) @ do_t
            ds = p * (do_t @ v_t.transpose(-2, -1) - delta[..., i0:i0 + q_tile, :])  # (..., Tq, Sk)
            dq[..., i0:i0 + q_tile, :] += scale * ds @ k_t
            dk_t += scale * ds.transpose(-2, -1) @ q_t
        dk[..., j0:j0 + kv_tile, :], dv[..., j0:j0 + kv_tile, :] = dk_t, dv_t
    return dq, dk, dv
    ### END SOLUTION


check("08.4", flash_backward)

# %% [markdown]
# ## Summary
#
# - The online softmax keeps a running maximum `m` and sum `l`, rescaled by `exp(m_old - m_new)` when the
#   maximum grows; with the unnormalised output `o`, two blocks' partials `(m, l, o)` merge exactly.
# - Tiled attention merges one `(q_tile, kv_tile)` tile at a time: exact, the same O(T × S × D) work, and at
#   inference O(tile) memory for the scores instead of O(T × S).
# - Under autograd every tile is kept for the backward pass, O(T × S) as in plain attention. By hand:
#   `dv = Pᵀ dO`, `dP = dO vᵀ`, `dS = P ⊙ (dP - Δ)` (the softmax's Jacobian) with `Δ = rowsum(dO ⊙ O)`,
#   `dq = scale · dS k`, `dk = scale · dSᵀ q`.
# - FlashAttention keeps q, k, v, the output and `L` per query and recomputes each tile's weights; in
#   FlashAttention-2's order the key tiles are outside. Exact gradients, memory linear in T (with
#   `is_causal`), five tile products to the forward's two: 2.5 times its arithmetic.
#
# Next, notebook 09: generating text with a KV cache, sampling and beam search.
#
# ## Further reading
#
# - Milakov & Gimelshein, [Online normalizer calculation for softmax](https://arxiv.org/abs/1805.02867)
#   (2018): the online softmax.
# - Rabe & Staats, [Self-attention Does Not Need O(n²) Memory](https://arxiv.org/abs/2112.05682) (2021).
# - Dao et al., [FlashAttention: Fast and Memory-Efficient Exact Attention with
#   IO-Awareness](https://arxiv.org/abs/2205.14135) (2022); Dao, [FlashAttention-2: Faster Attention with
#   Better Parallelism and Work Partitioning](https://arxiv.org/abs/2307.08691) (2023).

# %% [markdown]
# ## Appendix: cost curves
#
# `benchmarks/attention_cost.py` times each method and measures the growth of its peak memory at T = 128 to
# 8192 on q, k, v of shape `(1, 4, T, 64)`, causal except Linformer and AFT: naive attention, PyTorch's fused
# kernel, section 3's tiled loop (tiles of 256) and notebook 07's chunked sliding window (256), chunked top-k
# (k = 32), Linformer (R = 256) and AFT-simple. The saved run, with where and how it was made:

# %%
saved = json.loads((ROOT / "benchmarks" / "results" / "attention_cost_cpu.json").read_text())
print({key: saved["meta"][key] for key in ("device", "date", "torch", "command")})
for when in ("before", "after"):
    print(f"load average (1, 5, 15 min) {when}:", [round(x, 2) for x in saved["meta"]["load_average_1_5_15min"][when]])
methods = list(dict.fromkeys(r["method"] for r in saved["results"]))
exact = ("naive", "torch_sdpa", "tiled")  # exact attention; the others are different models or sparser
fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 3.8))
for method in methods:
    rows_m = [r for r in saved["results"] if r["method"] == method]
    style = {"lw": 2.5, "marker": "o"} if method in exact else {"lw": 1, "marker": ".", "alpha": 0.7}
    ax_t.plot([r["T"] for r in rows_m], [r["time_ms"] for r in rows_m], label=method, **style)
    ax_m.plot([r["T"] for r in rows_m], [max(r["peak_mb"], 0.1) for r in rows_m], label=method, **style)
for ax, label in ((ax_t, "time (ms)"), (ax_m, "peak memory growth (MB)")):
    ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel=label)
    ax.set_xticks([128, 512, 2048, 8192], ["128", "512", "2048", "8192"])
ax_t.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# A slope of 2 on log-log axes is quadratic, 1 linear; fixed overheads blur small T, so compare the largest:

# %%
by = {(r["method"], r["T"]): r for r in saved["results"]}
for method in methods:
    r1, r2 = by[(method, 4096)], by[(method, 8192)]
    print(f"{method:>15}: T=8192 {r2['time_ms'] / 1000:6.2f} s ({r2['ratio']:.2f}x naive), "
          f"peak +{r2['peak_mb']:7.1f} MB, memory x{r2['peak_mb'] / r1['peak_mb']:.1f} from T=4096")

# %% [markdown]
# From T = 4096 to 8192 naive attention's memory grows about 4x (several `(T, T)` tensors), the tiled loop's
# and the fused kernel's less than 2x. The tiled loop is about 4 to 6 times slower than the fused kernel from
# 256 tokens up (small tiles driven from Python), yet faster than naive attention from 512 up, as it skips the
# future tiles. Top-k saves memory, not time; Linformer and AFT-simple, different and non-causal models, are
# the cheapest. A small version runs live (nbval ignores its timings):

# %%
# NBVAL_IGNORE_OUTPUT
bench = runpy.run_path(str(ROOT / "benchmarks" / "attention_cost.py"))
live = bench["run"](lengths=(128, 256, 512), repeats=2, verbose=False, min_time_s=0.05)
print(bench["table"](live))
