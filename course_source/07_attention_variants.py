# %% [markdown]
# # 07 Attention variants: cheaper heads, local windows, linear mixers
#
# Plain attention has two costs that grow badly. Training and prefill build a `(T, T)` score matrix:
# time and memory grow as T². Generation keeps the keys and values of every earlier token of every
# layer in a **KV cache**, and every new token reads all of it: memory and memory traffic grow with the
# number of KV heads times the context. Every variant in this notebook attacks one of those costs by
# changing *one* thing (how many key/value heads there are, which keys are visible, how the scores are made)
# and reusing everything else. Each one is checked against the plain masked attention of notebooks 02-04
# or against PyTorch. Notebook 08 computes *exact* attention without the `(T, T)` matrix and measures every
# method here against sequence length; notebook 09 generates with the KV cache.
#
# **What you will learn**
#
# - multi-query and grouped-query attention: one module with `num_kv_heads`, what the KV cache costs in
#   memory and in bytes read per generated token, and why `repeat_interleave` (not `repeat`) matches PyTorch;
# - sliding-window attention as a mask and as a chunked computation that never builds the `(T, T)`
#   matrix, how the course's `window` relates to Mistral's and Longformer's, and how the receptive field
#   grows with depth;
# - Linformer (keys and values projected along the sequence), including what its fixed-size projections
#   do to shorter inputs, and the attention-free transformer (AFT), written so that large logits cannot
#   overflow;
# - chunked top-k attention, whose peak memory is O(chunk × T) instead of O(T²);
# - linear attention in brief: a state of constant size in place of a growing cache (notebook 13 builds it).
#
# **Prerequisites**: notebooks 02 (scaled attention), 03 (masking) and 04 (multi-head attention).
# Notebook 06 (positions) helps for the RoPE remark.
#
# **Time**: about 50 minutes. **Runs on**: CPU (the whole notebook takes well under a minute).
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `Hkv`
# num_kv_heads, `D` head_dim. Masks are boolean, `True` = may attend.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.gpt import GPT, GPTConfig
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.variants import (
    GroupedQueryAttention,
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
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The bill: a KV cache to store, and to read at every step
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
# With one key/value head per query head, eight sequences of 4096 tokens need 16 GiB of cache, more
# than the float16 weights of the model itself (about 14 GB). The cache, not the weights, limits the batch
# size and the context. Sharing key/value heads divides the bill by `H / Hkv`.
#
# Size is the smaller half of the argument. Shazeer's (2019) is **memory bandwidth**: a decoding step
# computes one token per sequence yet reads its whole cache, and a GPU does a few hundred FLOPs in the time
# it reads one byte (H100 SXM: about 990 TFLOP/s dense float16, 3.35 TB/s; NVIDIA's datasheet). The
# **arithmetic intensity**, FLOPs per byte read, says which limits a step. Per new token and layer,
# attention does `4 × H × S × D` FLOPs (`q · k` and `weights @ v`, 2 per multiply-add) and reads
# `2 × Hkv × S × D` cached numbers. For notebook 10's GPU-sized GPT at full context, weights included (2
# FLOPs per parameter per token, read once per step for the whole batch):

# %%
cfg = GPTConfig.preset("gpu")  # 6 layers, 6 heads of head_dim 64, context 256
L, H_gpt, S_gpt = cfg.num_layers, cfg.num_heads, cfg.context_length
D_gpt = cfg.embed_dim // H_gpt
print(f"{'':>8} {'cache read':>12} {'attention':>10}   FLOPs per byte read (float16)")
print(f"{'':>8} {'per sequence':>12} {'FLOPs':>10} {'attention':>10} {'batch 1':>9} {'batch 64':>9} {'batch 512':>9}")
for name, kv in (("MHA (6)", 6), ("GQA (2)", 2), ("MQA (1)", 1)):
    with torch.device("meta"):  # shapes only: no memory, no random numbers drawn
        n_params = GPT(GPTConfig.preset("gpu", num_kv_heads=kv)).num_parameters()
    cache = kv_cache_bytes(L, kv, D_gpt, num_tokens=S_gpt)  # every key and value of every layer, 2 bytes each
    attn = L * H_gpt * 4 * S_gpt * D_gpt  # per new token
    per_batch = [b * (2 * n_params + attn) / (2 * n_params + b * cache) for b in (1, 64, 512)]
    print(f"{name:>8} {cache / 2**20:>8.2f} MiB {attn / 1e6:>8.2f} M {attn / cache:>10.1f}",
          " ".join(f"{x:>9.1f}" for x in per_batch))

# %% [markdown]
# Attention alone does `H / Hkv` FLOPs per byte in float16 (1 for MHA, 3 and 6 here), whatever the
# batch and the context: every sequence reads its own cache. Batching shares the weights, not the cache, so
# with MHA no batch lifts a step above about 10 FLOPs per byte here, far below the few hundred where
# arithmetic would limit. Decoding waits on memory. Once the cache outweighs the weights (large batches,
# long contexts), MQA and GQA read `H / Hkv` times less per step, and that, more than the memory saved, is
# why they make decoding faster; at batch 1 this small model's step is mostly weight reads (1.0 to 1.1).
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
alternated, _ = scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), causal_mask(T))
print("out", tuple(ours.shape))
print("repeat_interleave vs enable_gqa, agree to 1e-6:", (ours - theirs).abs().max().item() < 1e-6)
print("repeat            vs enable_gqa, max abs diff:", round((alternated - theirs).abs().max().item(), 2))

# %% [markdown]
# `GroupedQueryAttention(embed_dim, num_heads, num_kv_heads)` is the module, and notebook 10's GPT uses it
# too. Its packed `qkv_proj` holds C rows for q as usual, but only `Hkv * D` rows each for k and v, so
# it is smaller too (`num_kv_heads` left out is `num_heads`: multi-head attention).

# %%
C = 32
for kv in (4, 2, 1):
    layer = GroupedQueryAttention(C, num_heads=4, num_kv_heads=kv)
    n_params = sum(p.numel() for p in layer.parameters())
    print(f"num_kv_heads={kv}: qkv_proj {tuple(layer.qkv_proj.weight.shape)}, parameters {n_params}")

# %% [markdown]
# **Two claims to check.** With `num_kv_heads == num_heads` it is ordinary multi-head attention: copy
# the weights of notebook 04's `MultiHeadAttention` (the same packed `qkv_proj`) and compare outputs
# and weights.

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
q_m, k_m, v_m = mqa.qkv_proj(x).split([C, 8, 8], dim=-1)  # (B, T, C), (B, T, D), (B, T, D)
q_m = q_m.view(Bx, Tx, 4, 8).transpose(1, 2)  # (B, H, T, D)
k_m, v_m = k_m[:, None], v_m[:, None]  # (B, 1, T, D): broadcast over the 4 heads
ref, _ = scaled_dot_product_attention(q_m, k_m, v_m, causal_mask(Tx))
ref = mqa.out_proj(ref.transpose(1, 2).reshape(Bx, Tx, C))
torch.testing.assert_close(mqa(x, causal_mask(Tx)), ref)
print("GQA with num_kv_heads == 1 is MQA")

# %% [markdown]
# ## 3. Sliding-window (local) attention
#
# In sliding-window attention each query sees only the last few positions. In this course `window`
# counts the keys a query sees, itself included: key j is visible from query i when
# `0 <= i - j < window`. It is the causal mask with the far past cut off.

# %%
window = 3
i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]  # query and key positions
local = (i - j >= 0) & (i - j < window)  # (T, T)
print(local.int())
print("sliding_window_mask agrees:", torch.equal(local, sliding_window_mask(8, window)))
print("a window >= T is the causal mask:", torch.equal(sliding_window_mask(8, 8), causal_mask(8)),
      torch.equal(sliding_window_mask(8, 100), causal_mask(8)))

# %% [markdown]
# Papers and implementations count windows differently, so check which count a number is before copying it:
#
# - **Mistral 7B** (Jiang et al. 2023) writes W as a *distance*: position i attends to `i - W .. i`, W + 1
#   keys, `window = W + 1` here. Its code disagrees with itself. The paper's rolling-buffer cache has W slots
#   (the query and the W - 1 positions before it), so a decoding step sees W keys, and xformers' local mask
#   and Hugging Face's eager path keep those W: W = 4096 runs as `window = 4096`. But the prefill mask of
#   Mistral's one-file reference code, `triu(tril(ones), diagonal=-W)`, keeps `i - W .. i`: W + 1 keys, as
#   the text says, so a prompt read at once and the same tokens decoded one at a time differ by the oldest
#   key. FlashAttention's `window_size=(left, 0)` means keys `i - left .. i`, `window = left + 1`: Mistral's
#   4096 keys are `(4095, 0)` there. Libraries have disagreed by this one key (Hugging Face transformers
#   issues #29623, #39408).
# - **Longformer** (Beltagy et al. 2020), as an encoder, looks *both ways* (about w / 2 positions on each
#   side, future included: not causal) and gives a few positions *global* attention, to and from every
#   token. Its character-level language models use causal windows instead, dilated in higher layers.

# %%
W = 2  # Mistral's W
paper_text = (i - j >= 0) & (i - j <= W)  # (T, T): keys i - W .. i, W + 1 of them
paper_code = (i - j >= 0) & (i - j < W)  # (T, T): W keys, the query's own included
print("the text's W = 2 is window = 3:", torch.equal(paper_text, sliding_window_mask(8, W + 1)),
      "| the cache's W = 2 is window = 2:", torch.equal(paper_code, sliding_window_mask(8, W)))
slots = [None] * W  # a rolling-buffer cache of W slots: position p is written to slot p % W
for p in range(8):
    slots[p % W] = p
print("after position 7 the buffer holds positions", sorted(slots), "= the keys of row 7 with window = W:",
      sliding_window_mask(8, W)[7].nonzero().flatten().tolist())
left = W - 1  # FlashAttention's window_size=(left, 0): keys i - left .. i
flash = (i - j >= 0) & (i - j <= left)  # (T, T)
print("window_size=(1, 0) is window = 2:", torch.equal(flash, sliding_window_mask(8, left + 1)))
prefill = torch.triu(torch.ones(8, 8).tril(), diagonal=-W).bool()  # (T, T): the reference code's prefill mask
print("the reference prefill mask with W = 2 is window = 3:", torch.equal(prefill, sliding_window_mask(8, W + 1)))
w = 4  # Longformer's window: w / 2 on each side
longformer = (i - j).abs() <= w // 2
longformer[:, 0] = longformer[0, :] = True  # position 0 as a global token: it sees and is seen by all
print(longformer.int())

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
# and L layers reach `L (window - 1)`. With Mistral's 32 layers, the last layer can in principle draw on
# 32 × 4095 = 131,040 earlier positions with the cache's `window = 4096` (32 × 4096 = 131,072 with the
# text's 4097): either way the "131K tokens" of the paper. Which inputs reach output 23 after L layers is
# a product of the mask with itself, L times:

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
# keys and values *along the sequence* down to R summary rows with `(R, S)` matrices: `k' = E k`,
# `v' = F v`. Every query then attends to R rows instead of S, so the scores are `(T, R)`: linear in T for
# a fixed R. With R = S and identity projections nothing changes:

# %%
g = torch.Generator().manual_seed(2)
T_lin = 256
q, k, v = (torch.randn(1, 2, T_lin, 16, generator=g) for _ in range(3))  # (B, H, T, D)
full, _ = scaled_dot_product_attention(q, k, v)
eye = torch.eye(T_lin)
print("identity projections, agree with full attention to 1e-6:",
      (linformer_attention(q, k, v, eye, eye) - full).abs().max().item() < 1e-6)

# %% [markdown]
# The paper's theorem (its Theorem 2) uses **random** Gaussian projections: by the Johnson-Lindenstrauss
# lemma, R of order `D log D / ε²` rows, whatever the length, keep each output row, with high probability,
# within `ε ‖p‖ ‖V‖` of full attention's, where p is that row's softmax weights. The bound is relative:
# ε times the norms, so an output row with large values may stray further than ε. Trained models learn E and F. With random ones and R = 32 the scores
# are `(256, 32)`. But every summary row mixes *all* positions, the future included, so Linformer is not
# causal: changing the last token changes the first output. It fits encoders, not the decoders of
# notebooks 09 and 10.

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
# **E and F are tied to a maximum length.** They are `(R, L)` for the longest sequence L the model takes
# (its context length). A shorter input of S positions uses their first S columns
# (`linformer_attention` slices `E[:, :S]` without a word): exactly what zero-padding the sequence to L
# gives, since zero rows of k and v add nothing to `E @ k`.

# %%
S_short = 100
q_s, k_s, v_s = q[..., :S_short, :], k[..., :S_short, :], v[..., :S_short, :]  # (B, H, 100, D)
sliced = linformer_attention(q_s, k_s, v_s, E, Fp)  # E, Fp are (R, 256): silently cut to (R, 100)
pad = torch.zeros(1, 2, T_lin - S_short, 16)  # (B, H, 156, D) zero rows
padded = linformer_attention(q_s, torch.cat([k_s, pad], dim=2), torch.cat([v_s, pad], dim=2), E, Fp)
print("slicing E and F = zero-padding k and v to 256, agree to 1e-6:",
      (sliced - padded).abs().max().item() < 1e-6)

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
# The rescued form matches where it is finite, but its first row shows an *underflow*: when the key that
# sets the per-channel maximum is invisible to query t, every visible `exp(k - k_max)` can round to 0, and
# 0 / 0 follows. The softmax form subtracts the maximum over exactly the keys each query sees, so
# `course_utils` uses it (memory `B × T × S × C`). Two more checks: AFT-simple is AFT-full with `w = 0`,
# in O(T × C); AFT-local's bias is zero outside the window.

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
# Notebook 08 measures the time and memory of every method here against sequence length.
#
# ## 7. Linear attention, in brief
#
# Softmax gives key j the weight `exp(q_t · k_j / √D)`, normalised over the row. Linear attention
# (Katharopoulos et al. 2020) gives it `φ(q_t) · φ(k_j)` instead, with a positive feature map, `φ = elu + 1`,
# normalised the same way. A dot product of features can be regrouped, so the query leaves the sum over keys:
# `out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t`, with `S_t = Σ_{j<=t} φ(k_j) v_jᵀ` and `z_t = Σ_{j<=t} φ(k_j)`. Both
# are running sums, so generating keeps a state of fixed size, `D × Dv` numbers (and D more) a head, where
# softmax attention's KV cache grows by a key and a value every token. Notebook 13 takes it from there: the
# recurrent step (its Exercise 13.4), the state against the cache, what a fixed state can remember, and the
# descendants that forget and correct.
#
# ## 8. Check against `course_utils`
#
# The inline versions of this notebook against the package:

# %%
torch.testing.assert_close(local, sliding_window_mask(8, 3))
torch.testing.assert_close(k_heads.repeat_interleave(2, dim=1), repeat_kv(k_heads, 4))
torch.testing.assert_close(ours, theirs)
torch.testing.assert_close(paper_text, sliding_window_mask(8, W + 1))
torch.testing.assert_close(paper_code, sliding_window_mask(8, W))
torch.testing.assert_close(prefill, sliding_window_mask(8, W + 1))
torch.testing.assert_close(sliced, padded)
torch.testing.assert_close(chunked, ref_topk)
print("matches course_utils (and F.scaled_dot_product_attention with enable_gqa=True)")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below checks it and, if it is wrong, names the mistake it looks
# like. Use plain tensor operations. Masks are
# boolean, the other results float32 like the inputs; leave the inputs unchanged.
#
# ### Exercise 07.1: a sliding-window mask (8 min, core)
#
# Write `my_sliding_window_mask(T, window)`: a boolean `(T, T)` mask, `True` = may attend, in which query
# i sees keys `i - window + 1 .. i` (`window` keys, itself included, never the future; the course's
# definition, not Mistral's).

# %%
def my_sliding_window_mask(T, window):
    ### BEGIN SOLUTION
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T): i - j
    return (offset >= 0) & (offset < window)
    ### END SOLUTION


check("07.1", my_sliding_window_mask)

# %% [markdown]
# ### Exercise 07.2: repeat the KV heads for grouped-query attention (8 min, core)
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
# ### Exercise 07.3: AFT-simple (8 min, core)
#
# Write `my_aft_simple(q, k, v)` for q `(B, T, C)` and k, v `(B, S, C)`: for each channel c, weights over
# the S positions from a softmax of the keys, a weighted sum of the values with them, and that mix gated
# by `sigmoid(q)`:
#
# `out[t, c] = sigmoid(q[t, c]) * sum_s softmax_s(k[:, c])[s] * v[s, c]`
#
# Key logits may be near 100, as in trained models, so the result must not overflow.

# %%
def my_aft_simple(q, k, v):
    ### BEGIN SOLUTION
    weights = torch.softmax(k, dim=-2)  # (B, S, C): a distribution over the positions, per channel
    mixed = (weights * v).sum(dim=-2, keepdim=True)  # (B, 1, C): the same mix for every query
    return torch.sigmoid(q) * mixed  # (B, T, C)
    ### END SOLUTION


check("07.3", my_aft_simple)


# %% [markdown]
# ## Summary
#
# - The KV cache holds `2 × layers × Hkv × D` numbers per token (512 KiB in float16 for a 7B-sized MHA
#   model, 16 KiB with MQA). Every decoding step reads all of it: once the cache outweighs the weights,
#   decoding is bound by that read, so fewer KV heads make it faster. `GroupedQueryAttention` covers MHA,
#   GQA and MQA; query head h reads KV head `h // (H / Hkv)`.
# - Sliding windows: `0 <= i - j < window`. Mistral's text gives W + 1 keys, its rolling cache W and its
#   reference prefill mask W + 1; FlashAttention's `(left, 0)` left + 1. L layers reach back `L (window - 1)` positions.
# - Linformer: `(T, R)` scores, not causal. AFT: a per-channel softmax over `k + w`, which cannot overflow.
#   Chunked top-k: O(chunk × S) memory, still O(T × S) time.
# - Linear attention: `φ(q) · φ(k)` instead of `exp(q · k)`, a state of constant size; notebook 13.
#
# Next, notebook 08 computes exact attention tile by tile (the idea behind FlashAttention) and measures all
# of these methods against sequence length; notebook 09 generates text with a KV cache, sampling and beam
# search.
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
# - Katharopoulos et al., [Transformers are RNNs: Fast Autoregressive Transformers with Linear
#   Attention](https://arxiv.org/abs/2006.16236) (2020).
