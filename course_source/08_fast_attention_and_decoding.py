# %% [markdown]
# # 08 Fast attention and decoding, from the online softmax to beam search
#
# Plain attention builds the whole `(T, S)` matrix of scores, then of weights, before it can produce a
# single output: at 8192 tokens that is a gigabyte per matrix for four heads in float32. Yet fused kernels
# such as FlashAttention compute the *exact* same result without ever holding it. This notebook derives
# how, in plain PyTorch: a softmax that streams over blocks of scores (the **online softmax**), and
# attention computed one tile of queries and keys at a time (**tiled attention**). Then it turns to the
# other half of fast inference, generating text: the KV cache (and what it really saves), sampling, beam
# search; and it measures time and memory of every method of notebooks 07 and 08 against sequence length.
#
# **What you will learn**
#
# - the online softmax: a running maximum and a running sum, rescaled by `exp(m_old - m_new)` whenever
#   the maximum grows, and how two blocks' partial results merge exactly;
# - tiled attention, the algorithm of FlashAttention: exact, with causal and boolean masks and fully
#   masked rows, checked against `F.scaled_dot_product_attention`, never building the `(T, S)` matrix;
# - a KV cache, a test that cached generation gives *exactly* the tokens and logits of recomputing the
#   prefix, and what the cache saves: one factor of N, counted;
# - sampling with temperature, top-k and top-p; beam search;
# - measured time and memory curves: naive, tiled and fused attention, and the variants of notebook 07.
#
# **Prerequisites**: notebooks 02 (scaled attention, the stable softmax), 03 (masking: `causal_mask(T, S)`
# for a cache) and 04 (multi-head attention); notebook 07 (grouped-query attention and the KV cache's
# size, sliding windows), whose `TinyDecoder` generates here.
#
# **Time**: about 60 minutes. **Runs on**: CPU (the whole notebook takes well under a minute); the tiled
# attention cells use `device`, so on a GPU they run there.
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `D` head_dim,
# `Dv` value width, `V` vocab_size, `N` tokens generated. Masks are boolean, `True` = may attend.

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
from course_utils.fast_attention import block_partial, finish, merge_partials, online_softmax, tiled_attention
from course_utils.generation import beam_search, generate, sample_next_token, top_k_filter, top_p_keep
from course_utils.masking import causal_mask
from course_utils.variants import DecoderConfig, KVCache, TinyDecoder

device = setup_notebook(seed=0)
ROOT = Path(course_utils.__file__).resolve().parent.parent
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The online softmax
#
# A softmax needs two numbers per row before it can give any weight: the maximum `m` (subtracted so that
# no `exp` overflows, notebook 02) and the sum `l` of `exp(x - m)`. The weights are `exp(x - m) / l`.
# It looks as if the whole row must be in memory to find them. It need not be (Milakov & Gimelshein 2018).
# Read the row in blocks and keep only a running `m` and `l`. When a block brings a larger maximum
# `m_new`, the sum so far was taken relative to the old one, so multiply it by `exp(m_old - m_new)`
# (at most 1, it never overflows), then add the new block's `exp(x - m_new)`:

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
# `o`, the sum of `exp(score - m) * v` over the keys seen so far: not yet divided by `l`. A block of
# keys leaves such a **partial** `(m, l, o)` for every query, and two partials merge exactly:
#
# `m = max(m1, m2)`, `a1 = exp(m1 - m)`, `a2 = exp(m2 - m)`, `l = a1 l1 + a2 l2`, `o = a1 o1 + a2 o2`,
#
# and the output is `o / l`. Split the 9 keys of three queries in two blocks, merge, compare:

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
# partial is `(m, l, o) = (-inf, 0, 0)`. Merging two of those computes `exp(-inf - (-inf))`, which is NaN.
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
# Tiles of 7 and 13 do not divide 50: the last tile is simply shorter. This is the algorithm of
# **FlashAttention** (Dao et al. 2022) and, earlier, of Rabe & Staats (2021), who showed that attention
# needs far less memory than its `(T, S)` matrix. FlashAttention runs it as one fused GPU kernel: the
# `(T, S)` scores and weights never leave the chip's small, fast on-chip memory. As in the loops above, a
# tile of queries is loaded there once and every tile of k and v streams past it, so k and v are read
# again for each query tile; only the output (with `m` and `l` per query, for the backward pass) goes back
# to the large, slow GPU memory, and the backward pass recomputes the tiles instead of storing them. (The
# first FlashAttention nests the loops the other way round, k and v outside, and so re-reads the query
# tiles and rewrites the output once per k/v tile; FlashAttention-2 puts the queries outside, as here.)
# Dao et al. count Θ(T²D²/M) reads and writes of GPU memory for on-chip memory of M numbers, against
# Θ(TD + T²) for plain attention, and show that on a GPU plain attention is limited by those reads and
# writes of the `(T, S)` matrices, not by arithmetic, so avoiding them makes it faster *and* smaller. On a CPU, `F.scaled_dot_product_attention` runs a compiled version of the same blocked
# algorithm too (`_scaled_dot_product_flash_attention_for_cpu` in PyTorch's profiler).
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
# traffic, not arithmetic. Section 7 measures both on this CPU.
#
# %% [markdown]
# ## 4. The KV cache, with a tiny decoder
#
# To generate, a decoder-only model predicts the next token from the prefix, appends it, and repeats.
# Without a cache every step runs the model on the whole prefix again. With a cache, only the new token
# goes through the model; each attention layer appends the new key and value to the cache and attends
# over everything cached, with the bottom-right causal mask `causal_mask(T, S)` of notebook 03.
#
# `course_utils.variants` defines the protocol (in its docstring) that notebook 09's GPT follows too:
#
# - `forward(idx, cache=None) -> logits (B, T, V)`; with a cache, `idx` holds only the **new** tokens,
#   at absolute positions `cache.length ..` (learned position embeddings and RoPE both need that offset);
# - attention layer i calls `k, v = cache.update(i, k_new, v_new)`: append, get everything back;
# - `new_cache()` returns a `KVCache` whose capacity is the context length; overflowing it is an error.
#
# `TinyDecoder` is a small model that follows it: embeddings, pre-norm blocks of notebook 07's
# `GroupedQueryAttention` (optionally with a sliding window or RoPE) and an MLP, and an LM head.
# Untrained, but that is all the cache needs.

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
                        ("window 4", {"window": 4}), ("RoPE", {"positions": "rope"})]:
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
# **What the cache saves.** Without a cache, step n runs the model on all n tokens of the prefix: n
# token-passes through the projections and the MLP (each O(C²)), and n × n (query, key) pairs scored in
# every attention layer (each O(C)). Over a generation of N tokens that is about N²/2 token-passes and
# N³/3 pairs. With a cache, step n feeds one token: one token-pass, but its query still attends over all
# n cached keys, n pairs. In all: N token-passes and about N²/2 pairs. So the cache removes **one factor
# of N** from each: projections and MLP go from O(N² C²) to O(N C²), attention from O(N³ C) to O(N² C).
# It does not make generation linear: each cached step still grows with the context. Counted with hooks
# on the first attention layer (`mask` is `(T, S)` there: T × S pairs per head):

# %%
def count_work(model, N, use_cache):
    """Tokens fed to the model and (query, key) pairs one head of its first layer scores, generating N tokens."""
    work = {"token-passes": 0, "score pairs": 0}

    def count_tokens(module, args):
        work["token-passes"] += args[0].shape[1]  # idx (B, T): T tokens go through every layer

    def count_pairs(module, args):
        work["score pairs"] += args[1].shape[-2] * args[1].shape[-1]  # mask (T, S)

    hooks = [model.register_forward_pre_hook(count_tokens),
             model.blocks[0].attn.register_forward_pre_hook(count_pairs)]
    try:
        generate(model, torch.zeros(1, 1, dtype=torch.long), N, greedy=True, use_cache=use_cache)
    finally:
        for h in hooks:
            h.remove()
    return work


torch.manual_seed(0)
counter = TinyDecoder(DecoderConfig(context_length=256)).eval()
lengths = (16, 32, 64, 128)
counts = {c: [count_work(counter, N, c) for N in lengths] for c in (False, True)}
for use_cache, works in counts.items():
    for what in ("token-passes", "score pairs"):
        n = [w[what] for w in works]
        slope = math.log2(n[-1] / n[-2])  # growth exponent from N = 64 to 128
        print(f"use_cache={use_cache!s:>5} {what:>12}: {n}, grows as N^{slope:.1f}")

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for (use_cache, works), style, marker in zip(counts.items(), ("-", "--"), ("o", "x")):
    for what, color in (("token-passes", "tab:blue"), ("score pairs", "tab:orange")):
        ax.plot(lengths, [w[what] for w in works], style, color=color, marker=marker, markersize=8,
                label=f"{what}, {'cache' if use_cache else 'no cache'}")
ax.set(xscale="log", yscale="log", xlabel="tokens generated N", ylabel="count (one head, one layer)",
       title="work of a generation: the cache removes one factor of N")
ax.minorticks_off()
ax.set_xticks(lengths, [str(N) for N in lengths])
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Each line climbs by one power of N less with the cache. (The pairs scored *with* a cache and the
# token-passes *without* one are the same numbers, N(N + 1)/2: their lines coincide.)
#
# In time, on a slightly bigger model and 150 tokens (your numbers will differ). The cache saves
# recomputing the projections and the MLP of the whole prefix at every step; attention over the cache
# still grows with the context, as counted above, though in a model this small each cached step's time
# is mostly fixed overhead.

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
# ## 5. Sampling: greedy, temperature, top-k, top-p
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
# ## 6. Beam search
#
# Greedy decoding takes the best *next* token, which is not always the start of the best *sequence*.
# Beam search keeps the `beam_width` best partial sequences (by total log-probability), extends each by
# every token, and keeps the best `beam_width` again. This one is the bare algorithm: it has **no end
# token** (every beam gets exactly `max_new_tokens` new tokens) and **no length penalty**. Real decoders
# stop a beam at its end-of-sequence token, and then compare finished beams of different lengths; since
# every token adds a negative log-probability, raw sums favour short beams, so they divide by a length
# penalty (Wu et al. 2016). With equal lengths, as here, neither question arises. A tiny model where that matters: after token 0, token
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
# ## 7. Cost curves: time and memory against sequence length
#
# `benchmarks/attention_cost.py` times each method and measures its peak memory at lengths 128 to 8192
# on q, k, v of shape `(1, 4, T, 64)`, all causal except Linformer and AFT: the naive masked attention of
# `course_utils` (which builds the `(T, T)` scores and weights), PyTorch's fused
# `F.scaled_dot_product_attention`, the tiled attention of section 3 (tiles of 256 × 256), and notebook
# 07's chunked sliding window (window 256), chunked top-k (k = 32), Linformer (R = 256) and AFT-simple.
# Memory is *measured* as the growth of the process's peak resident memory during one call
# (`tracemalloc` cannot see PyTorch's allocations), next to the *computed* size of the largest score-like
# intermediate. The saved results of one run, with where and how it was made:

# %%
saved = json.loads((ROOT / "benchmarks" / "results" / "attention_cost_cpu.json").read_text())
print({key: saved["meta"][key] for key in ("device", "date", "torch", "command")})
print("load average (1, 5, 15 min) before:", [round(x, 2) for x in saved["meta"]["load_average_1_5_15min"]["before"]])
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
# Read the slopes on the log-log axes: a slope of 2 is quadratic, 1 is linear. At small T every method
# takes a few milliseconds and fixed overheads blur the order, so compare the large lengths:

# %%
by = {(r["method"], r["T"]): r for r in saved["results"]}
for method in methods:
    r1, r2 = by[(method, 4096)], by[(method, 8192)]
    print(f"{method:>15}: T=8192 {r2['time_ms'] / 1000:6.2f} s ({r2['ratio']:.2f}x naive), "
          f"peak +{r2['peak_mb']:7.1f} MB, memory x{r2['peak_mb'] / r1['peak_mb']:.1f} from T=4096")

# %% [markdown]
# **Memory**, measured per call, is the clear part. Doubling T from 4096 to 8192 multiplies the naive
# method's memory by about 4: it holds several `(T, T)` tensors (scores, masked scores, weights). Tiled
# attention's grows by less than 2, like its inputs and output: its tiles stay 256 × 256. The fused
# kernel's grows the same way. Of notebook 07's variants, top-k holds one `(chunk, T)` block at a time, the
# sliding window's blocks do not grow at all (what grows is its output), Linformer holds `(T, R)` and
# AFT-simple `(T, C)`.
#
# **Time.** The run started on a quiet machine (a load average of 0.5; the benchmark's own two threads
# bring it to about 2). The tiled loop is *slower* than the fused kernel at every length, about 4 to 6
# times from 256 tokens up. That is expected, and not the point: it does the arithmetic one small tile at
# a time from Python, with no fusion. The point is its memory curve, and the algorithm, which is what the
# fused kernels run in compiled code (FlashAttention on a GPU, PyTorch's flash kernel for the CPU here).
# From 512 tokens up it is still faster than naive attention, which computes the whole `(T, T)` matrix,
# masked half included, and writes and reads it several times, where the tiled loop skips the future
# tiles. Top-k saves memory, not time: it is slower than naive, because it computes the scores twice and
# sorts them. Linformer and AFT-simple are the cheapest, at the price of being different models, and not
# causal.
#
# A small version runs live, tiled attention included (its timings depend on your machine, so nbval
# ignores them):

# %%
# NBVAL_IGNORE_OUTPUT
bench = runpy.run_path(str(ROOT / "benchmarks" / "attention_cost.py"))
live = bench["run"](lengths=(128, 256, 512), repeats=2, verbose=False, min_time_s=0.05)
print(bench["table"](live))

# %% [markdown]
# ## 8. Check against `course_utils`
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
torch.testing.assert_close(cached_logits, full_logits)
probs_demo = torch.softmax(logits_demo, -1)
nucleus = probs_demo * top_p_keep(probs_demo, 0.7)
torch.testing.assert_close(filtered_probs(1.0, None, 0.7), nucleus / nucleus.sum())
print("matches course_utils (and F.scaled_dot_product_attention)")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below it checks your function and, if it is wrong, names the
# mistake it looks like. Use plain tensor operations (the `course_utils` helpers would make them
# one-liners). Results are float32 like the inputs; leave the inputs unchanged (except the cache buffer of
# 08.3, which you write into). The checks also draw fresh inputs.
#
# ### Exercise 08.1: merge two blocks of an online softmax
#
# Two blocks of keys have left, for each query, the partials `(m1, l1, o1)` and `(m2, l2, o2)` of section
# 2: `m` and `l` of shape `(..., T, 1)`, `o` of shape `(..., T, Dv)`. Write `merge_blocks(m1, l1, o1, m2,
# l2, o2)` that returns the partial `(m, l, o)` of both blocks together, with `m` the larger maximum. A
# query that saw no key in either block has `(-inf, 0, 0)` twice and must get `(-inf, 0, 0)` back, not
# NaN. The checks include blocks whose scores differ by more than a hundred.

# %%
def merge_blocks(m1, l1, o1, m2, l2, o2):
    ### BEGIN SOLUTION
    m = torch.maximum(m1, m2)  # (..., T, 1)
    m_safe = m.masked_fill(m == float("-inf"), 0.0)  # queries that saw no key: nothing to rescale
    a1, a2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)  # (..., T, 1), each at most 1
    return m, a1 * l1 + a2 * l2, a1 * o1 + a2 * o2
    ### END SOLUTION


check("08.1", merge_blocks)

# %% [markdown]
# ### Exercise 08.2: nucleus (top-p) sampling probabilities
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


check("08.2", nucleus_probs)

# %% [markdown]
# ### Exercise 08.3: append to a KV cache
#
# `cache` is a preallocated buffer `(B, H, capacity, D)` whose first `length` positions hold keys. Write
# `append_kv(cache, length, new)` that writes the new keys `(B, H, T, D)` into the buffer (in place) right
# after the cached ones, and returns the part of the buffer that now holds keys, `(B, H, length + T, D)`.
# The slots after `length` may hold anything: zeros in a fresh buffer, an earlier sequence's keys in one
# that is reused.

# %%
def append_kv(cache, length, new):
    ### BEGIN SOLUTION
    T = new.shape[2]
    cache[:, :, length:length + T] = new
    return cache[:, :, :length + T]
    ### END SOLUTION


check("08.3", append_kv)

# %% [markdown]
# ## Summary
#
# - The online softmax keeps a running maximum `m` and sum `l`, rescaling the sum by `exp(m_old - m_new)`
#   when the maximum grows. With the unnormalised output `o`, two blocks' partials `(m, l, o)` merge
#   exactly; a query that saw no key stays `(-inf, 0, 0)` and its output is 0.
# - Tiled attention merges one `(q_tile, kv_tile)` tile of scores at a time: exact, O(tile) memory for the
#   scores instead of O(T × S), the same O(T × S × D) work (less with causal tiles skipped). It is the
#   algorithm of FlashAttention; in plain PyTorch on a CPU it is slower than the fused kernel, which runs
#   it in compiled code, but its memory stays flat where naive attention's grows as T².
# - With a KV cache each generation step feeds one token; the tokens and logits equal recomputing the
#   prefix. The cache removes one factor of N from a generation of N tokens: N token-passes instead of
#   about N²/2 (projections and MLP O(N² C²) -> O(N C²)), about N²/2 scored pairs instead of N³/3
#   (attention O(N³ C) -> O(N² C)). Each cached step still attends over the whole context.
# - Sampling: temperature on the logits, then top-k, then top-p (the token crossing p is kept), then
#   renormalise; greedy is the argmax. Beam search keeps the `beam_width` best sequences; width 1 is
#   greedy. Ours has no end token and no length penalty.
#
# Next, notebook 09 trains a tiny GPT that follows the same cache protocol and generates text with
# `course_utils.generation`.
#
# ## Further reading
#
# - Milakov & Gimelshein, [Online normalizer calculation for softmax](https://arxiv.org/abs/1805.02867)
#   (2018): the online softmax.
# - Rabe & Staats, [Self-attention Does Not Need O(n²) Memory](https://arxiv.org/abs/2112.05682) (2021).
# - Dao et al., [FlashAttention: Fast and Memory-Efficient Exact Attention with
#   IO-Awareness](https://arxiv.org/abs/2205.14135) (2022); Dao, [FlashAttention-2: Faster Attention with
#   Better Parallelism and Work Partitioning](https://arxiv.org/abs/2307.08691) (2023).
# - Pope et al., [Efficiently Scaling Transformer Inference](https://arxiv.org/abs/2211.05102) (2022): the
#   KV cache, its memory and its cost in practice.
# - Holtzman et al., [The Curious Case of Neural Text Degeneration](https://arxiv.org/abs/1904.09751)
#   (2020): nucleus sampling; Fan et al., [Hierarchical Neural Story Generation](https://arxiv.org/abs/1805.04833)
#   (2018): top-k sampling.
# - Wu et al., [Google's Neural Machine Translation System](https://arxiv.org/abs/1609.08144) (2016): beam
#   search with a length penalty.
