# %% [markdown]
# # 03 Masking: deciding which keys each query may see
#
# Attention lets every query look at every key. Often that is wrong: a language model must not peek at
# the word it is asked to predict, and a padded batch must not attend to the padding. A **mask** says, for
# each (query, key) pair, whether the query may look. This notebook builds masks, applies them the one
# right way, and measures what the popular wrong ways do.
#
# **What you will learn**
#
# - a causal mask with `tril`, and the bottom-right version for fewer queries than keys (a KV cache);
# - why a mask goes into the *scores* as `-inf`, *before* the softmax, and what zeroing weights after the
#   softmax or multiplying the mask in does instead;
# - padding masks, broadcast to `(B, 1, S)` or `(B, 1, 1, S)` and combined with a causal mask; padding
#   left out of the loss with `ignore_index`;
# - what a fully masked row does (NaN), and why a `torch.finfo(dtype).min` fill hides it;
# - dropout on the attention weights, and why dropout on the logits is a bug;
# - the three mask conventions (`True` = may attend, `True` = blocked, additive `0 / -inf`) and one
#   converter;
# - how to *prove* causality: changing token t+1 never changes output t;
# - PyTorch's names for the two causal alignments, `causal_lower_right` and `causal_upper_left`.
#
# **Prerequisites**: notebooks 01 (dot-product attention) and 02 (scaling and a safe softmax).
#
# **Time**: about 60 minutes. **Runs on**: CPU (every cell takes well under a second).
#
# **Shapes**: `B` batch, `T` query length, `S` key length, `C` embed_dim, `H` num_heads, `D` head_dim.
# A mask is boolean with `True` = *may attend*, as `F.scaled_dot_product_attention` reads it.

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
from course_utils.plotting import plot_weights, shared_colorbar

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. A running example
#
# Six tokens, each a random 8-dimensional vector, and three fixed random projections that make queries,
# keys and values (notebook 04 learns them). `attention_scores` is notebook 02's scaled dot product.

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
# In a language model the token at position i predicts token i+1, so it may look at positions 0 .. i
# and nothing later. Row i of the mask (query i) is `True` up to column i (key i): the lower triangle of a
# square of ones, which `torch.tril` keeps. "the" (row 0) sees only itself; "mat" (row 5) sees all six.
# `course_utils.masking.causal_mask` builds the same (and more, section 11).

# %%
mask = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = may attend
print(mask.shape)
print(mask.int())
print("equal to causal_mask(T):", torch.equal(mask, causal_mask(T)))

# %% [markdown]
# ## 3. Masking: `-inf` in the scores, *before* the softmax
#
# The softmax computes `exp(score) / sum(exp(scores))`. To give a key *exactly* zero weight, its score
# must be `-inf`, whose `exp` is exactly 0. So fill the blocked scores with `-inf`, then take the softmax:
# the allowed weights still sum to 1, since blocked keys add `exp(-inf) = 0` to the denominator.
# `course_utils.masking.mask_scores` is that one `masked_fill`, with a check that the mask is boolean and
# fits the scores. The heatmap shows the triangle: each word attends to itself and earlier words only.

# %%
masked = scores.masked_fill(~mask, float("-inf"))  # fill where the mask says "blocked"
weights = torch.softmax(masked, dim=-1)  # (T, T)
print(masked)
print(weights)
print("row sums:", weights.sum(dim=-1).round(decimals=4))  # rounded: their last bits depend on the CPU
torch.testing.assert_close(torch.softmax(mask_scores(scores, mask), dim=-1), weights)
plot_weights(weights, tokens, tokens, title="causal attention weights")
plt.show()

# %% [markdown]
# ## 4. Two wrong ways to mask, with numbers
#
# Both appear in real code, and both give weights that *look* masked at a glance.
#
# **Wrong way 1: zero the weights after the softmax.** The softmax has already spread the probability
# over all keys, forbidden ones included; zeroing them throws that share away, so rows no longer sum to 1.
# Dividing each row by its sum repairs the sums, and here even gives the right answer (only the
# denominator changes):

# %%
after = torch.softmax(scores, dim=-1) * mask  # softmax over ALL keys, then zero the forbidden ones
print(after)
print("row sums:", after.sum(dim=-1))
renormalised = after / after.sum(dim=-1, keepdim=True)
print("renormalised equals the -inf route (up to rounding):", torch.allclose(renormalised, weights))

# %% [markdown]
# But the route is fragile. When a forbidden key scores much higher than the allowed ones (easily the
# case mid-training, or unscaled), the allowed weights underflow to 0 before the repair, which then
# divides 0 by 0:

# %%
row = torch.tensor([1.0, 2.0, 120.0])  # one query, three keys; key 2 is forbidden but has a huge score
row_mask = torch.tensor([True, True, False])

repaired = torch.softmax(row, dim=-1) * row_mask
repaired = repaired / repaired.sum()
print("zero after, renormalise:", repaired)
print("-inf before softmax:    ", torch.softmax(row.masked_fill(~row_mask, float("-inf")), dim=-1))

# %% [markdown]
# **Wrong way 2: multiply the mask into the scores.** `scores * mask` sets the forbidden scores to 0,
# but a score of 0 is not "blocked": `exp(0) = 1`, so every forbidden key still gets weight. Row 0
# ("the") should put all its weight on itself. Then the three side by side, on one colour scale: only the
# left one is a proper causal attention matrix.

# %%
multiplied = torch.softmax(scores * mask, dim=-1)
print(multiplied)
print("weight on forbidden (future) keys, per query:", (multiplied * ~mask).sum(dim=-1))

fig, axes = plt.subplots(1, 3, figsize=(11.6, 3.4), layout="constrained")
for ax, w, name in ((axes[0], weights, "-inf before softmax"), (axes[1], after, "zeroed after softmax"),
                    (axes[2], multiplied, "mask multiplied in")):
    plot_weights(w, tokens, tokens, ax=ax, title=name, colorbar=False)
shared_colorbar(list(axes))
plt.show()

# %% [markdown]
# That is information flowing from the future into the past: a **leak**. Filling with 0 instead of
# `-inf` (`scores.masked_fill(~mask, 0)`) is the same mistake written differently.
#
# > **Pitfall found in the wild: the mask applied after the softmax.** The forbidden weights end up as
# > zeros, but the forbidden keys were in the softmax's *denominator*, so the future still changes the
# > past. The next section turns this into a test.

# %% [markdown]
# ## 5. Proving causality: token t+1 never changes output t
#
# A causal model's output at position t may depend on tokens 0..t only. Test it: add noise to the input
# at position t+1 and compare all outputs up to t. With a correct mask they are *bit for bit* equal: the
# forbidden keys get weight exactly 0, and `0 * anything = 0`.

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
# one whose weights are zero where they should be.

# %% [markdown]
# ## 6. Padding masks: batches of unequal length
#
# To batch sentences of different lengths we pad the short ones to a common length S with a filler
# token that carries no meaning, so **no query may attend to a padding key**. A padding mask marks the
# real key positions of each sequence: position j is real when `j < length`.

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
# The scores of a batch are `(B, T, S)`, the padding mask `(B, S)`: one row per sequence, the same for
# every query. Insert a query axis, `(B, 1, S)`, and broadcasting copies the row to all T queries; with
# heads, scores `(B, H, T, S)` take `(B, 1, 1, S)`. `pad_mask[:, :, None]` is legal too but masks
# *queries*: add new axes *before* the last one. The padding *keys* then get no weight, but the padding
# *queries* (rows 3 and 4 of sentence 0) still attend to the real tokens. Their outputs are meaningless,
# so whatever is computed from them, the training loss above all, must leave them out.

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

fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.2), layout="constrained")
for ax, b in zip(axes, (0, 2)):
    plot_weights(batch_weights[b], padded[b], padded[b], ax=ax, title=f"sentence {b}: padding mask", colorbar=False)
shared_colorbar(list(axes))
plt.show()

# %% [markdown]
# ### Padding in the loss: `ignore_index`
#
# A language model trained on this batch predicts a token at every position, padding included, scored
# by cross-entropy. Give the padding positions a target id of their own, `pad_id`, and pass
# `F.cross_entropy(..., ignore_index=pad_id)`: those targets add nothing, and the mean runs over the real
# tokens only. Here the "model" is random logits over 10 ids, with id 0 standing for `<pad>`.

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
# Counting the padding would change the loss and train the model to predict `<pad>` after `<pad>`. (The
# course's tiny GPT trains on equal-length windows of one text, so its batches have no padding and need
# no `ignore_index`; any model trained on padded batches does.)

# %% [markdown]
# ## 7. Combining masks: causal AND padding
#
# A decoder on a padded batch needs both rules: key j is visible to query i if j <= i **and** j is a
# real token. A logical AND, with broadcasting lining up the shapes: `(T, S)` AND `(B, 1, S)` gives
# `(B, T, S)`. `combine_masks` does that (and skips `None`s).

# %%
both = causal_mask(S) & pad_mask[:, None, :]  # (T, S) & (B, 1, S) -> (B, T, S)
print(both.shape, torch.equal(both, combine_masks(causal_mask(S), pad_mask[:, None, :])))
print(both[0].int())
both_weights = torch.softmax(mask_scores(batch_scores, both), dim=-1)
plot_weights(both_weights[1], padded[1], padded[1], title="causal AND padding (sentence 1)")
plt.show()

# %% [markdown]
# ## 8. A fully masked row: NaN, and what to do about it
#
# Sometimes a query may see *nothing*. A common way: batched generation pads on the **left** (so every
# sequence ends at the same position), and the causal mask lets the first padding queries see only
# padding keys. Below, rows 0 and 1 of the mask are all `False`: every score is `-inf`, and the softmax
# computes `exp(-inf) / sum(exp(-inf)) = 0 / 0 = NaN`. A NaN weight makes the row's output NaN, and in
# training the NaN spreads through the gradients into every parameter.

# %%
left_pad = torch.tensor([[False, False, True, True, True]])  # (B=1, S): 2 padding tokens, then 3 real ones
left_mask = causal_mask(5) & left_pad[:, None, :]  # (1, T, S)
print(left_mask[0].int())
g = torch.Generator().manual_seed(2)
q5, k5, v5 = (torch.randn(1, 5, D, generator=g) for _ in range(3))  # (B, T, D) each
s5 = q5 @ k5.transpose(-2, -1) / math.sqrt(D)  # (1, T, S)
bare = torch.softmax(mask_scores(s5, left_mask), dim=-1)
print(bare[0])
print("output:", (bare @ v5)[0])

# %% [markdown]
# The sensible answer is "a query that may see nothing gets output 0". `course_utils`'
# `scaled_dot_product_attention` and PyTorch's `F.scaled_dot_product_attention` both do that (PyTorch
# since version 2.5, the oldest this course runs on; before it, NaN there too):

# %%
ours, ours_weights = scaled_dot_product_attention(q5, k5, v5, mask=left_mask)
theirs = F.scaled_dot_product_attention(q5, k5, v5, attn_mask=left_mask)
print("course_utils:", ours[0])
print("PyTorch:     ", theirs[0])
torch.testing.assert_close(ours, theirs)

# %% [markdown]
# ### `-inf` or `torch.finfo(dtype).min`?
#
# Many codebases fill with a large finite negative number instead (`-1e9`, `-1e4`, or
# `torch.finfo(dtype).min`), so that a fully masked row cannot give NaN. For an ordinary row both fills
# give the same weights: `exp(min - max)` underflows to exactly 0. In a fully masked row all scores are
# the same huge negative number, and the softmax of equal numbers is **uniform**: the query spreads its
# attention over keys it was told not to see. No NaN, no error: silent leakage.

# %%
fill = torch.finfo(s5.dtype).min
with_min = torch.softmax(mask_scores(s5, left_mask, fill_value=fill), dim=-1)
with_inf = torch.softmax(mask_scores(s5, left_mask), dim=-1)
print(f"fill = {fill:.4g}")
print(with_min[0])
print("rows 2-4 equal to the -inf fill:", torch.equal(with_min[0, 2:], with_inf[0, 2:]))

# %% [markdown]
# Rows 0 and 1 now read 0.2 everywhere: the two padding queries average *all* five keys, three of them
# real tokens they must not see. A NaN at least says something is wrong. Prefer `-inf` plus an explicit
# rule for empty rows (as above), or make empty rows impossible. One more trap: `-1e9` does not fit in
# `float16`; depending on the call you get an error or a silent `-inf`:

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
# `plot_mask` from `course_utils.widgets` draws the weights of an 8-token sentence under one kind of mask
# (built with this notebook's helpers, scores from fixed random vectors). Blocked cells are hatched; a
# blocked cell showing a number is leakage, and a red NaN is a row that saw nothing. Here is this
# section's left-padding case with both fills: 3 padding tokens, 5 real ones.

# %%
from course_utils.widgets import mask_explorer, plot_mask

fig, (ax_inf, ax_min) = plt.subplots(1, 2, figsize=(10, 5))
plot_mask("causal + left padding", length=5, fill="-inf", ax=ax_inf)
plot_mask("causal + left padding", length=5, fill="finfo.min", ax=ax_min)
plt.show()

# %% [markdown]
# With `-inf` the three padding queries are NaN; with `finfo.min` they spread 1/8 = 0.12 over all eight
# keys, five of them real words they must not see. The real rows look the same under both fills.
#
# Now switch masks yourself (the widget needs a running kernel). Try `none`, then `causal`; `padding`
# with a shorter `length` (whole columns disappear, but padding *rows* still attend); `causal + padding`
# (with one real token no row is empty: every query sees the first token); `causal + left padding` with
# `length` 0 (every row empty: all NaN, or all uniform with `finfo.min`).

# %%
# NBVAL_IGNORE_OUTPUT
mask_explorer()

# %% [markdown]
# ## 9. Dropout on the attention weights
#
# Transformers regularise attention with dropout on the **weights**, after the softmax: each weight is
# zeroed with probability p and the survivors are scaled by `1 / (1 - p)`, keeping each weight's expected
# value. Masked weights are already 0, so masking and dropout cannot interfere. Below, row 0 ("the") had
# one weight and this draw dropped it: for this step "the" sees nothing. Rows no longer sum to 1 (only the
# *average* matters), and the average over many draws comes back to the original weights:

# %%
p = 0.5
torch.manual_seed(0)
dropped = F.dropout(weights, p=p, training=True)
print(dropped)
print("kept weights / original:", (dropped[weights > 0] / weights[weights > 0]).unique())
torch.manual_seed(0)
draws = F.dropout(weights.expand(20000, T, T), p=p, training=True)  # 20000 independent draws, (20000, T, T)
mean_dropped = draws.mean(0)  # (T, T)
print("row sums of one draw:", dropped.sum(-1))
print("max |mean over 20000 draws - weights|:", round((mean_dropped - weights).abs().max().item(), 2))

# %% [markdown]
# Dropout is only for **training**: `nn.Dropout` is the identity after `model.eval()`, and
# `scaled_dot_product_attention` should get `dropout_p` only while training, as PyTorch's modules do.

# %%
drop = nn.Dropout(p)
drop.eval()
print("eval mode changes nothing:", torch.equal(drop(weights), weights))
drop.train()
torch.manual_seed(0)
print("train mode:", torch.equal(drop(weights), dropped))

# %% [markdown]
# > **Pitfall found in the wild: dropout on the logits.** It looks equivalent and is not. A dropped
# > *logit* becomes 0, and `exp(0)` still gives that key a weight, perhaps more than its real score did;
# > the surviving logits are doubled (p = 0.5), which sharpens the softmax. The effects do not cancel,
# > and the average over many draws is no longer the original distribution:

# %%
torch.manual_seed(0)
logit_draws = F.dropout(scores.expand(20000, T, T), p=p, training=True)  # dropout on the LOGITS
logit_drop = torch.softmax(mask_scores(logit_draws, mask), dim=-1).mean(0)  # (T, T)
print("weights (row 5):                       ", weights[5])
print("mean, dropout on weights (row 5):      ", mean_dropped[5])
print("mean, dropout on logits first (row 5): ", logit_drop[5])

# %% [markdown]
# > Here the mean of row 5 is flatter than the truth: "mat" gets 0.11 of its own attention instead of 0.06.
# > Dropout *after* the `-inf` fill is worse: a dropped `-inf` becomes `-inf * 0 = NaN`, and the whole row
# > turns NaN. In this draw every row holding a `-inf` lost one; only row 5, which has none, survives:

# %%
torch.manual_seed(7)
print(torch.softmax(F.dropout(masked, p=p, training=True), dim=-1))

# %% [markdown]
# ## 10. Three mask conventions, one converter
#
# Libraries agree on what a mask *does*, not on how to *write* it:
#
# | convention | dtype | "may attend" | "blocked" | used by |
# |---|---|---|---|---|
# | `"allow"` | bool | `True` | `False` | `F.scaled_dot_product_attention`, this course |
# | `"block"` | bool | `False` | `True` | `nn.MultiheadAttention` (`attn_mask`, `key_padding_mask`) |
# | `"additive"` | float | `0.0` | `-inf` | added to the scores; many older codebases |
#
# Hand the wrong one to a library and it does not complain. Our causal "allow" mask passed straight to
# `nn.MultiheadAttention`, which reads `True` as blocked:

# %%
torch.manual_seed(0)
mha = nn.MultiheadAttention(embed_dim=C, num_heads=1, batch_first=True)
xb = x[None]  # (1, T, C)
with torch.no_grad():
    _, wrong = mha(xb, xb, xb, attn_mask=causal_mask(T))  # weights: (1, T, T)
print(wrong[0])

# %% [markdown]
# Each query attends only to the *future*, and the last query, for which everything is "blocked", gets
# NaN. That NaN is the good case, from `need_weights=True` (the default); with `need_weights=False` the
# same mistake gives the last query an output of zeros, with nothing to flag it (notebook 05, section 4).
# `convert_mask(mask, src, dst)` is the one place in the course that translates:

# %%
with torch.no_grad():
    _, right = mha(xb, xb, xb, attn_mask=convert_mask(causal_mask(T), "allow", "block"))
print(right[0])
allow = causal_mask(4)
additive = convert_mask(allow, "allow", "additive")
block = convert_mask(allow, "allow", "block")
print(additive)
print(block.int())
print("round trip allow -> additive -> block -> allow:",
      torch.equal(convert_mask(convert_mask(additive, "additive", "block"), "block", "allow"), allow))

# %% [markdown]
# An additive mask's blocked entries are `-inf` and its allowed ones 0. A float tensor with other values
# is a **bias**, not a mask: ALiBi adds `-slope * (i - j)` to make distant keys less attractive. There is
# no boolean mask to convert it to, and `convert_mask` says so rather than guess:

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
# A generating model computes the keys and values of earlier tokens once and keeps them (a KV cache).
# Each step then has T new queries (often 1) but S keys, the S - T cached ones and the new ones. The new
# queries are the **last** T positions: query i sits at `S - T + i` and may see keys `0 .. S - T + i`.
# The triangle is aligned **bottom-right**: `tril(diagonal=S - T)`.
#
# `F.scaled_dot_product_attention(..., is_causal=True)` aligns it **top-left** (query i sees keys
# `0 .. i`), as if the queries were the *first* T positions: the same only when T = S. (The pictures
# show masks, dark = may attend, so they carry no colourbar.)

# %%
T_new, S_all = 2, 6
bottom_right = causal_mask(T_new, S_all)  # (T, S)
top_left = torch.ones(T_new, S_all, dtype=torch.bool).tril()  # what is_causal=True uses
print(bottom_right.int())
print(top_left.int())

fig, axes = plt.subplots(1, 2, figsize=(7, 2.2))
for ax, m, name in ((axes[0], bottom_right, "causal_mask(2, 6): bottom-right"),
                    (axes[1], top_left, "is_causal=True: top-left")):
    plot_weights(m.float(), ["query 4", "query 5"], [f"key {j}" for j in range(S_all)], ax=ax, title=name,
                 annotate=False, colorbar=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Which is right? Recompute all 6 tokens with the square causal mask and keep the last 2 queries'
# outputs: that is what generation must reproduce. The bottom-right mask matches; `is_causal=True` does not.

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
# `is_causal` shortcut assumes T = S.) PyTorch names both alignments in `torch.nn.attention.bias`:
# `causal_lower_right(T, S)` is `causal_mask(T, S)`'s triangle, `causal_upper_left(T, S)` that of
# `is_causal=True`. Each is a small object that `F.scaled_dot_product_attention` takes as `attn_mask`, so
# it can pick a fused kernel without building the `(T, S)` matrix. They agree with ours:

# %%
lower_right = F.scaled_dot_product_attention(q_new, k6, v6, attn_mask=causal_lower_right(T_new, S_all))
upper_left = F.scaled_dot_product_attention(q_new, k6, v6, attn_mask=causal_upper_left(T_new, S_all))
print("causal_lower_right vs causal_mask(T, S), agree to 1e-6:", (lower_right - with_cache).abs().max().item() < 1e-6)
print("causal_upper_left  vs is_causal=True,    agree to 1e-6:",
      (upper_left - sdpa_is_causal).abs().max().item() < 1e-6)

# %% [markdown]
# ## 12. Check against `course_utils`
#
# Our inline versions against the package later notebooks use:

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
# Each exercise is a function; its cell checks it and, if it is wrong, names the mistake it looks like.
# Use plain tensor operations, not the `course_utils` helpers. Masks are boolean (`True` = may attend),
# scores and weights float32; leave the inputs unchanged. The checks also draw inputs of other sizes.
#
# ### Exercise 03.1: a causal mask for T queries and S keys (8 min, core)
#
# Write `my_causal_mask(T, S)`, a boolean `(T, S)` mask (`True` = may attend) for T <= S queries, the
# **last** T of S positions (section 11). With T = S it is the ordinary causal mask.

# %%
def my_causal_mask(T, S):
    ### BEGIN SOLUTION
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    ### END SOLUTION


check("03.1", my_causal_mask)

# %% [markdown]
# ### Exercise 03.2: masked attention weights (8 min, core)
#
# Write `masked_weights(scores, mask)`: given scores `(..., T, S)` and a boolean mask that broadcasts to
# them (`True` = may attend), return the attention weights, float32 like the scores. The masks are of
# every kind, and no row is fully masked. Block with `-inf` (`-1e9` gives the same weights and passes too).

# %%
# Inputs: `scores` may have 0 to 3 leading axes (the `...`); tensors may be non-contiguous views.
def masked_weights(scores, mask):
    ### BEGIN SOLUTION
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    ### END SOLUTION


check("03.2", masked_weights)

# %% [markdown]
# ### Exercise 03.3: a padding mask from lengths (8 min, core)
#
# Write `my_padding_mask(lengths, S)`: from a `(B,)` integer tensor `lengths`, a boolean `(B, S)` mask,
# `True` at each sequence's real tokens (positions `0 .. length - 1`), `False` at the padding.

# %%
# Inputs: `lengths` may be int64 or int32 or uint8.
def my_padding_mask(lengths, S):
    ### BEGIN SOLUTION
    return torch.arange(S)[None, :] < lengths[:, None]
    ### END SOLUTION


check("03.3", my_padding_mask)

# %% [markdown]
# ### Exercise 03.4: `nn.MultiheadAttention`'s masks as one course mask (8 min, core)
#
# Code written for `nn.MultiheadAttention` carries two boolean masks with `True` = **blocked**:
# `attn_mask` `(T, S)` and `key_padding_mask` `(B, S)`. Write `from_mha_masks(attn_mask, key_padding_mask)`
# returning one mask in this course's convention (`True` = may attend), `(B, 1, T, S)`, ready to
# broadcast against scores `(B, H, T, S)`.

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
# - Apply it to the **scores**, as `-inf`, **before** the softmax: blocked keys get weight exactly 0 and
#   the allowed weights still sum to 1. Zeroing weights after the softmax lets the future into the
#   normaliser; multiplying the mask in (or filling with 0) gives blocked keys weight. Both fail the
#   causality test; `-inf` passes it with a difference of exactly 0.0.
# - Causal mask: `tril`. With T queries and S > T keys (a cache), align it bottom-right,
#   `tril(diagonal=S - T)`; `is_causal=True` aligns top-left and is only right for T = S.
#   PyTorch calls the two `causal_lower_right` and `causal_upper_left` (`torch.nn.attention.bias`).
# - Padding mask: `arange(S) < lengths[:, None]`, broadcast as `(B, 1, S)` or `(B, 1, 1, S)` over the
#   *key* axis. Combine masks with AND. Leave the padding out of the loss with
#   `F.cross_entropy(..., ignore_index=pad_id)`.
# - A fully masked row gives NaN with `-inf`; `course_utils` and `F.scaled_dot_product_attention` (since
#   PyTorch 2.5) give it output 0. A finite fill (`finfo.min`, `-1e9`) hides it as uniform weights over
#   forbidden keys.
# - Dropout goes on the weights after the softmax, scales survivors by `1 / (1 - p)`, and only runs in
#   training. Dropout on the logits changes the distribution; after the `-inf` fill it makes NaN.
# - `convert_mask` translates between `"allow"`, `"block"` (`nn.MultiheadAttention`) and `"additive"`;
#   a bias such as ALiBi is not a mask. A mask handed over the wrong way round raises no error: it gives
#   NaN or, on other paths, silent zeros.
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
#   (ICLR 2022; arXiv 2021): an additive bias on the scores, the case `convert_mask` refuses.
# - Srivastava et al., [Dropout](https://jmlr.org/papers/v15/srivastava14a.html) (2014): units are dropped
#   while training and, at test time, a unit's outgoing weights are multiplied by its probability of being
#   kept, so what it passes on equals its expected output in training. Dividing the survivors by that
#   probability while training instead, `1 / (1 - p)` as `F.dropout` does, is the equivalent "inverted"
#   form: evaluation then needs no change.
