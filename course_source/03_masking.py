# %% [markdown]
# # 03 Masking: deciding which keys each query may see
#
# Attention lets every query look at every key. Often that is wrong: a language model must not peek
# at the next word it is asked to predict, and a batch of sentences padded to the same length must not
# attend to the padding. A **mask** says, for each (query, key) pair, whether the query may look.
# This notebook builds masks, applies them the one right way, and shows with numbers what each of the
# popular wrong ways does.
#
# **What you will learn**
#
# - build a causal mask with `tril`, and the bottom-right version for fewer queries than keys (a KV cache);
# - why a mask goes into the *scores* as `-inf`, *before* the softmax, and what goes wrong when you zero
#   weights after the softmax or multiply the mask into the scores;
# - padding masks for batches of unequal length, broadcasting them to `(B, 1, S)` and `(B, 1, 1, S)`, and
#   combining them with a causal mask; leaving the padding out of the loss with `F.cross_entropy`'s
#   `ignore_index`;
# - what a fully masked row does (NaN), how `course_utils` and PyTorch handle it, and why filling with
#   `torch.finfo(dtype).min` hides the problem instead of solving it;
# - dropout on the attention weights, and why dropout on the logits is a bug;
# - the three mask conventions you will meet (`True` = may attend, `True` = blocked, additive `0 / -inf`)
#   and the one helper that converts between them;
# - how to *prove* causality: changing token t+1 never changes output t;
# - PyTorch's own names for the two causal alignments, `causal_lower_right` and `causal_upper_left`.
#
# **Prerequisites**: notebooks 01 (dot-product attention) and 02 (scaling and a safe softmax).
#
# **Time**: about 45 minutes. **Runs on**: CPU (every cell takes well under a second).
#
# **Shapes** (the same alphabet in every notebook): `B` batch, `T` query length, `S` key length,
# `C` embed_dim, `H` num_heads, `D` head_dim. A mask is boolean with `True` = *may attend*, the way
# `F.scaled_dot_product_attention` reads it.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.masking import causal_mask, combine_masks, convert_mask, mask_scores, padding_mask
from course_utils.plotting import plot_weights

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. A running example
#
# Six tokens, each a random 8-dimensional vector, and three random projections that make queries, keys
# and values out of them (notebook 04 learns these projections; here they are just fixed random matrices).
# `attention_scores` is notebook 02's scaled dot product: one score per (query, key) pair.

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat"]
T, C, D = len(tokens), 8, 4

g = torch.Generator().manual_seed(0)
x = torch.randn(T, C, generator=g)  # (T, C): one vector per token
# (D, C) each, nn.Linear's layout (y = x @ W.T), drawn as (C, D) and transposed
W_q, W_k, W_v = (torch.randn(C, D, generator=g).T / math.sqrt(C) for _ in range(3))


def attention_scores(x):
    q, k = x @ W_q.T, x @ W_k.T  # (T, C) @ (C, D) -> (T, D)
    return q @ k.T / math.sqrt(D)  # (T, D) @ (D, T) -> (T, T)


scores = attention_scores(x)
v = x @ W_v.T  # (T, D)
print("scores", tuple(scores.shape))
print(scores)

# %% [markdown]
# ## 2. The causal mask, built with `tril`
#
# In a language model, the token at position i predicts token i+1, so it may look at positions
# 0, 1, ..., i and nothing later. Row i of the mask (query i) is `True` up to column i (key i) and
# `False` after it: the lower triangle of a square of ones, which `torch.tril` keeps.

# %%
mask = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
print(mask.shape)
print(mask.int())

# %% [markdown]
# Read it row by row: "the" (row 0) sees only itself; "mat" (row 5) sees all six tokens.
# `course_utils.masking.causal_mask` builds exactly this (and more, see section 11):

# %%
print(torch.equal(mask, causal_mask(T)))

# %% [markdown]
# ## 3. Masking: `-inf` in the scores, *before* the softmax
#
# The softmax turns scores into weights with `exp(score) / sum(exp(scores))`. To give a key *exactly*
# zero weight, its score must be a number whose `exp` is exactly zero: `-inf`. So we fill the blocked
# scores with `-inf` and then take the softmax. The allowed weights in each row still sum to 1, because
# the blocked keys contribute `exp(-inf) = 0` to the denominator.

# %%
masked = scores.masked_fill(~mask, float("-inf"))  # fill where the mask says "blocked"
weights = torch.softmax(masked, dim=-1)  # (T, T)
print(masked)
print(weights)
print("row sums:", weights.sum(dim=-1).round(decimals=4))  # rounded: their last bits depend on the CPU

# %% [markdown]
# `course_utils.masking.mask_scores` is that one `masked_fill`, with a check that the mask is boolean and
# fits the scores. The heatmap shows the triangle: each word spreads its attention over itself and the
# words before it, never after.

# %%
torch.testing.assert_close(torch.softmax(mask_scores(scores, mask), dim=-1), weights)
plot_weights(weights, tokens, tokens, title="causal attention weights")
plt.show()

# %% [markdown]
# ## 4. Two wrong ways to mask, with numbers
#
# Both of these appear in real code. Both give weights that *look* masked at a glance.
#
# **Wrong way 1: zero the weights after the softmax.** The softmax has already spread the probability
# over all keys, the forbidden ones included; zeroing them afterwards throws that share away, so the
# rows no longer sum to 1.

# %%
after = torch.softmax(scores, dim=-1) * mask  # softmax over ALL keys, then zero the forbidden ones
print(after)
print("row sums:", after.sum(dim=-1))

# %% [markdown]
# Dividing each row by its sum repairs the sums, and here it even gives the right answer (the
# exponentials of the allowed keys are the same, only the denominator changes):

# %%
renormalised = after / after.sum(dim=-1, keepdim=True)
print("renormalised equals the -inf route (up to rounding):", torch.allclose(renormalised, weights))

# %% [markdown]
# But it is a different, fragile route. The softmax first divides by a sum that includes the
# *forbidden* keys. When a forbidden key has a much larger score than the allowed ones (easily the case
# mid-training, or with unscaled scores), the allowed weights underflow to 0 before you can
# renormalise them, and the repair divides 0 by 0:

# %%
row = torch.tensor([1.0, 2.0, 120.0])  # one query, three keys; key 2 is forbidden but has a huge score
row_mask = torch.tensor([True, True, False])

repaired = torch.softmax(row, dim=-1) * row_mask
repaired = repaired / repaired.sum()
print("zero after, renormalise:", repaired)
print("-inf before softmax:    ", torch.softmax(row.masked_fill(~row_mask, float("-inf")), dim=-1))

# %% [markdown]
# **Wrong way 2: multiply the mask into the scores.** `scores * mask` sets the forbidden scores to 0.
# But a score of 0 is not "blocked": `exp(0) = 1`, so every forbidden key still gets weight. Row 0
# ("the") should put all its weight on itself; look at what it does instead:

# %%
multiplied = torch.softmax(scores * mask, dim=-1)
print(multiplied)
print("weight on forbidden (future) keys, per query:", (multiplied * ~mask).sum(dim=-1))

# %% [markdown]
# Side by side, with the row sums in mind: only the left matrix is a proper causal attention matrix.

# %%
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
for ax, w, name in ((axes[0], weights, "-inf before softmax"), (axes[1], after, "zeroed after softmax"),
                    (axes[2], multiplied, "mask multiplied in")):
    plot_weights(w, tokens, tokens, ax=ax, title=name)
fig.tight_layout()
plt.show()

# %% [markdown]
# That is information flowing from the future into the past: a **leak**. Filling with 0 instead of
# `-inf` (`scores.masked_fill(~mask, 0)`) is the same mistake written differently.
#
# > **Pitfall found in the wild: the mask applied after the softmax.** It looks harmless, since the
# > forbidden weights end up as zeros. But the forbidden keys were in the softmax's *denominator*, so
# > the future still changes the past: make token 5 different and every earlier output moves. The next
# > section turns this into a test.

# %% [markdown]
# ## 5. Proving causality: token t+1 never changes output t
#
# A causal model's output at position t may depend on tokens 0..t only. We can test that directly:
# change the input at position t+1 (add random noise to it) and compare all outputs up to t before and
# after. With a correct mask they are *bit for bit* equal: the forbidden keys get weight exactly 0,
# and `0 * anything = 0`.

# %%
def causal_attention(x, how="-inf"):
    s = attention_scores(x)  # (T, T)
    m = causal_mask(x.shape[0])  # (T, T)
    if how == "-inf":
        w = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    elif how == "after softmax":
        w = torch.softmax(s, dim=-1) * m
    elif how == "multiply":
        w = torch.softmax(s * m, dim=-1)
    return w @ (x @ W_v.T)  # (T, T) @ (T, D) -> (T, D)


def max_change_before(how, t):
    """Perturb token t+1; the largest change in any output at positions 0..t."""
    x2 = x.clone()
    x2[t + 1] += torch.randn(C, generator=torch.Generator().manual_seed(t))
    return (causal_attention(x2, how)[: t + 1] - causal_attention(x, how)[: t + 1]).abs().max().item()


for how in ("-inf", "after softmax", "multiply"):
    diffs = [max_change_before(how, t) for t in range(T - 1)]
    print(f"{how:>14}: max abs diff of outputs <= t = {round(max(diffs), 4)}")

# %% [markdown]
# Only the `-inf` route gives exactly `0.0` for every t. Both wrong routes let the future in, even the
# one whose weights were zero where they should be.

# %% [markdown]
# ## 6. Padding masks: batches of unequal length
#
# To batch sentences of different lengths we pad the short ones to a common length S with a filler
# token. The filler carries no meaning, so **no query may attend to a padding key**. A padding mask
# marks, for each sequence in the batch, which key positions are real: position j is real when
# `j < length`.

# %%
sentences = [["the", "cat", "sat"], ["a", "dog", "ran", "far", "away"], ["hi"]]
lengths = torch.tensor([len(s) for s in sentences])  # (B,)
B, S = len(sentences), int(lengths.max())
padded = [s + ["<pad>"] * (S - len(s)) for s in sentences]

positions = torch.arange(S)  # (S,)
pad_mask = positions[None, :] < lengths[:, None]  # (1, S) < (B, 1) -> (B, S)
for words, m in zip(padded, pad_mask):
    print(f"{str(m.int().tolist()):<18} {words}")
print(pad_mask.shape, torch.equal(pad_mask, padding_mask(lengths, S)))

# %% [markdown]
# The scores of a batch have shape `(B, T, S)`, but the padding mask is `(B, S)`: one row per sequence,
# the same for every query. Insert a query axis of size 1, `(B, 1, S)`, and broadcasting copies the row
# to all T queries. With several heads the scores are `(B, H, T, S)` and the mask becomes `(B, 1, 1, S)`.
#
# Watch out: `pad_mask[:, None]` and `pad_mask[:, :, None]` are both legal but mean different things;
# the second masks *queries*, not keys. Always add the new axes *before* the last one.

# %%
g = torch.Generator().manual_seed(1)
batch_scores = torch.randn(B, S, S, generator=g)  # (B, T, S) with T = S (self-attention)
batch_weights = torch.softmax(mask_scores(batch_scores, pad_mask[:, None, :]), dim=-1)  # (B, T, S)
print("mask", tuple(pad_mask[:, None, :].shape), "-> weights", tuple(batch_weights.shape))
print("weight on padding keys:", (batch_weights * ~pad_mask[:, None, :]).sum().item())

H = 2
head_scores = torch.randn(B, H, S, S, generator=g)  # (B, H, T, S)
head_weights = torch.softmax(mask_scores(head_scores, pad_mask[:, None, None, :]), dim=-1)
print("mask", tuple(pad_mask[:, None, None, :].shape), "-> weights", tuple(head_weights.shape))

# %% [markdown]
# The padding *keys* get no weight, but the padding *queries* (rows 3 and 4 of sentence 0) still
# produce outputs: they attend to the real tokens. Those outputs are meaningless, so whatever is computed
# from them must be left out, and above all the training loss.

# %%
fig, axes = plt.subplots(1, 2, figsize=(7, 3.2))
for ax, b in zip(axes, (0, 2)):
    plot_weights(batch_weights[b], padded[b], padded[b], ax=ax, title=f"sentence {b}: padding mask")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### Padding in the loss: `ignore_index`
#
# A language model trained on this padded batch predicts a token at every position, padding included,
# and is scored with the cross-entropy between its predictions and the targets. Give the padding
# positions a target id of their own, `pad_id`, and pass it as `F.cross_entropy(..., ignore_index=pad_id)`:
# targets equal to it add nothing to the loss, and the mean is taken over the real tokens only. Here the
# "model" is random logits over a toy vocabulary of 10 ids, with id 0 standing for `<pad>`.

# %%
pad_id, V = 0, 10
g = torch.Generator().manual_seed(3)
targets = torch.randint(1, V, (B, S), generator=g).masked_fill(~pad_mask, pad_id)  # (B, S), pad_id at the padding
logits = torch.randn(B, S, V, generator=g)  # (B, S, V): a prediction at every position
print(targets)

loss = F.cross_entropy(logits.reshape(B * S, V), targets.reshape(B * S), ignore_index=pad_id)
per_token = F.cross_entropy(logits.reshape(B * S, V), targets.reshape(B * S), reduction="none").view(B, S)  # (B, S)
print(f"ignore_index loss = mean over the {int(pad_mask.sum())} real tokens only, agree to 1e-6:",
      abs(loss.item() - per_token[pad_mask].mean().item()) < 1e-6)
print(f"ignore_index: {loss.item():.2f}; mean over all {B * S} positions, padding included: "
      f"{per_token.mean().item():.2f}")

# %% [markdown]
# Counting the padding would change the loss, and the gradient would train the model to predict `<pad>`
# after `<pad>`. (The tiny GPT at the end of the course trains on windows cut from one long text, all of
# the same length, so its batches have no padding and it needs no `ignore_index`; any model trained on
# padded batches does.)

# %% [markdown]
# ## 7. Combining masks: causal AND padding
#
# A decoder on a padded batch needs both rules: key j is visible to query i if j <= i **and** j is a
# real token. "Both" is a logical AND, and broadcasting lines the shapes up:
# `(T, S)` AND `(B, 1, S)` gives `(B, T, S)`. `combine_masks` does that (and skips `None`s).

# %%
both = causal_mask(S) & pad_mask[:, None, :]  # (T, S) & (B, 1, S) -> (B, T, S)
print(both.shape, torch.equal(both, combine_masks(causal_mask(S), pad_mask[:, None, :])))
print(both[0].int())

# %%
both_weights = torch.softmax(mask_scores(batch_scores, both), dim=-1)
plot_weights(both_weights[1], padded[1], padded[1], title="causal AND padding (sentence 1)")
plt.show()

# %% [markdown]
# ## 8. A fully masked row: NaN, and what to do about it
#
# Sometimes a query may see *nothing*. A common way to get there: batched text generation pads on the
# **left** (so every sequence ends at the same position), and then the causal mask lets the first
# padding query see only keys that are padding. Its row of the mask is all `False`.

# %%
left_pad = torch.tensor([[False, False, True, True, True]])  # (B=1, S): 2 padding tokens, then 3 real ones
left_mask = causal_mask(5) & left_pad[:, None, :]  # (1, T, S)
print(left_mask[0].int())

# %% [markdown]
# Rows 0 and 1 are all `False`: every score is `-inf`, and the softmax computes
# `exp(-inf) / sum(exp(-inf)) = 0 / 0 = NaN`. One NaN weight makes the row's output NaN, and in
# training the NaN spreads through the gradients into every parameter.

# %%
g = torch.Generator().manual_seed(2)
q5, k5, v5 = (torch.randn(1, 5, D, generator=g) for _ in range(3))  # (B, T, D) each
s5 = q5 @ k5.transpose(-2, -1) / math.sqrt(D)  # (1, T, S)
bare = torch.softmax(mask_scores(s5, left_mask), dim=-1)
print(bare[0])
print("output:", (bare @ v5)[0])

# %% [markdown]
# The sensible answer is "a query that may see nothing gets output 0". `course_utils`'
# `scaled_dot_product_attention` and PyTorch's `F.scaled_dot_product_attention` both do exactly that
# (PyTorch since version 2.5, the oldest this course runs on; before it, `F.scaled_dot_product_attention`
# gave NaN there too):

# %%
ours, ours_weights = scaled_dot_product_attention(q5, k5, v5, mask=left_mask)
theirs = F.scaled_dot_product_attention(q5, k5, v5, attn_mask=left_mask)
print("course_utils:", ours[0])
print("PyTorch:     ", theirs[0])
torch.testing.assert_close(ours, theirs)

# %% [markdown]
# ### `-inf` or `torch.finfo(dtype).min`?
#
# Many codebases fill with the most negative finite number instead of `-inf` (`-1e9`, `-1e4`, or
# `torch.finfo(dtype).min`), so that a fully masked row cannot produce NaN. For an ordinary row the two
# fills give the same weights: `exp(min - max)` underflows to exactly 0. For a fully masked row, all
# scores are the same huge negative number, and the softmax of equal numbers is **uniform**: the query
# spreads its attention evenly over keys it was told not to see. No NaN, no error, just silent leakage.

# %%
fill = torch.finfo(s5.dtype).min
with_min = torch.softmax(mask_scores(s5, left_mask, fill_value=fill), dim=-1)
with_inf = torch.softmax(mask_scores(s5, left_mask), dim=-1)
print(f"fill = {fill:.4g}")
print(with_min[0])
print("rows 2-4 equal to the -inf fill:", torch.equal(with_min[0, 2:], with_inf[0, 2:]))

# %% [markdown]
# Rows 0 and 1 now read 0.2 everywhere: the two padding queries average the values of *all* five keys,
# three of them real tokens they were never meant to see. A NaN at least tells you something is wrong.
# Prefer `-inf` plus an explicit rule for empty rows (as above), or make sure empty rows cannot happen.
#
# One more trap with finite fills: `-1e9` does not fit in `float16`. Depending on the call you get an
# error or a silent `-inf`:

# %%
half_scores = torch.zeros(3, dtype=torch.float16)
try:
    half_scores.masked_fill(torch.tensor([False, True, True]), -1e9)
except RuntimeError as e:
    print("RuntimeError:", e)
print(torch.tensor(-1e9).to(torch.float16), "| float16 min:", torch.finfo(torch.float16).min)

# %% [markdown]
# ### Explore: every mask of this notebook in one picture
#
# `plot_mask` from `course_utils.widgets` draws the weights of an 8-token sentence under one kind of mask,
# using `causal_mask`, `padding_mask`, `combine_masks`, `mask_scores` and a bare softmax (scores come from
# fixed random vectors, one per word). Blocked cells are hatched; a blocked cell that still shows a number
# is leakage, and a red NaN is a row that saw nothing. Here is the left-padding case of this section, with
# both fills: 3 padding tokens, 5 real ones.

# %%
from course_utils.widgets import mask_explorer, plot_mask

fig, (ax_inf, ax_min) = plt.subplots(1, 2, figsize=(10, 5))
plot_mask("causal + left padding", length=5, fill="-inf", ax=ax_inf)
plot_mask("causal + left padding", length=5, fill="finfo.min", ax=ax_min)
plt.show()

# %% [markdown]
# With `-inf` the three padding queries are NaN; with `finfo.min` they spread 1/8 = 0.12 over all eight
# keys, five of them real words they must not see. The five real rows look the same under both fills, as
# the `torch.equal` check above found for rows 2-4 of `s5`.
#
# Now switch between masks yourself (the widget needs a running kernel). Things to try: `none`, then
# `causal` (the triangle of section 2); `padding` with a shorter `length` (whole columns disappear, but
# the padding *rows* still attend); `causal + padding` (section 7: with at least one real token no row
# is empty, because every query sees the first token); `causal + left padding` with `length` 0 (every
# row empty: all NaN, or all uniform with `finfo.min`).

# %%
# NBVAL_IGNORE_OUTPUT
mask_explorer()

# %% [markdown]
# ## 9. Dropout on the attention weights
#
# Transformers regularise attention with dropout on the **weights**, after the softmax: each weight is
# zeroed with probability p, and the survivors are scaled by `1 / (1 - p)` so that each weight keeps its
# expected value. A dropped weight means "this query ignores that key this time"; since the masked
# weights are already 0, dropping them changes nothing, so masking and dropout cannot interfere.

# %%
p = 0.5
torch.manual_seed(0)
dropped = F.dropout(weights, p=p, training=True)
print(dropped)
print("kept weights / original:", (dropped[weights > 0] / weights[weights > 0]).unique())

# %% [markdown]
# Row 0 ("the") had only one weight, and this draw dropped it: for this step "the" sees nothing. The rows
# of a dropped-out matrix no longer sum to 1 (that is fine: only the *average* matters), and the average
# over many draws comes back to the original weights:

# %%
torch.manual_seed(0)
draws = F.dropout(weights.expand(20000, T, T), p=p, training=True)  # 20000 independent draws, (20000, T, T)
mean_dropped = draws.mean(0)  # (T, T)
print("row sums of one draw:", dropped.sum(-1))
print("max |mean over 20000 draws - weights|:", round((mean_dropped - weights).abs().max().item(), 2))

# %% [markdown]
# Dropout is only for **training**. In evaluation it must be off: `nn.Dropout` is the identity after
# `model.eval()`, and `scaled_dot_product_attention` takes `dropout_p=0.0` (pass `dropout_p` only while
# training, as PyTorch's own attention modules do).

# %%
drop = nn.Dropout(p)
drop.eval()
print("eval mode changes nothing:", torch.equal(drop(weights), weights))
drop.train()
torch.manual_seed(0)
print("train mode:", torch.equal(drop(weights), dropped))

# %% [markdown]
# > **Pitfall found in the wild: dropout on the logits.** Putting the dropout on the scores instead of the
# > weights looks equivalent and is not. A dropped *logit* becomes 0, and `exp(0)` still gives that key a
# > weight: the key is not removed, it is given the score 0, which may be higher than its real score.
# > The surviving logits are multiplied by 2 (for p = 0.5), which sharpens the softmax. The two effects
# > do not cancel, and the average over many draws is no longer the original distribution:

# %%
torch.manual_seed(0)
logit_draws = F.dropout(scores.expand(20000, T, T), p=p, training=True)  # dropout on the LOGITS
logit_drop = torch.softmax(mask_scores(logit_draws, mask), dim=-1).mean(0)  # (T, T)
print("weights (row 5):                       ", weights[5])
print("mean, dropout on weights (row 5):      ", mean_dropped[5])
print("mean, dropout on logits first (row 5): ", logit_drop[5])

# %% [markdown]
# > Here the mean of row 5 is flatter than the truth: "mat" gets 0.11 of its own attention instead of 0.06.
# > And if the dropout comes *after* the `-inf` fill, it is worse: a dropped `-inf` becomes
# > `-inf * 0 = NaN`, and the whole row of weights turns into NaN. In this draw every row that holds a
# > `-inf` lost one; only row 5, which has none, survives:

# %%
torch.manual_seed(7)
print(torch.softmax(F.dropout(masked, p=p, training=True), dim=-1))

# %% [markdown]
# ## 10. Three mask conventions, one converter
#
# Every library agrees on what a mask *does*; they disagree on how to *write* it:
#
# | convention | dtype | "may attend" | "blocked" | used by |
# |---|---|---|---|---|
# | `"allow"` | bool | `True` | `False` | `F.scaled_dot_product_attention`, this course |
# | `"block"` | bool | `False` | `True` | `nn.MultiheadAttention` (`attn_mask`, `key_padding_mask`) |
# | `"additive"` | float | `0.0` | `-inf` | added to the scores; many older codebases |
#
# Hand the wrong one to a library and it does not complain. Here is our causal "allow" mask passed
# straight to `nn.MultiheadAttention`, which reads `True` as blocked:

# %%
torch.manual_seed(0)
mha = nn.MultiheadAttention(embed_dim=C, num_heads=1, batch_first=True)
xb = x[None]  # (1, T, C)
with torch.no_grad():
    _, wrong = mha(xb, xb, xb, attn_mask=causal_mask(T))  # weights: (1, T, T)
print(wrong[0])

# %% [markdown]
# Each query attends only to the *future*, and the last query, for which everything is "blocked", gets
# NaN. That NaN is the good case: these weights come from `need_weights=True`, the default. Ask for
# `need_weights=False` and the same mistake gives the last query an output of zeros instead, with nothing
# to flag it; notebook 05 (section 4) takes the module's paths one by one.
#
# `convert_mask(mask, src, dst)` is the one place in the course that translates:

# %%
with torch.no_grad():
    _, right = mha(xb, xb, xb, attn_mask=convert_mask(causal_mask(T), "allow", "block"))
print(right[0])

# %%
allow = causal_mask(4)
additive = convert_mask(allow, "allow", "additive")
block = convert_mask(allow, "allow", "block")
print(additive)
print(block.int())
print("round trip allow -> additive -> block -> allow:",
      torch.equal(convert_mask(convert_mask(additive, "additive", "block"), "block", "allow"), allow))

# %% [markdown]
# An additive mask is added to the scores, so its blocked entries must be `-inf` and its allowed ones 0.
# A float tensor with other values is a **bias**, not a mask: ALiBi, for example, adds `-slope * (i - j)`
# to make distant keys less attractive. No key is blocked, so there is no boolean mask to convert it to,
# and `convert_mask` says so rather than guess:

# %%
i, j = torch.arange(4)[:, None], torch.arange(4)[None, :]
alibi = (0.5 * (j - i)).masked_fill(j > i, float("-inf"))  # causal ALiBi bias, slope 0.5
print(alibi)
try:
    convert_mask(alibi, "additive", "allow")
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# ## 11. Fewer queries than keys: the causal mask with a cache
#
# When a model generates text it computes the keys and values of earlier tokens once and keeps them (a
# KV cache). Each new step then has only T new queries (often 1) but S keys: the S - T cached ones plus
# the new ones. The new queries are the **last** T positions, so query i sits at position `S - T + i`
# and may see keys `0 .. S - T + i`. The triangle is aligned to the **bottom-right** corner:
# `tril(diagonal=S - T)`.
#
# `F.scaled_dot_product_attention(..., is_causal=True)` aligns it to the **top-left** instead (query i
# sees keys `0 .. i`), as if the queries were the *first* T positions. That is only the same when T = S.

# %%
T_new, S_all = 2, 6
bottom_right = causal_mask(T_new, S_all)  # (T, S)
top_left = torch.ones(T_new, S_all, dtype=torch.bool).tril()  # what is_causal=True uses
print(bottom_right.int())
print(top_left.int())

# %%
fig, axes = plt.subplots(1, 2, figsize=(7, 2.2))
for ax, m, name in ((axes[0], bottom_right, "causal_mask(2, 6): bottom-right"),
                    (axes[1], top_left, "is_causal=True: top-left")):
    plot_weights(m.float(), ["query 4", "query 5"], [f"key {j}" for j in range(S_all)], ax=ax, title=name,
                 annotate=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Which one is right? Recompute the whole sequence of 6 tokens with the ordinary square causal mask and
# keep the outputs of the last 2 queries: that is what generation must reproduce. The bottom-right mask
# matches it; `is_causal=True` does not.

# %%
g = torch.Generator().manual_seed(5)
q6, k6, v6 = (torch.randn(S_all, D, generator=g) for _ in range(3))  # (S, D) each

full, _ = scaled_dot_product_attention(q6, k6, v6, mask=causal_mask(S_all))  # (S, D): everything recomputed
last = full[-T_new:]  # (T, D): the outputs we want
q_new = q6[-T_new:]  # (T, D): only the new queries; keys and values come from the cache

with_cache, _ = scaled_dot_product_attention(q_new, k6, v6, mask=causal_mask(T_new, S_all))
sdpa_is_causal = F.scaled_dot_product_attention(q_new, k6, v6, is_causal=True)
print("causal_mask(T, S) vs full recompute, agree to 1e-6:", (with_cache - last).abs().max().item() < 1e-6)
print("is_causal=True    vs full recompute, max abs diff:", round((sdpa_is_causal - last).abs().max().item(), 2))

# %% [markdown]
# (Passing `attn_mask=causal_mask(T, S)` to `F.scaled_dot_product_attention` works too; only the
# `is_causal` shortcut assumes T = S.)
#
# PyTorch has names for both alignments in `torch.nn.attention.bias`: `causal_lower_right(T, S)` is the
# bottom-right triangle of `causal_mask(T, S)`, and `causal_upper_left(T, S)` the top-left one of
# `is_causal=True`. Each is a small object that `F.scaled_dot_product_attention` takes as its `attn_mask`,
# so it can pick a fused kernel without ever building the `(T, S)` matrix. They agree with ours:

# %%
lower_right = F.scaled_dot_product_attention(q_new, k6, v6, attn_mask=causal_lower_right(T_new, S_all))
upper_left = F.scaled_dot_product_attention(q_new, k6, v6, attn_mask=causal_upper_left(T_new, S_all))
print("causal_lower_right vs causal_mask(T, S), agree to 1e-6:", (lower_right - with_cache).abs().max().item() < 1e-6)
print("causal_upper_left  vs is_causal=True,    agree to 1e-6:",
      (upper_left - sdpa_is_causal).abs().max().item() < 1e-6)

# %% [markdown]
# ## 12. Check against `course_utils`
#
# Our inline versions of this notebook against the package every later notebook uses:

# %%
torch.testing.assert_close(torch.ones(T, T, dtype=torch.bool).tril(), causal_mask(T))
torch.testing.assert_close(torch.ones(4, 9, dtype=torch.bool).tril(diagonal=9 - 4), causal_mask(4, 9))
torch.testing.assert_close(scores.masked_fill(~mask, float("-inf")), mask_scores(scores, mask))
torch.testing.assert_close(positions[None, :] < lengths[:, None], padding_mask(lengths, S))
torch.testing.assert_close(causal_mask(S) & pad_mask[:, None, :], combine_masks(causal_mask(S), pad_mask[:, None, :]))
torch.testing.assert_close(~mask, convert_mask(mask, "allow", "block"))

q, k = x @ W_q.T, x @ W_k.T
out_ours, weights_ours = scaled_dot_product_attention(q, k, v, mask=mask)
torch.testing.assert_close(weights_ours, weights)
torch.testing.assert_close(out_ours, weights @ v)
torch.testing.assert_close(out_ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
torch.testing.assert_close(out_ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
print("matches course_utils (and F.scaled_dot_product_attention)")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function; the cell below it checks your function and, if it is wrong, names the
# mistake it looks like. Use plain tensor operations (the `course_utils` helpers would make them
# one-liners, so leave them aside). Masks are boolean tensors (`True` = may attend), scores and weights
# float32; leave the inputs unchanged. The checks also draw fresh inputs of other sizes.
#
# ### Exercise 03.1: a causal mask for T queries and S keys
#
# Write `my_causal_mask(T, S)`, a boolean `(T, S)` mask with `True` = may attend, for T <= S queries that
# are the **last** T of S positions (section 11). With T = S it is the ordinary causal mask.

# %%
def my_causal_mask(T, S):
    ### BEGIN SOLUTION
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    ### END SOLUTION


check("03.1", my_causal_mask)

# %% [markdown]
# ### Exercise 03.2: masked attention weights
#
# Write `masked_weights(scores, mask)`: given scores of shape `(..., T, S)` and a boolean mask that
# broadcasts to them (`True` = may attend), return the attention weights, float32 like the scores. The
# masks are of every kind (causal, padding, both, any pattern), and no row of them is fully masked.
# Block with `-inf`; a large negative number such as `-1e9` gives the same weights and passes too.

# %%
def masked_weights(scores, mask):
    ### BEGIN SOLUTION
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    ### END SOLUTION


check("03.2", masked_weights)

# %% [markdown]
# ### Exercise 03.3: a padding mask from lengths
#
# Write `my_padding_mask(lengths, S)`: `lengths` is a `(B,)` integer tensor, and the result is a boolean
# `(B, S)` mask that is `True` at the real tokens of each sequence (positions `0 .. length - 1`) and
# `False` at the padding.

# %%
def my_padding_mask(lengths, S):
    ### BEGIN SOLUTION
    return torch.arange(S)[None, :] < lengths[:, None]
    ### END SOLUTION


check("03.3", my_padding_mask)

# %% [markdown]
# ### Exercise 03.4: `nn.MultiheadAttention`'s masks as one course mask
#
# Code written for `nn.MultiheadAttention` carries two boolean masks, both with `True` = **blocked**:
# `attn_mask` of shape `(T, S)` and `key_padding_mask` of shape `(B, S)`. Write
# `from_mha_masks(attn_mask, key_padding_mask)` that returns one boolean mask in this course's convention
# (`True` = may attend) of shape `(B, 1, T, S)`, ready to broadcast against scores `(B, H, T, S)`.

# %%
def from_mha_masks(attn_mask, key_padding_mask):
    ### BEGIN SOLUTION
    allowed = ~attn_mask  # (T, S)
    real_keys = ~key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
    return allowed & real_keys  # (B, 1, T, S)
    ### END SOLUTION


check("03.4", from_mha_masks)

# %% [markdown]
# ## Summary
#
# - A mask says which keys each query may see. In this course it is boolean, `True` = may attend.
# - Apply it to the **scores**, as `-inf`, **before** the softmax: blocked keys then get weight exactly 0
#   and the allowed weights still sum to 1. Zeroing weights after the softmax breaks the sums and lets
#   the future into the normaliser; multiplying the mask in (or filling with 0) gives blocked keys
#   weight `exp(0) = 1`. Both fail the causality test; `-inf` passes it with a difference of exactly 0.0.
# - Causal mask: `tril`. With T queries and S > T keys (a cache), align it bottom-right,
#   `tril(diagonal=S - T)`; `is_causal=True` aligns top-left and is only right for T = S.
#   PyTorch calls the two `causal_lower_right` and `causal_upper_left` (`torch.nn.attention.bias`).
# - Padding mask: `arange(S) < lengths[:, None]`, broadcast as `(B, 1, S)` or `(B, 1, 1, S)` over the
#   *key* axis. Combine masks with AND. The padding positions' outputs are meaningless: leave them out of
#   the loss with `F.cross_entropy(..., ignore_index=pad_id)`, which averages over the real tokens only.
# - A fully masked row gives NaN with `-inf`; the fix is to give it output 0, as `course_utils` and
#   `F.scaled_dot_product_attention` (since PyTorch 2.5) do. A finite fill (`finfo.min`, `-1e9`) hides it
#   as a uniform distribution over forbidden keys.
# - Dropout goes on the weights after the softmax, scales survivors by `1 / (1 - p)`, and only runs in
#   training. Dropout on the logits changes the distribution; after the `-inf` fill it makes NaN.
# - `convert_mask` translates between `"allow"`, `"block"` (`nn.MultiheadAttention`) and `"additive"`;
#   a float bias such as ALiBi is not a mask. A mask handed over the wrong way round raises no error: it
#   gives NaN or, on other paths, silent zeros.
#
# Next, notebook 04 gives attention learned projections and several heads, and uses these masks
# unchanged on `(B, H, T, S)` scores.
#
# ## Further reading
#
# - Vaswani et al., [Attention Is All You Need](https://arxiv.org/abs/1706.03762) (2017), section 3.2.3:
#   the decoder's "masking out (setting to -inf)" of illegal connections.
# - PyTorch documentation of
#   [`F.scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
#   (boolean `attn_mask` with `True` = take part; `is_causal`), of
#   [`torch.nn.attention.bias`](https://pytorch.org/docs/stable/nn.attention.bias.html)
#   (`causal_lower_right`, `causal_upper_left`), of
#   [`F.cross_entropy`](https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html)
#   (`ignore_index`) and of
#   [`nn.MultiheadAttention`](https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html)
#   (`True` = not allowed to attend).
# - Press et al., [Train Short, Test Long: Attention with Linear Biases (ALiBi)](https://arxiv.org/abs/2108.12409)
#   (2021): an additive bias on the scores, the case `convert_mask` refuses.
# - Srivastava et al., [Dropout](https://jmlr.org/papers/v15/srivastava14a.html) (2014): why survivors are
#   rescaled.
