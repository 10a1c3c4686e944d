# %% [markdown]
# # 07 Attention variants: cheaper heads, local windows, linear mixers, and fast decoding
#
# Plain attention has two costs that grow badly. Training and prefill build a `(T, T)` score matrix:
# time and memory grow as T². Generation keeps the keys and values of every earlier token of every
# layer in a **KV cache**: memory grows with the number of KV heads times the context. Every variant in
# this notebook attacks one of those costs by changing *one* thing (how many key/value heads there are,
# which keys are visible, how the scores are made) and reusing everything else. Each one is checked
# against the plain masked attention of notebooks 02-04 or against PyTorch, and the notebook closes with
# the other half of fast decoding: the KV cache, sampling and beam search.
#
# **What you will learn**
#
# - multi-query and grouped-query attention: one module with `num_kv_heads`, what the KV cache of a
#   7B-sized model costs with each, and why `repeat_interleave` (not `repeat`) matches PyTorch;
# - sliding-window attention as a mask and as a chunked computation that never builds the `(T, T)`
#   matrix, and how the receptive field grows with depth;
# - Linformer (keys and values projected along the sequence) and the attention-free transformer (AFT),
#   written so that large logits cannot overflow;
# - chunked top-k attention, whose peak memory is O(chunk × T) instead of O(T²);
# - a KV cache, and a test that cached generation gives *exactly* the tokens and logits of recomputing the
#   prefix; sampling with temperature, top-k and top-p; beam search;
# - measured time and memory curves of all of them against sequence length.
#
# **Prerequisites**: notebooks 02 (scaled attention), 03 (masking: `causal_mask(T, S)` for a cache) and 04
# (multi-head attention). Notebook 06 (positions) helps for the RoPE remark.
#
# **Time**: about 60 minutes. **Runs on**: CPU (the whole notebook takes well under a minute).
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `Hkv`
# num_kv_heads, `D` head_dim, `V` vocab_size. Masks are boolean, `True` = may attend.

# %%
# NBVAL_IGNORE_OUTPUT
import json
import math
import runpy
import time
from pathlib import Path

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import course_utils
from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.generation import beam_search, generate, sample_next_token, top_k_filter, top_p_keep
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.plotting import plot_weights
from course_utils.variants import (
    DecoderConfig,
    GroupedQueryAttention,
    KVCache,
    TinyDecoder,
    aft_full,
    aft_local_bias,
    aft_simple,
    kv_cache_bytes,
    linformer_attention,
    repeat_kv,
    sliding_window_attention,
    sliding_window_mask,
    topk_attention,
)

device = setup_notebook(seed=0)
ROOT = Path(course_utils.__file__).resolve().parent.parent
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The bill: a KV cache for a 7B-sized model
#
# When a model generates text, each new token needs the keys and values of all earlier tokens, in every
# layer. Recomputing them at every step would cost as much as a forward pass over the whole prefix, so
# they are kept: the **KV cache**. Per token it holds `2 (k and v) × layers × KV heads × head_dim`
# numbers. Take a 7B-sized model (32 layers, 32 query heads of `head_dim` 128, float16 = 2 bytes), with
# 32, 8 or 1 key/value heads:

# %%
layers, heads, head_dim = 32, 32, 128
print(f"{'KV heads':>22} {'per token':>10} {'4096 tokens':>12} {'x 8 sequences':>14}")
for name, kv_heads in (("MHA (32)", 32), ("GQA (8, as Mistral 7B)", 8), ("MQA (1)", 1)):
    per_token = kv_cache_bytes(layers, kv_heads, head_dim)
    context = kv_cache_bytes(layers, kv_heads, head_dim, num_tokens=4096)
    batch = kv_cache_bytes(layers, kv_heads, head_dim, num_tokens=4096, batch_size=8)
    print(f"{name:>22} {per_token / 2**10:>7.0f} KiB {context / 2**30:>8.3f} GiB {batch / 2**30:>10.2f} GiB")

# %% [markdown]
# With one key/value head per query head, eight sequences of 4096 tokens need 16 GiB of cache, as much
# as the float16 weights of the model itself (about 14 GB). The cache, not the weights, limits the batch
# size and the context. Sharing key/value heads divides the bill by `H / Hkv`.
#
# ## 2. Multi-query and grouped-query attention
#
# **Multi-query attention** (MQA, Shazeer 2019) keeps H query heads but only **one** key head and one
# value head, shared by all queries. **Grouped-query attention** (GQA, Ainslie et al. 2023) sits in
# between: `Hkv` key/value heads, each shared by a group of `H / Hkv` neighbouring query heads. GQA is used
# in Llama 2 70B (8 KV heads for 64 query heads) and Mistral 7B (8 for 32); MQA in PaLM.
#
# The only new step: before the usual attention, make each key/value head serve its group, so query head
# h reads KV head `h // (H // Hkv)`. With 4 query heads and 2 KV heads:

# %%
H, Hkv = 4, 2
k_heads = torch.arange(Hkv, dtype=torch.float32).view(1, Hkv, 1, 1)  # (B, Hkv, S, D): KV head j holds j
print("repeat_interleave:", k_heads.repeat_interleave(H // Hkv, dim=1).flatten().tolist())
print("repeat:           ", k_heads.repeat(1, H // Hkv, 1, 1).flatten().tolist())
print("repeat_kv:        ", repeat_kv(k_heads, H).flatten().tolist())

# %% [markdown]
# `repeat_interleave` gives `0, 0, 1, 1`: query heads 0 and 1 share KV head 0. `repeat` gives `0, 1, 0, 1`
# (heads 0 and 2 share), a different wiring, and a checkpoint trained with one reads garbage with the
# other. PyTorch's `F.scaled_dot_product_attention(..., enable_gqa=True)` takes the smaller k and v
# directly and uses the `repeat_interleave` wiring:

# %%
g = torch.Generator().manual_seed(0)
B, T, D = 2, 6, 8
q = torch.randn(B, H, T, D, generator=g)  # (B, H, T, D)
k, v = torch.randn(B, Hkv, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g)  # (B, Hkv, T, D)

ours, _ = scaled_dot_product_attention(q, repeat_kv(k, H), repeat_kv(v, H), causal_mask(T))
theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
tiled, _ = scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), causal_mask(T))
print("out", tuple(ours.shape))
print("repeat_interleave vs enable_gqa, agree to 1e-6:", (ours - theirs).abs().max().item() < 1e-6)
print("repeat            vs enable_gqa, max abs diff:", round((tiled - theirs).abs().max().item(), 2))

# %% [markdown]
# `GroupedQueryAttention(embed_dim, num_heads, num_kv_heads)` is the module: `q_proj` maps C -> C as
# usual, but `k_proj` and `v_proj` map C -> `Hkv * D`, so they are smaller too.

# %%
C = 32
for kv in (4, 2, 1):
    layer = GroupedQueryAttention(C, num_heads=4, num_kv_heads=kv)
    n_params = sum(p.numel() for p in layer.parameters())
    print(f"num_kv_heads={kv}: k_proj {tuple(layer.k_proj.weight.shape)}, parameters {n_params}")

# %% [markdown]
# **Two claims to check.** With `num_kv_heads == num_heads` it is ordinary multi-head attention: copy
# the weights of notebook 04's `MultiHeadAttention` (its packed `qkv_proj` splits into q, k and v) and
# compare outputs and weights.

# %%
torch.manual_seed(0)
mha = MultiHeadAttention(C, 4)
gqa = GroupedQueryAttention.from_multihead(mha)
x = torch.randn(2, 7, C)
out_gqa, w_gqa = gqa(x, causal_mask(7), need_weights=True)
out_mha, w_mha = mha(x, causal_mask(7), need_weights=True)
torch.testing.assert_close(out_gqa, out_mha)
torch.testing.assert_close(w_gqa, w_mha)
print("GQA with num_kv_heads == num_heads is MHA:", tuple(out_gqa.shape), tuple(w_gqa.shape))

# %% [markdown]
# With `num_kv_heads = 1` it is multi-query attention: every query head uses the same k and v, which we
# can also write with broadcasting (a head axis of size 1) and no repeat at all.

# %%
mqa = GroupedQueryAttention(C, 4, 1)
Bx, Tx, _ = x.shape
q_m = mqa.q_proj(x).view(Bx, Tx, 4, 8).transpose(1, 2)  # (B, H, T, D)
k_m, v_m = mqa.k_proj(x)[:, None], mqa.v_proj(x)[:, None]  # (B, 1, T, D): broadcast over the 4 heads
ref, _ = scaled_dot_product_attention(q_m, k_m, v_m, causal_mask(Tx))
ref = mqa.out_proj(ref.transpose(1, 2).reshape(Bx, Tx, C))
torch.testing.assert_close(mqa(x, causal_mask(Tx)), ref)
print("GQA with num_kv_heads == 1 is MQA")

# %% [markdown]
# ## 3. Sliding-window (local) attention
#
# In sliding-window attention each query sees only its last `window` positions, itself included: key j is
# visible from query i when `0 <= i - j < window`. It is the causal mask with the far past cut off.
# Longformer (Beltagy et al. 2020) uses such windows (plus a few global tokens); Mistral 7B uses a window
# of 4096 in every layer.

# %%
window = 3
i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]  # query and key positions
local = (i - j >= 0) & (i - j < window)  # (T, T)
print(local.int())
print("sliding_window_mask agrees:", torch.equal(local, sliding_window_mask(8, window)))
print("a window >= T is the causal mask:", torch.equal(sliding_window_mask(8, 8), causal_mask(8)),
      torch.equal(sliding_window_mask(8, 100), causal_mask(8)))

# %% [markdown]
# As a mask, this saves nothing: the `(T, T)` scores are still computed, then mostly thrown away. The
# saving comes from computing only what the window needs. Cut the queries into chunks; the chunk of
# queries `i0 .. i1-1` only needs keys `i0 - window + 1 .. i1 - 1`, so its scores are
# `(chunk, chunk + window - 1)`, whatever T is. `sliding_window_attention` does that, and agrees with the
# masked reference:

# %%
g = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, 2, 50, 8, generator=g) for _ in range(3))  # (B, H, T, D)
reference, weights_sw = scaled_dot_product_attention(q, k, v, sliding_window_mask(50, 7))
for chunk in (1, 8, 16, 64):
    chunked = sliding_window_attention(q, k, v, window=7, chunk_size=chunk)
    print(f"chunk_size={chunk:>2}: out {tuple(chunked.shape)}, agrees with the masked reference to 1e-5: "
          f"{(chunked - reference).abs().max().item() < 1e-5}")
print("largest scores block with chunk 16:", (16, 16 + 7 - 1), "instead of", tuple(weights_sw.shape[-2:]))

# %% [markdown]
# **The receptive field grows with depth.** After one layer, output t has seen inputs `t - window + 1 ..
# t`. A second layer mixes outputs that each saw a window, so it reaches back `2 (window - 1)` positions,
# and L layers reach `L (window - 1)`. With Mistral's 32 layers and a window of 4096, the last layer can in
# principle draw on about 131k positions. Which inputs reach output 23 after L layers is a product of
# the mask with itself, L times:

# %%
T_rf, window = 24, 4
step = sliding_window_mask(T_rf, window).float()  # (T, T): 1 where input j feeds output i in one layer
reach, rows = torch.eye(T_rf), []
for L in range(1, 6):
    reach = (step @ reach).clamp(max=1)  # (T, T): can input j reach output i in L layers?
    rows.append(reach[-1])
    print(f"L={L}: output 23 sees inputs {int(reach[-1].nonzero().min())}..23, "
          f"{int(reach[-1].sum())} of them = 1 + L * (window - 1) = {1 + L * (window - 1)}")

# %%
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.imshow(torch.stack(rows), cmap="Blues", aspect="auto")
ax.set_yticks(range(5), [f"{L} layer{'s' if L > 1 else ''}" for L in range(1, 6)])
ax.set_xlabel("input position")
ax.set_title(f"inputs that reach output {T_rf - 1} (window {window})")
plt.show()

# %% [markdown]
# ## 4. Low rank along the sequence: Linformer
#
# Linformer (Wang et al. 2020) observes that attention matrices are close to low rank, and projects the S
# keys and values *along the sequence* down to R summary rows with learned `(R, S)` matrices:
# `k' = E k`, `v' = F v`. Every query then attends to R rows instead of S, so the scores are `(T, R)`:
# linear in T for a fixed R. With R = S and identity projections nothing changes:

# %%
g = torch.Generator().manual_seed(2)
T_lin = 256
q, k, v = (torch.randn(1, 2, T_lin, 16, generator=g) for _ in range(3))  # (B, H, T, D)
full, _ = scaled_dot_product_attention(q, k, v)
eye = torch.eye(T_lin)
print("identity projections, agree with full attention to 1e-6:",
      (linformer_attention(q, k, v, eye, eye) - full).abs().max().item() < 1e-6)

# %% [markdown]
# In a real model E and F are learned with the rest of the network (random projections are *not* a good
# approximation: the softmax of the projected scores is not the projection of the softmax), so here we
# only look at the cost and at one property. With R = 32 the scores are `(256, 32)` instead of
# `(256, 256)`. But every summary row mixes *all* positions, the future included, so Linformer is not
# causal: changing the last token changes the first output. It fits encoders, not the decoders of
# notebook 08.

# %%
R = 32
E, Fp = (torch.randn(R, T_lin, generator=g) / math.sqrt(R) for _ in range(2))  # (R, S) each
out_lin = linformer_attention(q, k, v, E, Fp)  # (B, H, T, D)
print("out", tuple(out_lin.shape), "| scores", tuple((q @ (E @ k).transpose(-2, -1)).shape))
k2 = k.clone()
k2[:, :, -1] += 1.0  # change only the LAST key
change = (linformer_attention(q, k2, v, E, Fp) - out_lin)[:, :, 0].abs().max().item()
print(f"change of output 0 after changing key {T_lin - 1}: {change:.4f} (0 for a causal layer)")

# %% [markdown]
# ## 5. The attention-free transformer (AFT), without overflow
#
# AFT (Zhai et al. 2021) drops the query-key dot product. For each channel c, output t is a weighted
# average of the values, with weights from the *keys* plus a learned bias `w[t, s]` per pair of
# positions, gated by `sigmoid(q)`:
#
# `out[t, c] = sigmoid(q[t, c]) * sum_s exp(k[s, c] + w[t, s]) v[s, c] / sum_s exp(k[s, c] + w[t, s])`
#
# The fraction is a **softmax over s** of `k[s, c] + w[t, s]`, one per channel. AFT-simple drops w; AFT-local
# keeps w only inside a window (outside it, w is 0, *not* `-inf`: far keys still count through `exp(k)`).
#
# Written the obvious way, `exp(k)` overflows as soon as a logit exceeds about 88 in float32, and
# `inf / inf = NaN`. That happens in versions you may find online, which factorise the sum as
# `exp(w) @ (exp(k) * v) / (exp(w) @ exp(k))` for speed:

# %%
g = torch.Generator().manual_seed(3)
T_aft, C_aft = 6, 4
q, v = torch.randn(1, T_aft, C_aft, generator=g), torch.randn(1, T_aft, C_aft, generator=g)
k = 100.0 * torch.randn(1, T_aft, C_aft, generator=g)  # large logits: trained models produce them
w_bias = torch.randn(T_aft, T_aft, generator=g)  # (T, S) learned position biases
w = w_bias.masked_fill(~causal_mask(T_aft), float("-inf"))  # causal: exp(-inf) = 0 for future keys

naive = torch.sigmoid(q) * (torch.exp(w) @ (torch.exp(k) * v)) / (torch.exp(w) @ torch.exp(k))
print("factorised exp(w) @ (exp(k) * v):", naive[0, :, 0])

# %% [markdown]
# What we fixed: a softmax is invariant to subtracting a constant, so subtract the maximum before every
# `exp`. `aft_full` computes exactly the formula above as a `torch.softmax` over the key axis (which does
# that subtraction); a fully masked row gives 0 instead of NaN. The factorised form can be rescued too, by
# subtracting the per-channel maximum of k and the per-row maximum of w, which keeps every `exp` at most 1:

# %%
stable = aft_full(q, k, v, w_bias, causal_mask(T_aft))  # (B, T, C)
k_max = k.amax(dim=1, keepdim=True)  # (B, 1, C)
w_max = w.amax(dim=1, keepdim=True)  # (T, 1)
e_k, e_w = torch.exp(k - k_max), torch.exp(w - w_max)  # every entry <= 1: no overflow
rescued = torch.sigmoid(q) * (e_w @ (e_k * v)) / (e_w @ e_k)
print("aft_full (softmax):          ", stable[0, :, 0])
print("factorised, maxima removed:  ", rescued[0, :, 0])

# %% [markdown]
# The rescued factorised form matches where it is finite, but look at its first row: the one number it
# can still get wrong is an *underflow*. When the key that sets the per-channel maximum is invisible to
# query t, every visible `exp(k - k_max)` can round to 0, and it divides 0 by 0. The softmax form subtracts
# the maximum over exactly the keys each query sees and has no such case, so `course_utils` uses it (at a
# memory cost of `B × T × S × C`, fine at these sizes). Two more checks: AFT-simple is AFT-full with
# `w = 0`, computed in O(T × C); and AFT-local's bias is zero outside the window.

# %%
q, k, v = (torch.randn(2, 8, 4, generator=g) for _ in range(3))
torch.testing.assert_close(aft_simple(q, k, v), aft_full(q, k, v, torch.zeros(8, 8)))
print("aft_simple == aft_full with w = 0; stable at k = 1000:",
      bool(torch.isfinite(aft_simple(q, 1000 * k, v)).all()))
print(aft_local_bias(torch.full((6, 6), 0.5), window=2))

# %% [markdown]
# ## 6. Chunked top-k attention
#
# Many attention rows put almost all their weight on a few keys. Top-k attention (Gupta et al. 2021)
# keeps, for each query, only its k highest-scoring keys and renormalises over them. Done naively it
# still needs all `(T, S)` scores at once. Done by **chunks of queries**, it needs only `(chunk, S)` at a
# time: peak memory O(chunk × S) instead of O(T × S). (The work is still O(T × S): this saves memory, not
# time.) `topk_attention` does exactly this, with any mask; with `top_k >= S` it is ordinary attention:

# %%
g = torch.Generator().manual_seed(4)
q, k, v = (torch.randn(1, 2, 40, 8, generator=g) for _ in range(3))
plain, weights_plain = scaled_dot_product_attention(q, k, v, causal_mask(40))
print("top_k >= S equals plain attention:",
      torch.allclose(topk_attention(q, k, v, top_k=40, mask=causal_mask(40), chunk_size=8), plain, atol=1e-6))

# %% [markdown]
# And against the reference that builds all the scores, keeps each row's top k and masks the rest:

# %%
scores_all = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal_mask(40), float("-inf"))
kth = scores_all.topk(4, dim=-1).values[..., -1:]  # (B, H, T, 1): each row's 4th best score
keep = (scores_all >= kth) & causal_mask(40)  # (B, H, T, S)
ref_topk, _ = scaled_dot_product_attention(q, k, v, keep)
chunked = topk_attention(q, k, v, top_k=4, mask=causal_mask(40), chunk_size=8)
print("chunked top-4 vs full reference, agree to 1e-6:", (chunked - ref_topk).abs().max().item() < 1e-6)
print("keys kept per query (first 6 rows):", keep[0, 0].sum(-1)[:6].tolist(), "...")
print(f"share of the full softmax weight on the kept 4 keys, mean over queries: "
      f"{(weights_plain * keep).sum(-1).mean().item():.3f}")

# %% [markdown]
# ## 7. The KV cache, with a tiny decoder
#
# To generate, a decoder-only model predicts the next token from the prefix, appends it, and repeats.
# Without a cache every step runs the model on the whole prefix again. With a cache, only the new token
# goes through the model; each attention layer appends the new key and value to the cache and attends
# over everything cached, with the bottom-right causal mask `causal_mask(T, S)` of notebook 03.
#
# `course_utils.variants` defines the protocol (in its docstring) that notebook 08's GPT follows too:
#
# - `forward(idx, cache=None) -> logits (B, T, V)`; with a cache, `idx` holds only the **new** tokens,
#   at absolute positions `cache.length ..` (learned position embeddings and RoPE both need that offset);
# - attention layer i calls `k, v = cache.update(i, k_new, v_new)`: append, get everything back;
# - `new_cache()` returns a `KVCache` whose capacity is the context length; overflowing it is an error.
#
# `TinyDecoder` is a small model that follows it: embeddings, pre-norm blocks of `GroupedQueryAttention`
# (optionally with a sliding window or RoPE) and an MLP, and an LM head. Untrained, but that is all the
# cache needs.

# %%
torch.manual_seed(0)
cfg = DecoderConfig(vocab_size=16, context_length=32, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2)
model = TinyDecoder(cfg).eval()
idx = torch.randint(0, 16, (2, 12))  # (B, T)
full_logits = model(idx)  # (B, T, V): the whole sequence at once
cache = model.new_cache()
steps = [model(idx[:, :5], cache)]  # the prompt: 5 tokens at once
for t in range(5, 12):
    steps.append(model(idx[:, t:t + 1], cache))  # then one token at a time
cached_logits = torch.cat(steps, dim=1)
print(cache, "| logits", tuple(cached_logits.shape))
print("cached vs full forward, logits agree to 1e-5:", (cached_logits - full_logits).abs().max().item() < 1e-5)
print("cache buffers per layer:", tuple(cache.keys[0].shape), "(B, Hkv, capacity, D)")

# %% [markdown]
# The same holds for generation: `generate(..., use_cache=True)` produces exactly the tokens of
# recomputing the prefix at every step, and logits equal to rounding error, for every variant that
# supports a cache here (MHA, GQA, MQA, sliding window, RoPE):

# %%
prompt = torch.randint(0, 16, (2, 4), generator=torch.Generator().manual_seed(5))
for name, overrides in [("MHA", {"num_kv_heads": 4}), ("GQA", {}), ("MQA", {"num_kv_heads": 1}),
                        ("window 4", {"window": 4}), ("RoPE", {"positional": "rope"})]:
    torch.manual_seed(0)
    m = TinyDecoder(DecoderConfig(**overrides)).eval()
    fast, fast_logits = generate(m, prompt, 20, temperature=0.8, top_k=8, use_cache=True,
                                 generator=torch.Generator().manual_seed(1), return_logits=True)
    slow, slow_logits = generate(m, prompt, 20, temperature=0.8, top_k=8, use_cache=False,
                                 generator=torch.Generator().manual_seed(1), return_logits=True)
    print(f"{name:>8}: same tokens {torch.equal(fast, slow)}, "
          f"logits agree to 1e-5: {(fast_logits - slow_logits).abs().max().item() < 1e-5}")

# %% [markdown]
# The cache has a fixed capacity (the context length): asking for more raises an error that says what
# to do, rather than silently dropping positions.

# %%
try:
    generate(model, prompt, max_new_tokens=40)
except ValueError as e:
    print("ValueError:", e)
small = KVCache(num_layers=1, capacity=4)
small.update(0, torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))
try:
    small.update(0, torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# How much faster? Without a cache, step n runs the model on n tokens, so generating N tokens costs
# about N²/2 token-passes; with a cache, N. A slightly bigger model and 150 tokens (your numbers will
# differ):

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(0)
bigger = TinyDecoder(DecoderConfig(vocab_size=64, context_length=256, embed_dim=64, num_heads=8,
                                   num_kv_heads=2, num_layers=4)).eval()
start = torch.zeros(1, 8, dtype=torch.long)
for use_cache in (False, True):
    t0 = time.perf_counter()
    generate(bigger, start, 150, greedy=True, use_cache=use_cache)
    print(f"use_cache={use_cache!s:>5}: {time.perf_counter() - t0:.2f} s for 150 tokens")

# %% [markdown]
# ## 8. Sampling: greedy, temperature, top-k, top-p
#
# The model gives logits over the vocabulary; `sample_next_token` turns them into one token:
#
# - **greedy**: the argmax;
# - **temperature** τ: divide the *logits* by τ before the softmax; τ < 1 sharpens, τ > 1 flattens
#   (dividing the probabilities instead does nothing useful: they just stop summing to 1);
# - **top-k** (Fan et al. 2018): keep the k most likely tokens;
# - **top-p** or nucleus (Holtzman et al. 2020): keep the *smallest* set of most likely tokens whose
#   probabilities sum to at least p, including the token that crosses p.
#
# Then renormalise over what is kept and sample. The boundary of top-p, with probabilities that are exact
# in binary:

# %%
probs = torch.tensor([0.125, 0.5, 0.0625, 0.25, 0.0625])
for p in (0.5, 0.51, 0.75, 0.8, 1e-6, 1.0):
    print(f"top_p={p:<6}: keeps tokens {top_p_keep(probs, p).nonzero().flatten().tolist()}")

# %% [markdown]
# p = 0.5 keeps only the 0.5 token (it reaches p exactly); p = 0.51 also needs the token that crosses it;
# a tiny p still keeps the most likely token, and p = 1 keeps everything. The filtered distributions for
# a handful of settings:

# %%
words = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat"]
logits_demo = torch.tensor([2.0, 1.6, 1.0, 0.8, 0.3, 0.0, -0.5, -1.0])


def filtered_probs(temperature=1.0, top_k=None, top_p=None):
    z = logits_demo / temperature
    if top_k is not None:
        z = top_k_filter(z, top_k)
    p = torch.softmax(z, dim=-1)
    if top_p is not None:
        p = p * top_p_keep(p, top_p)
    return p / p.sum()


def plot_sampling(temperature=1.0, top_k=8, top_p=1.0, ax=None):
    ax = ax or plt.subplots(figsize=(5, 2.4))[1]
    p = filtered_probs(temperature, top_k, top_p)
    ax.bar(words, p.tolist(), color=["tab:blue" if x > 0 else "lightgray" for x in p.tolist()])
    ax.set_ylim(0, 1)
    ax.set_title(f"T={temperature}, top_k={top_k}, top_p={top_p}", fontsize=10)
    return ax


fig, axes = plt.subplots(1, 4, figsize=(14, 2.6), sharey=True)
for ax, (t, kk, pp) in zip(axes, [(1.0, 8, 1.0), (0.5, 8, 1.0), (2.0, 3, 1.0), (1.0, 8, 0.7)]):
    plot_sampling(t, kk, pp, ax)
    ax.tick_params(axis="x", labelrotation=60)
fig.tight_layout()
plt.show()

# %% [markdown]
# Move the sliders to see the same picture for any setting (greedy is the limit τ -> 0):

# %%
# NBVAL_IGNORE_OUTPUT
def show_sampling(temperature, top_k, top_p):
    plot_sampling(temperature, top_k, top_p)
    plt.show()


_ = widgets.interact(show_sampling,
                     temperature=widgets.FloatSlider(value=1.0, min=0.1, max=3.0, step=0.1),
                     top_k=widgets.IntSlider(value=8, min=1, max=8),
                     top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05))

# %% [markdown]
# Sampling many times reproduces the filtered distribution, and the settings are checked:

# %%
many = sample_next_token(logits_demo.expand(20000, 8), temperature=1.0, top_p=0.7,
                         generator=torch.Generator().manual_seed(0))
print("sampled frequencies:", [round(f, 2) for f in (torch.bincount(many, minlength=8) / 20000).tolist()])
print("filtered probs:     ", [round(f, 2) for f in filtered_probs(1.0, None, 0.7).tolist()])
for bad in ({"top_p": 0.0}, {"temperature": 0.0}, {"top_k": 0}):
    try:
        sample_next_token(logits_demo[None], **bad)
    except ValueError as e:
        print("ValueError:", e)

# %% [markdown]
# ## 9. Beam search
#
# Greedy decoding takes the best *next* token, which is not always the start of the best *sequence*.
# Beam search keeps the `beam_width` best partial sequences (by total log-probability), extends each by
# every token, and keeps the best `beam_width` again. A tiny model where that matters: after token 0, token
# 1 looks better (0.6 vs 0.4), but after 1 everything is uncertain (0.25 each), while after 2 the model
# is sure (0.9 for token 3).

# %%
class BigramTable(nn.Module):
    """The next token's distribution depends only on the current token: a fixed (V, V) table of probabilities."""

    context_length = 100

    def __init__(self, probs):
        super().__init__()
        self.register_buffer("log_probs", probs.log())

    def forward(self, idx, cache=None):
        return self.log_probs[idx]  # (B, T) -> (B, T, V)


table = torch.full((4, 4), 0.25)
table[0] = torch.tensor([1e-6, 0.6, 0.4, 1e-6])
table[2] = torch.tensor([0.05, 1e-6, 0.05, 0.9])
trap = BigramTable(table / table.sum(-1, keepdim=True))
start = torch.zeros(1, 1, dtype=torch.long)

greedy_seq = generate(trap, start, 2, greedy=True, use_cache=False)
beams, scores = beam_search(trap, start, beam_width=2, max_new_tokens=2, use_cache=False)
greedy_logp = sum(trap.log_probs[a, b] for a, b in zip(greedy_seq[0, :-1], greedy_seq[0, 1:]))
print("greedy:", greedy_seq[0].tolist(), f"probability {math.exp(greedy_logp):.3f}")
print("beam 2:", beams[0].tolist(), f"probability {math.exp(scores[0]):.3f}")

# %% [markdown]
# With `beam_width = 1` beam search *is* greedy decoding; on the tiny decoder (with its KV cache, which
# beam search reorders as beams are kept or dropped):

# %%
prompt1 = prompt[:1]
one_beam, _ = beam_search(model, prompt1, beam_width=1, max_new_tokens=10)
print("beam_width=1 equals greedy:", torch.equal(one_beam, generate(model, prompt1, 10, greedy=True)))
four, four_scores = beam_search(model, prompt1, beam_width=4, max_new_tokens=10)
print("beam_width=4 log-probs, best first:", [round(s, 3) for s in four_scores.tolist()])

# %% [markdown]
# ## 10. Cost curves: time and memory against sequence length
#
# `benchmarks/attention_cost.py` times each method and measures its peak memory at lengths 128 to 8192
# on q, k, v of shape `(1, 4, T, 64)`: the naive masked attention of `course_utils`, PyTorch's fused
# `F.scaled_dot_product_attention`, chunked sliding window (window 256), chunked top-k (k = 32), Linformer
# (R = 256) and AFT-simple. Memory is *measured* as the growth of the process's peak resident memory
# during one call (`tracemalloc` cannot see PyTorch's allocations), next to the *computed* size of the
# largest score-like intermediate. The saved results of one run, with where and how it was made:

# %%
saved = json.loads((ROOT / "benchmarks" / "results" / "attention_cost_cpu.json").read_text())
print({key: saved["meta"][key] for key in ("device", "date", "torch", "command")})
methods = list(dict.fromkeys(r["method"] for r in saved["results"]))
fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 3.6))
for method in methods:
    rows = [r for r in saved["results"] if r["method"] == method]
    ax_t.plot([r["T"] for r in rows], [r["time_ms"] for r in rows], marker="o", label=method)
    ax_m.plot([r["T"] for r in rows], [max(r["peak_mb"], 0.1) for r in rows], marker="o", label=method)
for ax, label in ((ax_t, "time (ms)"), (ax_m, "peak memory growth (MB)")):
    ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel=label)
    ax.set_xticks([128, 512, 2048, 8192], ["128", "512", "2048", "8192"])
ax_t.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the slopes on the log-log axes: a slope of 2 is quadratic, 1 is linear. The saved run was made on
# a quiet 2-core machine (its load averages are in the file's `meta`); at small T every method is a few
# milliseconds and fixed overheads blur the order, so compare the large lengths, where each method's cost
# dominates:

# %%
by = {(r["method"], r["T"]): r for r in saved["results"]}
for method in methods:
    r1, r2 = by[(method, 4096)], by[(method, 8192)]
    print(f"{method:>15}: T=8192 {r2['time_ms'] / 1000:6.2f} s ({r2['ratio']:.2f}x naive), "
          f"peak +{r2['peak_mb']:7.1f} MB, memory x{r2['peak_mb'] / r1['peak_mb']:.1f} from T=4096")

# %% [markdown]
# Doubling T from 4096 to 8192 multiplies the naive method's memory by 4 (several `(T, T)` tensors:
# scores, masked scores, weights, about 3.3 GB at 8192) and the others' by about 2 or less: top-k holds one
# `(chunk, T)` block at a time, Linformer `(T, R)`, AFT-simple `(T, C)`; the sliding window's blocks do not
# grow at all (what grows is its output). Top-k saves memory, not time: it is *slower* than naive here,
# because it computes the scores twice and sorts them. The fused PyTorch kernel is exact, never
# materialises the matrix, and is an order of magnitude faster than naive at large T. Linformer and
# AFT-simple are the cheapest, at the price of being different models, and not causal.
#
# A small version runs live (its timings depend on your machine, so nbval ignores them):

# %%
# NBVAL_IGNORE_OUTPUT
bench = runpy.run_path(str(ROOT / "benchmarks" / "attention_cost.py"))
live = bench["run"](lengths=(128, 256, 512), repeats=2, verbose=False)
print(bench["table"](live))

# %% [markdown]
# ## 11. Check against `course_utils`
#
# The inline versions of this notebook against the package:

# %%
torch.testing.assert_close(local, sliding_window_mask(8, 3))
torch.testing.assert_close(k_heads.repeat_interleave(2, dim=1), repeat_kv(k_heads, 4))
torch.testing.assert_close(ours, theirs)
torch.testing.assert_close(chunked, ref_topk)
torch.testing.assert_close(cached_logits, full_logits)
torch.testing.assert_close(filtered_probs(1.0, None, 0.7),
                           torch.softmax(logits_demo, -1) * top_p_keep(torch.softmax(logits_demo, -1), 0.7)
                           / (torch.softmax(logits_demo, -1) * top_p_keep(torch.softmax(logits_demo, -1), 0.7)).sum())
print("matches course_utils (and F.scaled_dot_product_attention with enable_gqa=True)")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below it checks your function and, if it is wrong, names the
# mistake it looks like. Use plain tensor operations (the `course_utils` helpers would make them
# one-liners). Masks are boolean, the other results float32 like the inputs; leave the inputs unchanged
# (except the cache buffer of 07.4, which you write into). The checks also draw fresh inputs.
#
# ### Exercise 07.1: a sliding-window mask
#
# Write `my_sliding_window_mask(T, window)`: a boolean `(T, T)` mask, `True` = may attend, in which query
# i sees keys `i - window + 1 .. i` (itself included, never the future).

# %%
def my_sliding_window_mask(T, window):
    ### BEGIN SOLUTION
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T): i - j
    return (offset >= 0) & (offset < window)
    ### END SOLUTION


check("07.1", my_sliding_window_mask)

# %% [markdown]
# ### Exercise 07.2: repeat the KV heads for grouped-query attention
#
# Write `my_repeat_kv(k, num_heads)`: from keys `(B, Hkv, S, D)` return `(B, H, S, D)` in which query head
# h gets KV head `h // (H // Hkv)`, the wiring of `enable_gqa=True`.

# %%
def my_repeat_kv(k, num_heads):
    ### BEGIN SOLUTION
    return k.repeat_interleave(num_heads // k.shape[1], dim=1)
    ### END SOLUTION


check("07.2", my_repeat_kv)

# %% [markdown]
# ### Exercise 07.3: nucleus (top-p) sampling probabilities
#
# Write `nucleus_probs(logits, temperature, top_p)`: apply the temperature, take the softmax over the last
# axis, keep the smallest set of most likely tokens whose probabilities sum to at least `top_p`, and
# return the renormalised distribution `(..., V)` (zeros outside the nucleus).

# %%
def nucleus_probs(logits, temperature, top_p):
    ### BEGIN SOLUTION
    probs = torch.softmax(logits / temperature, dim=-1)  # (..., V)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p  # mass strictly before each token < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)
    ### END SOLUTION


check("07.3", nucleus_probs)

# %% [markdown]
# ### Exercise 07.4: append to a KV cache
#
# `cache` is a preallocated buffer `(B, H, capacity, D)` whose first `length` positions hold keys. Write
# `append_kv(cache, length, new)` that writes the new keys `(B, H, T, D)` into the buffer (in place) right
# after the cached ones, and returns the part of the buffer that now holds keys, `(B, H, length + T, D)`.

# %%
def append_kv(cache, length, new):
    ### BEGIN SOLUTION
    T = new.shape[2]
    cache[:, :, length:length + T] = new
    return cache[:, :, :length + T]
    ### END SOLUTION


check("07.4", append_kv)

# %% [markdown]
# ## Summary
#
# - The KV cache costs `2 × layers × Hkv × D` numbers per token: 512 KiB in float16 for a 7B-sized MHA
#   model, 128 KiB with 8 KV heads (GQA), 16 KiB with one (MQA). `GroupedQueryAttention` covers all three;
#   query head h reads KV head `h // (H / Hkv)` (`repeat_interleave`, as `enable_gqa=True`).
# - Sliding-window attention: `0 <= i - j < window`; a window >= T is causal attention. Computed in chunks
#   it never builds the `(T, T)` matrix. L layers see back `L (window - 1)` positions.
# - Linformer projects keys and values along the sequence to R rows: `(T, R)` scores, not causal.
#   AFT replaces dot products with a per-channel softmax over `k + w`; computed as a softmax it cannot
#   overflow, while the factorised `exp(w) @ (exp(k) v)` gives NaN at logits near 100.
# - Chunked top-k attention: O(chunk × S) memory, still O(T × S) time.
# - With a KV cache each generation step feeds one token; the tokens and logits equal recomputing the
#   prefix, and the time drops from quadratic to linear in the number of tokens.
# - Sampling: temperature on the logits, then top-k, then top-p (the token crossing p is kept), then
#   renormalise; greedy is the argmax. Beam search keeps the `beam_width` best sequences; width 1 is greedy.
#
# Next, notebook 08 trains a tiny GPT that follows the same cache protocol and generates text with
# `course_utils.generation`.
#
# ## Further reading
#
# - Shazeer, [Fast Transformer Decoding: One Write-Head is All You Need](https://arxiv.org/abs/1911.02150)
#   (2019): multi-query attention.
# - Ainslie et al., [GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
#   Checkpoints](https://arxiv.org/abs/2305.13245) (2023).
# - Beltagy et al., [Longformer: The Long-Document Transformer](https://arxiv.org/abs/2004.05150) (2020), and
#   Jiang et al., [Mistral 7B](https://arxiv.org/abs/2310.06825) (2023): sliding windows.
# - Wang et al., [Linformer: Self-Attention with Linear Complexity](https://arxiv.org/abs/2006.04768) (2020).
# - Zhai et al., [An Attention Free Transformer](https://arxiv.org/abs/2105.14103) (2021).
# - Gupta et al., [Memory-efficient Transformers via Top-k Attention](https://arxiv.org/abs/2106.06899) (2021).
# - Holtzman et al., [The Curious Case of Neural Text Degeneration](https://arxiv.org/abs/1904.09751)
#   (2020): nucleus sampling; Fan et al., [Hierarchical Neural Story Generation](https://arxiv.org/abs/1805.04833)
#   (2018): top-k sampling.
