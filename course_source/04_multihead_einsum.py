# %% [markdown]
# # 04 Multi-head attention with einsum
#
# One attention head mixes the tokens in one way. A transformer runs several heads side by side, each
# with its own small query, key and value projections, and glues their outputs together. You build that
# three times: a Python loop over heads, one batched computation with a packed projection (as real code
# does), and per-head weights with `einsum`; check that all three agree; and meet the mistakes people
# make when moving axes around.
#
# **What you will learn**
#
# - to read and write `torch.einsum` and to predict what broadcasting does to a shape;
# - one head, a list of heads, and all heads in one batched computation (`split_heads`, `merge_heads`);
# - how the packed `qkv_proj` weight is the per-head weights stacked up, and that the formulations agree;
# - the shape of every intermediate, from `x (B, T, C)` to the output projection;
# - four pitfalls found in real code: scaling by `C` instead of `D`, `view` after `transpose`, a
#   `view` that silently mixes tokens, and a padding mask that broadcasts onto the heads.
#
# **Prerequisites:** notebooks 02 (scaled dot-product attention) and 03 (masking).
#
# **Time:** about 60 minutes. **Runs on:** a CPU; no GPU needed.
#
# **Shape alphabet** (the same in every notebook): `B` batch, `T` query length, `S` key length,
# `C` embed_dim, `H` num_heads, `D` head_dim = C / H. In `einsum` strings the same letters in lower
# case, with `i` and `j` for query and key positions.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.masking import causal_mask
from course_utils.multihead import (
    MultiHeadAttention,
    MultiHeadAttentionEinsum,
    MultiHeadAttentionWrapper,
    SingleHeadAttention,
    merge_heads,
    split_heads,
)
from course_utils.plotting import plot_heads

device = setup_notebook(seed=0)
print("torch", torch.__version__, "| device:", device)

# %% [markdown]
# Everything here is tiny and runs on the CPU; `device` is printed only so you know what you have.
#
# ## 1. An einsum primer
#
# `torch.einsum` takes a recipe and some tensors. The recipe names every axis of every input with a
# letter, and after the `->` the axes of the output. Two rules:
#
# 1. a letter that appears in the output is **kept** (and walked over, like an outer `for` loop);
# 2. a letter that appears in the inputs but **not in the output is summed over**.
#
# A matrix product `A @ W` with `A` of shape (i, j) and `W` of shape (j, k) is "for each i and k, sum over j":

# %%
g = torch.Generator().manual_seed(0)
A = torch.randn(2, 3, generator=g)
W = torch.randn(3, 4, generator=g)

prod = torch.einsum("ij,jk->ik", A, W)  # j is not in the output: summed
print(prod.shape, "equal to A @ W:", torch.allclose(prod, A @ W))

# %% [markdown]
# A batch letter in front of everything gives a batched matrix product; dropping letters from the output,
# sums; no shared letter, an outer product; reordered letters, a transpose.

# %%
X = torch.randn(5, 2, 3, generator=g)  # a batch of 5 matrices (2, 3)
Y = torch.randn(5, 3, 4, generator=g)  # a batch of 5 matrices (3, 4)
u, w = torch.randn(3, generator=g), torch.randn(4, generator=g)

examples = {
    "bij,bjk->bik  batched matmul": (torch.einsum("bij,bjk->bik", X, Y), X @ Y),
    "ij->ji        transpose": (torch.einsum("ij->ji", A), A.T),
    "ij->          sum of all": (torch.einsum("ij->", A), A.sum()),
    "ij->i         sum of rows": (torch.einsum("ij->i", A), A.sum(dim=1)),
    "i,j->ij       outer product": (torch.einsum("i,j->ij", u, w), u[:, None] * w[None, :]),
    "i,i->         dot product": (torch.einsum("i,i->", u, u), u @ u),
}
for recipe, (got, expected) in examples.items():
    print(f"{recipe:30s} shape {str(tuple(got.shape)):10s} same as plain PyTorch: {torch.allclose(got, expected)}")

# %% [markdown]
# Attention needs the **scores** recipe most. With queries `q` (B, H, T, D) and keys `k` (B, H, S, D),
# the score of query `i` against key `j` in head `h` of batch item `b` is the dot product over `d`:
#
# `scores = torch.einsum("bhid,bhjd->bhij", q, k)`
#
# `d` is missing from the output, so it is summed; `b` and `h` are kept, so every head of every batch
# item gets its own (T, S) table: exactly `q @ k.transpose(-2, -1)`.

# %%
q = torch.randn(2, 3, 5, 4, generator=g)  # (B, H, T, D)
k = torch.randn(2, 3, 6, 4, generator=g)  # (B, H, S, D), S = 6 keys
scores = torch.einsum("bhid,bhjd->bhij", q, k)  # (B, H, T, D), (B, H, S, D) -> (B, H, T, S)
print("scores", tuple(scores.shape))
torch.testing.assert_close(scores, q @ k.transpose(-2, -1))
print("same as q @ k.transpose(-2, -1)")

# %% [markdown]
# ### Broadcasting, in three rules
#
# When tensors of different shapes meet in `+`, `*`, `masked_fill` or `@`, PyTorch lines their shapes up
# **from the right**. Each pair of sizes must be equal, or one must be 1 (stretched) or missing (counts
# as 1); the result takes the larger size. So one (T, T) causal mask serves every batch item and head,
# and a per-head bias (H, D) placed as (1, H, 1, D) reaches every batch item and time step.

# %%
shape_pairs = [
    ((2, 3, 5, 5), (5, 5)),        # scores (B, H, T, T) and a causal mask (T, T)
    ((2, 3, 5, 4), (1, 3, 1, 4)),  # q (B, H, T, D) and a per-head bias (1, H, 1, D)
    ((2, 1, 1, 5), (5, 1)),        # a padding mask (B, 1, 1, S) and a column (T, 1)
    ((2, 5, 12), (3, 4)),          # x (B, T, C) and a bias (H, D) that was not reshaped
]
for a, b in shape_pairs:
    try:
        print(f"{str(a):14s} with {str(b):14s} -> {tuple(torch.broadcast_shapes(a, b))}")
    except RuntimeError as e:
        print(f"{str(a):14s} with {str(b):14s} -> RuntimeError: {e}")

# %% [markdown]
# The last pair fails loudly, the good case: 12 against 4 cannot be lined up. The dangerous case is a
# shape that broadcasts when you did not mean it to (Pitfall 4).
#
# ## 2. One head, by hand
#
# Our running example: `B = 2` sequences of `T = 5` tokens of `C = 12` numbers, and `H = 3` heads of
# size `D = C / H = 4`. A single head has its own three projections from C to D channels, written out
# with (D, C) weight matrices as `nn.Linear` stores them:

# %%
B, T, C, H = 2, 5, 12, 3
D = C // H
x = torch.randn(B, T, C, generator=g)

w_q, w_k, w_v = (torch.randn(D, C, generator=g) / math.sqrt(C) for _ in range(3))  # (D, C) each
q = x @ w_q.T  # (B, T, C) @ (C, D) -> (B, T, D)
k = x @ w_k.T  # (B, T, D)
v = x @ w_v.T  # (B, T, D)
scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, T, D) @ (B, D, T) -> (B, T, T)
weights = torch.softmax(scores, dim=-1)  # (B, T, T), rows sum to 1
head_out = weights @ v  # (B, T, T) @ (B, T, D) -> (B, T, D)
print("q", tuple(q.shape), "scores", tuple(scores.shape), "out", tuple(head_out.shape))

# %% [markdown]
# The scale is `1 / sqrt(D)` with the head size 4, not the model width 12.
# `course_utils.multihead.SingleHeadAttention` is the same computation as a module; copy our weights in
# and compare:

# %%
head = SingleHeadAttention(embed_dim=C, head_dim=D)
with torch.no_grad():
    head.q_proj.weight.copy_(w_q)
    head.k_proj.weight.copy_(w_k)
    head.v_proj.weight.copy_(w_v)
torch.testing.assert_close(head(x), head_out)
print("matches SingleHeadAttention:", tuple(head(x).shape))

# %% [markdown]
# ## 3. Many heads: a loop
#
# Multi-head attention runs `H` such heads, each with its own weights, on the same input. Each returns D
# channels; side by side they give `H * D = C` channels, and one more linear layer, the **output
# projection** (C -> C), mixes what the heads found. Most directly, a Python loop over heads:

# %%
heads_w = [[torch.randn(D, C, generator=g) / math.sqrt(C) for _ in range(3)] for _ in range(H)]
w_out = torch.randn(C, C, generator=g) / math.sqrt(C)


def mha_loop(x, heads_w, w_out):
    """Multi-head attention as a loop over heads (no biases, no mask)."""
    outs = []
    for w_q, w_k, w_v in heads_w:
        q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (B, T, D) each
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (B, T, T)
        outs.append(weights @ v)  # (B, T, D)
    concat = torch.cat(outs, dim=-1)  # H x (B, T, D) -> (B, T, C)
    return concat @ w_out.T  # output projection: (B, T, C) -> (B, T, C)


out_loop = mha_loop(x, heads_w, w_out)
print("out", tuple(out_loop.shape))

# %% [markdown]
# `MultiHeadAttentionWrapper` is this loop as a module: an `nn.ModuleList` of `SingleHeadAttention`s
# and an `out_proj`. With the same weights (and the biases switched off) it gives the same numbers:

# %%
wrapper = MultiHeadAttentionWrapper(C, H, bias=False)
with torch.no_grad():
    for head, (w_q, w_k, w_v) in zip(wrapper.heads, heads_w):
        head.q_proj.weight.copy_(w_q)
        head.k_proj.weight.copy_(w_k)
        head.v_proj.weight.copy_(w_v)
    wrapper.out_proj.weight.copy_(w_out)
torch.testing.assert_close(wrapper(x), out_loop)
print("matches MultiHeadAttentionWrapper")

# %% [markdown]
# The loop is clear, but it launches `5 * H + 1` small matrix products one after another (for each head
# three projections, the scores and the weighted sum; then the output projection: 16 for H = 3), each too
# small to keep a GPU (or a many-core CPU) busy. Next, the same work in four big products, whatever H.
#
# ## 4. All heads at once
#
# Two observations turn the loop into batched code.
#
# **One projection for all heads.** Stacking the H query matrices (each D x C) gives one (C, C) matrix;
# one product `x @ W_q.T` computes every head's queries, head `h` in channels `h*D ... (h+1)*D - 1`.
# Stacking query, key and value too gives one packed (3C, C) matrix, `qkv_proj`, in the order q, k, v
# (the layout of `nn.MultiheadAttention`).

# %%
W_q = torch.cat([hw[0] for hw in heads_w], dim=0)  # H x (D, C) -> (C, C)
W_k = torch.cat([hw[1] for hw in heads_w], dim=0)
W_v = torch.cat([hw[2] for hw in heads_w], dim=0)
W_qkv = torch.cat([W_q, W_k, W_v], dim=0)  # (3C, C)
print("W_qkv", tuple(W_qkv.shape))

qkv = x @ W_qkv.T  # (B, T, C) -> (B, T, 3C)
q, k, v = qkv.chunk(3, dim=-1)  # 3 x (B, T, C), in the order q, k, v
print("qkv", tuple(qkv.shape), "-> q", tuple(q.shape))
# head 1's queries are channels D ... 2D - 1 of q:
torch.testing.assert_close(q[..., D:2 * D], x @ heads_w[1][0].T)
print("head 1's queries sit in channels", D, "to", 2 * D - 1)

# %% [markdown]
# **Heads as a batch axis.** `split_heads` gives the heads their own axis in two steps: cut the channel
# axis into (H, D), then move the head axis before time, so each head holds a (T, D) matrix like a batch
# item:
#
# `(B, T, C) --view--> (B, T, H, D) --transpose(1, 2)--> (B, H, T, D)`

# %%
def my_split(t, num_heads):
    B, T, C = t.shape
    return t.view(B, T, num_heads, C // num_heads).transpose(1, 2)  # (B, T, C) -> (B, T, H, D) -> (B, H, T, D)


qh, kh, vh = my_split(q, H), my_split(k, H), my_split(v, H)
print("q split:", tuple(qh.shape))
torch.testing.assert_close(qh[:, 1], x @ heads_w[1][0].T)  # head 1 of the split = head 1 of the loop
print("qh[:, 1] is head 1's queries")

# %% [markdown]
# One call of notebook 02's attention, which only looks at the last two axes, handles every head of every
# batch item. Then `merge_heads` undoes the split (transpose back, heads side by side), and the output
# projection follows:

# %%
def my_merge(t):
    B, H, T, D = t.shape
    return t.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, C)


out_heads, weights = scaled_dot_product_attention(qh, kh, vh)  # (B, H, T, D), (B, H, T, T)
out_batched = my_merge(out_heads) @ w_out.T  # (B, T, C)
torch.testing.assert_close(out_batched, out_loop)
print("batched == loop; weights", tuple(weights.shape))

# %% [markdown]
# `MultiHeadAttention`, the module the rest of the course uses, is exactly these lines, with biases and
# an optional mask. Its parameters are the packed `qkv_proj` (Linear C -> 3C) and `out_proj` (C -> C):

# %%
mha = MultiHeadAttention(C, H, bias=False)
with torch.no_grad():
    mha.qkv_proj.weight.copy_(W_qkv)
    mha.out_proj.weight.copy_(w_out)
torch.testing.assert_close(mha(x), out_loop)
print("MultiHeadAttention == loop")
print({name: tuple(p.shape) for name, p in mha.named_parameters()})

# %% [markdown]
# ### The shape of every intermediate
#
# The whole batched forward pass again, one step per line, with each tensor's shape.
# (B, T, C, H, D) = (2, 5, 12, 3, 4).

# %%
mha = MultiHeadAttention(C, H)  # fresh weights, with biases
flow = [("x", x, "(B, T, C)")]
qkv = mha.qkv_proj(x)
flow.append(("qkv = qkv_proj(x)", qkv, "(B, T, 3C)"))
q, k, v = (split_heads(t, H) for t in qkv.chunk(3, dim=-1))
flow.append(("q, k, v (each)", q, "(B, H, T, D)"))
scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(D)
flow.append(("scores", scores, "(B, H, T, T)"))
weights = torch.softmax(scores, dim=-1)
flow.append(("weights = softmax(scores)", weights, "(B, H, T, T)"))
out = torch.einsum("bhij,bhjd->bhid", weights, v)  # weights @ v as einsum: sum over the keys j
flow.append(("out = weights @ v", out, "(B, H, T, D)"))
merged = merge_heads(out)
flow.append(("merged = merge_heads(out)", merged, "(B, T, C)"))
final = mha.out_proj(merged)
flow.append(("out_proj(merged)", final, "(B, T, C)"))

print(f"{'step':28s} {'letters':14s} shape")
for name, t, letters in flow:
    print(f"{name:28s} {letters:14s} {tuple(t.shape)}")
torch.testing.assert_close(final, mha(x))
print("\nthe step-by-step result equals mha(x)")

# %% [markdown]
# ## 5. Per-head weights with einsum
#
# A third way keeps the per-head structure in the parameters: the query, key and value weights are each
# **(H, D, C)**, one (D, C) matrix per head. One `einsum` projects the input for every head and lands
# directly in (B, H, T, D), with no `split_heads`:
#
# `q = torch.einsum("hdc,btc->bhtd", w_q, x)`: for each head h and output channel d, sum over the
# input channels c.

# %%
w_q_heads = torch.stack([hw[0] for hw in heads_w])  # H x (D, C) -> (H, D, C)
q_einsum = torch.einsum("hdc,btc->bhtd", w_q_heads, x)  # (H, D, C), (B, T, C) -> (B, H, T, D)
print("w_q_heads", tuple(w_q_heads.shape), "-> q", tuple(q_einsum.shape))
torch.testing.assert_close(q_einsum, qh)  # the same queries split_heads gave us
print("same as split_heads(x @ W_q.T)")

# %% [markdown]
# The (H, D, C) tensor and the packed (C, C) block hold the same numbers in the same memory order:
# `W_q.view(H, D, C)` is `w_q_heads`. That is all `MultiHeadAttentionEinsum.from_packed` needs to copy
# a packed module's weights into the per-head layout. The two formulations compute the same function:

# %%
mha = MultiHeadAttention(C, H)  # random weights, with biases
mha_einsum = MultiHeadAttentionEinsum.from_packed(mha)
mha_wrapper = MultiHeadAttentionWrapper.from_packed(mha)
print("W_q.view(H, D, C) is w_q_heads:", torch.equal(W_q.view(H, D, C), w_q_heads))
print("per-head parameter:", tuple(mha_einsum.w_q.shape), " packed parameter:", tuple(mha.qkv_proj.weight.shape))

# %% [markdown]
# Now all three on the same input with a causal mask. `assert_close` raises if any element is off by more
# than float32 rounding allows; since that rounding's digits vary between machines, we print whether the
# differences stay below a stated tolerance.

# %%
mask = causal_mask(T)
ref = mha(x, mask)
for name, m in [("MultiHeadAttentionEinsum", mha_einsum), ("MultiHeadAttentionWrapper", mha_wrapper)]:
    got = m(x, mask)
    torch.testing.assert_close(got, ref)
    print(f"{name:26s} vs MultiHeadAttention: agree to 1e-6: {(got - ref).abs().max().item() < 1e-6}")

# %% [markdown]
# The differences are float32 rounding (around 1e-7): the modules add the same products in slightly
# different orders. They also have exactly the same number of parameters,
# `4 * C * C + 4 * C` (three C x C projections and the output projection, each with a bias):

# %%
for name, m in [("MultiHeadAttentionWrapper", mha_wrapper), ("MultiHeadAttention", mha),
                ("MultiHeadAttentionEinsum", mha_einsum)]:
    print(f"{name:26s} {sum(p.numel() for p in m.parameters()):4d} parameters")
print(f"{'4 * C * C + 4 * C':26s} {4 * C * C + 4 * C:4d}")

# %% [markdown]
# So splitting into heads costs no parameters: `H` heads of size `C / H` have the weights of one head of
# size `C`. What changes is that each head makes its own softmax, its own choice of where to look.
#
# ## 6. Why several heads? A picture
#
# One softmax row is one distribution over keys: a single head that must both "look at the previous
# word" and "look for the same word earlier" has to blur the two; two heads can each do one job. We
# hand-build a two-head layer on a short sentence. Each token's embedding is a one-hot code for its word
# (first 8 channels) followed by one for its position (last 8):

# %%
sentence = "the dog saw the cat and the bird".split()
vocab = sorted(set(sentence))
T_s, C_s, H_s = len(sentence), 16, 2
D_s = C_s // H_s  # 8
emb = torch.zeros(1, T_s, C_s)  # (B=1, T, C)
for t, word in enumerate(sentence):
    emb[0, t, vocab.index(word)] = 1.0  # word code: channels 0 ... 7
    emb[0, t, 8 + t] = 1.0  # position code: channels 8 ... 15
print("vocab:", vocab, "| embeddings", tuple(emb.shape))

# %% [markdown]
# Head 0 ("previous token"): the query of position t is the position code of t - 1, the key of position
# s is the position code of s, so the score is high exactly when s = t - 1. Head 1 ("same word"): query
# and key are both the word code, so the score is high when the two tokens are the same word. We write
# these into the packed `qkv_proj`, head `h` in rows `h*D ... (h+1)*D - 1` of each block, and use a causal
# mask.

# %%
strength = 4.0
toy = MultiHeadAttention(C_s, H_s, bias=False)
Wq, Wk, Wv = torch.zeros(C_s, C_s), torch.zeros(C_s, C_s), torch.eye(C_s)
for d in range(D_s):
    if d + 1 < D_s:
        Wq[d, 8 + d + 1] = strength  # head 0, query: position t -> channel t - 1
    Wk[d, 8 + d] = strength  # head 0, key: position s -> channel s
    Wq[D_s + d, d] = strength  # head 1, query: word code
    Wk[D_s + d, d] = strength  # head 1, key: word code
with torch.no_grad():
    toy.qkv_proj.weight.copy_(torch.cat([Wq, Wk, Wv]))  # (3C, C) in the order q, k, v
    toy.out_proj.weight.copy_(torch.eye(C_s))

_, toy_weights = toy(emb, causal_mask(T_s), need_weights=True)  # (1, H, T, T)
print("weights", tuple(toy_weights.shape))
plot_heads(toy_weights[0], sentence, title="two hand-built heads, causal mask")
plt.show()

# %% [markdown]
# Head 0 puts almost all its weight one step to the left (the first token can only look at itself).
# Head 1 lets the second and third "the" spread their weight over every "the" up to and including itself,
# and every other word look at itself. The numbers behind the picture:

# %%
print(f"{'keys:':18s}", " ".join(f"{w:>5s}" for w in sentence))
for t in (3, 6):
    for h in range(H_s):
        row = " ".join(f"{p:5.2f}" for p in toy_weights[0, h, t].tolist())
        print(f"query {t} '{sentence[t]}' head {h}", row)

# %% [markdown]
# A trained model learns such weights, rarely this tidy, but the reason for several heads is the same:
# each gets its own distribution over the keys. For contrast, the four heads of a freshly initialised
# layer spread their weight almost evenly over the visible tokens; training makes heads differ:

# %%
torch.manual_seed(0)
fresh = MultiHeadAttention(C_s, 4)
_, fresh_weights = fresh(emb, causal_mask(T_s), need_weights=True)
plot_heads(fresh_weights[0], sentence, title="four untrained heads, causal mask")
plt.show()

# %% [markdown]
# ### Explore: one head at a time
#
# `plot_head` from `course_utils.widgets` draws one head's weights of a `MultiHeadAttention` layer, with
# or without the causal mask (hatched cells are blocked). Here is the "same word" head 1 *without* the
# mask: the first "the" also sees the later ones, and every "the" has the same row, because the head
# looks at words, not positions.

# %%
from course_utils.widgets import head_explorer, plot_head

plot_head(toy, emb, sentence, head=1, causal=False)
plt.show()

# %% [markdown]
# Now pick a layer, a head and the mask yourself (the widget needs a running kernel). Try head 0 without
# the mask (the "previous token" head looks back anyway; only the first token now spreads its weight over
# the sentence), and the untrained layer's four heads, which all look alike.

# %%
# NBVAL_IGNORE_OUTPUT
head_explorer({"hand-built (2 heads)": toy, "untrained (4 heads)": fresh}, emb, sentence)

# %% [markdown]
# ## 7. Pitfalls found in the wild
#
# ### Pitfall 1: scaling by the model width C instead of the head size D
#
# Each head's dot product runs over D channels, so `1 / sqrt(D)` is the scale (notebook 02). Notebook 02
# (Pitfall 1) tells how the *Let's build GPT* lecture's code came to scale by `C ** -0.5`, the model
# width. With H heads, `C = H * D`, so that divides every head's scores by an extra `sqrt(H)`, and the
# softmax gets flatter. We measure the entropy of each row of weights (0 = one key, log T = uniform), for
# random projections of random data with entries of standard deviation about 2 (as after some training):

# %%
B_p, T_p, C_p, H_p = 4, 16, 64, 8
D_p = C_p // H_p
x_p = torch.randn(B_p, T_p, C_p, generator=torch.Generator().manual_seed(1))
w_p = 2 * torch.randn(2 * C_p, C_p, generator=torch.Generator().manual_seed(2)) / math.sqrt(C_p)
q_p, k_p = (split_heads(t, H_p) for t in (x_p @ w_p.T).chunk(2, dim=-1))  # (B, H, T, D)
print(f"std of q entries: {q_p.std().item():.2f}")
raw = torch.einsum("bhid,bhjd->bhij", q_p, k_p)  # (B, H, T, T), unscaled


def entropy(weights):
    return -(weights * torch.log(weights.clamp_min(1e-12))).sum(dim=-1)  # (..., T)


print(f"uniform weights over T = {T_p} keys: entropy log T = {math.log(T_p):.3f}")
for label, scale in [(f"1 / sqrt(D) = 1 / sqrt({D_p})", D_p ** -0.5), (f"1 / sqrt(C) = 1 / sqrt({C_p})", C_p ** -0.5)]:
    w_scaled = torch.softmax(raw * scale, dim=-1)
    print(f"scale {label:24s} mean entropy {entropy(w_scaled).mean().item():.3f}, "
          f"mean largest weight {w_scaled.amax(dim=-1).mean().item():.3f}")

# %% [markdown]
# Scaled by C, the weights are flatter (higher entropy, smaller largest weight): every head starts closer
# to a plain average. The model still trains, which is why the bug survives, but the heads need larger
# weights to become sharp. Use `q.shape[-1]`, the size the dot product runs over.
#
# ### Pitfall 2: `view` after `transpose`
#
# `view` never copies: it reinterprets the memory with a new shape, so the elements must lie in the order
# the new shape reads them. After `transpose(1, 2)` they do not (the tensor is **non-contiguous**), and
# `view` refuses:

# %%
out_heads = torch.randn(B, H, T, D, generator=g)  # what the attention step returns
t = out_heads.transpose(1, 2)  # (B, H, T, D) -> (B, T, H, D), no copy
print("contiguous after transpose:", t.is_contiguous())
try:
    t.view(B, T, C)
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# Two fixes: `.contiguous().view(...)` (copy into the right order, then view) or `.reshape(...)`, which
# views when it can and copies when it must. Both give `merge_heads`:

# %%
fixed_1 = t.contiguous().view(B, T, C)
fixed_2 = t.reshape(B, T, C)
print("contiguous().view == merge_heads:", torch.equal(fixed_1, merge_heads(out_heads)))
print("reshape           == merge_heads:", torch.equal(fixed_2, merge_heads(out_heads)))

# %% [markdown]
# ### Pitfall 3: a `view` that silently mixes tokens
#
# The opposite order is worse, because nothing complains. Splitting heads with `x.view(B, H, T, D)`,
# skipping the transpose, gives the right shape and no error, but cuts the memory in the wrong place. To
# see it, put the token index t into every channel of token t.

# %%
labels = torch.arange(T, dtype=torch.float32).view(1, T, 1).expand(1, T, C).contiguous()  # (1, T, C)
print("right, head 0 (rows = time, entries = which token):\n", split_heads(labels, H)[0, 0])
print("wrong, head 0:\n", labels.view(1, H, T, D)[0, 0])

# %% [markdown]
# In the wrong version, head 0's five "time steps" are three slices of token 0 and two of token 1;
# tokens 2, 3 and 4 are not in head 0 at all. Rows no longer correspond to positions, so the causal mask
# guards the wrong things. Test its promise (output t does not change when a later token does): change
# only the last token and measure how much each output moves:

# %%
def mha_forward_wrong_split(m, x, mask):
    """MultiHeadAttention's forward pass, but splitting heads with a direct reshape to (B, H, T, D).

    (reshape, because a chunk of qkv is not contiguous; on a contiguous tensor view does the same.)
    """
    B, T, C = x.shape
    q, k, v = (t.reshape(B, m.num_heads, T, m.head_dim) for t in m.qkv_proj(x).chunk(3, dim=-1))  # wrong
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return m.out_proj(merge_heads(out))


mha = MultiHeadAttention(C, H)
x_changed = x.clone()
x_changed[:, -1] += 1.0  # change only the last token
print(f"largest change of each output t = 0 ... {T - 1} when only token {T - 1} changes:")
for name, f in [("correct split", lambda inp: mha(inp, mask)),
                ("view without transpose", lambda inp: mha_forward_wrong_split(mha, inp, mask))]:
    change = (f(x_changed) - f(x)).abs().amax(dim=(0, 2))  # (T,): largest change per position
    print(f"{name:24s}", " ".join(f"{c:.4f}" for c in change.tolist()))

# %% [markdown]
# With the correct split only output 4 moves. With the wrong split earlier outputs move too: the future
# leaks into the past, with no error, and a language model trained this way can read the answer it is
# supposed to predict. Always `view(B, T, H, D)` first, then `transpose(1, 2)`.
#
# ### Pitfall 4: a padding mask with one axis too few
#
# Notebook 03 built a padding mask `m` of shape `(B, S)` and gave it to `(B, H, T, S)` scores as
# `m[:, None, None, :]`, shape `(B, 1, 1, S)`; `MultiHeadAttention` takes it the same way. Leave out one
# `None` and the mask is `(B, 1, S)`. Broadcasting lines shapes up from the right, so against
# `(B, H, T, S)` it counts as `(1, B, 1, S)`: its batch axis lands on the **heads**. When B differs from H
# that is an error. When B == H it runs, and head b of every sequence uses the padding of sequence b.
# Three sequences of lengths 5, 3 and 2 through a layer of three heads:

# %%
mha_pad = MultiHeadAttention(C, 3)  # H = 3 heads
lengths_pad = torch.tensor([5, 3, 2])  # B = 3 sequences, padded to S = T = 5
x_pad = torch.randn(3, T, C, generator=torch.Generator().manual_seed(7))  # (B, T, C)
pad = torch.arange(T)[None, :] < lengths_pad[:, None]  # (B, S), True for real keys
q_p, k_p, v_p = (split_heads(t, 3) for t in mha_pad.qkv_proj(x_pad).chunk(3, dim=-1))  # (B, H, T, D) each
scores_p = q_p @ k_p.transpose(-2, -1) / math.sqrt(mha_pad.head_dim)  # (B, H, T, S)
for name, m in [("m[:, None, None, :]", pad[:, None, None, :]), ("m[:, None, :]", pad[:, None, :])]:
    w_pad = torch.softmax(scores_p.masked_fill(~m, float("-inf")), dim=-1)  # m broadcast as PyTorch reads it
    on_padding = (w_pad * ~pad[:, None, None, :]).sum(dim=(1, 2, 3))  # (B,): weight on each sequence's padding
    print(f"{name:20s} mask {str(tuple(m.shape)):13s} weight on padding keys, per sequence:",
          [round(w, 2) for w in on_padding.tolist()])
right_out = F.scaled_dot_product_attention(q_p, k_p, v_p, attn_mask=pad[:, None, None, :])  # (B, H, T, D)
wrong_out = F.scaled_dot_product_attention(q_p, k_p, v_p, attn_mask=pad[:, None, :])  # runs all the same
print("F.scaled_dot_product_attention, outputs agree to 1e-4, per sequence:",
      [torch.allclose(r, w, atol=1e-4) for r, w in zip(right_out, wrong_out)])
try:
    mha_pad(x_pad, pad[:, None, :])
except ValueError as e:
    print("MultiHeadAttention:", e)

# %% [markdown]
# (The weights are summed over the heads and the queries.) With the right layout no weight reaches a
# padding key. With the wrong one, sequences 1 and 2 put weight on their padding, because their head 0
# reads the mask of sequence 0, which has none; and sequence 0, which has no padding at all, loses keys 3
# and 4 in head 1 and keys 2 to 4 in head 2, so its output changes too. PyTorch raises no error and no
# NaN says so. When B == H the shape alone cannot tell a (B, T, S) mask from an (H, T, S) one, so the
# course's modules refuse a 3-D mask there, and say which 4-D form to write. Add the new axes before the last one, and with heads, two of them: `m[:, None, None, :]`.
#
# ## 8. Closing check against `course_utils`
#
# Our inline versions (the loop, the batched code with `my_split` / `my_merge`, and the einsum
# projections) against the modules of `course_utils`, on fresh weights with biases and a causal mask:

# %%
torch.manual_seed(3)
mha = MultiHeadAttention(C, H)
W, b = mha.qkv_proj.weight.detach(), mha.qkv_proj.bias.detach()
W_o, b_o = mha.out_proj.weight.detach(), mha.out_proj.bias.detach()
ref = mha(x, mask)

# loop over heads
outs = []
for h in range(H):
    rows = [slice(i * C + h * D, i * C + (h + 1) * D) for i in range(3)]  # head h's rows of q, k, v
    q_h, k_h, v_h = (x @ W[r].T + b[r] for r in rows)  # (B, T, D) each
    outs.append(scaled_dot_product_attention(q_h, k_h, v_h, mask)[0])
out_loop = torch.cat(outs, dim=-1) @ W_o.T + b_o  # (B, T, C)

# batched, with our own split and merge
q, k, v = (my_split(t, H) for t in (x @ W.T + b).chunk(3, dim=-1))  # (B, H, T, D)
out_batched = my_merge(scaled_dot_product_attention(q, k, v, mask)[0]) @ W_o.T + b_o

# per-head weights with einsum
w3, b3 = W.view(3, H, D, C), b.view(3, H, 1, D)  # (3, H, D, C), (3, H, 1, D)
q, k, v = (torch.einsum("hdc,btc->bhtd", w3[i], x) + b3[i] for i in range(3))  # (B, H, T, D)
scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(D)
weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
out_einsum = merge_heads(torch.einsum("bhij,bhjd->bhid", weights, v)) @ W_o.T + b_o

for got in (out_loop, out_batched, out_einsum):
    torch.testing.assert_close(got, ref)
torch.testing.assert_close(my_split(x, H), split_heads(x, H))
torch.testing.assert_close(my_merge(q), merge_heads(q))
print("loop, batched and einsum versions match course_utils")

# %% [markdown]
# ## 9. Exercises
#
# Each exercise is a function to write; its cell checks it and, when it is wrong, tries to name the
# mistake. Use plain PyTorch (`view`, `transpose`, `reshape`, `einsum`, `F.linear`), not the
# `course_utils` functions the exercise is about. Inputs and results are float32 (masks boolean); leave
# the inputs unchanged. The checks also draw head counts such as 3 or 5, other sizes, non-causal masks.
#
# ### Exercise 04.1: `split_heads` (8 min, core)
#
# Write `my_split_heads(x, num_heads)` that turns `x` of shape (B, T, C) into (B, H, T, D) with
# D = C / H, head `h` holding channels `h*D ... (h+1)*D - 1`.

# %%
def my_split_heads(x, num_heads):
    ### BEGIN SOLUTION
    B, T, C = x.shape
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
    ### END SOLUTION


check("04.1", my_split_heads)

# %% [markdown]
# ### Exercise 04.2: `merge_heads` (8 min, core)
#
# Write `my_merge_heads(x)` that undoes it: (B, H, T, D) -> (B, T, H * D), with the heads side by side.
# Remember that the result of a `transpose` cannot be `view`ed.

# %%
def my_merge_heads(x):
    ### BEGIN SOLUTION
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)
    ### END SOLUTION


check("04.2", my_merge_heads)

# %% [markdown]
# ### Exercise 04.3: scores with einsum (8 min, core)
#
# Write `my_scores(q, k)` with one `torch.einsum`: queries (B, H, T, D), keys (B, H, S, D), scaled
# scores (B, H, T, S), divided by the square root of the head size.

# %%
def my_scores(q, k):
    ### BEGIN SOLUTION
    return torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1])
    ### END SOLUTION


check("04.3", my_scores)

# %% [markdown]
# ### Exercise 04.4: multi-head attention from packed weights (8 min, core)
#
# Write the whole forward pass of `MultiHeadAttention` as a function of its weights:
# `qkv_weight` (3C, C) and `qkv_bias` (3C,) stacked in the order q, k, v; `out_weight` (C, C) and
# `out_bias` (C,); an optional boolean `mask` (True = may attend) that broadcasts to (B, H, T, T) and lets
# every query attend to at least one key.
# Return the output (B, T, C). You may use `scaled_dot_product_attention` from `course_utils.attention`
# (already imported) or write the softmax yourself; `F.linear(x, w, b)` computes `x @ w.T + b`.

# %%
def my_mha_forward(x, qkv_weight, qkv_bias, out_weight, out_bias, num_heads, mask=None):
    ### BEGIN SOLUTION
    B, T, C = x.shape
    D = C // num_heads
    q, k, v = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)  # 3 x (B, T, C)
    q, k, v = (t.view(B, T, num_heads, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    out, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, D)
    out = out.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
    return F.linear(out, out_weight, out_bias)
    ### END SOLUTION


check("04.4", my_mha_forward)

# %% [markdown]
# ## Summary
#
# - `einsum` names every axis; letters kept in the output are looped over, letters left out are summed.
#   The attention scores are `"bhid,bhjd->bhij"`, the output `"bhij,bhjd->bhid"`.
# - Broadcasting lines shapes up from the right; sizes must match or be 1. That is how one (T, T) mask
#   serves every batch item and head.
# - Multi-head attention = H independent heads of size D = C / H on the same input, concatenated, then
#   an output projection. Same parameter count as one big head; H separate softmaxes.
# - Three equal formulations: a loop over heads (`MultiHeadAttentionWrapper`), per-head (H, D, C)
#   weights with einsum (`MultiHeadAttentionEinsum`), and the packed `qkv_proj` with `split_heads` /
#   `merge_heads` (`MultiHeadAttention`, the one the course uses from now on).
# - Shapes: x (B, T, C) -> qkv (B, T, 3C) -> q, k, v (B, H, T, D) -> scores, weights (B, H, T, T) ->
#   out (B, H, T, D) -> merged (B, T, C) -> out_proj (B, T, C).
# - Pitfalls: scale by sqrt(D), not sqrt(C); `reshape` (or `.contiguous().view`) after `transpose`;
#   split with `view(B, T, H, D).transpose(1, 2)`, never `view(B, H, T, D)`, which mixes tokens silently
#   and leaks the future past a causal mask; a `(B, S)` padding mask goes in as `m[:, None, None, :]`,
#   since `m[:, None, :]` hands sequence b's padding to head b when B == H.
#
# Next, notebook 05 checks `MultiHeadAttention` against PyTorch's own `nn.MultiheadAttention` and
# `F.scaled_dot_product_attention`.
#
# ## Further reading
#
# - Vaswani et al., "Attention Is All You Need" (2017), section 3.2.2, *Multi-Head Attention*:
#   https://arxiv.org/abs/1706.03762
# - PyTorch documentation of `torch.einsum`: https://pytorch.org/docs/stable/generated/torch.einsum.html
# - PyTorch broadcasting semantics: https://pytorch.org/docs/stable/notes/broadcasting.html
# - A. Rogozhnikov, "Einops: Clear and Reliable Tensor Manipulations with Einstein-like Notation"
#   (ICLR 2022), and the einops README: https://github.com/arogozhnikov/einops. The `rearrange`
#   patterns there, such as `"b t (h d) -> b h t d"`, say what `split_heads` does in one line.
