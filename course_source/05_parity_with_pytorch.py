# %% [markdown]
# # 05 Parity with `torch.nn.MultiheadAttention`
#
# In notebook 04 we built `MultiHeadAttention` by hand; PyTorch ships `nn.MultiheadAttention`. With
# PyTorch's weights copied into ours, the two should compute the same function. Getting them to agree
# means reading an API closely: the maths is the same, but several **conventions** differ, and each
# one, forgotten, gives a wrong answer without an error.
#
# **What you will learn**
#
# - where `nn.MultiheadAttention` keeps its weights (`in_proj_weight`, `in_proj_bias`, `out_proj`) and
#   how to copy them into our module, by hand and with `MultiHeadAttention.from_torch`;
# - the conventions that differ, and what goes wrong when you forget each one: **mask polarity**
#   (PyTorch's module reads `True` as *blocked*), `batch_first=False` by default, the returned
#   **tuple** `(out, weights)`, `need_weights` and `average_attn_weights`, and the layout of a 3-D
#   `attn_mask`;
# - how close "equal" is: both modules do the same arithmetic, so they agree to each type's rounding error
#   or exactly, depending on your CPU's kernels (checked below `1e-6` in `float32`, `1e-14` in `float64`),
#   while `float32` itself is about `1e-7` from the `float64` answer;
# - that `F.scaled_dot_product_attention` (with a boolean mask or `is_causal=True`) gives the same
#   result from our projections;
# - why dropout in training mode cannot be compared, and why eval mode can;
# - that a mask passed the wrong way round gives NaN on one of the module's paths and silent zeros on
#   another;
# - **cross-attention**: queries from one sequence, keys and values from another, as in the
#   encoder-decoder Transformer, and how decoder-only models do without it.
#
# **Prerequisites**: notebooks 03 (masks, `convert_mask`) and 04 (`MultiHeadAttention`, `split_heads`).
#
# **Time**: about 65 minutes. **Runs on**: CPU (every tensor here is tiny; parity is about
# conventions, not speed).

# %%
# NBVAL_IGNORE_OUTPUT
import math
from unittest import mock

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.masking import causal_mask, combine_masks, convert_mask, padding_mask
from course_utils.multihead import MultiHeadAttention, merge_heads, split_heads
from course_utils.plotting import plot_weights

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}; this notebook runs on the CPU (your best device would be: {device})")

# %% [markdown]
# ## 1. Two modules, one function
#
# We make one `nn.MultiheadAttention` with `embed_dim` C = 8 and `num_heads` H = 2 (so `head_dim`
# D = 4), and a batch of B = 2 sequences of T = 5 tokens. We pass `batch_first=True` for now, so that
# it takes `(B, T, C)` like ours; section 6 shows what the default does instead.

# %%
B, T, C, H = 2, 5, 8, 2
torch.manual_seed(0)
torch_mha = nn.MultiheadAttention(embed_dim=C, num_heads=H, batch_first=True)
x = torch.randn(B, T, C)
for name, p in torch_mha.named_parameters():
    print(f"{name:22s} {tuple(p.shape)}")

# %% [markdown]
# Four tensors. `in_proj_weight` has shape `(3C, C)`: the query, key and value projections **stacked
# along the rows**, in that order: rows `0..C-1` make q, rows `C..2C-1` make k, rows `2C..3C-1` make v.
# Like every `nn.Linear`, each block is stored as `(out_features, in_features)` and applied as
# `x @ W.T + b`. `out_proj` is an ordinary `nn.Linear(C, C)`.
#
# Our `MultiHeadAttention` uses the same layout on purpose: one packed `qkv_proj = nn.Linear(C, 3C)`
# and an `out_proj`.

# %%
ours = MultiHeadAttention(C, H)
for name, p in ours.named_parameters():
    print(f"{name:22s} {tuple(p.shape)}")

# %% [markdown]
# ## 2. Copy the weights by hand
#
# First the slices, the three `(C, C)` blocks of rows; then everything into `ours`. Parameters are leaves
# that require gradients, so the in-place copy goes inside `torch.no_grad()`.

# %%
W = torch_mha.in_proj_weight.detach()  # (3C, C)
b = torch_mha.in_proj_bias.detach()  # (3C,)
w_q, w_k, w_v = W[:C], W[C : 2 * C], W[2 * C :]  # 3 x (C, C), rows = output channels
b_q, b_k, b_v = b[:C], b[C : 2 * C], b[2 * C :]  # 3 x (C,)
print(w_q.shape, w_k.shape, w_v.shape, b_q.shape)

with torch.no_grad():
    ours.qkv_proj.weight.copy_(torch_mha.in_proj_weight)  # (3C, C): same layout, straight across
    ours.qkv_proj.bias.copy_(torch_mha.in_proj_bias)  # (3C,)
    ours.out_proj.weight.copy_(torch_mha.out_proj.weight)  # (C, C)
    ours.out_proj.bias.copy_(torch_mha.out_proj.bias)  # (C,)

# The first C outputs of our packed projection are the queries x @ w_q.T + b_q:
q_ours = ours.qkv_proj(x)[..., :C]  # (B, T, 3C) -> (B, T, C)
torch.testing.assert_close(q_ours, x @ w_q.T + b_q)
print("queries agree:", q_ours.shape)

# %% [markdown]
# ## 3. Call both, compare
#
# `nn.MultiheadAttention` is written for the general case `forward(query, key, value)`: for
# self-attention we pass `x` three times. It **always returns a tuple** `(out, weights)`. Ours takes
# `x` once and returns just `out`, or `(out, weights)` when asked with `need_weights=True`.

# %%
ours.eval()  # no dropout here anyway; eval mode says: deterministic, as a comparison should be
torch_mha.eval()
out_t, weights_t = torch_mha(x, x, x)
out_o, weights_o = ours(x, need_weights=True)
print("torch:", type(torch_mha(x, x, x)).__name__, tuple(out_t.shape), tuple(weights_t.shape))
print("ours: ", tuple(out_o.shape), tuple(weights_o.shape))
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(weights_o.mean(dim=1), weights_t)  # (B, H, T, S) -> (B, T, S)
print("out and head-averaged weights match")

# %% [markdown]
# The weights differ in shape: PyTorch returns `(B, T, S)`, ours `(B, H, T, S)`. That is
# `average_attn_weights=True`, the default: PyTorch **averages the weights over the heads**, so we
# compared ours averaged over dim 1. With `average_attn_weights=False`, PyTorch returns one matrix per
# head, and the head order matches: both split the C channels into H consecutive groups of D.

# %%
_, weights_per_head = torch_mha(x, x, x, average_attn_weights=False)
print(weights_per_head.shape)
torch.testing.assert_close(weights_o, weights_per_head)
print("per-head weights match")

# %% [markdown]
# The hand copy is what `MultiHeadAttention.from_torch` does (it also copies the dropout probability
# and the train/eval mode). From now on we use the one-liner.

# %%
ours2 = MultiHeadAttention.from_torch(torch_mha)
for p, p2 in zip(ours.parameters(), ours2.parameters()):
    torch.testing.assert_close(p, p2, rtol=0, atol=0)
print("from_torch copies exactly what we copied by hand; training mode:", ours2.training)

# %% [markdown]
# ## 4. Masks: PyTorch's module reads `True` as *blocked*
#
# This is the convention that bites hardest. In this course, and in `F.scaled_dot_product_attention`,
# a boolean mask says **`True` = may attend**. `nn.MultiheadAttention`'s `attn_mask` and
# `key_padding_mask` say the opposite: **`True` = blocked** ("masked out"). `convert_mask(mask, "allow",
# "block")` from notebook 03 translates; for a boolean mask it is just `~mask`.

# %%
allow = causal_mask(T)  # (T, T), True = may attend
block = convert_mask(allow, "allow", "block")  # (T, T), True = blocked
print("ours (allow):\n", allow.int())
print("nn.MultiheadAttention (block):\n", block.int())
print("block is ~allow:", torch.equal(block, ~allow))

out_t, weights_t = torch_mha(x, x, x, attn_mask=block)
out_o, weights_o = ours(x, allow, need_weights=True)
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(weights_o.mean(dim=1), weights_t)
print("causal: match")

# %% [markdown]
# **What goes wrong if you forget.** Passing our `allow` mask straight in raises no error. PyTorch
# blocks exactly the keys we meant to keep: the first query may look only at the *future*, and the
# last query, whose row is all `True`, has every key blocked. Its softmax is 0 / 0 = NaN, and the NaN
# spreads through the output projection into every channel of that token.

# %%
out_wrong, weights_wrong = torch_mha(x, x, x, attn_mask=allow)  # forgot to invert!
print("weights of sequence 0 (averaged over heads):\n", weights_wrong[0].detach())
print("NaN in the output, per token of sequence 0:", out_wrong[0].isnan().any(dim=-1).tolist())
fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.0))
plot_weights(weights_t[0], ax=axes[0], title="block = ~allow (correct)")
plot_weights(weights_wrong[0].nan_to_num(0.0), ax=axes[1], title="forgot to invert (NaN row drawn as 0)")
plt.tight_layout()
plt.show()

# %% [markdown]
# **NaN or zeros: it depends on the path.** That NaN came from `need_weights=True`, the default, which
# builds the weights with an explicit softmax: `0 / 0` shows. `nn.MultiheadAttention` has two other
# ways through, and the same forgotten inversion does not look the same on them:
#
# - `need_weights=False` hands the attention step to `F.scaled_dot_product_attention`, which (since
#   PyTorch 2.5) gives a query with no visible key the output 0. The last token's attention output is
#   0, so the module returns just `out_proj`'s bias, which PyTorch initialises to zeros: **zeros, no NaN,
#   nothing to flag the mistake**. That is worse than NaN.
# - In eval mode under `torch.no_grad()` (with `batch_first=True`, biases, an even number of heads, and
#   the same tensor passed as query, key and value), PyTorch takes a native "fast path" in C++. On the
#   CPU, in the version this course is tested with, it gives NaN again.
#
# The other tokens are wrong on every path, and the same way: they attend to the future instead of the
# past.

# %%
with torch.no_grad():
    right = torch_mha(x, x, x, attn_mask=block, need_weights=False)[0]  # the correct output, to compare with
paths = {"need_weights=True": lambda: torch_mha(x, x, x, attn_mask=allow)[0],
         "need_weights=False": lambda: torch_mha(x, x, x, attn_mask=allow, need_weights=False)[0]}
with torch.no_grad():
    fast = torch_mha(x, x, x, attn_mask=allow, need_weights=False)[0]  # the native fast path
outs = {name: run().detach() for name, run in paths.items()} | {"no_grad, eval (fast path)": fast}
for name, out in outs.items():
    print(f"{name:26s} last token: NaN {out[:, -1].isnan().all().item()!s:5s} "
          f"all zeros {(out[:, -1] == 0).all().item()!s:5s} | the other tokens: same as on the first path "
          f"(to 1e-5) {torch.allclose(out[:, :-1], outs['need_weights=True'][:, :-1], atol=1e-5)}, "
          f"off from the right answer by {round((out[:, :-1] - right[:, :-1]).abs().max().item(), 2)}")

# %% [markdown]
# ## 5. Padding: `key_padding_mask`
#
# For a batch of sequences padded to the same length, PyTorch takes a separate `key_padding_mask` of
# shape `(B, S)`, again with **`True` = blocked** (here: padding). Ours has one `mask` argument; the
# course's `padding_mask` is `(B, S)` with `True` = real token, and broadcasting it as `(B, 1, 1, S)`
# applies it to every head and every query.

# %%
lengths = torch.tensor([5, 3])  # sequence 1 has two padding tokens at the end
keys_allow = padding_mask(lengths, T)  # (B, S), True = real token
key_padding_mask = convert_mask(keys_allow, "allow", "block")  # (B, S), True = padding
print(key_padding_mask)

out_t, weights_t = torch_mha(x, x, x, key_padding_mask=key_padding_mask)
out_o, weights_o = ours(x, keys_allow[:, None, None, :], need_weights=True)  # (B, S) -> (B, 1, 1, S)
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(weights_o.mean(dim=1), weights_t)
print("padding: match; weights on the padding keys of sequence 1:", weights_t[1, :, 3:].abs().max().item())

# %% [markdown]
# Both masks together: PyTorch blocks a key if **either** mask blocks it; we combine our two "allow"
# masks with `combine_masks` (a logical AND). The padded *queries* of sequence 1 still get outputs (they
# can see the real keys before them); a model ignores those positions, and both modules agree on them
# anyway.

# %%
both = combine_masks(allow, keys_allow[:, None, None, :])  # (T, T) & (B, 1, 1, S) -> (B, 1, T, S)
out_t, weights_t = torch_mha(x, x, x, attn_mask=block, key_padding_mask=key_padding_mask)
out_o, weights_o = ours(x, both, need_weights=True)
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(weights_o.mean(dim=1), weights_t)
print("causal + padding: match;", tuple(both.shape))

# %% [markdown]
# A per-sequence `attn_mask` is also possible, with a layout to know: a 3-D `attn_mask` has shape
# `(B*H, T, S)`, one `(T, S)` mask per sequence **and** head, **batch-major**: row `b*H + h` belongs
# to sequence `b`, head `h`. So each sequence's mask is repeated H times in a row, with
# `repeat_interleave` (exercise 05.3).

# %%
per_seq = combine_masks(allow, keys_allow[:, None, :])  # (T, T) & (B, 1, S) -> (B, T, S), allow
attn_mask_3d = convert_mask(per_seq, "allow", "block").repeat_interleave(H, dim=0)  # (B*H, T, S)
out_t, _ = torch_mha(x, x, x, attn_mask=attn_mask_3d)
torch.testing.assert_close(ours(x, per_seq[:, None]), out_t)  # ours: (B, 1, T, S) broadcasts over heads
print("3-D attn_mask", tuple(attn_mask_3d.shape), "matches")

# %% [markdown]
# ## 6. `batch_first=False` is the default
#
# `nn.MultiheadAttention` defaults to `batch_first=False` and then wants **`(T, B, C)`**: time first,
# like PyTorch's recurrent modules (`nn.RNN`, `nn.LSTM`, `nn.GRU`) and fairseq's attention (`T x B x C`);
# the original Transformer's code (tensor2tensor) was batch-major. Ours always takes `(B, T, C)`.
# `from_torch` copies the weights regardless; you transpose the input and the output.

# %%
torch.manual_seed(1)
seq_first = nn.MultiheadAttention(C, H)  # batch_first=False, the default
print("batch_first:", seq_first.batch_first, "| nn.LSTM's default:", nn.LSTM(C, C).batch_first)
ours_sf = MultiHeadAttention.from_torch(seq_first)
x_tbc = x.transpose(0, 1)  # (B, T, C) -> (T, B, C)
out_t, weights_t = seq_first(x_tbc, x_tbc, x_tbc)  # out: (T, B, C), weights: (B, T, S)
print("out", tuple(out_t.shape), "weights", tuple(weights_t.shape))
torch.testing.assert_close(ours_sf(x), out_t.transpose(0, 1))  # (T, B, C) -> (B, T, C)
print("match after transposing")

# %% [markdown]
# The returned weights are `(B, T, S)` either way, and `key_padding_mask` is `(B, S)` either way:
# `batch_first` only changes `query`, `key`, `value` and the output.
#
# **What goes wrong if you forget.** A `(B, T, C)` tensor handed to a sequence-first module is read as
# T = 2 time steps of a batch of 5. No error, the output even has the right shape, but each token now
# attends to the tokens at the *same position in the other sequences*, never to its own neighbours.

# %%
out_mixed, _ = seq_first(x, x, x)  # (B, T, C) where (T, B, C) was expected
print("shape:", tuple(out_mixed.shape), "(looks fine)")
print("largest difference from the right answer:", round((out_mixed - ours_sf(x)).abs().max().item(), 2))

# %% [markdown]
# ## 7. How equal is equal? A table of relative errors
#
# Now every combination at once: four masks, with and without bias, both `batch_first` settings, in
# `float32` and `float64`. We measure the relative error `‖ours − torch‖ / ‖torch‖` of the output and
# of the head-averaged weights.

# %%
def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def compare(mask_name, bias, batch_first, dtype):
    """Outputs and head-averaged weights of nn.MultiheadAttention and of ours on one fixed-seed case."""
    B, T, C, H = 3, 6, 16, 4
    torch.manual_seed(0)
    torch_mha = nn.MultiheadAttention(C, H, bias=bias, batch_first=batch_first).to(dtype).eval()
    ours = MultiHeadAttention.from_torch(torch_mha)
    x = torch.randn(B, T, C).to(dtype)  # the same numbers in both dtypes
    allow = causal_mask(T)  # (T, T)
    keys = padding_mask(torch.tensor([6, 4, 2]), T)  # (B, S)
    attn_mask = {"causal": allow, "causal+padding": allow}.get(mask_name)
    key_mask = {"padding": keys, "causal+padding": keys}.get(mask_name)
    torch_kwargs = {
        "attn_mask": None if attn_mask is None else convert_mask(attn_mask, "allow", "block"),
        "key_padding_mask": None if key_mask is None else convert_mask(key_mask, "allow", "block"),
    }
    our_mask = combine_masks(attn_mask, None if key_mask is None else key_mask[:, None, None, :])
    x_in = x if batch_first else x.transpose(0, 1)  # (T, B, C) for batch_first=False
    out_t, weights_t = torch_mha(x_in, x_in, x_in, **torch_kwargs)
    out_t = out_t if batch_first else out_t.transpose(0, 1)
    out_o, weights_o = ours(x, our_mask, need_weights=True)
    return out_t, weights_t, out_o, weights_o.mean(dim=1)  # weights: (B, H, T, S) -> (B, T, S)


rows = []
for mask_name in ("none", "causal", "padding", "causal+padding"):
    for bias in (True, False):
        for batch_first in (True, False):
            t32, tw32, o32, ow32 = compare(mask_name, bias, batch_first, torch.float32)
            t64, tw64, o64, ow64 = compare(mask_name, bias, batch_first, torch.float64)
            errs = (rel_err(o32, t32), rel_err(ow32, tw32), rel_err(o64, t64), rel_err(ow64, tw64),
                    rel_err(o32.double(), t64))  # last: float32 against the float64 answer
            rows.append((mask_name, bias, batch_first, *errs))
print(len(rows), "cases")

# %%
# NBVAL_IGNORE_OUTPUT
# The last bits of floating point can differ between machines and versions: nbval skips this table.
print(f"{'mask':15s} {'bias':5s} {'batch_first':11s} | {'f32 out':>8s} {'f32 wts':>8s} | {'f64 out':>8s} "
      f"{'f64 wts':>8s} | {'f32 vs f64':>10s}")
for mask_name, bias, batch_first, e32o, e32w, e64o, e64w, e32x in rows:
    print(f"{mask_name:15s} {bias!s:5s} {batch_first!s:11s} | {e32o:8.1e} {e32w:8.1e} | {e64o:8.1e} "
          f"{e64w:8.1e} | {e32x:10.1e}")

# %% [markdown]
# How to read it: the errors sit at the type's rounding error or below. `float32` keeps about 7
# significant digits (machine epsilon `1.2e-7`), `float64` about 16 (`2.2e-16`). Entries may be
# exactly `0`: both modules do the same arithmetic, and whether they also round the same way depends on
# the kernels your CPU picks. Agreeing is not being *exact*: the last column compares the `float32`
# output with the `float64` one, and there `float32`'s `1e-7` shows. A real bug, a forgotten scale or a
# flipped mask, gives errors of order `1e-1` or NaN. The deterministic version of the table, the one to
# trust in a test:

# %%
worst32 = max(max(r[3], r[4]) for r in rows)
worst64 = max(max(r[5], r[6]) for r in rows)
worst_exact = max(r[7] for r in rows)
print("ours vs torch, float32: all below 1e-6: ", worst32 < 1e-6, f"(eps = {torch.finfo(torch.float32).eps:.1e})")
print("ours vs torch, float64: all below 1e-14:", worst64 < 1e-14, f"(eps = {torch.finfo(torch.float64).eps:.1e})")
print("float32 vs float64 answer: between 1e-8 and 1e-6:", 1e-8 < worst_exact < 1e-6)

# %% [markdown]
# ## 8. `need_weights`: the default costs speed
#
# `need_weights=True` is the default, so by default `nn.MultiheadAttention` builds the full `(T, S)`
# matrix of weights with an explicit matmul and softmax, to return it. With `need_weights=False` it
# returns `(out, None)` and hands the work to `F.scaled_dot_product_attention`, which can pick fused
# kernels (FlashAttention, memory-efficient attention) that never store the weights. We can watch that
# happen by wrapping `F.scaled_dot_product_attention` in a `mock` that counts its calls.

# %%
for need_weights in (True, False):
    with mock.patch.object(F, "scaled_dot_product_attention", wraps=F.scaled_dot_product_attention) as spy:
        out_t, weights_t = torch_mha(x, x, x, need_weights=need_weights)
    shape = None if weights_t is None else tuple(weights_t.shape)
    print(f"need_weights={need_weights!s:5s}: weights {shape}, F.scaled_dot_product_attention called {spy.call_count}x")
torch.testing.assert_close(ours(x), out_t)
with torch.no_grad():  # eval mode, no autograd, batch_first=True: the native fast path
    torch.testing.assert_close(torch_mha(x, x, x, need_weights=False)[0], out_t)
print("same output every way")

# %% [markdown]
# Our module makes the other choice: `need_weights=False` is *its* default, and then it returns a bare
# tensor: `torch_mha(x, x, x)` gives a tuple, `ours(x)` a tensor.
#
# ## 9. `F.scaled_dot_product_attention` from our projections
#
# The functional API reads boolean masks **our** way round: `True` = may attend. So we can use our
# module's projections, run the attention step with PyTorch's function, and land on
# `nn.MultiheadAttention`'s output again. `is_causal=True` builds the causal mask itself (aligned
# top-left, which is the same as ours when T == S).

# %%
with torch.no_grad():
    q, k, v = ours.qkv_proj(x).chunk(3, dim=-1)  # (B, T, 3C) -> 3 x (B, T, C)
    q, k, v = (split_heads(t, H) for t in (q, k, v))  # (B, T, C) -> (B, H, T, D)
    print("q", tuple(q.shape))
    heads_mask = F.scaled_dot_product_attention(q, k, v, attn_mask=allow)  # (B, H, T, D)
    heads_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
    out_mask = ours.out_proj(merge_heads(heads_mask))  # (B, H, T, D) -> (B, T, C) -> (B, T, C)
    out_causal = ours.out_proj(merge_heads(heads_causal))
    out_t, _ = torch_mha(x, x, x, attn_mask=block)

torch.testing.assert_close(out_mask, out_t)
torch.testing.assert_close(out_causal, out_t)
print("F.scaled_dot_product_attention (attn_mask=allow and is_causal=True) matches nn.MultiheadAttention")

# %% [markdown]
# Careful: `F.scaled_dot_product_attention` also accepts a *float* `attn_mask`, which it **adds** to
# the scores. A 0/1 float mask is therefore not a mask at all, just a small bias: convert to bool (or
# to `"additive"` with `convert_mask`, 0 and -inf) first.

# %%
with torch.no_grad():
    as_float = F.scaled_dot_product_attention(q, k, v, attn_mask=allow.float())  # adds 1 or 0 to scores
    additive = F.scaled_dot_product_attention(q, k, v, attn_mask=convert_mask(allow, "allow", "additive"))
print("0/1 float mask gives the causal result:", torch.allclose(as_float, heads_mask))
print("additive (0 / -inf) mask gives it:     ", torch.allclose(additive, heads_mask))

# %% [markdown]
# ## 10. Dropout: equal in eval mode, not comparable in training mode
#
# Both modules apply dropout to the attention weights (after the softmax) in training mode, and scale
# the kept weights by `1 / (1 - p)`. Each call draws a fresh random mask, so even **one** module gives
# a different result on each call: there is nothing stable to compare.

# %%
torch.manual_seed(2)
drop_mha = nn.MultiheadAttention(C, H, dropout=0.5, batch_first=True)  # training mode by default
drop_ours = MultiHeadAttention.from_torch(drop_mha)
print("training:", drop_mha.training, drop_ours.training, "| dropout:", drop_mha.dropout, drop_ours.dropout)
out1, w1 = drop_mha(x, x, x)
out2, _ = drop_mha(x, x, x)
print("two calls of the same module agree:", torch.allclose(out1, out2))
print("row sums of the weights (no longer 1):", w1[0].detach().sum(dim=-1))

# %% [markdown]
# Reseeding before each call does not make two *different* implementations comparable either: how an
# implementation consumes the random generator (one draw per weight, in which order, or a fused GPU
# kernel with its own generator) is a detail PyTorch does not promise. Parity tests compare in eval
# mode, where dropout is off:

# %%
drop_mha.eval()
drop_ours.eval()
torch.testing.assert_close(drop_ours(x), drop_mha(x, x, x)[0])
print("eval mode: match")

# %% [markdown]
# ## 11. Cross-attention: queries from one sequence, keys and values from another
#
# Everything so far was **self-attention**: one sequence supplied queries, keys and values. The original
# Transformer (Vaswani et al., 2017, section 3.2.3) translates with two stacks. The *encoder* reads the
# source sentence, S tokens, and outputs one vector per token: the **memory**. The *decoder* writes the
# translation, T tokens so far; each of its layers has, besides its masked self-attention, an
# **encoder-decoder attention** (cross-attention): the decoder's T positions ask the queries, the
# encoder's S outputs supply keys and values. Three things follow:
#
# - The weights are `(B, H, T, S)`, a rectangle: T and S are the lengths of two different sequences.
# - **No causal mask across the two.** Causality orders the positions of one sequence. The source is
#   known in full before the first word is written, so every decoder position may look at every source
#   token; the decoder's own causal mask lives in its self-attention layer.
# - **A padding mask on the encoder side.** A batch of source sentences is padded to S, and no query may
#   attend to that padding: a `(B, S)` mask, broadcast as `(B, 1, 1, S)` (for `nn.MultiheadAttention`,
#   `key_padding_mask`, True = blocked).
#
# `nn.MultiheadAttention` was built for this: `forward(query, key, value)` with the memory as key and
# value; rows `0..C-1` of `in_proj_weight` project the queries (from the decoder), rows `C..3C-1` the
# keys and values (from the memory). Ours takes the memory as a keyword, `ours(x, mask, memory=memory)`.

# %%
S = 6
torch.manual_seed(3)
memory = torch.randn(B, S, C)  # (B, S, C): the encoder's outputs for source sentences of S = 6 tokens
src_keys = padding_mask(torch.tensor([6, 4]), S)  # (B, S), True = real source token; sentence 1 is padded
out_t, weights_t = torch_mha(x, memory, memory, key_padding_mask=convert_mask(src_keys, "allow", "block"),
                             average_attn_weights=False)
out_o, weights_o = ours(x, src_keys[:, None, None, :], need_weights=True, memory=memory)  # (B, S) -> (B, 1, 1, S)
print("queries x", tuple(x.shape), "memory", tuple(memory.shape), "-> out", tuple(out_o.shape),
      "weights", tuple(weights_o.shape))
torch.testing.assert_close(out_o, out_t)
torch.testing.assert_close(weights_o, weights_t)
print("cross-attention: match")
plot_weights(weights_o[1].mean(dim=0), [f"target {i}" for i in range(T)], [f"source {j}" for j in range(S)],
             title="sentence 1: T = 5 queries over S = 6 memory keys (2 padded)")
plt.show()

# %% [markdown]
# Every decoder position spreads its weight over all four real source tokens, the last one included,
# and puts none on the padding. So the padding's values cannot matter: replace them, and the output does
# not move.

# %%
real_weights = weights_o[1][..., :4]  # (H, T, 4): the real source tokens of sentence 1
print("every query puts weight on every real source token:", (real_weights > 0).all().item())
print("weight on the padding:", weights_o[1][..., 4:].abs().max().item())
other_padding = memory.clone()
other_padding[1, 4:] = 100 * torch.randn(2, C)  # new vectors where sentence 1 is padded
print("padding changed, output agrees to 1e-6:",
      (ours(x, src_keys[:, None, None, :], memory=other_padding) - out_o).abs().max().item() < 1e-6)

# %% [markdown]
# A causal mask across the two sequences would be a quiet bug: `causal_mask(T, S)` aligns the T queries
# with the *last* T of S positions, as if the decoder continued the source, and keeps the first target
# word from seeing the end of the source sentence:

# %%
print(causal_mask(T, S).int())

# %% [markdown]
# Forgetting to invert `key_padding_mask` is the mistake of section 4 again, with one difference:
# `nn.MultiheadAttention` takes its native fast path only for self-attention (query, key and value one
# tensor), so for cross-attention `need_weights=False` always goes through
# `F.scaled_dot_product_attention`. Sentence 0 has no padding, so the uninverted mask blocks all its
# keys: NaN with `need_weights=True`, and with `need_weights=False` every one of its outputs is
# `out_proj`'s bias, zeros here, under `torch.no_grad()` too.

# %%
forgot = dict(key_padding_mask=src_keys)  # True = real token, read by PyTorch as True = blocked
with torch.no_grad():
    nan_out, _ = torch_mha(x, memory, memory, **forgot)
    zero_out, _ = torch_mha(x, memory, memory, **forgot, need_weights=False)
print("need_weights=True,  sentence 0: all NaN  ", nan_out[0].isnan().all().item())
print("need_weights=False, sentence 0: all zeros", (zero_out[0] == 0).all().item())

# %% [markdown]
# ### Decoder-only models: no cross-attention at all
#
# GPT-style models, the course's tiny GPT among them, have no encoder and no memory: one sequence, and
# causal self-attention in every layer. To translate, a decoder-only model reads the source as part of
# its **prompt** ("English: the cat sat. French:") and continues the text. The source's tokens come
# *first*, so every position written after them may look back at all of them: in the causal mask of the
# S + T tokens, the last T rows (the translation) see all S source columns:

# %%
prompt_and_answer = causal_mask(S + T)  # (S + T, S + T): one sequence, source first
print("every answer token sees the whole source:", prompt_and_answer[S:, :S].all().item())
print("no source token sees the answer:", (~prompt_and_answer[:S, S:]).all().item())

# %% [markdown]
# What the decoder-only model gives up is the split: the source is read by the same weights, with the
# same causal mask, as the answer (its first tokens cannot look at its later ones), where an encoder
# reads it with no mask and a decoder consults it through separate cross-attention weights.
#
# ## 12. Closing check against `course_utils`
#
# Everything above used `course_utils` pieces, but we derived three things by hand: the row slices of
# `in_proj_weight`, the inverted masks, and the attention step through `F.scaled_dot_product_attention`.
# Each agrees with the `course_utils` version, and so does cross-attention built from the same slices.

# %%
reference = MultiHeadAttention.from_torch(torch_mha).eval()
torch.testing.assert_close(torch.cat([w_q, w_k, w_v]), reference.qkv_proj.weight.detach(), rtol=0, atol=0)
torch.testing.assert_close(torch.cat([b_q, b_k, b_v]), reference.qkv_proj.bias.detach(), rtol=0, atol=0)
assert torch.equal(block, ~causal_mask(T)) and torch.equal(key_padding_mask, torch.arange(T) >= lengths[:, None])
torch.testing.assert_close(out_mask, reference(x, causal_mask(T)))
with torch.no_grad():  # cross-attention by hand: q from x with w_q, k and v from the memory with w_k and w_v
    q_x, k_m, v_m = (split_heads(t, H) for t in (x @ w_q.T + b_q, memory @ w_k.T + b_k, memory @ w_v.T + b_v))
    by_hand = reference.out_proj(merge_heads(F.scaled_dot_product_attention(q_x, k_m, v_m,
                                                                            attn_mask=src_keys[:, None, None, :])))
torch.testing.assert_close(by_hand, reference(x, src_keys[:, None, None, :], memory=memory))
print("matches course_utils")

# %% [markdown]
# ## Exercises
#
# Each exercise is a function, checked in its cell on fixed and freshly drawn inputs; a common mistake is
# named. Masks are boolean, weights float32; leave the inputs (and the module) unchanged.
#
# **05.1 Slice `in_proj_weight`.** *(8 min, core)*
# Write `split_in_proj(m)` that takes an `nn.MultiheadAttention` and
# returns its query, key and value weights `(q_weight, k_weight, v_weight)`, each `(C, C)` in
# `nn.Linear`'s `(out, in)` layout (use `m.in_proj_weight` and `m.embed_dim`; `.detach()` is fine).

# %%
def split_in_proj(m):
    ### BEGIN SOLUTION
    C = m.embed_dim
    w = m.in_proj_weight.detach()  # (3C, C)
    return w[:C], w[C : 2 * C], w[2 * C :]
    ### END SOLUTION


check("05.1", split_in_proj)

# %% [markdown]
# **05.2 A `key_padding_mask` from lengths.** *(8 min, core)*
# Write `torch_key_padding_mask(lengths, S)` that returns
# the `(B, S)` boolean mask `nn.MultiheadAttention` wants for sequences of the given `lengths` padded
# to `S`: `True` where the key is padding (blocked). Try it without `padding_mask`, with
# `torch.arange`.

# %%
# Inputs: `lengths` may be int64 or int32.
def torch_key_padding_mask(lengths, S):
    ### BEGIN SOLUTION
    return torch.arange(S)[None, :] >= lengths[:, None]  # (1, S) vs (B, 1) -> (B, S)
    ### END SOLUTION


check("05.2", torch_key_padding_mask)

# %% [markdown]
# **05.3 A course mask as a 3-D `attn_mask`.** *(8 min, core)*
# Write `to_torch_attn_mask(mask, num_heads)`: `mask`
# is a course mask of shape `(B, T, S)` (`True` = may attend), one per sequence. Return the
# `(B*H, T, S)` `attn_mask` that makes `nn.MultiheadAttention` do the same: `True` = blocked, row
# `b*H + h` for sequence `b`, head `h`.

# %%
def to_torch_attn_mask(mask, num_heads):
    ### BEGIN SOLUTION
    return (~mask).repeat_interleave(num_heads, dim=0)  # (B, T, S) -> (B*H, T, S)
    ### END SOLUTION


check("05.3", to_torch_attn_mask)

# %% [markdown]
# **05.4 Average the heads like `need_weights` does.** *(8 min, core)*
# Write `average_heads(weights)` that turns our
# per-head weights `(B, H, T, S)` into what `nn.MultiheadAttention` returns by default
# (`average_attn_weights=True`): `(B, T, S)`, each row still summing to 1.

# %%
def average_heads(weights):
    ### BEGIN SOLUTION
    return weights.mean(dim=1)  # (B, H, T, S) -> (B, T, S)
    ### END SOLUTION


check("05.4", average_heads)

# %% [markdown]
# **05.5 Cross-attention from packed weights.** *(8 min, optional)*
# Write `cross_attention(x, memory, key_mask, qkv_weight,
# qkv_bias, out_weight, out_bias, num_heads)`: the queries come from `x` `(B, T, C)`, the keys and values
# from `memory` `(B, S, C)`, and T and S may differ. The weights are packed the way
# `nn.MultiheadAttention` packs them: `qkv_weight` `(3C, C)` is `in_proj_weight` (q, k, v blocks of C rows,
# each in `nn.Linear`'s `(out, in)` layout), `qkv_bias` `(3C,)`, and `out_weight` `(C, C)`, `out_bias`
# `(C,)` make the output projection. `key_mask` is `(B, S)` in the course's convention: True = a real
# memory token that may be attended (every memory sequence has at least one, and at least one padding slot).
# Scores may be far past where `exp` overflows float32 (notebook 02's stable softmax handles them). Return
# `(B, T, C)`.

# %%
def cross_attention(x, memory, key_mask, qkv_weight, qkv_bias, out_weight, out_bias, num_heads):
    ### BEGIN SOLUTION
    B, T, C = x.shape
    S, D = memory.shape[1], C // num_heads
    w_q, w_k, w_v = qkv_weight.chunk(3)  # 3 x (C, C)
    b_q, b_k, b_v = qkv_bias.chunk(3)  # 3 x (C,)
    q = (x @ w_q.T + b_q).view(B, T, num_heads, D).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
    k = (memory @ w_k.T + b_k).view(B, S, num_heads, D).transpose(1, 2)  # (B, S, C) -> (B, H, S, D)
    v = (memory @ w_v.T + b_v).view(B, S, num_heads, D).transpose(1, 2)  # (B, S, C) -> (B, H, S, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)
    scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))  # (B, S) -> (B, 1, 1, S)
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, S)
    out = (weights @ v).transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C)
    return out @ out_weight.T + out_bias
    ### END SOLUTION


check("05.5", cross_attention)

# %% [markdown]
# ## Summary
#
# Copying `in_proj_weight`, `in_proj_bias` and `out_proj` makes our `MultiHeadAttention` compute what
# `nn.MultiheadAttention` computes, to each type's rounding error or exactly (below `1e-6` in `float32`,
# `1e-14` in `float64`). The maths was never the issue; the conventions are:
#
# | | this course (`MultiHeadAttention`) | `nn.MultiheadAttention` | `F.scaled_dot_product_attention` |
# |---|---|---|---|
# | boolean mask | `True` = may attend | `True` = **blocked** (`attn_mask`, `key_padding_mask`) | `True` = may attend |
# | float mask | – | added to the scores | added to the scores |
# | input layout | `(B, T, C)` | `(T, B, C)` unless `batch_first=True` | `(..., T, D)` per head |
# | 3-D mask | broadcast to `(B, H, T, S)` | `(B*H, T, S)`, batch-major | broadcast to `(B, H, T, S)` |
# | returns | `out`, or `(out, weights)` with `need_weights=True` | always a tuple `(out, weights or None)` | `out` only |
# | weights | per head `(B, H, T, S)` | averaged over heads `(B, T, S)` by default | not returned |
# | `need_weights` default | `False` | `True` (no fused kernel) | – |
# | causal | `causal_mask(T, S)`, bottom-right | `attn_mask` (or `is_causal` with a mask as a hint) | `is_causal=True`, top-left |
# | cross-attention | `ours(x, mask, memory=m)` | `mha(x, m, m, key_padding_mask=...)` | q from `x`, k and v from `m` |
#
# - Invert a course mask with `convert_mask(mask, "allow", "block")` before handing it to
#   `nn.MultiheadAttention`; forgetting it raises no error, but sends queries to the wrong keys, and a
#   fully blocked row comes out as NaN (`need_weights=True`, and the native fast path on the CPU) or as
#   silent zeros (`need_weights=False` through `F.scaled_dot_product_attention`, since PyTorch 2.5).
# - Cross-attention takes the queries from the sequence being written and the keys and values from the
#   memory: weights `(B, H, T, S)`, no causal mask across the two sequences, the memory's padding masked.
#   A decoder-only model has one sequence instead, and the source reaches it through the prompt.
# - Compare in eval mode: dropout draws fresh random masks on every call.
# - In a test, compare with `torch.testing.assert_close` (it reports the worst element), not by
#   printing digits.
#
# ## Further reading
#
# - Vaswani et al., [Attention Is All You Need](https://arxiv.org/abs/1706.03762) (2017), section 3.2.3:
#   the three uses of attention in the Transformer, encoder-decoder attention among them.
# - Bahdanau, Cho and Bengio, [Neural Machine Translation by Jointly Learning to Align and
#   Translate](https://arxiv.org/abs/1409.0473) (2014): the decoder attending over the encoder's states,
#   before Transformers.
# - PyTorch documentation, [`torch.nn.MultiheadAttention`](https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html):
#   every argument used here, including `add_bias_kv`, `add_zero_attn`, `kdim` and `vdim`, which
#   `from_torch` does not support.
# - PyTorch documentation, [`torch.nn.functional.scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html):
#   its reference implementation in plain PyTorch, the mask conventions, and how it picks a kernel.
# - PyTorch documentation, [`torch.testing.assert_close`](https://pytorch.org/docs/stable/testing.html):
#   the default tolerances for each dtype.
