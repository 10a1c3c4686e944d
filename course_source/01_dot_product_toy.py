# %% [markdown]
# # 01 The dot-product toy
#
# Attention is a lookup table that never says "not found". You ask with a **query**, every entry
# answers with a **key**, and instead of returning the one entry whose key matches, it returns a
# blend of all the **values**, weighted by how well each key matches. This notebook builds that
# idea from three keys you can read by eye, up to self-attention with learned projections.
#
# **What you will learn**
#
# - the three steps of attention: dot products (scores) -> softmax (weights) -> weighted sum (out);
# - why this is a *soft* lookup, and what it buys over a hard `dict` lookup or an `argmax`;
# - the same computation with loops and as two matrix products;
# - self-attention with no weights (`x @ x.T`), and why it needs learned `W_Q`, `W_K`, `W_V`.
#
# **Prerequisites**: Python, a little PyTorch (tensors, `@`), the dot product.
# **Time**: about 50 minutes. **Runs on**: CPU (no GPU needed).

# %%
# NBVAL_IGNORE_OUTPUT
import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from course_utils.attention import attention_loops, attention_matmul, simple_self_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.plotting import plot_weights
from course_utils.widgets import lookup_explorer, plot_lookup

device = setup_notebook(seed=0)
print(f"torch {torch.__version__}, device: {device} (this notebook only needs the CPU)")

# %% [markdown]
# ## 1. A hard lookup: the Python `dict`
#
# A `dict` maps keys to values. You ask with a key; you get a value back if the key matches
# *exactly*, and an error if it does not. There is no "close enough".

# %%
table = {"cat": 0.0, "dog": 1.0, "kitten": 0.0}
print(table["dog"])
try:
    table["puppy"]
except KeyError as e:
    print("KeyError:", e)

# %% [markdown]
# Attention replaces the exact match with a graded one. Keys and queries become vectors, and "how
# well does this key match my query?" becomes a number: their **dot product**. Here is a table
# small enough to read. Think of the two coordinates as two features, say "cat-like" and
# "dog-like". Key 0 is very cat-like, key 1 is dog-like, key 2 is mostly cat-like. The values
# mark the dog entry with a 1.

# %%
keys = torch.tensor([[0.95, 0.05],   # key 0: cat-like
                     [0.10, 0.90],   # key 1: dog-like
                     [0.80, 0.20]])  # key 2: mostly cat-like
values = torch.tensor([0.0, 1.0, 0.0])
query = torch.tensor([1.0, 0.0])     # "I am looking for something cat-like"
print("keys", keys.shape, " values", values.shape, " query", query.shape)

# %% [markdown]
# ## 2. Step 1: scores are dot products
#
# The score of key $j$ is $q \cdot k_j = \sum_d q_d\, k_{j,d}$: large when the two vectors point the
# same way, zero when they are at right angles. One loop over the keys:

# %%
scores = torch.zeros(len(keys))
for j in range(len(keys)):
    scores[j] = torch.dot(query, keys[j])
print("scores:", scores, scores.shape)

# %% [markdown]
# The same thing as one matrix-vector product, `keys @ query`: (S, D) @ (D,) -> (S,), with S = 3
# keys of dimension D = 2.

# %%
print(keys @ query)
torch.testing.assert_close(keys @ query, scores)

# %% [markdown]
# ## 3. Step 2: softmax turns scores into weights
#
# Scores can be any real numbers. To *mix* values we want weights that are positive and sum to 1.
# The softmax does exactly that: exponentiate (everything becomes positive, and larger scores grow
# faster), then divide by the total.
#
# $$\text{weights}_j = \frac{e^{\text{score}_j}}{\sum_{j'} e^{\text{score}_{j'}}}$$

# %%
exps = torch.exp(scores)
weights = exps / exps.sum()
print("weights:", weights, " sum:", round(weights.sum().item(), 4))
torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))

# %% [markdown]
# The order is kept (key 0 scored highest and gets the most weight), but nobody gets zero.
# Notebook 02 shows why you should subtract the maximum score before `exp` in real code.
#
# ## 4. Step 3: the output is the weighted sum of the values

# %%
out = weights @ values  # (S,) @ (S,) -> a single number
print("out:", out, out.shape)
print("by hand:", " + ".join(f"{w:.4f}*{v:.0f}" for w, v in zip(weights.tolist(), values.tolist())),
      f"= {out.item():.4f}")

# %% [markdown]
# That is all of attention: **scores -> weights -> weighted sum**. Here it is as a function, and
# what happens when we ask the dog-like question `[0., 1.]` instead.

# %%
def soft_lookup_toy(query, keys, values):
    scores = keys @ query                     # (S, D) @ (D,) -> (S,)
    weights = torch.softmax(scores, dim=-1)   # (S,), positive, sums to 1
    return weights @ values, weights          # a mix of the values, and the weights used


for q in ([1.0, 0.0], [0.0, 1.0]):
    out, weights = soft_lookup_toy(torch.tensor(q), keys, values)
    print(f"query {q}: weights {weights}, out {out.item():.4f}")

# %% [markdown]
# The cat-like query puts most weight on keys 0 and 2 (values 0), so the output is small (0.19).
# The dog-like query puts most weight on key 1 (value 1), so the output is larger (0.52). Neither
# is exactly 0 or 1: the lookup is **soft**.
#
# ## 5. A soft, or fuzzy, lookup table
#
# Compare with a **hard** lookup that takes the single best-matching key (`argmax`), the closest a
# `dict` gets to "nearest match":

# %%
for q in ([1.0, 0.0], [0.0, 1.0]):
    q = torch.tensor(q)
    best = (keys @ q).argmax()
    soft, _ = soft_lookup_toy(q, keys, values)
    print(f"query {q.tolist()}: hard lookup -> key {best.item()}, value {values[best].item():.1f};"
          f"  soft lookup -> {soft.item():.4f}")

# %% [markdown]
# How soft? That depends on the size of the scores. Make the query 10 times longer (same direction)
# and every score is 10 times larger. The softmax then becomes nearly one-hot, and the soft lookup
# approaches the hard one:

# %%
for length in (1.0, 3.0, 10.0):
    q = length * torch.tensor([0.0, 1.0])
    out, weights = soft_lookup_toy(q, keys, values)
    print(f"query length {length:4.1f}: weights {weights}, out {out.item():.4f}")

# %% [markdown]
# So why not just use the hard lookup? Because the soft one is **differentiable**: a tiny change
# to the query or a key changes the output a tiny bit, so gradient descent can learn what to ask
# for and what to answer. The `argmax` has no gradient at all. Let autograd show it:

# %%
q = torch.tensor([1.0, 0.0], requires_grad=True)
v = values.clone().requires_grad_()
out, weights = soft_lookup_toy(q, keys, v)
out.backward()
print("soft: d out / d query  =", q.grad)
print("soft: d out / d values =", v.grad, "(= the weights)")

q = torch.tensor([1.0, 0.0], requires_grad=True)
v = values.clone().requires_grad_()
out = v[(keys @ q).argmax()]
out.backward()
print("hard: d out / d query  =", q.grad, "(no path from the query to the output)")
print("hard: d out / d values =", v.grad, "(only the winner learns)")

# %% [markdown]
# The idea of reading a memory by *content*, with softmax weights over how well each slot matches,
# is older than Transformers: it is the content-based addressing of Neural Turing Machines
# (Graves et al., 2014), and the alignment of Bahdanau et al. (2014) for translation.
#
# ## 6. Explore: turn the query
#
# Below, the query is a 2-D arrow at some angle, with a length (the "sharpness" from above). The
# left panel shows the keys (key 1, the one with value 1, in orange) and the query; the right panel
# shows the weights and the output. `plot_lookup` from `course_utils.widgets` draws it with the same
# three steps as `soft_lookup_toy`: scores `keys @ query`, softmax, weighted sum of the values.
# First, two fixed pictures: the cat-like query at 0 degrees and the dog-like one at 90 degrees.

# %%
plot_lookup(0, keys=keys, values=values)
plot_lookup(90, keys=keys, values=values)
plt.show()

# %% [markdown]
# Now drag the sliders (the widget needs a running kernel; the picture updates when you let go).
# Things to try: point the query straight at key 1 (about 84 degrees); at 45 degrees all three scores
# are equal (each key's two coordinates add up to 1), so every key gets weight 1/3, whatever the length;
# point it away from every key (225 degrees); lengthen it to make the lookup sharper; shorten it to 0 and
# every key gets weight 1/3 again. Equal scores always give equal weights, because adding the same number
# `c` to every score changes no weight: $e^{s_j + c} / \sum_{j'} e^{s_{j'} + c} = e^{s_j} / \sum_{j'} e^{s_{j'}}$.
# This is the softmax's **shift invariance**; notebook 02 puts it to work.

# %%
# NBVAL_IGNORE_OUTPUT
lookup_explorer(keys, values)

# %% [markdown]
# ## 7. Many queries at once: loops, then matrices
#
# Real attention asks many questions at once: T queries, stacked as the rows of `q` (T, D),
# against S keys `k` (S, D) and S values `v` (S, Dv). Values can be vectors; here each one is a
# vector of length 1. First the plain loops: every number is visible.

# %%
def my_attention_loops(q, k, v):
    T, S = q.shape[0], k.shape[0]
    out = torch.zeros(T, v.shape[1])
    for i in range(T):                        # one query at a time
        scores = torch.zeros(S)
        for j in range(S):                    # one key at a time
            scores[j] = torch.dot(q[i], k[j])
        weights = torch.exp(scores) / torch.exp(scores).sum()
        for j in range(S):
            out[i] += weights[j] * v[j]
    return out


q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])  # three queries: cat-like, dog-like, both
k, v = keys, values[:, None]                             # v: (S,) -> (S, 1)
print("q", q.shape, " k", k.shape, " v", v.shape)
print(my_attention_loops(q, k, v))

# %% [markdown]
# The loops hide two matrix products. All T x S scores at once are `q @ k.T`:
# (T, D) @ (D, S) -> (T, S), one row per query. The softmax runs along each row (`dim=-1`, over the
# keys), so every query's weights sum to 1. Then `weights @ v`: (T, S) @ (S, Dv) -> (T, Dv).

# %%
def my_attention_matmul(q, k, v):
    scores = q @ k.T                          # (T, D) @ (D, S) -> (T, S)
    weights = torch.softmax(scores, dim=-1)   # (T, S), each row sums to 1
    return weights @ v                        # (T, S) @ (S, Dv) -> (T, Dv)


scores = q @ k.T
weights = torch.softmax(scores, dim=-1)
print("scores", scores.shape, "\n", scores)
print("weights", weights.shape, "\n", weights)
print("row sums:", weights.sum(dim=-1).round(decimals=4))  # rounded: their last bits depend on the CPU
torch.testing.assert_close(my_attention_matmul(q, k, v), my_attention_loops(q, k, v))
print("loops and matrix form agree:", my_attention_matmul(q, k, v).squeeze(-1))

# %% [markdown]
# The first two rows are the two lookups from section 4. The third query, halfway between cat and
# dog, scores 0.7 with every key. By shift invariance that is the same as scoring 0 with every key, so it
# weights them exactly equally: 1/3 each. Add 5 to every score, or take 0.7 away, and nothing changes:

# %%
print("third query's scores:", scores[2], "-> weights", torch.softmax(scores[2], dim=-1))
for c in (5.0, -0.7):
    same = torch.allclose(torch.softmax(scores + c, dim=-1), weights, atol=1e-6)
    print(f"every score {c:+.1f}: the same weights (to 1e-6): {same}")

# %% [markdown]
#
# ## 8. Self-attention with no weights
#
# In a Transformer the keys, values and queries all come from the *same* sequence: every token
# asks a question of every other token. The simplest version uses each token's vector `x_i`
# directly as its query, its key and its value:
#
# $$\text{scores} = X X^\top,\quad \text{weights} = \text{softmax}(\text{scores}),\quad \text{out} = \text{weights}\, X$$
#
# Let's make a few word vectors by hand, with four readable features. Real embeddings are learned
# and have hundreds of dimensions, but they play the same role. We give every vector the same
# length (2), which will matter in a moment.

# %%
tokens = ["the", "cat", "sat", "on", "a", "mat"]
features = ["noun", "verb", "small word", "animal"]
raw = torch.tensor([[0.0, 0.0, 1.0, 0.0],    # the
                    [1.0, 0.0, 0.0, 1.0],    # cat
                    [0.0, 1.0, 0.0, 0.2],    # sat
                    [0.0, 0.3, 1.0, 0.0],    # on
                    [0.1, 0.0, 1.0, 0.0],    # a
                    [1.0, 0.0, 0.0, 0.0]])   # mat
x = 2 * raw / raw.norm(dim=-1, keepdim=True)  # (T, C) = (6, 4), every row has length 2
print("x", x.shape)
print(x)

# %%
def my_simple_self_attention(x):
    scores = x @ x.T                          # (T, C) @ (C, T) -> (T, T)
    weights = torch.softmax(scores, dim=-1)   # (T, T)
    return weights @ x, weights               # (T, C), (T, T)


out, weights = my_simple_self_attention(x)
print("out", out.shape, " weights", weights.shape)
plot_weights(weights, tokens, tokens, title="no learned weights: softmax(x @ x.T)")
plt.show()

# %% [markdown]
# Two things stand out.
#
# **Every token attends most to itself**, here because every vector has the same length. A token's
# score with itself is $x_i \cdot x_i = \|x_i\|^2 = 4$, and no other token can beat that:
# $x_i \cdot x_j \le \|x_i\|\,\|x_j\| = 4$ (Cauchy-Schwarz), with equality only when $x_j$ points exactly
# the way $x_i$ does, which at the same length means $x_j = x_i$. So only an identical vector could tie
# for the top score; a near-copy comes close and stays below ("a" scores 3.98 against "the").

# %%
print("each token's favourite:", {t: tokens[j] for t, j in zip(tokens, weights.argmax(dim=-1).tolist())})
print("diagonal of the scores:", torch.diagonal(x @ x.T).round(decimals=4))  # rounded: last bits vary by CPU
print(f"score(the -> a) = {(x[tokens.index('the')] @ x[tokens.index('a')]).item():.4f}")

# %% [markdown]
# Without the equal lengths this is no longer true. A longer vector in the same direction beats the token
# itself: $x_i \cdot (2x_i) = 2\|x_i\|^2$. And a different vector ties with $x_i$'s own score exactly when
# it is $x_i$ plus something at right angles to $x_i$, a special position that always makes it longer.
# In general a dot product rewards length as well as direction.

# %%
the = x[tokens.index("the")]  # (0, 0, 2, 0)
right_angle = torch.tensor([1.0, 0.0, 0.0, 0.0])  # at right angles to "the"
for name, other in [("the", the), ("2 * the", 2 * the), ("the + right_angle", the + right_angle)]:
    label = f"score(the -> {name})"
    print(f"{label:30s} = {(the @ other).item():.4f}   length of {name}: {other.norm().item():.4f}")

# %% [markdown]
# **The scores are symmetric**: "sat" scores "cat" exactly as "cat" scores "sat", because
# $x_i \cdot x_j = x_j \cdot x_i$. A token's question is the same vector as its answer. So the verb
# "sat" cannot *look for its subject* (an animal) unless it already resembles one.

# %%
scores = x @ x.T
i, j = tokens.index("sat"), tokens.index("cat")
print(f"score(sat -> cat) = {scores[i, j]:.4f},  score(cat -> sat) = {scores[j, i]:.4f}")
print("scores symmetric:", torch.equal(scores, scores.T))

# %% [markdown]
# ## 9. Learned projections: W_Q, W_K, W_V
#
# The fix is to give each role its own linear map. The same token vector is projected three ways:
# a **query** $q_i = W_Q x_i$ (what I am looking for), a **key** $k_i = W_K x_i$ (what I contain,
# as seen by others), and a **value** $v_i = W_V x_i$ (what I hand over when chosen). In PyTorch
# each is an `nn.Linear` without bias. In a model they start random and are learned.
#
# One convention to remember: `nn.Linear` stores its weight as `(out_features, in_features)`, here
# `W_Q` as `(D, C)`, and computes `q = x @ W_Q.T` for the rows of `x` (T, C). Exercise 01.4 and
# notebooks 02 and 04 store weight matrices the same way.

# %%
C, D = 4, 2
w_q, w_k, w_v = nn.Linear(C, D, bias=False), nn.Linear(C, D, bias=False), nn.Linear(C, C, bias=False)
print("W_Q weight", w_q.weight.shape, "(nn.Linear stores (out, in); it computes x @ weight.T)")
q, k, v = w_q(x), w_k(x), w_v(x)
print("q", q.shape, " k", k.shape, " v", v.shape)
out = attention_matmul(q, k, v)
print("out", out.shape)

# %% [markdown]
# To see what learned projections *can* do, let's set them by hand to what training might find:
#
# - queries: a verb asks for an **animal** (its subject); a small word asks for a **noun**;
# - keys: a token answers the "animal?" and "noun?" questions with those two features;
# - values: the token vector unchanged (W_V = identity), so the output is a readable mix of words.

# %%
with torch.no_grad():
    w_q.weight.zero_()
    w_q.weight[0, features.index("verb")] = 1.5        # query slot 0: "where is an animal?"
    w_q.weight[1, features.index("small word")] = 1.5  # query slot 1: "where is a noun?"
    w_k.weight.zero_()
    w_k.weight[0, features.index("animal")] = 1.5      # key slot 0: "I am an animal"
    w_k.weight[1, features.index("noun")] = 1.5        # key slot 1: "I am a noun"
    w_v.weight.copy_(torch.eye(C))


def my_self_attention_qkv(x, w_q, w_k, w_v):
    q, k, v = w_q(x), w_k(x), w_v(x)          # (T, C) -> (T, D), (T, D), (T, C)
    weights = torch.softmax(q @ k.T, dim=-1)  # (T, T)
    return weights @ v, weights               # (T, C), (T, T)


with torch.no_grad():
    out_qkv, weights_qkv = my_self_attention_qkv(x, w_q, w_k, w_v)
fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.4))
plot_weights(weights, tokens, tokens, ax=axes[0], title="x @ x.T (no weights)")
plot_weights(weights_qkv, tokens, tokens, ax=axes[1], title="q @ k.T, q = x @ W_Q.T, k = x @ W_K.T")
fig.tight_layout()
plt.show()

# %% [markdown]
# Now "sat" looks at "cat", not at itself, and the small words look for a noun. ("the" and "a"
# both pick "mat", the purest noun: nothing in these vectors says which noun comes *next*; the
# vectors carry no position.) Nouns ask no question at all here (their query is zero), so all
# their scores are 0 and they spread their weight evenly, 1/6 each.

# %%
for t, row in zip(tokens, weights_qkv):
    best = row.argmax().item()
    print(f"{t:>4} -> " + (f"{tokens[best]} ({row[best]:.2f})" if row.max() > 1 / 6 + 1e-6 else "all six (1/6 each)"))
with torch.no_grad():
    scores_qkv = w_q(x) @ w_k(x).T
print(f"score(sat -> cat) = {scores_qkv[i, j]:.4f},  score(cat -> sat) = {scores_qkv[j, i]:.4f}")
print("scores symmetric:", torch.equal(scores_qkv, scores_qkv.T))

# %% [markdown]
# And what does "sat" carry away? Its output row is a mix of the value vectors, dominated by "cat":
# the verb now holds information about its subject.

# %%
print(dict(zip(features, [round(f, 3) for f in out_qkv[i].tolist()])))

# %% [markdown]
# With W_Q = W_K the scores would be symmetric again: $(W x_i)\cdot(W x_j) = (W x_j)\cdot(W x_i)$.
# Separate query and key maps are what let "asking" differ from "being found".

# %%
with torch.no_grad():
    s_same = w_q(x) @ w_q(x).T
print("W_Q used for keys too -> scores symmetric:", torch.equal(s_same, s_same.T))

# %% [markdown]
# ## 10. Check against `course_utils`
#
# The course package has the same functions, written once and tested; later notebooks import them.
# Our inline versions must agree with them.

# %%
gen = torch.Generator().manual_seed(1)
q_r, k_r, v_r = torch.randn(5, 3, generator=gen), torch.randn(7, 3, generator=gen), torch.randn(7, 4, generator=gen)
torch.testing.assert_close(my_attention_loops(q_r, k_r, v_r), attention_loops(q_r, k_r, v_r))
torch.testing.assert_close(my_attention_matmul(q_r, k_r, v_r), attention_matmul(q_r, k_r, v_r))
torch.testing.assert_close(my_simple_self_attention(x), simple_self_attention(x))
with torch.no_grad():
    torch.testing.assert_close(my_self_attention_qkv(x, w_q, w_k, w_v)[0], attention_matmul(w_q(x), w_k(x), w_v(x)))
print("matches course_utils")

# %% [markdown]
# ## Exercises
#
# Write each function, then run its cell: the check tells you whether it is right, and if not,
# which common mistake it looks like. Use `torch.softmax`; there is no scaling yet (that is
# notebook 02). Inputs and results are float32 tensors; leave the inputs unchanged. The checks also
# try fresh inputs of other sizes.
#
# **Exercise 01.1: a soft lookup for one query.** *(8 min, core)*
# `query` is (D,), `keys` is (S, D), `values` is
# (S,) or (S, Dv). Return the softmax-weighted mix of the values: a number (a 0-d tensor or a Python
# float) when `values` is (S,), or a (Dv,) vector.

# %%
def soft_lookup(query, keys, values):
    ### BEGIN SOLUTION
    scores = keys @ query                    # (S,)
    weights = torch.softmax(scores, dim=-1)  # (S,)
    return weights @ values                  # () or (Dv,)
    ### END SOLUTION


check("01.1", soft_lookup)

# %% [markdown]
# **Exercise 01.2: many queries, as matrices.** *(8 min, core)*
# `q` is (T, D), `k` is (S, D), `v` is (S, Dv).
# Return `out` of shape (T, Dv), with no Python loops.

# %%
def attention_many(q, k, v):
    ### BEGIN SOLUTION
    scores = q @ k.T                         # (T, S)
    weights = torch.softmax(scores, dim=-1)  # (T, S)
    return weights @ v                       # (T, Dv)
    ### END SOLUTION


check("01.2", attention_many)

# %% [markdown]
# **Exercise 01.3: simple self-attention.** *(8 min, core)*
# `x` is (T, C). Every token is its own query, key and
# value. Return `(out, weights)` with shapes (T, C) and (T, T).

# %%
def my_self_attention(x):
    ### BEGIN SOLUTION
    weights = torch.softmax(x @ x.T, dim=-1)  # (T, T)
    return weights @ x, weights               # (T, C), (T, T)
    ### END SOLUTION


check("01.3", my_self_attention)

# %% [markdown]
# **Exercise 01.4: self-attention with W_Q, W_K, W_V.** *(8 min, core)*
# `x` is (T, C); `w_q`, `w_k`, `w_v` are
# weight matrices stored the way `nn.Linear.weight` stores them, (D, C). Project, then attend
# (unscaled). Return `out`, (T, D). The inputs are moderate (see the comment below).

# %%
# Inputs: `x` has entries up to 10 in size.
def qkv_attention(x, w_q, w_k, w_v):
    ### BEGIN SOLUTION
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (T, D) each
    weights = torch.softmax(q @ k.T, dim=-1)   # (T, T)
    return weights @ v                         # (T, D)
    ### END SOLUTION


check("01.4", qkv_attention)

# %% [markdown]
# ## Summary
#
# - Attention is a **soft lookup**: scores $= q \cdot k_j$, weights $=$ softmax(scores), out $= \sum_j$ weights$_j\, v_j$.
# - Unlike a `dict` or an `argmax`, every value contributes, and the output is differentiable in the
#   query, the keys and the values. Longer queries (larger scores) make the lookup sharper.
# - For many queries it is two matrix products: `softmax(q @ k.T, dim=-1) @ v`, the softmax along
#   the keys so each query's weights sum to 1.
# - Self-attention with no weights, `softmax(x @ x.T) @ x`, has symmetric scores, and with
#   equal-length vectors every token attends most to itself (only an identical vector could tie; a longer
#   one in the same direction would win).
# - Adding the same number to every score changes no weight (the softmax's shift invariance), so equal
#   scores give equal weights.
# - Learned `W_Q`, `W_K`, `W_V` separate what a token looks for, what it offers to be found by, and
#   what it passes on, so a verb can look for its subject.
#
# **Next**: notebook 02 scales the scores by $1/\sqrt{D}$ and makes the softmax numerically safe.
#
# ## Further reading
#
# - D. Bahdanau, K. Cho, Y. Bengio (2014). *Neural Machine Translation by Jointly Learning to Align
#   and Translate.* arXiv:1409.0473. Soft attention over the source sentence, learned jointly with
#   translation.
# - A. Graves, G. Wayne, I. Danihelka (2014). *Neural Turing Machines.* arXiv:1410.5401. Content-based
#   addressing: read a memory with softmax weights over the similarity of a key to every slot.
# - A. Vaswani et al. (2017). *Attention Is All You Need.* arXiv:1706.03762. Queries, keys and values
#   from learned projections, and attention as the main building block.
