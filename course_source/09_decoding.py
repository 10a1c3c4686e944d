# %% [markdown]
# # 09 Decoding: the KV cache, sampling and beam search
#
# A trained decoder gives, for every position, logits over the next token. Generating text is a loop: feed
# the prefix, turn the last logits into one token, append it, repeat. This notebook makes that loop fast
# and tunable: the **KV cache**, which stops every step from recomputing the whole prefix (and what it
# really saves, counted), **sampling** with temperature, top-k and top-p, and **beam search**. Every piece
# is checked: cached generation gives *exactly* the tokens of recomputing the prefix.
#
# **What you will learn**
#
# - a KV cache, a test that cached generation gives *exactly* the tokens and logits of recomputing the
#   prefix, and what the cache saves: one factor of N, counted;
# - sampling with temperature, top-k and top-p (and where the token that crosses p goes);
# - beam search, and when it beats greedy decoding.
#
# **Prerequisites**: notebooks 03 (masking: `causal_mask(T, S)` for a cache) and 07 (grouped-query
# attention and the KV cache's size, sliding windows); notebook 10's `GPT`, untrained and tiny, generates here.
#
# **Time**: about 40 minutes. **Runs on**: CPU (the whole notebook takes well under a minute).
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `D` head_dim,
# `V` vocab_size, `N` tokens generated. Masks are boolean, `True` = may attend.

# %%
# NBVAL_IGNORE_OUTPUT
import math
import time
from dataclasses import replace

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from torch import nn

from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.generation import beam_search, generate, sample_next_token, top_k_filter, top_p_keep
from course_utils.gpt import GPT, GPTConfig
from course_utils.variants import KVCache

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The KV cache, with a tiny decoder
#
# To generate, a decoder-only model predicts the next token from the prefix, appends it, and repeats.
# Without a cache every step runs the model on the whole prefix again. With a cache, only the new token
# goes through the model; each attention layer appends the new key and value to the cache and attends
# over everything cached, with the bottom-right causal mask `causal_mask(T, S)` of notebook 03.
#
# `course_utils.variants` defines the protocol (in its docstring) that `course_utils.generation` relies on:
#
# - `forward(idx, cache=None) -> logits (B, T, V)`; with a cache, `idx` holds only the **new** tokens,
#   at absolute positions `cache.length ..` (learned position embeddings and RoPE both need that offset);
# - attention layer i calls `k, v = cache.update(i, k_new, v_new)`: append, get everything back;
# - `new_cache()` returns a `KVCache` whose capacity is the context length; overflowing it is an error.
#
# The model is notebook 10's `GPT`, built here tiny and untrained (that is all the cache needs): embeddings,
# pre-norm blocks of notebook 07's `GroupedQueryAttention` (optionally with a sliding window or RoPE) and an
# MLP, and an LM head. (Pre-norm, built in notebook 10: `x + attention(LayerNorm(x))`, then
# `x + MLP(LayerNorm(x))`.) Its own `forward` also takes targets and returns `(logits, loss)`;
# `for_generation()` is the same model behind the protocol above.

# %%
torch.manual_seed(0)
cfg = GPTConfig(vocab_size=16, context_length=32, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=2)
model = GPT(cfg).eval().for_generation()
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
    m = GPT(replace(cfg, **overrides)).eval().for_generation()
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
# It does not make generation linear: each cached step still grows with the context. Counted with a hook on
# the model's calls: token-passes (each token fed goes through every layer) and the pairs one head of one
# layer scores (the T tokens fed, as queries, against S = what the cache holds + T keys):

# %%
def count_work(model, N, use_cache):
    """Tokens fed to the model and (query, key) pairs one head of one layer scores, for N tokens."""
    work = {"token-passes": 0, "score pairs": 0}

    def count(module, args):
        idx, cache = args[0], (args[1] if len(args) > 1 else None)  # generate calls model(idx[, cache])
        T = idx.shape[1]
        work["token-passes"] += T
        work["score pairs"] += T * (T + (0 if cache is None else cache.length))  # (T, S) scores

    hook = model.register_forward_pre_hook(count)
    try:
        generate(model, torch.zeros(1, 1, dtype=torch.long), N, greedy=True, use_cache=use_cache)
    finally:
        hook.remove()
    return work


torch.manual_seed(0)
counter = GPT(replace(cfg, context_length=256)).eval().for_generation()
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
    for what, of, color in (("token-passes", "whole model", "tab:blue"),
                            ("score pairs", "one head, one layer", "tab:orange")):
        ax.plot(lengths, [w[what] for w in works], style, color=color, marker=marker, markersize=8,
                label=f"{what} ({of}), {'cache' if use_cache else 'no cache'}")
ax.set(xscale="log", yscale="log", xlabel="tokens generated N", ylabel="count",
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
bigger = GPT(GPTConfig(vocab_size=64, context_length=256, embed_dim=64, num_heads=8, num_kv_heads=2,
                       num_layers=4)).eval().for_generation()
start = torch.zeros(1, 8, dtype=torch.long)
for use_cache in (False, True):
    t0 = time.perf_counter()
    generate(bigger, start, 150, greedy=True, use_cache=use_cache)
    print(f"use_cache={use_cache!s:>5}: {time.perf_counter() - t0:.2f} s for 150 tokens")

# %% [markdown]
# ## 2. Sampling: greedy, temperature, top-k, top-p
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
# ## 3. Beam search
#
# Greedy decoding takes the best *next* token, which is not always the start of the best *sequence*.
# Beam search keeps the `beam_width` best partial sequences (by total log-probability), extends each by
# every token, and keeps the best `beam_width` again. This one is the bare algorithm: it has **no end
# token** (every beam gets exactly `max_new_tokens` new tokens) and **no length penalty**. Real decoders
# stop a beam at its end-of-sequence token, and then compare finished beams of different lengths; since
# every token adds a negative log-probability, raw sums favour short beams, so they divide by a length
# penalty (Wu et al. 2016). With equal lengths, as here, neither question arises. A tiny model where
# that matters: after token 0, token 1 looks better (0.6 vs 0.4), but after 1 everything is uncertain
# (0.25 each), while after 2 the model is sure (0.9 for token 3).

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
# ## 4. Check against `course_utils`
#
# The inline versions of this notebook against the package:

# %%
torch.testing.assert_close(cached_logits, full_logits)
probs_demo = torch.softmax(logits_demo, -1)
nucleus = probs_demo * top_p_keep(probs_demo, 0.7)
torch.testing.assert_close(filtered_probs(1.0, None, 0.7), nucleus / nucleus.sum())
print("matches course_utils")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below it checks your function and, if it is wrong, names the
# mistake it looks like. Use plain tensor operations (the `course_utils` helpers would make them
# one-liners). Results are float32 like the inputs; leave the inputs unchanged (except the cache buffer of
# 09.2, which you write into). The checks also draw fresh inputs.
#
# ### Exercise 09.1: nucleus (top-p) sampling probabilities (8 min, core)
#
# Write `nucleus_probs(logits, temperature, top_p)`: apply the temperature, take the softmax over the last
# axis, keep the smallest set of most likely tokens whose probabilities sum to at least `top_p`, and
# return the renormalised distribution `(..., V)` (zeros outside the nucleus). `logits` may have any number
# of leading axes, or none, and `-inf` for a token already removed; `0 < top_p < 1`. In the checks no
# running sum of probabilities lands exactly on `top_p` (there float rounding would decide), and no two
# tokens tie where the nucleus ends (there the order of a sort would).

# %%
# Inputs: `logits` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous views.
def nucleus_probs(logits, temperature, top_p):
    ### BEGIN SOLUTION
    probs = torch.softmax(logits / temperature, dim=-1)  # (..., V)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p  # mass strictly before each token < p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
    kept = probs * keep
    return kept / kept.sum(dim=-1, keepdim=True)
    ### END SOLUTION


check("09.1", nucleus_probs)

# %% [markdown]
# ### Exercise 09.2: append to a KV cache (8 min, core)
#
# `cache` is a preallocated buffer `(B, H, capacity, D)` whose first `length` positions hold keys. Write
# `append_kv(cache, length, new)` that writes the new keys `(B, H, T, D)` into the buffer (in place) right
# after the cached ones, and returns the part of the buffer that now holds keys, `(B, H, length + T, D)`.
# The slots after `length` may hold anything: zeros in a fresh buffer, an earlier sequence's keys in one
# that is reused. Write only the `T` slots from `length` on; leave every other slot as it was.

# %%
# Inputs: tensors may be non-contiguous views.
def append_kv(cache, length, new):
    ### BEGIN SOLUTION
    T = new.shape[2]
    cache[:, :, length:length + T] = new
    return cache[:, :, :length + T]
    ### END SOLUTION


check("09.2", append_kv)

# %% [markdown]
# ### Exercise 09.3: one step of beam search (10 min, optional)
#
# Write `beam_step(beam_scores, next_log_probs, beam_width)`: `beam_scores (K,)` are the total
# log-probabilities of K beams, `next_log_probs (K, V)` each beam's log-probabilities for the next token
# (V ≥ 2). Return `(scores, beams, tokens)`, the `beam_width` best extensions over all K × V, best first:
# their total log-probabilities `(beam_width,)` float32, and which beam each extends and which token it
# adds, `(beam_width,)` int64 each. `beam_width` is at most K × V and may exceed K (at the first step there
# is a single beam); the checks have no ties.

# %%
def beam_step(beam_scores, next_log_probs, beam_width):
    ### BEGIN SOLUTION
    V = next_log_probs.shape[-1]
    total = (beam_scores[:, None] + next_log_probs).flatten()  # (K * V,): beam b's token t at b * V + t
    scores, flat = total.topk(beam_width)  # (beam_width,), best first
    return scores, flat // V, flat % V
    ### END SOLUTION


check("09.3", beam_step)

# %% [markdown]
# ## Summary
#
# - With a KV cache each generation step feeds one token; the tokens and logits equal recomputing the
#   prefix. The cache removes one factor of N from a generation of N tokens: N token-passes instead of
#   about N²/2 (projections and MLP O(N² C²) -> O(N C²)), about N²/2 scored pairs instead of N³/3
#   (attention O(N³ C) -> O(N² C)). Each cached step still attends over the whole context.
# - Sampling: temperature on the logits, then top-k, then top-p (the token crossing p is kept), then
#   renormalise; greedy is the argmax. Beam search keeps the `beam_width` best sequences; width 1 is
#   greedy. Ours has no end token and no length penalty.
#
# Next, notebook 10 trains a tiny GPT that follows the same cache protocol and generates text with
# `course_utils.generation`.
#
# ## Further reading
#
# - Pope et al., [Efficiently Scaling Transformer Inference](https://arxiv.org/abs/2211.05102) (2022): the
#   KV cache, its memory and its cost in practice.
# - Holtzman et al., [The Curious Case of Neural Text Degeneration](https://arxiv.org/abs/1904.09751)
#   (2020): nucleus sampling; Fan et al., [Hierarchical Neural Story Generation](https://arxiv.org/abs/1805.04833)
#   (2018): top-k sampling.
# - Wu et al., [Google's Neural Machine Translation System](https://arxiv.org/abs/1609.08144) (2016): beam
#   search with a length penalty.
