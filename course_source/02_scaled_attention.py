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
# - what large scores do to the softmax, and to the gradient that reaches `q` and `k`: not less of it on
#   average, but nearly all of it on a few queries;
# - what real initialisations give (not unit variance), and what the scale really guarantees;
# - how to write a softmax that does not overflow (subtract the row maximum), and what happens if you don't;
# - `scaled_dot_product_attention`, from loops to one line, checked against PyTorch's own;
# - two bugs found in widely copied code: scaling by `embed_dim` instead of `head_dim`, and the softmax
#   over the wrong axis.
#
# **Prerequisites:** notebook 01 (dot-product attention, `q`, `k`, `v`, scores and weights).
# Basic probability helps: mean, variance, independence.
#
# **Time:** about 60 minutes. **Runs on:** a CPU, in a few seconds.
#
# Shapes use the course alphabet: `B` batch, `T` queries, `S` keys, `C` embed_dim (model width),
# `H` heads, `D` head_dim.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.environment import setup_notebook

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device {device} (this notebook runs on the CPU)")

# %% [markdown]
# ## 1. Dot products grow with the dimension
#
# Take a query `q` and a key `k` with `D` entries each, every entry drawn independently with mean 0 and
# variance 1. (Unit variance keeps the algebra clean; section 1b measures what initialisation gives.)
# Their score is `q . k = q_1 k_1 + ... + q_D k_D`.
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
# Now `N` pairs at once, as rows of two `(N, D)` matrices: the scores are `(q * k).sum(-1)`, shape `(N,)`.

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
# The unscaled variance follows the dotted line `Var = D`; the scaled one stays at 1. With `D = 64` (a
# typical head size) unscaled scores have a standard deviation of 8, so two keys' scores easily differ by
# 20, which matters because of what the softmax does next (section 2).
#
# The 1 itself is not the point. With entry variances `Var(q_i)` and `Var(k_i)`, the same sum gives
# `Var(q . k / sqrt(D)) = Var(q_i) Var(k_i)`, the same for a head of 8 channels and one of 1024. That is
# what the scale guarantees: the distribution of the scores, and with it how peaked the softmax is
# (section 5), does not depend on the head size.
#
# ### 1b. What initialisation really gives
#
# A projection `q = x @ W_Q.T` (weights stored `(D, C)`, `(out, in)`, as in `nn.Linear`) does not give
# unit-variance entries. `nn.Linear`'s default draws each weight uniformly from `(-1/sqrt(C), 1/sqrt(C))`,
# of variance `1 / (3C)`; an entry of `q` sums `C` such terms, so `Var(q) = Var(x) / 3` and, for
# `Var(x) = 1`, the scaled scores have variance about `1/9`. GPT-2, nanoGPT and the course's GPT
# (`course_utils.gpt`) draw weights from `N(0, 0.02^2)`: `Var(q) = C * 0.02^2 * Var(x)`, 0.15 for
# `C = 384`, and scaled scores of variance about `0.15^2 = 0.02`. Measured on unit-variance tokens (what a
# LayerNorm hands to attention at initialisation: each token's vector rescaled to mean 0 and variance 1,
# then a learned gain and bias that start at 1 and 0; notebook 10 builds it):

# %%
g = torch.Generator().manual_seed(9)
B, T, C, D = 8, 64, 384, 64  # nanoGPT's Shakespeare model: embed_dim 384, 6 heads of 64
x = torch.randn(B, T, C, generator=g)  # (B, T, C), unit-variance entries
torch.manual_seed(29)  # the layers' seed; the same seed as x's generator would make the weights a copy of x
default_q, default_k = nn.Linear(C, D, bias=False), nn.Linear(C, D, bias=False)  # weights (D, C)
gpt_q, gpt_k = nn.Linear(C, D, bias=False), nn.Linear(C, D, bias=False)
for layer in (gpt_q, gpt_k):
    nn.init.normal_(layer.weight, mean=0.0, std=0.02)  # GPT-2's init, as course_utils.gpt does it
print(f"Var(x) = {x.var().item():.2f}; uniform weights over T = {T} keys would all be 1/T = {1 / T:.3f}")
with torch.no_grad():
    for name, (w_q, w_k) in {"nn.Linear default": (default_q, default_k), "N(0, 0.02^2)": (gpt_q, gpt_k)}.items():
        q, k = w_q(x), w_k(x)  # x @ W.T: (B, T, C) -> (B, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, T, T)
        print(f"{name:18s} Var(q) {q.var().item():.2f}  Var(k) {k.var().item():.2f}  "
              f"Var(scores) {scores.var().item():.3f}  "
              f"mean largest weight {torch.softmax(scores, dim=-1).amax(dim=-1).mean().item():.3f}")

# %% [markdown]
# Both start far below variance 1, with a softmax close to uniform (mean largest weights 0.033 and 0.022,
# against `1/64 = 0.016` for uniform weights); training grows the scores from there.
#
# The derivation also assumed `q` and `k` **independent** (the paper's footnote says so). In
# self-attention both come from the same tokens: `q_i = W_Q x_i`, `k_j = W_K x_j`. For two different tokens
# that holds at initialisation, but a token's score with *itself* uses `x_i` twice. Below, 16 heads of size
# 64 with independent `W_Q`, `W_K` (`Var(q) = 1`) score 4096 pairs of tokens; the last line ties
# `W_K = W_Q`, which nothing forbids training from approaching:

# %%
g = torch.Generator().manual_seed(10)
N, C, D, H = 4096, 384, 64, 16  # 4096 pairs of tokens, 16 heads of size 64
x, y = torch.randn(N, C, generator=g), torch.randn(N, C, generator=g)  # (N, C) each, independent tokens
W_q = torch.randn(H * D, C, generator=g) / math.sqrt(C)  # (H*D, C): 16 heads' W_Q stacked, Var(q) = 1
W_k = torch.randn(H * D, C, generator=g) / math.sqrt(C)


def head_scores(a, b, w_a, w_b):
    """Scaled score of a's query against b's key, in each head: (N, C), (N, C) -> (N, H)."""
    q = (a @ w_a.T).view(N, H, D)  # (N, C) @ (C, H*D) -> (N, H, D)
    k = (b @ w_b.T).view(N, H, D)
    return (q * k).sum(dim=-1) / math.sqrt(D)  # (N, H)


pairs = {"two different tokens": head_scores(x, y, W_q, W_k),
         "a token with itself": head_scores(x, x, W_q, W_k),
         "a token with itself, W_K = W_Q": head_scores(x, x, W_q, W_q)}
for name, s in pairs.items():
    print(f"{name:31s} mean {round(s.mean().item(), 1) + 0.0:4.1f}  variance {s.var().item():.2f}")

# %% [markdown]
# At initialisation the shared `x_i` hardly matters (in expectation it adds `2 / C` to the variance, 0.005
# here, less than the sampling noise). But once `W_Q` and `W_K` are correlated, a token's score with itself
# is no longer centred on 0: with `W_K = W_Q` it is `|q_i|^2 / sqrt(D)`, of mean `sqrt(D) = 8`, growing
# with the head size again (notebook 01's `x @ x.T` is the extreme case). The variance argument describes
# the start of training, not all of it.

# %% [markdown]
# ## 2. Large scores saturate the softmax
#
# Multiply one query's scores over `S = 8` keys by a growing factor: the weights go from almost uniform
# (`1/8` each) to almost one-hot. We measure the largest weight and the **entropy**
# `H = -sum_j w_j log w_j`: `log(8) = 2.08` for uniform weights, 0 for one-hot.

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
# Unscaled scores with `D = 100` have a standard deviation of 10, like unit-variance scores times 10: more
# than half the weight sits on one key. At a factor of 100 (`D = 10,000`) the softmax is a hard `argmax`.
#
# ### The Jacobian shrinks; the gradient concentrates
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
# When `w` is one-hot, `diag(w) = w w^T` and `J` is zero: nudging any score changes no weight. The plot
# shows the Frobenius norm of `J`, averaged over 256 random logit vectors of length 8, as the factor grows.

# %%
g = torch.Generator().manual_seed(2)
many_logits = torch.randn(256, 8, generator=g)  # 256 rows of S = 8 logits
factors = torch.logspace(-1, 2, 31)
jac_norm = [softmax_jacobian(f * many_logits).norm(dim=(-2, -1)).mean().item() for f in factors]

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.semilogx(factors, jac_norm)
ax.set_xlabel("factor multiplying the logits")
ax.set_ylabel("norm of softmax Jacobian")
ax.set_title("Saturated softmax, vanishing Jacobian", fontsize=10)
plt.show()

# %% [markdown]
# The norm rises at first (the softmax is most sensitive when a few keys compete), then falls past a
# factor of a few, and at 100 it is almost 0.
#
# ### What reaches `q` and `k`
#
# Does unscaled attention then learn nothing? The gradient reaching query `i` is
# `dL/dq_i = scale * sum_j (dL/dscore_ij) k_j`: a mix of keys each about `sqrt(D)` long, times the scale,
# which is 1 instead of `1 / sqrt(D)` when unscaled and makes up for a lot of Jacobian. So measure what
# arrives, query by query: `D = 1024`, `S = 32` keys, `T = 32` queries in each of 64 random draws, random
# values `v`, and a random upstream gradient `grad_out` standing in for `dL/d(out)`.

# %%
def grad_norms(q, k, v, grad_out, scale):
    """Norm of the gradient of attention for each query and each key, by autograd: -> (n, T), (n, S)."""
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)  # (n, T, S)
    (weights @ v).backward(grad_out)  # (n, T, Dv): grad_out plays dL/d(out)
    return q.grad.norm(dim=-1), k.grad.norm(dim=-1)  # (n, T), (n, S)


g = torch.Generator().manual_seed(12)
n, T, S, D = 64, 32, 32, 1024
q, k, v = (torch.randn(n, m, D, generator=g) for m in (T, S, S))  # (n, T, D), (n, S, D), (n, S, Dv)
grad_out = torch.randn(n, T, D, generator=g)  # (n, T, Dv)
norms = {"none": grad_norms(q, k, v, grad_out, 1.0), "1/sqrt(D)": grad_norms(q, k, v, grad_out, D**-0.5)}
print("grad_q norms", tuple(norms["none"][0].shape), " grad_k norms", tuple(norms["none"][1].shape))
print("scale     gradient   mean  median     max  below 0.1  largest 10% carry")
for name, per_position in norms.items():
    for what, norm in zip(("per query", "per key"), per_position):
        flat = norm.flatten()  # 2048 queries, or 2048 keys
        share = flat.topk(len(flat) // 10).values.sum() / flat.sum()
        print(f"{name:9s} {what:9s} {flat.mean().item():6.2g} {flat.median().item():7.2g} {flat.max().item():7.2g} "
              f"{(flat < 0.1).float().mean().item():10.0%} {share.item():11.0%} of the total")

# %% [markdown]
# Unscaled, the *average* gradient is larger than scaled, so "no gradient flows" is wrong; its
# distribution is what goes wrong. The median query gets almost nothing, about half get less than 0.1, and
# the largest tenth take most of the total; scaled, every query gets about the same. The keys split the
# same way, a little less extremely (each collects from all 32 queries). Histograms (values below `1e-12`,
# zeros included, drawn at `1e-12`):

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
bins = torch.logspace(-12, 4, 49)
for ax, i, what in zip(axes, (0, 1), ("query", "key")):
    for name, per_position in norms.items():
        ax.hist(per_position[i].flatten().clamp_min(1e-12), bins=bins, alpha=0.6, label=f"scale {name}")
    ax.set_xscale("log")
    ax.set_xlabel(f"gradient norm, per {what}")
axes[0].set_ylabel("count (of 2048)")
axes[0].legend()
fig.suptitle("D = 1024, 32 keys: where the gradient goes", fontsize=10)
plt.show()

# %% [markdown]
# Which queries get the large updates? Those whose two best keys nearly tie, so that the softmax has a
# choice to make. The unscaled scores spread about 32 (`sqrt(1024)`); the gap between the two best scores,
# for the tenth of the queries with the largest gradients and for the rest:

# %%
scores = q @ k.transpose(-2, -1)  # (n, T, S), unscaled
best_two = scores.topk(2, dim=-1).values  # (n, T, 2)
gap = (best_two[..., 0] - best_two[..., 1]).flatten()  # how far each query's winner is ahead
gq = norms["none"][0].flatten()
largest = gq >= gq.quantile(0.9)
print(f"spread of the scores (std): {scores.std().item():.0f}")
print(f"gap between the two best keys, median: {gap[largest].median().item():.0f} for the 10% of queries with the "
      f"largest gradients, {gap[~largest].median().item():.0f} for the rest")

# %% [markdown]
# So without the scale, learning at `D = 1024` is a lottery: which queries learn is decided by which
# happen to have two keys within a point or so of each other, out of scores that spread 32. A few get
# updates up to about 200 times a typical scaled one, most almost none, and the bigger the head the worse.
#
# That is what `1 / sqrt(D)` is for. It neither makes more gradient flow nor gives the scores variance 1
# (section 1b); it makes attention at initialisation look the same at every head size: the scores'
# distribution, the softmax's entropy (section 5) and the spread of the gradients stop depending on `D`.

# %% [markdown]
# ## 3. A softmax that does not overflow
#
# The textbook formula `exp(z_j) / sum_k exp(z_k)` is `course_utils.attention.softmax_naive`. In float32,
# `exp(x)` overflows to `inf` above about 88.7, and `inf / inf` is `nan`. Scores of 100 come from an
# unscaled head of size 10,000, or a trained model whose logits have grown.

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
# so the softmax is **shift invariant**: adding one number to every score of a row changes no weight.
# Choose `c = max_k z_k`: every exponent is `<= 0` (no overflow) and the largest is `e^0 = 1`, so the sum
# is at least 1 (no `0 / 0`). Loops first, one row at a time:

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
# The three rows differ only by a constant, so they give the same weights. Vectorised, the maximum is
# taken along the softmax axis with `keepdim=True`, so that the `(T, 1)` maxima broadcast against the
# `(T, S)` scores:

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
# `torch.softmax` does the same subtraction inside: call it (or `course_utils.attention.softmax`), not
# `exp(...) / sum`. The maximum must be **per row**: the maximum of the whole tensor is still correct
# algebra, but a row far below it underflows to `0 / 0`:

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
# The same function on `B = 2` sequences of `H = 3` heads, against
# `course_utils.attention.scaled_dot_product_attention` and PyTorch's
# `F.scaled_dot_product_attention` (which returns only `out`):

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
# Which scale keeps attention useful as heads get bigger? Below, `q` and `k` are random `(T, D)` and
# `(S, D)` with `T = S = 32`, and we measure the mean entropy of the weights under three scales. Uniform
# weights over 32 keys have entropy `log 32 = 3.47`; one-hot weights have 0.
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
# The same numbers as pictures, at `D = 256`: 8 queries over 32 keys for each scale (one colour scale,
# capped at 0.5; uniform attention is a pale `1/32 = 0.03` everywhere).

# %%
fig, axes = plt.subplots(3, 1, figsize=(7.6, 4.6), sharex=True, layout="constrained")
for ax, name in zip(axes, SCALINGS):
    w = random_weights(256, name)[0, :8]  # (8, 32)
    image = ax.imshow(w, cmap="Blues", vmin=0, vmax=0.5)
    ax.set_title(f"scale {name}: mean entropy {entropy(random_weights(256, name)).mean().item():.2f}", fontsize=9)
    ax.set_ylabel("query")
axes[-1].set_xlabel("key")
fig.colorbar(image, ax=axes, label="weight (capped at 0.5)")  # one bar: the three panels share one scale
plt.show()

# %% [markdown]
# `plot_entropy` from `course_utils.widgets` puts one choice in context: its weights on the left (the same
# `q` and `k` as `random_weights`), and on the right the entropy curves of all three scales, with a red
# star for the chosen one. The dotted line is uniform attention, `log 32`.

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
# > The code of Karpathy's lecture *Let's build GPT* (repository `karpathy/ng-video-lecture`) computed,
# > inside each attention head, `B, T, C = x.shape` and then `wei = q @ k.transpose(-2,-1) * C**-0.5`.
# > That was right for one head as wide as the model. When the model was split into heads the line
# > stayed: in the final script `C` is `n_embd = 384`, the width of `x`, while each of the `n_head = 6`
# > heads has `q` and `k` of `head_size = 64` entries. A contributed fix ("scale by head size", merged in
# > January 2023) changed it to `k.shape[-1]**-0.5`, but earlier copies still carry the old line. In this
# > course `C` is always `embed_dim` and `D` always `head_dim`. (Notebook 04 shows the bug in a layer of
# > several heads.)
#
# Relative to `1 / sqrt(D)`, the scores shrink by `sqrt(C / D) = sqrt(6) = 2.45` and their variance by 6,
# whatever the initialisation: with unit-variance `q` and `k` the variance is `D / C = 1/6` instead of 1,
# and the weights are closer to uniform.

# %%
g = torch.Generator().manual_seed(5)
B, T, C, D = 8, 32, 384, 64
x = torch.randn(B, T, C, generator=g)  # (B, T, C)
w_q = torch.randn(D, C, generator=g) / math.sqrt(C)  # (D, C) as nn.Linear stores it; Var(q) about 1
w_k = torch.randn(D, C, generator=g) / math.sqrt(C)
q, k = x @ w_q.T, x @ w_k.T  # (B, T, C) @ (C, D) -> (B, T, D)
scores = q @ k.transpose(-2, -1)  # (B, T, T)
print(f"q.shape {tuple(q.shape)}, Var(q) = {q.var().item():.2f}")
for label, scale in (("head_dim D = 64  ", D**-0.5), ("embed_dim C = 384", C**-0.5)):
    w = torch.softmax(scores * scale, dim=-1)
    print(f"scale by {label}: score variance {(scores * scale).var().item():.2f}, "
          f"mean entropy {entropy(w).mean().item():.2f} (uniform: {math.log(T):.2f}), "
          f"mean max weight {w.amax(dim=-1).mean().item():.3f}")

# %% [markdown]
# The model still trains (it can learn larger `w_q`, `w_k`), so nothing crashes and the bug goes
# unnoticed; but the head starts at another temperature than the `1 / sqrt(D)` argument chose, and one
# that changes with the number of heads (`C / D`).
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
# With `dim=1`, a query's weights no longer sum to 1, so its output is not an average of the values. A
# one-line test catches it: `assert_close(weights.sum(-1), ones)`. In a causal model (notebook 03: query
# `i` sees only keys `j <= i`) it is worse: each key's column is normalised over all the queries, later
# ones included, so an early query's output depends on tokens it may not see. Change only the last query
# and watch the first output:

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
# Our inline versions against the course package, on a fresh batch with large-logit rows, and our
# autograd `grad_norms` against `attention_grad_norms`, which writes the chain rule out:

# %%
from course_utils.attention import attention_grad_norms

g = torch.Generator().manual_seed(7)
z = torch.cat([torch.randn(3, 5, generator=g), torch.tensor([[100.0, 101.0, 102.0, 99.0, 98.0]])])  # (4, 5)
torch.testing.assert_close(stable_softmax(z), softmax(z))
assert not softmax(z).isnan().any()
q, k, v = torch.randn(2, 4, 8, generator=g), torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 3, generator=g)
for ours, theirs in zip(scaled_attention(q, k, v), scaled_dot_product_attention(q, k, v)):
    torch.testing.assert_close(ours, theirs)
grad_out = torch.randn(2, 4, 3, generator=g)  # (2, T, Dv)
for scale in (1.0, 8**-0.5):  # unscaled and 1 / sqrt(D): autograd against the chain rule written out
    for ours, theirs in zip(grad_norms(q, k, v, grad_out, scale), attention_grad_norms(q, k, v, grad_out, scale)):
        torch.testing.assert_close(ours, theirs)
print("stable_softmax, scaled_attention and grad_norms match course_utils")

# %% [markdown]
# ## Exercises
#
# Write each function, then run its cell: the check says **passed**, or names the mistake it recognises
# with a hint (`check(..., hint=2)` shows the exact fix). Inputs are float32 tensors and so are the
# results; leave the inputs unchanged. The checks also draw fresh inputs of other sizes.
#
# **02.1 A stable softmax.** *(8 min, core)*
# Write `stable_softmax(x, dim=-1)` without `torch.softmax`: subtract the
# maximum along `dim`, exponentiate, divide by the sum along `dim`. It must work for logits around 100,
# for rows of very different sizes, and for any `dim`. A row may hold `-inf` (a masked logit), never only `-inf`.

# %%
from course_utils.exercises import NotAttempted, check


# Inputs: `x` has entries up to 10000 in size; tensors may be non-contiguous views.
def stable_softmax(x, dim=-1):
    ### BEGIN SOLUTION
    exps = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


check("02.1", stable_softmax)

# %% [markdown]
# **02.2 Scaled dot-product attention.** *(8 min, core)*
# Write `my_scaled_attention(q, k, v)` for `q (..., T, D)`,
# `k (..., S, D)`, `v (..., S, Dv)`, returning `(out, weights)` with `out (..., T, Dv)` and
# `weights (..., T, S)`. Use `torch.softmax`.

# %%
# Inputs: `q`, `k`, `v` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous views.
def my_scaled_attention(q, k, v):
    ### BEGIN SOLUTION
    D = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (..., T, S)
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, Dv), (..., T, S)
    ### END SOLUTION


check("02.2", my_scaled_attention)

# %% [markdown]
# **02.3 One head, scaled by its head size.** *(8 min, core)*
# Write `head_attention(x, w_q, w_k, w_v)` for
# `x (B, T, C)` and projection matrices `w_q, w_k, w_v` of shape `(D, C)`: project `x` to `q, k, v`,
# then self-attention with the right scale. Return `out (B, T, D)`. (Pitfall 1: most checks use `C != D`.)
# The matrices are stored `(out, in) = (D, C)`, as in `nn.Linear` and exercise 01.4: `x @ w_q.T` projects.
# Tokens may line up strongly, with scores far past where `exp` overflows float32: use a stable softmax.

# %%
def head_attention(x, w_q, w_k, w_v):
    ### BEGIN SOLUTION
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (B, T, C) @ (C, D) -> (B, T, D)
    D = q.shape[-1]  # the head size, not x.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) * D**-0.5, dim=-1)  # (B, T, T)
    return weights @ v  # (B, T, D)
    ### END SOLUTION


check("02.3", head_attention)

# %% [markdown]
# **02.4 Entropy of attention weights.** *(8 min, core)*
# Write `attention_entropy(weights)`: for weights `(..., T, S)`
# return the entropy of each query's weights in nats, `H = -sum_j w_j log w_j`, shape `(..., T)`.
# Weights can be exactly 0 (a masked key, or a one-hot row), and `0 * log 0` must count as 0.
# Hint: `torch.special.xlogy`.

# %%
# Inputs: `weights` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous views.
def attention_entropy(weights):
    ### BEGIN SOLUTION
    return -torch.special.xlogy(weights, weights).sum(dim=-1)
    ### END SOLUTION


check("02.4", attention_entropy)

# %% [markdown]
# ## Summary
#
# - For random, independent `q`, `k` with unit-variance entries, `Var(q . k) = D`. Dividing by `sqrt(D)`
#   makes it 1 for every head size (`Var(q_i) Var(k_i)` in general); dividing by `D` makes it `1 / D`, so
#   big heads attend uniformly.
# - Initialisation gives less than unit variance: `Var(q) = Var(x) / 3` with `nn.Linear`'s default, far
#   less with GPT-2's `N(0, 0.02^2)`. A token's `q` and `k` share `x`: harmless at initialisation, not once
#   `W_Q` and `W_K` are correlated.
# - Large scores push the softmax to one-hot and its Jacobian `diag(w) - w w^T` to zero. Without the
#   scale the gradient reaching `q` and `k` is not smaller on average, but most queries get almost none
#   and the few whose best keys nearly tie get huge ones.
# - What `1 / sqrt(D)` buys: the scores' distribution, the softmax's entropy and the spread of the
#   gradients do not depend on the head size.
# - Compute softmax as `exp(z - max) / sum exp(z - max)`, the maximum taken per row along the softmax
#   axis; `exp(z) / sum exp(z)` gives `nan` for float32 logits near 100 (and very negative ones).
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
# - Milakov and Gimelshein (2018), *Online normalizer calculation for softmax*: the maximum and the sum in
#   one pass, which FlashAttention builds on.
# - Zhai et al. (2023), *Stabilizing Transformer Training by Preventing Attention Entropy Collapse*: trained
#   logits that grow until the entropy falls towards 0.
# - Yang et al. (2022), *Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter
#   Transfer* (muP), which argues for `1 / D` once `q` and `k` become correlated in training.
# - PyTorch documentation of `torch.nn.functional.scaled_dot_product_attention`.
