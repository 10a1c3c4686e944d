# %% [markdown]
# # 13 After softmax: linear attention as a memory, and how to make it forget and correct
#
# Notebook 07 closed with linear attention in brief: replace `exp(q · k)` by a product of features and causal
# attention becomes a recurrence with a `D × Dv` state, the same size at every step, where softmax attention
# keeps a KV cache that grows with every token. This notebook starts there, with the recurrence step by step and
# its state measured against the cache, then takes that state seriously as a **memory**:
# keys write values into it, queries read them out. Measured as a memory it has a capacity, and several recent
# models mix softmax layers with recurrent layers that repair it: **decay and gates** let the state forget
# (RetNet, gated linear attention, Mamba-2), and the **delta rule** lets it overwrite (DeltaNet, Gated
# DeltaNet). Last comes the **chunkwise** form that makes them fast to train.
#
# **What you will learn**
#
# - linear attention's recurrent step, with its normaliser, and its state of constant size against a growing
#   KV cache;
# - the state as an associative memory, and its capacity, measured: retrieval error against the number of
#   stored pairs per key dimension, beside softmax attention's cache;
# - forgetting with a fixed decay and a data-dependent gate, and the masked quadratic form where a decay
#   matrix replaces the causal mask;
# - the delta rule, which corrects the value stored under a key instead of adding to it;
# - the chunkwise-parallel form: the quadratic form inside a chunk, the state across chunks, and its cost.
#
# **Prerequisites**: notebooks 03 (masking) and 07 (the KV cache of section 1, linear attention in brief in
# section 7).
#
# **Time**: about 60 minutes. **Runs on**: CPU (the whole notebook takes a few seconds).
#
# **Shapes**: `B` batch, `H` num_heads, `T` sequence length, `D` the width of queries and keys, `Dv` of the
# values, `C` a chunk's length, `n` stored pairs. The state `S` is `(D, Dv)`: rows indexed by key features.

# %%
# NBVAL_IGNORE_OUTPUT
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.linear_attention import (
    chunkwise_cost,
    decay_mask,
    delta_rule_recurrent,
    delta_rule_step,
    elu_feature_map,
    gated_linear_attention,
    gated_linear_attention_chunk,
    gated_linear_attention_chunkwise,
    gated_linear_attention_prefix_states,
    gated_linear_attention_recurrent,
    gated_linear_attention_step,
    linear_attention_quadratic,
    linear_attention_recurrent,
    linear_attention_step,
)
from course_utils.variants import KVCache

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The state: write with keys, read with queries
#
# Softmax attention weighs key j by `exp(q_t · k_j / √D)`. Linear attention (Katharopoulos et al. 2020) weighs
# it by a product of features, `φ(q_t) · φ(k_j)` with `φ(x) = elu(x) + 1`, positive everywhere, and divides by
# the row's sum as softmax does. Since `(φ(q_t) · φ(k_j)) v_j = φ(q_t)ᵀ (φ(k_j) v_jᵀ)`, the query comes out of
# the sum over the keys `j <= t`:
#
# `out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t`, with `S_t = Σ_{j<=t} φ(k_j) v_jᵀ` (D × Dv) and `z_t = Σ_{j<=t} φ(k_j)` (D).
#
# Token by token, from zeros, that is a **recurrence**: add the token, `S_t = S_{t-1} + φ(k_t) v_tᵀ` and
# `z_t = z_{t-1} + φ(k_t)`, then read with the query: an RNN whose hidden state is a matrix.
# `linear_attention_step` is one step (Exercise 13.4). Run over the sequence, it agrees with the `(T, T)` form
# (notebook 03's masked attention with these weights); only the order of the sums differs:

# %%
g_la = torch.Generator().manual_seed(5)
q_la, k_la = (torch.randn(2, 12, 8, generator=g_la, dtype=torch.float64) for _ in range(2))  # (B, T, D)
v_la = torch.randn(2, 12, 6, generator=g_la, dtype=torch.float64)  # (B, T, Dv): the values may have another width
S_la, z_la = torch.zeros(2, 8, 6, dtype=torch.float64), torch.zeros(2, 8, dtype=torch.float64)  # (B, D, Dv), (B, D)
outs_la = []
for t in range(12):
    out_t, S_la, z_la = linear_attention_step(S_la, z_la, q_la[:, t], k_la[:, t], v_la[:, t])  # (B, Dv)
    outs_la.append(out_t)
recurrent_la = torch.stack(outs_la, dim=1)  # (B, T, Dv)
gap = (recurrent_la - linear_attention_quadratic(q_la, k_la, v_la)).abs().max().item()
print("recurrent steps vs the (T, T) form, float64, agree to 1e-12:", gap < 1e-12)
print("state", tuple(S_la.shape), "and normaliser", tuple(z_la.shape), "after 12 tokens")

# %% [markdown]
# **A state of constant size.** To generate token t, softmax attention reads a KV cache of t keys and values
# (notebook 09's `KVCache`); linear attention reads its state, the same `D × Dv` numbers at every step.
# Measured on one layer of 4 heads, `D = Dv = 16`, float32:

# %%
heads, D_m, steps = 4, 16, 256
cache = KVCache(num_layers=1, capacity=steps)  # allocates its capacity at once; each step reads the filled part
S_m, z_m = torch.zeros(1, heads, D_m, D_m), torch.zeros(1, heads, D_m)  # (B, H, D, Dv), (B, H, D)
cache_bytes, state_bytes = [], []
for _ in range(steps):
    q_t, k_t, v_t = (torch.randn(1, heads, 1, D_m, generator=g_la) for _ in range(3))  # (B, H, 1, D): one token
    keys, values = cache.update(0, k_t, v_t)  # (B, H, tokens so far, D): what softmax attention reads now
    cache_bytes.append(keys.nbytes + values.nbytes)
    _, S_m, z_m = linear_attention_step(S_m, z_m, q_t[:, :, 0], k_t[:, :, 0], v_t[:, :, 0])
    state_bytes.append(S_m.nbytes + z_m.nbytes)
print(f"after {steps} tokens: KV cache {cache_bytes[-1]:,} bytes, state {state_bytes[-1]:,} bytes "
      f"(after 1 token: {cache_bytes[0]:,} and {state_bytes[0]:,})")
print("the state is smaller from token", next(t + 1 for t in range(steps) if cache_bytes[t] > state_bytes[t]))

# %%
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(range(1, steps + 1), [b / 1024 for b in cache_bytes], label="KV cache (softmax attention)")
ax.plot(range(1, steps + 1), [b / 1024 for b in state_bytes], label="state + normaliser (linear attention)")
ax.set_xlabel("tokens generated")
ax.set_ylabel("KiB read per step (one layer)")
ax.legend()
plt.show()

# %% [markdown]
# The price: a sum of `D × Dv` numbers cannot hold every earlier key and value apart the way a cache does
# (section 2 measures how far), and the weights are not softmax's, so a model must be trained with them.
#
# The models of this notebook drop the normaliser (they put a normalisation layer after the output instead)
# and write the state as a recurrence, from `S_0 = 0`:
#
# `S_t = S_{t-1} + k_t v_tᵀ` (write), `out_t = S_tᵀ q_t` (read).
#
# The feature map, when there is one, is applied to q and k beforehand. A loop over t:

# %%
g = torch.Generator().manual_seed(0)
B, T, D, Dv = 2, 10, 8, 6
q, k, v = (torch.randn(B, T, n, generator=g) for n in (D, D, Dv))  # (B, T, D), (B, T, D), (B, T, Dv)
q, k = elu_feature_map(q), elu_feature_map(k)  # phi = elu + 1, as in notebook 07

S = torch.zeros(B, D, Dv)  # (B, D, Dv): nothing written yet
outs = []
for t in range(T):
    S = S + k[:, t, :, None] * v[:, t, None, :]  # (B, D, 1) * (B, 1, Dv) -> (B, D, Dv): write k_t v_t^T
    outs.append(torch.einsum("bd,bde->be", q[:, t], S))  # (B, Dv): read S_t^T q_t
plain = torch.stack(outs, dim=1)  # (B, T, Dv)
print("out", tuple(plain.shape), "state", tuple(S.shape))

# %% [markdown]
# Summed out, `out_t = Σ_{j<=t} (q_t · k_j) v_j`: attention whose weights are the raw scores, zero above
# the diagonal. That is the **masked quadratic form**, `((q kᵀ) ⊙ mask) v`:

# %%
quadratic = ((q @ k.transpose(-2, -1)) * torch.ones(T, T).tril()) @ v  # (B, T, T) @ (B, T, Dv) -> (B, T, Dv)
print("loop vs masked quadratic form, float32, agree to 1e-5:", torch.allclose(plain, quadratic, atol=1e-5, rtol=1e-5))

# %% [markdown]
# ## 2. The state as an associative memory, measured
#
# Read the state with a key it stored: `Sᵀ k_i = Σ_j (k_j · k_i) v_j = (k_i · k_i) v_i + Σ_{j≠i} (k_j · k_i) v_j`.
# With unit-length keys the first term is `v_i`; the rest is **crosstalk** from every other pair. If the keys
# are orthogonal the crosstalk is zero, but a `D`-dimensional space holds at most `D` orthogonal directions.
#
# The experiment: write `n` random pairs (random unit keys, Gaussian values) into a `(D, Dv)` state, read
# each back by its key, and measure the relative error `‖read − V‖ / ‖V‖` over all `n`. Beside it, softmax
# attention over the same `n` pairs kept in a cache, reading with the same keys. Its scores are multiplied by
# 100: a sharp softmax, which a trained model can learn through the size of its queries.

# %%
def random_pairs(n, D, Dv, seed):
    gen = torch.Generator().manual_seed(seed)
    keys = F.normalize(torch.randn(n, D, generator=gen, dtype=torch.float64), dim=-1)  # (n, D), unit length
    return keys, torch.randn(n, Dv, generator=gen, dtype=torch.float64)  # (n, Dv)


def relative_error(read, values):
    return (torch.linalg.norm(read - values) / torch.linalg.norm(values)).item()


D_mem, Dv_mem = 32, 32
keys, values = random_pairs(64, D_mem, Dv_mem, seed=1)
state = keys.T @ values  # (D, n) @ (n, Dv) -> (D, Dv): the sum of the n writes k_i v_i^T
read_linear = keys @ state  # (n, Dv): S^T k_i for every i at once
read_softmax = torch.softmax(100.0 * keys @ keys.T, dim=-1) @ values  # (n, n) @ (n, Dv): a cache of n pairs
print(f"n = 64 pairs, D = {D_mem}: linear state error {relative_error(read_linear, values):.2f}, "
      f"softmax cache error below 1e-6: {relative_error(read_softmax, values) < 1e-6}")

# %% [markdown]
# The crosstalk terms are sums of `n − 1` products of random unit vectors, each of variance `1 / D`, so the
# error is about `√((n − 1) / D)`: it grows with the number of pairs per key dimension, `n / D`. Over a range
# of `n`, averaged over 5 draws, with two more curves: orthonormal keys (possible only while `n <= D`), and
# the **best state there is**, the least-squares `S` that minimises `‖K S − V‖`. For `n > D` even it fails:
# the `n` reads `K S` lie in the `D`-dimensional column space of `K`, and `n` random values do not.

# %%
def capacity(ns, D, Dv, draws=5):
    rows = []
    for n in ns:
        err = {"additive": 0.0, "best state": 0.0, "softmax cache": 0.0}
        for seed in range(draws):
            K, V = random_pairs(n, D, Dv, seed)
            err["additive"] += relative_error(K @ (K.T @ V), V) / draws
            err["best state"] += relative_error(K @ torch.linalg.lstsq(K, V).solution, V) / draws
            err["softmax cache"] += relative_error(torch.softmax(100.0 * K @ K.T, dim=-1) @ V, V) / draws
        rows.append(err)
    return rows


ns = [4, 8, 16, 24, 32, 48, 64, 96, 128]
curves = capacity(ns, D_mem, Dv_mem)
Q_orth = torch.linalg.qr(torch.randn(D_mem, D_mem, generator=g, dtype=torch.float64)).Q  # (D, D) orthonormal
orth = []
for n in (8, 32):
    V = random_pairs(n, D_mem, Dv_mem, 0)[1]
    orth.append(relative_error(Q_orth[:n] @ (Q_orth[:n].T @ V), V))
print("orthonormal keys, n = 8 and n = D = 32, error below 1e-12:", all(e < 1e-12 for e in orth))
for n, err in zip(ns, curves):
    print(f"n/D = {n / D_mem:5.3f}: additive {err['additive']:.2f} (sqrt((n-1)/D) = {((n - 1) / D_mem) ** 0.5:.2f}), "
          f"best state {err['best state']:.2f}, softmax cache below 1e-6: {err['softmax cache'] < 1e-6}")

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
ratio = [n / D_mem for n in ns]
for name, style in (("additive", "o-"), ("best state", "s-"), ("softmax cache", "^-")):
    ax.plot(ratio, [c[name] for c in curves], style, label=name if name != "additive" else "linear attention state")
ax.axvline(1.0, color="grey", lw=0.8, ls=":")
ax.set_xlabel("stored pairs per key dimension, n / D")
ax.set_ylabel("relative retrieval error")
ax.legend()
plt.show()

# %% [markdown]
# So the sentence of section 1, "a sum of D × Dv numbers cannot hold every earlier key and value apart",
# has a number on it: with random keys, plain linear attention's error reaches 0.5 at `n ≈ D / 4` pairs and
# 1 (the size of the values themselves) at `n ≈ D`, while the cache retrieves exactly at every `n` measured,
# because its softmax is sharp enough: with the usual `1/√D` in place of the ×100, these nearly orthogonal
# keys give an almost flat softmax and an error above 0.7 at every `n`, 0.99 at `n = 128`. Two ways
# out follow: **forget** old pairs, so that fewer compete, and **write better**, closer to the best state.
#
# ## 3. Forgetting: a fixed decay and a data-dependent gate
#
# Multiply the state by a number `γ` in (0, 1] before each write (RetNet, Sun et al. 2023):
#
# `S_t = γ S_{t-1} + k_t v_tᵀ`.
#
# A pair written `a` steps ago is read back `γ^a` times as strong. Make the number depend on the token,
# `α_t`, computed from the input by the model (a sigmoid of a projection, say), and the model chooses when to
# forget. One number per token (per head) is Mamba-2's scalar gate (Dao and Gu 2024), the form built here:
#
# `S_t = α_t S_{t-1} + k_t v_tᵀ`, `out_t = S_tᵀ q_t`.
#
# Gated linear attention (Yang et al. 2023) gates finer: its `α_t` is a vector in (0, 1)^D, one number per
# key feature, and `S_t = diag(α_t) S_{t-1} + k_t v_tᵀ` forgets each row of the state at its own rate.

# %%
gate = torch.sigmoid(torch.randn(B, T, generator=g) + 2.0)  # (B, T): alpha_t in (0, 1), mostly near 0.9
S = torch.zeros(B, D, Dv)  # (B, D, Dv)
outs = []
for t in range(T):
    S = gate[:, t, None, None] * S + k[:, t, :, None] * v[:, t, None, :]  # forget, then write: (B, D, Dv)
    outs.append(torch.einsum("bd,bde->be", q[:, t], S))  # read: (B, Dv)
gated = torch.stack(outs, dim=1)  # (B, T, Dv)
print("gated", tuple(gated.shape), "gates from", round(gate.min().item(), 2), "to", round(gate.max().item(), 2))

# %% [markdown]
# Unrolled, token j reaches step i multiplied by every gate after it: `out_i = Σ_{j<=i} (α_{j+1} ⋯ α_i)
# (q_i · k_j) v_j`. The product is a `(T, T)` **decay matrix** `M[i, j]`, 1 on the diagonal and 0 above it,
# and the masked quadratic form keeps its shape with `M` where the causal mask was: `((q kᵀ) ⊙ M) v`. With a
# fixed `γ`, `M[i, j] = γ^(i−j)`; with all gates 1, `M` is the causal mask. Computed as products of gates,
# the entries underflow for long spans; the cumulative sum of `log α` gives each entry as one difference and
# one `exp`:

# %%
log_cum = gate.log().cumsum(dim=-1)  # (B, T): sum of log alpha_1 .. alpha_i
diff = log_cum[:, :, None] - log_cum[:, None, :]  # (B, T, T): sum of log alpha over j < m <= i
M = diff.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).exp()  # (B, T, T): 0 above
gated_quadratic = ((q @ k.transpose(-2, -1)) * M) @ v  # (B, T, Dv)
print("M[0, :4, :4] =\n", M[0, :4, :4].round(decimals=3))
print("gated loop vs masked quadratic form, float32, agree to 1e-5:",
      torch.allclose(gated, gated_quadratic, atol=1e-5, rtol=1e-5))

# %% [markdown]
# The cumulative sum has a price in float32: its rounding error grows with `|Σ log α|` times the machine
# epsilon, so over a whole long sequence the differences lose digits (with gates of 0.5 and `T = 2048`, about
# 30 times the error of the same sum taken per chunk of 64). That is one more reason real kernels take the
# cumulative sum inside each chunk (section 5); `course_utils` sums each entry's own segment instead.
#
# The order matters: the gate acts on the old state and the new pair is written whole, so `M[i, i] = 1`.
# In float64 the two forms agree to rounding, here with RetNet's fixed decay `γ = 0.9` as well:

# %%
q64, k64, v64, gate64 = q.double(), k.double(), v.double(), gate.double()
for name, a in (("data-dependent gate", gate64), ("fixed decay 0.9", 0.9)):
    rec, _ = gated_linear_attention_recurrent(q64, k64, v64, a)
    gap = (gated_linear_attention(q64, k64, v64, a) - rec).abs().max().item()
    print(f"{name}: recurrence vs masked quadratic form, float64, agree to 1e-12: {gap < 1e-12}")

# %% [markdown]
# ## 4. Correcting: the delta rule
#
# A decay forgets everything at the same rate, the useful with the stale. To store a new value under a key
# the memory already has, the additive write cannot replace: it adds, and the read returns the old value plus
# the new. The **delta rule** (DeltaNet, Schlag et al. 2021) first reads what the memory holds under `k_t`,
# then writes the difference, a step `β_t` in [0, 1] towards `v_t`:
#
# `S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ`.
#
# With a unit-length key and `β_t = 1`, `S_tᵀ k_t = v_t` exactly: the old value is replaced. Gated DeltaNet
# (Yang et al. 2024) decays first, `S' = α_t S_{t-1}`, then applies the delta rule to `S'`.

# %%
D_d, Dv_d = 8, 4
key = F.normalize(torch.randn(D_d, generator=g, dtype=torch.float64), dim=0)  # (D,), unit length
old, new = torch.randn(2, Dv_d, generator=g, dtype=torch.float64)  # (Dv,) each
S_add = torch.outer(key, old) + torch.outer(key, new)  # (D, Dv): two additive writes under one key
S_delta = torch.outer(key, old)  # (D, Dv): the first write
S_delta = S_delta + 1.0 * torch.outer(key, new - S_delta.T @ key)  # beta = 1: write the difference
print("additive read returns old + new, to twelve decimals:", torch.allclose(S_add.T @ key, old + new, atol=1e-12))
print("delta-rule read returns new, to twelve decimals:", torch.allclose(S_delta.T @ key, new, atol=1e-12))

# %% [markdown]
# **The overwrite experiment.** Write `n = 16` random pairs into a `D = 32` state, then write the same 16 keys
# again with new values, and read every key back. The right answer now is the new values. We compare the
# additive write with the delta rule (`β = 1`), using the recurrences of `course_utils` with `q = k`, so the
# final state is what we read:

# %%
def overwrite_errors(n, D, Dv, seed, orthogonal=False):
    K, V_old = random_pairs(n, D, Dv, seed)
    if orthogonal:
        K = torch.linalg.qr(torch.randn(D, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)).Q.T
    V_new = random_pairs(n, D, Dv, seed + 1000)[1]  # (n, Dv): new values for the same keys
    keys_seq, vals_seq = torch.cat([K, K]), torch.cat([V_old, V_new])  # (2n, D), (2n, Dv): written in that order
    _, S_add = gated_linear_attention_recurrent(keys_seq, keys_seq, vals_seq)
    _, S_del = delta_rule_recurrent(keys_seq, keys_seq, vals_seq, beta=1.0)
    return relative_error(K @ S_add, V_new), relative_error(K @ S_del, V_new)


for label, orthogonal in (("random unit keys", False), ("orthonormal keys", True)):
    add, delta = (sum(e) / 5 for e in zip(*(overwrite_errors(16, 32, 32, s, orthogonal) for s in range(5))))
    print(f"{label}: error against the new values, additive {add:.2f}, delta rule {delta:.2f}")

# %% [markdown]
# The additive state returns old plus new: with orthonormal keys an error of 1, the whole old value, and more
# with random keys, whose crosstalk adds to it. The delta rule returns the new values, exactly with orthonormal
# keys; with random ones each correction of one key disturbs the others a little, through the keys' overlaps,
# and the error is less than half the additive one. The same correction helps capacity too:
# repeat section 2's experiment with the delta rule's write instead of the sum:

# %%
def delta_capacity(ns, D, Dv, draws=5):
    errs = []
    for n in ns:
        total = 0.0
        for seed in range(draws):
            K, V = random_pairs(n, D, Dv, seed)
            _, S_del = delta_rule_recurrent(K, K, V, beta=1.0)
            total += relative_error(K @ S_del, V) / draws
        errs.append(total)
    return errs


delta_curve = delta_capacity(ns, D_mem, Dv_mem)
for n, err, d in zip(ns, curves, delta_curve):
    best = err["best state"]
    print(f"n/D = {n / D_mem:5.3f}: additive {err['additive']:.2f}, delta rule {d:.2f}, best state {best:.2f}")

# %% [markdown]
# The delta rule's error is a fifth to nearly a third below the additive one at every `n` up to `D`, but far from the best
# state's zero: one pass over the pairs, each corrected once, is not a least-squares solve. Past `n = D` nothing linear can hold every pair.
#
# The delta rule's own parallel form is harder than the gated one: `S_{t-1}` enters the write, so the
# state is a product of the matrices `I − β_t k_t k_tᵀ`. Each has eigenvalue 1 on the directions orthogonal to
# `k_t` and `1 − β_t ‖k_t‖²` along it, so the state stays bounded only while `β_t ‖k_t‖² <= 2`: with keys ten
# times longer and `β = 1` it blows up. DeltaNet and Gated DeltaNet L2-normalise their keys, so that with
# `β_t` in [0, 1] every eigenvalue is in [0, 1] and each step only shrinks the old state. Yang et al. (2024, "Parallelizing Linear
# Transformers with the Delta Rule") compute it chunk by chunk with a compact form of that product (the WY
# representation); `course_utils` keeps the recurrence as the reference.
#
# ## 5. The chunkwise-parallel form
#
# The recurrence takes `T` sequential steps, each a small product: a GPU sits idle. The masked quadratic form
# is one big product, but it costs `T² (D + Dv)` and a `(T, T)` matrix. All `T` prefix states at once (a
# `cumsum` of the writes) are `T × D × Dv` numbers. Real kernels cut the sequence into chunks of `C`
# tokens and use both forms: the quadratic form **inside** a chunk, the state **across** chunks.
#
# For one chunk, starting from the state `S_0` left by the chunks before, let `b_i = α_1 ⋯ α_i` (the gates
# from the chunk's start to its token i) and `M` the chunk's decay matrix, `M[i, j] = b_i / b_j`:
#
# - `out = b ⊙ (q S_0) + ((q kᵀ) ⊙ M) v`: the past, decayed to each token, then the chunk's own tokens;
# - `S_C = b_C S_0 + Σ_j (b_C / b_j) k_j v_jᵀ`: the state handed on, each token decayed to the chunk's end.
#
# The chunk's own tokens come from the quadratic part alone, and `S_0` holds none of them.

# %%
def chunkwise(q, k, v, gate, C):
    S = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])  # (B, D, Dv)
    outs = []
    for s in range(0, q.shape[-2], C):
        qc, kc, vc = q[:, s : s + C], k[:, s : s + C], v[:, s : s + C]  # (B, C, D), (B, C, D), (B, C, Dv)
        log_b = gate[:, s : s + C].log().cumsum(dim=-1)  # (B, C): log b_i
        Cc = qc.shape[1]  # the last chunk may be shorter
        Mc = (log_b[:, :, None] - log_b[:, None, :]).masked_fill(~torch.ones(Cc, Cc, dtype=torch.bool).tril(),
                                                                   float("-inf")).exp()  # (B, C, C)
        outs.append(log_b.exp()[:, :, None] * (qc @ S) + ((qc @ kc.transpose(-2, -1)) * Mc) @ vc)  # (B, C, Dv)
        to_end = (log_b[:, -1:] - log_b).exp()  # (B, C): b_C / b_j
        S = log_b[:, -1, None, None].exp() * S + (kc * to_end[:, :, None]).transpose(-2, -1) @ vc  # (B, D, Dv)
    return torch.cat(outs, dim=1), S  # (B, T, Dv), (B, D, Dv)


rec, S_rec = gated_linear_attention_recurrent(q64, k64, v64, gate64)
for C in (1, 3, 4, 5, 10, 16):
    out_c, S_c = chunkwise(q64, k64, v64, gate64, C)
    ok = (out_c - rec).abs().max().item() < 1e-12 and (S_c - S_rec).abs().max().item() < 1e-12
    print(f"T = {T}, C = {C:2d} ({'divides T' if T % C == 0 else 'does not divide T'}): "
          f"equal to the recurrence in float64 to 1e-12: {ok}")
one = chunkwise(q64[:, :1], k64[:, :1], v64[:, :1], gate64[:, :1], 4)[0]
print("T = 1, C = 4: equal to 1e-12:", (one - rec[:, :1]).abs().max().item() < 1e-12)

# %% [markdown]
# **The cost.** Counting the matrix products for one head: the recurrence does `2 T D Dv` multiply-adds
# in `T` sequential steps; the quadratic form `T² (D + Dv)`; the chunkwise form `T C (D + Dv)` inside the
# chunks (when `C` divides `T`; a shorter last chunk costs less) plus `2 T D Dv` for reading and writing the state, in `T / C` sequential steps, with one `(C, C)`
# matrix and one state in memory at a time. With `C` about `D`, it does about twice the recurrence's work,
# in big products, and `C` times fewer sequential steps:

# %%
for T_c in (1024, 8192):
    cost = chunkwise_cost(T=T_c, D=64, Dv=64, chunk_size=64)
    print(f"T = {T_c}, D = Dv = C = 64: " + ", ".join(f"{name} {m / 1e6:,.0f}M" for name, m in cost.items())
          + f"; sequential steps: recurrent {T_c}, chunkwise {T_c // 64}")

# %% [markdown]
# Measured on this CPU (one head, `D = Dv = 64`, `C = 64`): the recurrent loop, the chunkwise form and all
# prefix states at once (`benchmarks/CHUNKWISE.md` has the full table, with peak memory, over `T`):

# %%
# NBVAL_IGNORE_OUTPUT
def best_time(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


T_b = 2048
qb, kb, vb = (torch.randn(1, T_b, 64, generator=g) for _ in range(3))  # (1, T, 64)
gb = torch.sigmoid(torch.randn(1, T_b, generator=g) + 3.0)  # (1, T)
timings = {
    "recurrent": best_time(lambda: gated_linear_attention_recurrent(qb, kb, vb, gb)),
    "chunkwise": best_time(lambda: gated_linear_attention_chunkwise(qb, kb, vb, gb, chunk_size=64)),
    "prefix states": best_time(lambda: gated_linear_attention_prefix_states(qb, kb, vb, gb), repeats=1),
}
print(", ".join(f"{name} {s * 1000:.1f} ms" for name, s in timings.items()))

# %%
print("chunkwise at least 5x faster than the recurrent loop at T = 2048:",
      timings["recurrent"] > 5 * timings["chunkwise"])

# %% [markdown]
# ## 6. Check against `course_utils`
#
# The inline versions of this notebook against the package (float32, the stated tolerance 1e-5):

# %%
torch.testing.assert_close(plain, gated_linear_attention_recurrent(q, k, v)[0], atol=1e-5, rtol=1e-5)
torch.testing.assert_close(quadratic, gated_linear_attention(q, k, v), atol=1e-5, rtol=1e-5)
torch.testing.assert_close(gated, gated_linear_attention_recurrent(q, k, v, gate)[0], atol=1e-5, rtol=1e-5)
torch.testing.assert_close(M, decay_mask(gate), atol=1e-6, rtol=1e-6)
torch.testing.assert_close(gated_quadratic, gated_linear_attention_prefix_states(q, k, v, gate), atol=1e-5, rtol=1e-5)
torch.testing.assert_close(S_delta, delta_rule_step(torch.outer(key, old), key, key, new, 1.0)[1])
torch.testing.assert_close(chunkwise(q, k, v, gate, 4)[0], gated_linear_attention_chunkwise(q, k, v, gate, 4)[0],
                           atol=1e-5, rtol=1e-5)
_, S_4 = gated_linear_attention_recurrent(q[:, :4], k[:, :4], v[:, :4], gate[:, :4])  # the state after 4 tokens
torch.testing.assert_close(chunkwise(q, k, v, gate, 4)[0][:, 4:8],
                           gated_linear_attention_chunk(S_4, q[:, 4:8], k[:, 4:8], v[:, 4:8], gate[:, 4:8])[0],
                           atol=1e-5, rtol=1e-5)
torch.testing.assert_close(recurrent_la, linear_attention_recurrent(q_la, k_la, v_la))
print("matches course_utils")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below checks it and, if it is wrong, names the mistake it looks
# like. Use plain tensor operations. Inputs are float32 with any number of leading axes `...` (none to three)
# and may be non-contiguous views; results are float32; leave the inputs unchanged. The state is
# `(..., D, Dv)`, keys on its rows.
#
# ### Exercise 13.1: one step of gated linear attention (8 min, core)
#
# Write `my_gla_step(state, q_t, k_t, v_t, gate_t)`: from the state `(..., D, Dv)` left by the tokens before
# t, token t's `q_t`, `k_t` `(..., D)`, `v_t` `(..., Dv)` and its gate `gate_t` `(...)` in (0, 1], return
# `(out_t, new_state)`: the state after token t, and `out_t` `(..., Dv)` read from it, as in section 3.

# %%
# Inputs: `state`, `q_t`, `k_t`, `v_t`, `gate_t` may have 0 to 3 leading axes (the `...`); tensors may be
# non-contiguous views.
def my_gla_step(state, q_t, k_t, v_t, gate_t):
    ### BEGIN SOLUTION
    new_state = gate_t[..., None, None] * state + k_t[..., :, None] * v_t[..., None, :]  # (..., D, Dv)
    out_t = (q_t[..., None, :] @ new_state)[..., 0, :]  # (..., 1, D) @ (..., D, Dv) -> (..., Dv)
    return out_t, new_state
    ### END SOLUTION


check("13.1", my_gla_step)

# %% [markdown]
# ### Exercise 13.2: one step of the delta rule (8 min, core)
#
# Write `my_delta_step(state, q_t, k_t, v_t, beta_t)`: the same, with the delta rule's write of section 4
# (no gate) and `beta_t` `(...)` in [0, 1]. Keys need not have unit length.

# %%
# Inputs: `state`, `q_t`, `k_t`, `v_t`, `beta_t` may have 0 to 3 leading axes (the `...`); tensors may be
# non-contiguous views.
def my_delta_step(state, q_t, k_t, v_t, beta_t):
    ### BEGIN SOLUTION
    stored = (k_t[..., None, :] @ state)[..., 0, :]  # (..., Dv): what the memory holds under k_t before the write
    new_state = state + beta_t[..., None, None] * k_t[..., :, None] * (v_t - stored)[..., None, :]  # (..., D, Dv)
    out_t = (q_t[..., None, :] @ new_state)[..., 0, :]  # (..., Dv)
    return out_t, new_state
    ### END SOLUTION


check("13.2", my_delta_step)

# %% [markdown]
# ### Exercise 13.3: one chunk of the chunkwise form (12 min, core)
#
# Write `my_chunk(state, q, k, v, gate)`: from the state `(..., D, Dv)` left by the chunks before, a chunk's
# `q`, `k` `(..., C, D)`, `v` `(..., C, Dv)` and gates `(..., C)` in [0.5, 1] (`C` at most 64, so the
# products `b_i` stay far from underflow and `b_i / b_j` may be computed directly), return `(out, new_state)`:
# `out` `(..., C, Dv)` and the state the chunk hands on, as in section 5.

# %%
# Inputs: `state`, `q`, `k`, `v`, `gate` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous
# views.
def my_chunk(state, q, k, v, gate):
    ### BEGIN SOLUTION
    C = q.shape[-2]
    b = gate.cumprod(dim=-1)  # (..., C): b_i = alpha_1 ... alpha_i
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    M = torch.where(causal, b[..., :, None] / b[..., None, :], 0.0)  # (..., C, C): b_i / b_j for j <= i
    out = b[..., :, None] * (q @ state) + ((q @ k.transpose(-2, -1)) * M) @ v  # (..., C, Dv)
    to_end = b[..., -1:] / b  # (..., C): b_C / b_j
    new_state = b[..., -1, None, None] * state + (k * to_end[..., None]).transpose(-2, -1) @ v  # (..., D, Dv)
    return out, new_state
    ### END SOLUTION


check("13.3", my_chunk)

# %% [markdown]
# ### Exercise 13.4: one step of linear attention (8 min, core)
#
# Write `my_linear_attention_step(state, normaliser, q_t, k_t, v_t)` with `φ(x) = F.elu(x) + 1`: from the
# state `(..., D, Dv)` and normaliser `(..., D)` of the tokens before t, and token t's `q_t`, `k_t`
# `(..., D)` and `v_t` `(..., Dv)`, return `(out_t, new_state, new_normaliser)`, out_t `(..., Dv)` read as in
# section 1. Work out which (the check enforces it): does out_t read the state before or after token t is added?

# %%
# Inputs: `state`, `normaliser`, `q_t`, `k_t`, `v_t` may have 0 to 3 leading axes (the `...`); tensors may be
# non-contiguous views.
def my_linear_attention_step(state, normaliser, q_t, k_t, v_t):
    ### BEGIN SOLUTION
    phi_q, phi_k = F.elu(q_t) + 1, F.elu(k_t) + 1  # (..., D)
    state = state + phi_k[..., :, None] * v_t[..., None, :]  # (..., D, Dv): token t joins first
    normaliser = normaliser + phi_k  # (..., D)
    out = (phi_q[..., :, None] * state).sum(dim=-2) / (phi_q * normaliser).sum(dim=-1, keepdim=True)  # (..., Dv)
    return out, state, normaliser
    ### END SOLUTION


check("13.4", my_linear_attention_step)

# %% [markdown]
# ## Summary
#
# - Linear attention, `φ(q) · φ(k)` in place of `exp(q · k)`, runs as a recurrence: `S_t = S_{t-1} + φ(k_t)
#   v_tᵀ`, `z_t = z_{t-1} + φ(k_t)`, `out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t`, a state that stays the same size
#   while a KV cache grows.
# - Linear attention's state is an associative memory: `Sᵀ k_i` returns `v_i` plus crosstalk from every
#   other pair. With random keys the error grows as `√((n − 1) / D)`; past `n = D` no `(D, Dv)` state holds
#   every pair, while softmax attention's cache, with a sharp enough softmax (scores ×100 here), retrieves
#   exactly at every `n` measured, at the price of growing.
# - A decay or a data-dependent gate forgets: `S_t = α_t S_{t-1} + k_t v_tᵀ`. Its quadratic form is
#   `((q kᵀ) ⊙ M) v` with the decay matrix `M[i, j] = α_{j+1} ⋯ α_i`, computed from cumulative sums of
#   `log α`.
# - The delta rule corrects: `S_t = S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ` replaces the value stored under a
#   key; Gated DeltaNet decays first.
# - The chunkwise form: the quadratic form inside chunks of `C`, the state across; `T C (D + Dv) + 2 T D Dv`
#   multiply-adds in `T / C` sequential steps. Training kernels use it; generation uses the recurrence.
#
# ## Further reading
#
# - Katharopoulos et al., [Transformers are RNNs](https://arxiv.org/abs/2006.16236) (2020): linear attention.
# - Schlag et al., [Linear Transformers Are Secretly Fast Weight Programmers](https://arxiv.org/abs/2102.11174)
#   (2021): the state as a memory, its capacity, and the delta rule.
# - Sun et al., [Retentive Network](https://arxiv.org/abs/2307.08621) (2023): a fixed decay, and its
#   recurrent, parallel and chunkwise forms.
# - Yang et al., [Gated Linear Attention Transformers with Hardware-Efficient
#   Training](https://arxiv.org/abs/2312.06635) (2023): a data-dependent gate per key feature, and the chunkwise
#   form.
# - Dao and Gu, [Transformers are SSMs](https://arxiv.org/abs/2405.21060) (2024): Mamba-2's scalar gate and
#   the masked quadratic form ("structured state space duality").
# - Yang et al., [Parallelizing Linear Transformers with the Delta Rule over Sequence
#   Length](https://arxiv.org/abs/2406.06484) (2024), and [Gated Delta Networks](https://arxiv.org/abs/2412.06464)
#   (2024).
# - Arora et al., [Zoology: Measuring and Improving Recall in Efficient Language
#   Models](https://arxiv.org/abs/2312.04927) (2023): associative recall as the test of these layers.
