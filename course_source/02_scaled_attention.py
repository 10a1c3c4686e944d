# %% [markdown]
# # 02 Scaled attention
#
# In notebook 01 attention was `softmax(q @ k.T) @ v`. Every real transformer divides the scores by
# `sqrt(D)` first, where `D` is the head size (`head_dim`). This notebook measures why, and shows the
# two other things a softmax needs to be trusted: computing it without overflow, and over the right axis.
#
# **What you will learn**
#
# - why the dot product `q . k` of random vectors grows with `D`, and why dividing by `sqrt(D)` (not `D`,
#   not the model width `C`) is the right fix;
# - what large scores do to the softmax: its output goes one-hot and its gradient goes to zero;
# - how to write a softmax that does not overflow (subtract the row maximum), and what happens if you don't;
# - `scaled_dot_product_attention`, from loops to one line, checked against PyTorch's own;
# - two bugs found in widely copied code: scaling by `embed_dim` instead of `head_dim`, and the softmax
#   over the wrong axis.
#
# **Prerequisites:** notebook 01 (dot-product attention, `q`, `k`, `v`, scores and weights).
# Basic probability helps: mean, variance, independence.
#
# **Time:** about 35 minutes. **Runs on:** a CPU, in a few seconds.
#
# Shapes use the course alphabet: `B` batch, `T` queries, `S` keys, `C` embed_dim (model width),
# `H` heads, `D` head_dim.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course_utils.environment import setup_notebook

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device {device} (this notebook runs on the CPU)")

# %% [markdown]
# ## 1. Dot products grow with the dimension
#
# Take a query `q` and a key `k` with `D` entries each, every entry drawn independently with mean 0 and
# variance 1 (roughly what you get at initialisation). Their score is `q . k = q_1 k_1 + ... + q_D k_D`.
#
# One term `q_i k_i` has mean 0 and variance `E[q_i^2] E[k_i^2] = 1 * 1 = 1`. The `D` terms are
# independent, so their variances add up:
#
# $$\operatorname{Var}(q \cdot k) = D, \qquad \operatorname{Var}\!\left(\frac{q \cdot k}{\sqrt{D}}\right) = \frac{D}{D} = 1.$$
#
# This is the argument in the footnote to section 3.2.1 of *Attention Is All You Need* (Vaswani et al.,
# 2017). Let's check it by measurement, starting with one score written out as a loop.

# %%
g = torch.Generator().manual_seed(0)
D = 8
q = torch.randn(D, generator=g)
k = torch.randn(D, generator=g)

score = 0.0
for i in range(D):
    score += q[i].item() * k[i].item()  # one term q_i k_i at a time
print(f"loop: {score:.4f}   torch.dot: {torch.dot(q, k).item():.4f}   q.shape {tuple(q.shape)}")

# %% [markdown]
# Now many pairs at once: `N` queries and `N` keys as rows of two `(N, D)` matrices. The score of pair
# `n` is the sum over the last axis of the elementwise product, `(q * k).sum(-1)`, which has shape `(N,)`.

# %%
N = 4000
dims = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
var_unscaled, var_scaled = [], []
g = torch.Generator().manual_seed(0)
for D in dims:
    q = torch.randn(N, D, generator=g)  # (N, D)
    k = torch.randn(N, D, generator=g)  # (N, D)
    scores = (q * k).sum(dim=-1)  # (N,): one score per pair
    var_unscaled.append(scores.var().item())
    var_scaled.append((scores / math.sqrt(D)).var().item())

print("scores.shape", tuple(scores.shape))
print("   D   Var(q.k)   Var(q.k / sqrt(D))")
for D, vu, vs in zip(dims, var_unscaled, var_scaled):
    print(f"{D:4d} {vu:10.1f} {vs:12.2f}")

# %%
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.loglog(dims, var_unscaled, "o-", label="q . k", base=2)
ax.loglog(dims, var_scaled, "s-", label="q . k / sqrt(D)", base=2)
ax.loglog(dims, dims, "k:", label="D (theory)", base=2)
ax.set_xlabel("head_dim D")
ax.set_ylabel("variance of the score")
ax.set_title("Score variance grows like D; scaling keeps it at 1")
ax.legend()
plt.show()

# %% [markdown]
# The unscaled variance follows the dotted line `Var = D` almost exactly; the scaled one stays at 1
# whatever `D` is. With `D = 64` (a typical head size) unscaled scores have a standard deviation of 8,
# so two keys' scores easily differ by 20. Why does that matter? Because of what the softmax does next.
#
# (The assumption "independent, variance 1" holds at initialisation, not after training. The point of
# the scale is to start every head in the same sensible regime whatever its size; training is free to
# make scores larger.)

# %% [markdown]
# ## 2. Large scores saturate the softmax
#
# Take one query's scores over `S = 8` keys and multiply them by a growing factor. The weights go from
# almost uniform (every key weighs `1/8`) to almost one-hot (all weight on the largest score).
# We measure this by the largest weight and by the **entropy** `H = -sum_j w_j log w_j`: it is
# `log(8) = 2.08` for uniform weights and 0 for one-hot.

# %%
def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of weights; 0 * log 0 counts as 0. (..., S) -> (...)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


g = torch.Generator().manual_seed(1)
logits = torch.randn(8, generator=g)  # (S,) = (8,)
print("logits", logits)
for factor in [0.1, 1, 3, 10, 30, 100]:
    w = torch.softmax(factor * logits, dim=-1)
    print(f"factor {factor:4}: max weight {w.max().item():.3f}, entropy {entropy(w).item():.3f}")

# %%
fig, axes = plt.subplots(1, 4, figsize=(9, 2.2), sharey=True)
for ax, factor in zip(axes, [0.1, 1, 10, 100]):
    ax.bar(range(8), torch.softmax(factor * logits, dim=-1))
    ax.set_title(f"softmax({factor} * logits)", fontsize=9)
    ax.set_xlabel("key")
axes[0].set_ylabel("weight")
plt.show()

# %% [markdown]
# Unscaled scores with `D = 100` have a standard deviation of 10, the same as multiplying unit-variance
# scores by 10: more than half the weight already sits on one key. At a factor of 100 (`D = 10,000`)
# the softmax is a hard `argmax`.
#
# ### The gradient vanishes too
#
# Learning happens through the gradient of the softmax. With `w = softmax(z)`, its Jacobian is
#
# $$\frac{\partial w_i}{\partial z_j} = w_i(\delta_{ij} - w_j), \qquad J = \operatorname{diag}(w) - w w^\top .$$
#
# Loops first: each entry from the formula. Then one line, and both against autograd.

# %%
def softmax_jacobian_loops(z: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(z, dim=-1)
    S = z.shape[0]
    J = torch.zeros(S, S)
    for i in range(S):
        for j in range(S):
            J[i, j] = w[i] * ((1.0 if i == j else 0.0) - w[j])
    return J  # (S, S)


def softmax_jacobian(z: torch.Tensor) -> torch.Tensor:
    w = torch.softmax(z, dim=-1)  # (..., S)
    return torch.diag_embed(w) - w[..., :, None] * w[..., None, :]  # (..., S, S)


J_auto = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=-1), logits)
torch.testing.assert_close(softmax_jacobian_loops(logits), J_auto)
torch.testing.assert_close(softmax_jacobian(logits), J_auto)
print("loops, vectorised and autograd agree; J.shape", tuple(J_auto.shape))

# %% [markdown]
# When `w` is one-hot, `diag(w)` and `w w^T` are the same matrix and `J` is zero: nudging any score
# changes nothing, so no gradient flows back to `q` and `k`. The left plot shows the size of `J`
# (its Frobenius norm, averaged over 256 random logit vectors of length 8) as the factor grows. The right
# plot goes back to attention: random `q` and `k` of size `D`, scores over `S = 32` keys, the average
# Jacobian norm per query, with and without the scale.

# %%
g = torch.Generator().manual_seed(2)
many_logits = torch.randn(256, 8, generator=g)  # 256 rows of S = 8 logits
factors = torch.logspace(-1, 2, 31)
jac_norm = [softmax_jacobian(f * many_logits).norm(dim=(-2, -1)).mean().item() for f in factors]

jac_unscaled, jac_scaled = [], []
for D in dims:
    q = torch.randn(8, 32, D, generator=g)  # (n, T, D): 8 random draws
    k = torch.randn(8, 32, D, generator=g)  # (n, S, D)
    scores = q @ k.transpose(-2, -1)  # (n, T, S)
    jac_unscaled.append(softmax_jacobian(scores).norm(dim=(-2, -1)).mean().item())
    jac_scaled.append(softmax_jacobian(scores / math.sqrt(D)).norm(dim=(-2, -1)).mean().item())

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
ax1.semilogx(factors, jac_norm)
ax1.set_xlabel("factor multiplying the logits")
ax1.set_ylabel("norm of softmax Jacobian")
ax1.set_title("Saturated softmax, vanishing gradient", fontsize=10)
ax2.semilogx(dims, jac_unscaled, "o-", label="q . k", base=2)
ax2.semilogx(dims, jac_scaled, "s-", label="q . k / sqrt(D)", base=2)
ax2.set_xlabel("head_dim D")
ax2.set_title("Attention at initialisation", fontsize=10)
ax2.legend()
plt.show()
print("   D  Jacobian norm: unscaled  scaled")
for D, ju, js in zip(dims, jac_unscaled, jac_scaled):
    print(f"{D:4d} {ju:22.3f} {js:7.3f}")

# %% [markdown]
# A little spread in the scores does no harm (the norm even rises at first: the softmax is most
# sensitive when a few keys compete), but past a factor of a few it falls, and at 100 it is almost 0.
# Without the scale, large heads are pushed exactly there: from `D = 16` on, the gradient through the
# softmax shrinks steadily, and at `D = 1024` it is about four times smaller than with the scale. With
# the scale, it is the same for every head size. That is the whole reason for `1 / sqrt(D)`.

# %% [markdown]
# ## 3. A softmax that does not overflow
#
# The textbook formula `exp(z_j) / sum_k exp(z_k)` is `course_utils.attention.softmax_naive`. In float32,
# `exp(x)` overflows to `inf` for `x` above about 88.7, and `inf / inf` is `nan`. Scores of 100 are not
# exotic: an unscaled head of size 10,000, or a trained model whose logits have grown.

# %%
from course_utils.attention import softmax, softmax_naive

big = torch.tensor([100.0, 101.0, 102.0])
print("exp(big)          ", torch.exp(big))
print("softmax_naive(big)", softmax_naive(big))
print("torch.finfo(torch.float32).max =", f"{torch.finfo(torch.float32).max:.3e}")

# %% [markdown]
# Very negative scores fail the other way: `exp(-1000)` underflows to 0, and `0 / 0` is `nan` too.

# %%
print("softmax_naive(-1000 - [0, 1, 2])", softmax_naive(torch.tensor([-1000.0, -1001.0, -1002.0])))

# %% [markdown]
# The fix costs one line. For any number `c`,
#
# $$\frac{e^{z_j - c}}{\sum_k e^{z_k - c}} = \frac{e^{-c}\, e^{z_j}}{e^{-c} \sum_k e^{z_k}} = \frac{e^{z_j}}{\sum_k e^{z_k}},$$
#
# so we may subtract whatever we like. Choose `c = max_k z_k`: then every exponent is `<= 0` (no overflow)
# and the largest is exactly `e^0 = 1`, so the sum is at least 1 (no `0 / 0`). Loops first, one row at a time:

# %%
def stable_softmax_loops(z: torch.Tensor) -> torch.Tensor:
    """Stable softmax of each row of a (T, S) matrix, written out."""
    T, S = z.shape
    out = torch.zeros(T, S)
    for t in range(T):
        m = max(z[t, j].item() for j in range(S))  # this row's maximum
        exps = [math.exp(z[t, j].item() - m) for j in range(S)]  # each <= 1
        total = sum(exps)  # >= 1
        for j in range(S):
            out[t, j] = exps[j] / total
    return out


rows = torch.tensor([[100.0, 101.0, 102.0], [-1000.0, -1001.0, -1002.0], [0.0, 1.0, 2.0]])
print(stable_softmax_loops(rows))

# %% [markdown]
# All three rows give the same weights, as they should: the rows differ only by a constant. Vectorised,
# the maximum is taken along the softmax axis with `keepdim=True`, so that the `(T, 1)` maxima broadcast
# against the `(T, S)` scores:

# %%
def stable_softmax(z: torch.Tensor, dim: int = -1) -> torch.Tensor:
    shift = z.amax(dim=dim, keepdim=True)  # (T, 1): one maximum per row
    exps = torch.exp(z - shift)  # (T, S), every entry in (0, 1]
    return exps / exps.sum(dim=dim, keepdim=True)  # (T, S), rows sum to 1


print("shift.shape", tuple(rows.amax(dim=-1, keepdim=True).shape))
print(stable_softmax(rows))
torch.testing.assert_close(stable_softmax(rows), stable_softmax_loops(rows))
torch.testing.assert_close(stable_softmax(rows), softmax(rows))  # course_utils
torch.testing.assert_close(stable_softmax(rows), torch.softmax(rows, dim=-1))
print("loops, vectorised, course_utils.attention.softmax and torch.softmax agree")

# %% [markdown]
# `torch.softmax` does the same subtraction inside, which is why you should call it (or
# `course_utils.attention.softmax`) rather than `exp(...) / sum`. One detail matters: the maximum must be
# **per row**. Subtracting the maximum of the whole tensor is still correct algebra, but a row that sits
# far below the global maximum then underflows to `0 / 0`:

# %%
rows_far_apart = torch.tensor([[60.0, 61.0, 62.0], [-60.0, -59.0, -58.0]])
global_shift = torch.exp(rows_far_apart - rows_far_apart.max())
print("global max:", global_shift / global_shift.sum(dim=-1, keepdim=True))
print("row max:   ", stable_softmax(rows_far_apart))

# %% [markdown]
# ## 4. Scaled dot-product attention, loops to one line
#
# Put together: scores `q k^T`, scaled by `1 / sqrt(D)`, a stable softmax over the keys, then a weighted
# sum of the values. In the paper's notation
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V .$$
#
# Loops first, one query `i` and one key `j` at a time:

# %%
def scaled_attention_loops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """(T, D), (S, D), (S, Dv) -> out (T, Dv), weights (T, S)."""
    T, D = q.shape
    S, Dv = v.shape
    weights = torch.zeros(T, S)
    out = torch.zeros(T, Dv)
    for i in range(T):
        scores_i = torch.stack([torch.dot(q[i], k[j]) / math.sqrt(D) for j in range(S)])  # (S,)
        weights[i] = stable_softmax(scores_i, dim=-1)  # (S,)
        for j in range(S):
            out[i] += weights[i, j] * v[j]  # (Dv,)
    return out, weights


g = torch.Generator().manual_seed(3)
T, S, D, Dv = 4, 6, 16, 8
q, k, v = torch.randn(T, D, generator=g), torch.randn(S, D, generator=g), torch.randn(S, Dv, generator=g)
out_loops, weights_loops = scaled_attention_loops(q, k, v)
print("out", tuple(out_loops.shape), "weights", tuple(weights_loops.shape))
print("row sums of weights", weights_loops.sum(dim=-1).round(decimals=4))  # last bits depend on the CPU

# %% [markdown]
# Vectorised, for any number of leading batch dimensions `(..., T, D)`. Transpose the last two axes of
# `k` with `k.transpose(-2, -1)`: `k.T` would reverse *all* axes of a batched tensor.

# %%
def scaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """(..., T, D), (..., S, D), (..., S, Dv) -> out (..., T, Dv), weights (..., T, S)."""
    D = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (..., T, D) @ (..., D, S) -> (..., T, S)
    weights = stable_softmax(scores, dim=-1)  # (..., T, S): over the keys
    return weights @ v, weights  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)


out, weights = scaled_attention(q, k, v)
torch.testing.assert_close(out, out_loops)
torch.testing.assert_close(weights, weights_loops)
print("vectorised matches loops; out", tuple(out.shape))

# %% [markdown]
# The same function, unchanged, on a batch of `B = 2` sequences with `H = 3` heads, against
# `course_utils.attention.scaled_dot_product_attention` and PyTorch's
# `torch.nn.functional.scaled_dot_product_attention` (which returns only `out`):

# %%
from course_utils.attention import scaled_dot_product_attention


def max_abs_error(a: torch.Tensor, b: torch.Tensor) -> str:
    err = (a - b).abs().max().item()
    return "< 1e-6" if err < 1e-6 else f"{err:.1e}"


g = torch.Generator().manual_seed(4)
B, H, T, S, D = 2, 3, 5, 7, 16
q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (T, S, S))
out, weights = scaled_attention(q, k, v)
out_cu, weights_cu = scaled_dot_product_attention(q, k, v)
out_torch = F.scaled_dot_product_attention(q, k, v)
print("out", tuple(out.shape), "weights", tuple(weights.shape))
torch.testing.assert_close(out, out_cu)
torch.testing.assert_close(weights, weights_cu)
torch.testing.assert_close(out, out_torch)
print("vs course_utils: max abs error", max_abs_error(out, out_cu))
print("vs F.scaled_dot_product_attention: max abs error", max_abs_error(out, out_torch))

# %% [markdown]
# ## 5. Explore: head size, scale and the entropy of the weights
#
# Which scale keeps attention in a useful regime as heads get bigger? Below, `q` and `k` are random
# `(T, D)` and `(S, D)` with `T = S = 32`, and we measure the mean entropy of the weights for three
# choices of scale. Uniform weights over 32 keys have entropy `log 32 = 3.47`; one-hot weights have 0.
#
# - **none**: scores have variance `D`; as `D` grows, attention collapses towards one-hot.
# - **1 / sqrt(D)**: variance 1 for every `D`; the entropy does not depend on the head size.
# - **1 / D**: variance `1 / D`; scores shrink to 0 and attention melts into a plain average.

# %%
SCALINGS = {"none": lambda D: 1.0, "1/sqrt(D)": lambda D: D**-0.5, "1/D": lambda D: 1.0 / D}


def random_weights(D: int, scaling: str, T: int = 32, n: int = 8, seed: int = 0) -> torch.Tensor:
    """Attention weights (n, T, T) of random unit-variance q, k of size D under one scaling."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, T, D, generator=g)  # (n, T, D)
    k = torch.randn(n, T, D, generator=g)  # (n, S, D), S = T
    return torch.softmax(q @ k.transpose(-2, -1) * SCALINGS[scaling](D), dim=-1)  # (n, T, S)


mean_entropy = {name: [entropy(random_weights(D, name)).mean().item() for D in dims] for name in SCALINGS}
print("   D " + "".join(f"{name:>12}" for name in SCALINGS))
for i, D in enumerate(dims):
    print(f"{D:4d} " + "".join(f"{mean_entropy[name][i]:12.3f}" for name in SCALINGS))

# %% [markdown]
# The same numbers as pictures, at `D = 256`: first 8 queries over 32 keys for each scale (colours capped
# at 0.5; uniform attention is a pale `1/32 = 0.03` everywhere).

# %%
fig, axes = plt.subplots(3, 1, figsize=(7, 4.6), sharex=True)
for ax, name in zip(axes, SCALINGS):
    w = random_weights(256, name)[0, :8]  # (8, 32)
    ax.imshow(w, cmap="Blues", vmin=0, vmax=0.5)
    ax.set_title(f"scale {name}: mean entropy {entropy(random_weights(256, name)).mean().item():.2f}", fontsize=9)
    ax.set_ylabel("query")
axes[-1].set_xlabel("key")
fig.tight_layout()
plt.show()

# %% [markdown]
# `plot_entropy` from `course_utils.widgets` puts one choice in context: its weights on the left (the same
# random `q` and `k` as `random_weights` above), and on the right the entropy curves of all three scales
# over the head sizes of the table, with a red star for the chosen one. The dotted line is uniform
# attention, `log 32`.

# %%
from course_utils.widgets import entropy_explorer, plot_entropy

fig = plot_entropy(256, "1/sqrt(D)")
print(fig.axes[1].get_title(), "| the table above:", f"{mean_entropy['1/sqrt(D)'][dims.index(256)]:.2f}")
plt.show()

# %% [markdown]
# Try it: pick a head size and a scale (the widget needs a running kernel). With `none`, the star slides
# down the curve as `D` grows; with `1/sqrt(D)` it stays put; with `1/D` it climbs to the dotted line.

# %%
# NBVAL_IGNORE_OUTPUT
entropy_explorer()

# %% [markdown]
# ## 6. Pitfalls found in the wild
#
# > **Pitfall 1: scaling by the model width `C` instead of the head size `D`.**
# > The code of Karpathy's lecture *Let's build GPT* computes, inside one attention head,
# > `B, T, C = x.shape` and then `wei = q @ k.transpose(-2, -1) * C**-0.5`. There `C` is `n_embd = 384`,
# > the width of `x`, while `q` and `k` have only `head_size = 64` entries. The line has been copied
# > into many repositories since. Shape letters with two meanings make this easy to miss; in this
# > course `C` is always `embed_dim` and `D` always `head_dim`.
#
# What does it do? The score variance is `D / C = 64 / 384 = 1/6` instead of 1, so the head starts
# with its scores shrunk by `sqrt(6) = 2.45` and its weights closer to uniform.

# %%
g = torch.Generator().manual_seed(5)
B, T, C, D = 8, 32, 384, 64
x = torch.randn(B, T, C, generator=g)  # (B, T, C)
w_q = torch.randn(C, D, generator=g) / math.sqrt(C)  # (C, D), keeps q's entries at variance ~1
w_k = torch.randn(C, D, generator=g) / math.sqrt(C)
q, k = x @ w_q, x @ w_k  # (B, T, C) @ (C, D) -> (B, T, D)
scores = q @ k.transpose(-2, -1)  # (B, T, T)
print(f"q.shape {tuple(q.shape)}, Var(q) = {q.var().item():.2f}")
for label, scale in (("head_dim D = 64  ", D**-0.5), ("embed_dim C = 384", C**-0.5)):
    w = torch.softmax(scores * scale, dim=-1)
    print(f"scale by {label}: score variance {(scores * scale).var().item():.2f}, "
          f"mean entropy {entropy(w).mean().item():.2f} (uniform: {math.log(T):.2f}), "
          f"mean max weight {w.amax(dim=-1).mean().item():.3f}")

# %% [markdown]
# The model still trains (it can learn larger `w_q`, `w_k` to make up for it), so nothing crashes and
# the bug goes unnoticed; but the head starts at a different temperature than the one the
# `1 / sqrt(D)` argument chose, and the temperature changes whenever you change the number of heads.
#
# > **Pitfall 2: the softmax over the wrong axis.**
# > Scores are `(..., T, S)`: queries on the second-to-last axis, keys on the last. Each *query* must
# > share out its attention over the keys, so the softmax runs over `dim=-1`. `dim=0`, `dim=1` or `dim=-2`
# > run without an error (the shape is the same) and silently normalise over the queries instead.

# %%
g = torch.Generator().manual_seed(6)
scores = torch.randn(2, 3, 4, generator=g)  # (B, T, S) = (2, 3, 4)
right = torch.softmax(scores, dim=-1)
wrong = torch.softmax(scores, dim=1)  # looks like "rows", is the query axis
print("dim=-1: sums over keys   ", right.sum(dim=-1)[0].round(decimals=4))  # rounded, as every sum of
print("dim=1:  sums over keys   ", wrong.sum(dim=-1)[0].round(decimals=4))  # floats: the last bits depend
print("dim=1:  sums over queries", wrong.sum(dim=1)[0].round(decimals=4))   # on the CPU

# %% [markdown]
# With `dim=1`, a query's weights no longer sum to 1 (here they range from well below to well above 1),
# so its output is not an average of the values any more. A one-line test catches it:
# `assert_close(weights.sum(-1), ones)`. In a causal model (notebook 03: query `i` may only see keys
# `j <= i`) the mistake is worse than wrong numbers. Each key's column is normalised over all the
# queries, later ones included, so an early query's output depends on tokens it is not allowed to see.
# Change only the last query and watch the first output:

# %%
g = torch.Generator().manual_seed(8)
T, D = 4, 8
q, k, v = (torch.randn(T, D, generator=g) for _ in range(3))
allowed = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): True on and below the diagonal


def causal_out(q, k, v, dim):
    scores = (q @ k.T / math.sqrt(D)).masked_fill(~allowed, float("-inf"))  # (T, T)
    return torch.softmax(scores, dim=dim) @ v  # (T, D)


q_changed = q.clone()
q_changed[-1] += 1.0  # the last token's query, which the first token must never see
for dim in (-1, -2):
    change = (causal_out(q, k, v, dim)[0] - causal_out(q_changed, k, v, dim)[0]).abs().max().item()
    print(f"softmax dim={dim:2d}: output 0 changes by {change:.4f}")

# %% [markdown]
# ## 7. Check against `course_utils`
#
# Our inline versions against the course package, on a fresh batch that includes the large-logit rows:

# %%
g = torch.Generator().manual_seed(7)
z = torch.cat([torch.randn(3, 5, generator=g), torch.tensor([[100.0, 101.0, 102.0, 99.0, 98.0]])])  # (4, 5)
torch.testing.assert_close(stable_softmax(z), softmax(z))
assert not softmax(z).isnan().any()
q, k, v = torch.randn(2, 4, 8, generator=g), torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 3, generator=g)
for ours, theirs in zip(scaled_attention(q, k, v), scaled_dot_product_attention(q, k, v)):
    torch.testing.assert_close(ours, theirs)
print("stable_softmax and scaled_attention match course_utils")

# %% [markdown]
# ## Exercises
#
# Write each function, then run its cell: the check says **passed**, or names the mistake it recognises
# with a hint (`check(..., hint=2)` shows the exact fix). Inputs are float32 tensors and so are the
# results; leave the inputs unchanged. The checks also draw fresh inputs of other sizes.
#
# **02.1 A stable softmax.** Write `stable_softmax(x, dim=-1)` without `torch.softmax`: subtract the
# maximum along `dim`, exponentiate, divide by the sum along `dim`. It must work for logits around 100,
# for rows of very different sizes, and for any `dim`.

# %%
from course_utils.exercises import NotAttempted, check


def stable_softmax(x, dim=-1):
    ### BEGIN SOLUTION
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


check("02.1", stable_softmax)

# %% [markdown]
# **02.2 Scaled dot-product attention.** Write `my_scaled_attention(q, k, v)` for `q (..., T, D)`,
# `k (..., S, D)`, `v (..., S, Dv)`, returning `(out, weights)` with `out (..., T, Dv)` and
# `weights (..., T, S)`. Use `torch.softmax`.

# %%
def my_scaled_attention(q, k, v):
    ### BEGIN SOLUTION
    D = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (..., T, S)
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, Dv), (..., T, S)
    ### END SOLUTION


check("02.2", my_scaled_attention)

# %% [markdown]
# **02.3 One head, scaled by its head size.** Write `head_attention(x, w_q, w_k, w_v)` for
# `x (B, T, C)` and projection matrices `w_q, w_k, w_v` of shape `(C, D)`: project `x` to `q, k, v`,
# then self-attention with the right scale. Return `out (B, T, D)`. (This is Pitfall 1: the checks use
# `C != D`.) Note the layout: these matrices are `(C, D)`, as in the cells above, so `x @ w_q` projects;
# the `nn.Linear` layout `(D, C)` of exercise 01.4 would need `x @ w_q.T` (with `C != D` the wrong one
# fails with a shape error).

# %%
def head_attention(x, w_q, w_k, w_v):
    ### BEGIN SOLUTION
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, T, C) @ (C, D) -> (B, T, D)
    D = w_q.shape[-1]  # the head size, not x.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) * D**-0.5, dim=-1)  # (B, T, T)
    return weights @ v  # (B, T, D)
    ### END SOLUTION


check("02.3", head_attention)

# %% [markdown]
# **02.4 Entropy of attention weights.** Write `attention_entropy(weights)`: for weights `(..., T, S)`
# return the entropy of each query's weights in nats, `H = -sum_j w_j log w_j`, shape `(..., T)`.
# Weights can be exactly 0 (a masked key, or a one-hot row), and `0 * log 0` must count as 0.
# Hint: `torch.special.xlogy`.

# %%
def attention_entropy(weights):
    ### BEGIN SOLUTION
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
    ### END SOLUTION


check("02.4", attention_entropy)

# %% [markdown]
# ## Summary
#
# - For random `q`, `k` with unit-variance entries, `Var(q . k) = D`. Dividing by `sqrt(D)` makes it 1
#   for every head size; dividing by `D` makes it `1 / D`, so big heads attend uniformly.
# - Large scores push the softmax to one-hot, and its Jacobian `diag(w) - w w^T` to zero: the head stops
#   learning. That is what the scale prevents at initialisation.
# - Compute softmax as `exp(z - max) / sum exp(z - max)`, with the maximum taken per row along the softmax
#   axis. `exp(z) / sum exp(z)` gives `nan` for logits near 100 in float32 (and for very negative ones).
# - `scaled_dot_product_attention(q, k, v)` = `softmax(q k^T / sqrt(D), dim=-1) v`; ours matches
#   `course_utils` and `F.scaled_dot_product_attention`.
# - Scale by the **head size** `D`, not the model width `C`; softmax over the **keys** (`dim=-1`).
#
# Next, notebook 03 adds masks: which keys each query may see.
#
# ## Further reading
#
# - Vaswani et al. (2017), *Attention Is All You Need*, section 3.2.1 "Scaled Dot-Product Attention",
#   with the variance argument in its footnote.
# - Goodfellow, Bengio and Courville (2016), *Deep Learning*, section 4.1 "Overflow and Underflow", which
#   uses the softmax as its example of the max-subtraction trick.
# - Milakov and Gimelshein (2018), *Online normalizer calculation for softmax*: computing the maximum and
#   the sum in one pass, the idea FlashAttention builds on.
# - Zhai et al. (2023), *Stabilizing Transformer Training by Preventing Attention Entropy Collapse*: what
#   happens when trained attention logits grow and the entropy falls towards 0.
# - Yang et al. (2022), *Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter
#   Transfer* (muP), which argues for `1 / D` instead of `1 / sqrt(D)` once `q` and `k` become correlated
#   during training.
# - PyTorch documentation of `torch.nn.functional.scaled_dot_product_attention`.
