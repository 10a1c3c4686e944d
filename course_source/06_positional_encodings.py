# %% [markdown]
# # 06 Positional encodings: telling attention where each token is
#
# Attention compares every query with every key by a dot product. Nothing in that computation knows
# *where* a token sits: shuffle the words of a sentence and each word gets exactly the same output, just
# in the shuffled place. This notebook shows that problem first, then the four answers in use today,
# each built from scratch and checked: a learned vector per position (GPT-2), the fixed sinusoidal
# encoding (the original Transformer), rotary embeddings (RoPE: Llama, Mistral, Qwen, ...) and linear
# biases (ALiBi: BLOOM, MPT). It ends with a small experiment you can run on a laptop: the same tiny
# model trained with each scheme, then asked to work on sequences longer than any it has seen.
#
# **What you will learn**
#
# - why self-attention without positions is *permutation-equivariant*, what that means for a model, and
#   how a causal mask leaks a little position anyway;
# - learned position embeddings, and their hard limit: no position beyond the trained context;
# - the sinusoidal formula, what its table and its dot products look like, and why shifting by k
#   positions is a rotation (a linear map that does not depend on the position);
# - RoPE: rotating pairs of channels of q and k so that a score depends only on the distance i - j;
#   which way it turns, its two pairing conventions (and the one this course uses), and rotating cached
#   keys at their absolute positions;
# - ALiBi: one slope per head and a distance penalty added to the scores;
# - how each scheme changes *one step* of `MultiHeadAttention`, and how the schemes compare when
#   sequences get longer than in training.
#
# **Prerequisites:** notebooks 02 (scaled dot-product attention), 03 (masking), 04 (multi-head attention).
#
# **Time:** about 60 minutes. **Runs on:** a CPU; the experiment takes under a minute (one switch makes
# it bigger).
#
# **Shape alphabet** (the same in every notebook): `B` batch, `T` query length, `S` key length,
# `C` embed_dim, `H` num_heads, `D` head_dim = C / H.

# %%
# NBVAL_IGNORE_OUTPUT
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.environment import setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.masking import causal_mask, convert_mask
from course_utils.multihead import MultiHeadAttention, split_heads
from course_utils.positional import (
    ALiBiMultiHeadAttention,
    LearnedPositionalEmbedding,
    RotaryMultiHeadAttention,
    RotaryTable,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_pairing_permutation,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)

device = setup_notebook(seed=0)
print("torch", torch.__version__, "| device:", device)

# %% [markdown]
# Everything in this notebook is small enough for a CPU; `device` is printed only so you know what you have.
#
# ## 1. The problem: attention cannot see order
#
# Take a sentence, embed each word as a vector (here: random vectors, one per word), and run it through a
# `MultiHeadAttention` layer. Then run the *shuffled* sentence through the same layer.

# %%
words = "the dog bit the man".split()
vocab = sorted(set(words))
g = torch.Generator().manual_seed(0)
C, H = 8, 2
word_vectors = torch.randn(len(vocab), C, generator=g)  # (V, C): one vector per word


def embed(sentence):
    return word_vectors[[vocab.index(w) for w in sentence]][None]  # (1, T, C)


torch.manual_seed(0)
mha = MultiHeadAttention(C, H)
x = embed(words)  # (1, T, C)
perm = torch.tensor([4, 1, 2, 3, 0])  # swap "the" (0) and "man" (4): "man dog bit the the"
shuffled = [words[i] for i in perm]
print(" ".join(words), "->", " ".join(shuffled))
out, out_shuffled = mha(x), mha(x[:, perm])
print("out", tuple(out.shape))
print("shuffled outputs == outputs shuffled:", torch.allclose(out_shuffled, out[:, perm], atol=1e-6))

# %% [markdown]
# Shuffling the input shuffles the output in exactly the same way, and changes nothing else. That is
# **permutation equivariance**: `attn(x[perm]) == attn(x)[perm]`. It holds because each output is a
# weighted average over a *set* of keys and values; the scores `q_i . k_j` depend on the two vectors only,
# not on i or j. For "dog bit man" and "man bit dog" the vector for "bit" comes out identical:

# %%
a, b = embed("dog bit man".split()), embed("man bit dog".split())
print("output for 'bit' in both sentences is the same:", torch.allclose(mha(a)[0, 1], mha(b)[0, 1], atol=1e-6))

# %%
flat = torch.zeros(1, 1, 6, 1)  # q = k = 0: every score equal, so the weights are uniform over the visible keys
v_start = torch.tensor([1.0, 0, 0, 0, 0, 0]).view(1, 1, 6, 1)  # (B, H, T, D): a start token, then five others
avg_causal, _ = scaled_dot_product_attention(flat, flat, v_start, causal_mask(6))
avg_full, _ = scaled_dot_product_attention(flat, flat, v_start)
print("causal mask, average at t = 0..5:", " ".join(f"{a:.3f}" for a in avg_causal.flatten().tolist()))
print("no mask,     average at t = 0..5:", " ".join(f"{a:.3f}" for a in avg_full.flatten().tolist()))

# %% [markdown]
# A model can read its position off that number. One causal layer still sees the tokens before t as a
# *set* (their count, not their order); a second layer can combine the counts of different prefixes, and
# causal language models trained with no positional encoding at all do learn where each token is
# (Haviv et al., 2022; Kazemnejad et al., 2023 found such "NoPE" decoders generalise to longer inputs
# better than models with explicit encodings on their tasks; both in further reading). The model in this notebook's experiment has one layer, and
# without positions it does badly.
#
# Every scheme below makes *where* a token is an explicit part of the computation. Two families:
# %% [markdown]
# This layer has no mask, so one such layer cannot recover the order of its input: whatever it computes
# for a token, it computes for the token's value wherever it sits. A **causal** mask changes that a little.
# Token t sees only the keys 0 .. t, so the mask itself carries position: a head whose scores are all
# equal (a query orthogonal to every key) returns the plain average of the t + 1 values it can see, and
# that average moves with t. A start token with value 1 followed by tokens with value 0 makes it exact:
# the causal average at position t is 1 / (t + 1), while without a mask every position gets the same 1/6.
#
# - **absolute** schemes add a vector for position t to the token's embedding, before any attention
#   (learned, sinusoidal);
# - **relative** schemes change the attention scores so that they depend on the distance i - j between query
#   and key (RoPE, ALiBi).
#
# ## 2. Learned position embeddings
#
# The simplest idea (BERT, GPT-2): a trainable table with one row per position, `context_length` rows of
# `C` numbers, and add row t to the embedding of token t. `LearnedPositionalEmbedding` is that table, an
# `nn.Embedding(context_length, C)`:

# %%
torch.manual_seed(0)
pos_emb = LearnedPositionalEmbedding(context_length=8, embed_dim=C)
print("table", tuple(pos_emb.embedding.weight.shape))
x_pos = pos_emb(x)  # (1, T, C) + rows 0 .. T-1
print("x + positions", tuple(x_pos.shape))
print("with positions, shuffled outputs == outputs shuffled:",
      torch.allclose(mha(pos_emb(x[:, perm])), mha(x_pos)[:, perm], atol=1e-6))

# %% [markdown]
# Now the two "the"s of the sentence get different inputs, and the equivariance is gone. The table is
# learned like any other weight, so the model can put into it whatever helps.
#
# The limit is built in: there is a row for positions 0 ... context_length - 1 and nothing else. A
# GPT-2 trained with 1024 positions has no vector for position 1024:

# %%
try:
    pos_emb(torch.randn(1, 9, C))  # 9 positions, 8 rows
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# One could make the table longer than the training sequences, but the extra rows would never receive a
# gradient: they would keep their random initial values, which the model has never seen. Section 7
# measures what that does.
#
# ## 3. Sinusoidal encodings
#
# The original Transformer (Vaswani et al., 2017) uses a fixed table instead, with nothing to learn and a
# value for *every* position. Channel pair i of position t holds a sine and a cosine of the angle
# t * omega_i, with frequencies that fall geometrically from 1 to almost 1/10000:
#
# $$PE[t, 2i] = \sin(t\,\omega_i), \qquad PE[t, 2i+1] = \cos(t\,\omega_i), \qquad
#   \omega_i = 10000^{-2i/C}, \quad i = 0, \dots, C/2 - 1.$$
#
# First with loops, exactly as written:

# %%
def sinusoidal_loops(T, C):
    pe = torch.zeros(T, C)
    for t in range(T):
        for i in range(C // 2):
            omega = 10000 ** (-2 * i / C)
            pe[t, 2 * i] = math.sin(t * omega)
            pe[t, 2 * i + 1] = math.cos(t * omega)
    return pe


print(sinusoidal_loops(4, 6))

# %% [markdown]
# Row 0 is (0, 1, 0, 1, ...): sin 0 and cos 0. Vectorised, the angles are an outer product of the
# positions (T, 1) and the frequencies (1, C/2):

# %%
def sinusoidal_vectorised(T, C):
    omega = 10000 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)  # (C/2,): 2i / C for i = 0, 1, ...
    angles = torch.arange(T, dtype=torch.float64)[:, None] * omega[None, :]  # (T, 1) * (1, C/2) -> (T, C/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, C).float()  # interleave sin, cos


pe = sinusoidal_vectorised(64, 32)
print("pe", tuple(pe.shape))
torch.testing.assert_close(sinusoidal_vectorised(10, 6), sinusoidal_loops(10, 6))
torch.testing.assert_close(pe, sinusoidal_encoding(64, 32))
print("loops == vectorised == course_utils.positional.sinusoidal_encoding")

# %% [markdown]
# As a picture, position down, channel across: the first channels oscillate fast (omega = 1 radian per
# position), the last ones barely move. Read a row from right to left and it is a bit like a clock with
# hands of many speeds, or a binary counter with smooth digits.

# %%
fig, ax = plt.subplots(figsize=(6, 3.2))
im = ax.imshow(pe.T, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
ax.set_xlabel("position t")
ax.set_ylabel("channel")
ax.set_title("sinusoidal encoding, T = 64, C = 32")
fig.colorbar(im, ax=ax)
plt.show()

# %% [markdown]
# ### Similarity depends on distance only
#
# Each pair contributes sin(a) sin(b) + cos(a) cos(b) = cos(a - b) to the dot product of two rows, so
# `PE[t] . PE[s] = sum_i cos((t - s) omega_i)`: a function of the distance t - s alone. It is largest at
# distance 0 (C/2 = 16) and falls, with ripples, as positions move apart:

# %%
sim = pe @ pe.T  # (T, T)
distances = torch.arange(0, 40)
from_10 = sim[10, 10 + distances]  # row 10 against positions 10, 11, ...
from_20 = sim[20, 20 + distances]
print("PE[10] . PE[10 + k] == PE[20] . PE[20 + k] for all k:", torch.allclose(from_10, from_20, atol=1e-4))
fig, ax = plt.subplots(figsize=(5, 2.8))
ax.plot(distances, from_10, marker=".")
ax.set_xlabel("distance k")
ax.set_ylabel("PE[t] . PE[t + k]")
ax.set_title("dot product of two positions, C = 32")
plt.show()

# %% [markdown]
# ### A fixed offset is a linear map
#
# The paper's reason for sines: "for any fixed offset k, PE[t + k] can be represented as a linear
# function of PE[t]". The addition formulas say how. For one pair, with a = t omega and b = k omega,
#
# $$\begin{pmatrix}\sin(a+b)\\ \cos(a+b)\end{pmatrix} =
#   \begin{pmatrix}\cos b & \sin b\\ -\sin b & \cos b\end{pmatrix}
#   \begin{pmatrix}\sin a\\ \cos a\end{pmatrix}.$$
#
# The 2x2 matrix is a rotation by the angle k omega, and it does not involve t. Stack one block per pair
# on the diagonal and you have a (C, C) matrix `M_k` with `PE[t + k] = M_k PE[t]` for *every* t:

# %%
k_shift = 3
M = sinusoidal_shift_matrix(k_shift, 32).float()  # (C, C), block diagonal
print("M_3", tuple(M.shape), "| first block (omega = 1):\n", M[:2, :2])
print("PE[t + 3] == M_3 @ PE[t] for t = 0 .. 60:", torch.allclose(pe[:-k_shift] @ M.T, pe[k_shift:], atol=1e-5))
print("M_3 is a rotation (M M^T = I):", torch.allclose(M @ M.T, torch.eye(32), atol=1e-6))

# %% [markdown]
# So "three positions back" is the same linear map everywhere, and a linear layer (like a query or key
# projection) can in principle learn to use it. In practice the encoding is *added* to the token
# embedding, and the projections see the sum, which muddles this neat structure. RoPE keeps it clean.
#
# ## 4. Rotary position embeddings (RoPE)
#
# RoPE (Su et al., 2021) puts the rotation where it matters: on the queries and keys themselves,
# *after* the projections, instead of adding anything to the input. Cut the D channels of a query or key
# into D/2 pairs, treat each pair as a point in the plane, and rotate pair i of the vector at position t
# by the angle t * theta_i, with the same frequencies as above: theta_i = 10000^(-2i/D).
#
# Why that works: rotating q by angle a and k by angle b changes their dot product into
# q^T R(a)^T R(b) k = q^T R(b - a) k, which depends only on b - a. With a = i theta and b = j theta, the
# score of query i and key j depends on their positions only through **i - j**. One pair by hand:

# %%
def rotate(v, angle):
    """Rotate a 2-D vector counter-clockwise by angle (radians)."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([c * v[0] - s * v[1], s * v[0] + c * v[1]])


q2, k2 = torch.tensor([1.0, 0.5]), torch.tensor([0.3, -1.2])
theta = 0.4
for i, j in [(5, 2), (12, 9), (103, 100), (2, 5)]:
    score = rotate(q2, i * theta) @ rotate(k2, j * theta)
    print(f"query at {i:3d}, key at {j:3d}, i - j = {i - j:2d}: score {score.item():+.4f}")

# %% [markdown]
# The same distance, the same score, wherever the pair sits. And rotations keep lengths, so RoPE never
# changes the norm of a query or key.
#
# Which way does it turn? `rotate` turns **counter-clockwise** by the angle t * theta_i in the plane of the
# pair: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos), the sign convention of the paper and of
# `course_utils`. Clockwise (every angle negated) would serve as well, *if q and k turn the same way*:
# the scores still depend on i - j alone, they are just different numbers (clockwise equals
# counter-clockwise with the second channel of every pair negated, a sign a model folds into W_q and
# W_k). Turning q one way and k the other breaks it: the score then depends on i + j.

# %%
for i, j in [(5, 2), (12, 9)]:
    both_cw = rotate(q2, -i * theta) @ rotate(k2, -j * theta)
    mixed = rotate(q2, i * theta) @ rotate(k2, -j * theta)
    print(f"i = {i:2d}, j = {j}: both clockwise {both_cw.item():+.4f} | "
          f"q counter-clockwise, k clockwise {mixed.item():+.4f}")

# %% [markdown]
# Both clockwise, distance 3 scores +1.1495 at either place: the counter-clockwise score of distance -3
# above. So the direction is a convention, like the pairing below: a trained model only works with the one
# it was trained with.
#
# Now a whole (B, H, T, D) tensor. Pair i of the channels is (2i, 2i + 1), the *interleaved* pairing of
# the RoFormer paper:

# %%
def rope_interleaved(x, positions):
    D = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * theta[None, :]  # (T, D/2)
    cos, sin = angles.cos().float(), angles.sin().float()
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, T, D/2) each: the first and second coordinate of each pair
    rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, H, T, D/2, 2)
    return rotated.flatten(-2)  # (B, H, T, D)


B, T, D = 2, 6, 8
q = torch.randn(B, H, T, D, generator=g)
k = torch.randn(B, H, T, D, generator=g)
pos = torch.arange(T)
q_rot = rope_interleaved(q, pos)
print("q_rot", tuple(q_rot.shape))
torch.testing.assert_close(q_rot, apply_rope(q, pos, pairing="interleaved"))
print("matches course_utils.positional.apply_rope(pairing='interleaved')")
print("norms unchanged:", torch.allclose(q_rot.norm(dim=-1), q.norm(dim=-1), atol=1e-5))

# %% [markdown]
# The claim that matters, checked on the full scores: move every query and key 100 positions further
# along, and not one score changes.

# %%
rope_i = lambda t, p: apply_rope(t, p, pairing="interleaved")  # the paper's pairing, as above
scores = rope_i(q, pos) @ rope_i(k, pos).transpose(-2, -1)  # (B, H, T, T)
scores_shifted = rope_i(q, pos + 100) @ rope_i(k, pos + 100).transpose(-2, -1)
print("scores at positions 0..5 == scores at 100..105, to 1e-5 (float32 rounding of the angles):",
      (scores - scores_shifted).abs().max().item() < 1e-5)

# %% [markdown]
# ### Two pairings, one rotation
#
# Code in the wild pairs the channels in two ways. The RoFormer paper (and Meta's original Llama code,
# with complex numbers) pairs neighbours, (0, 1), (2, 3), ... GPT-NeoX and the Hugging Face Llama code
# pair channel i with channel i + D/2: the first half with the second half. `apply_rope` takes
# `pairing="interleaved"` or `pairing="half"`. On the same input they differ:

# %%
inter = apply_rope(q, pos, pairing="interleaved")
half = apply_rope(q, pos, pairing="half")
print("same result:", torch.allclose(inter, half))

# %% [markdown]
# But they are the same rotation with the channels listed in a different order. Reorder the channels
# as (0, 2, 4, ..., 1, 3, 5, ...) and the interleaved pair i, channels (2i, 2i + 1), lands on channels
# (i, i + D/2), exactly the half pair i, with the same frequency:

# %%
perm_D = rope_pairing_permutation(D)
print("permutation:", perm_D.tolist())
print("half(x[perm]) == interleaved(x)[perm]:",
      torch.allclose(apply_rope(q[..., perm_D], pos, pairing="half"), inter[..., perm_D], atol=1e-6))

# %% [markdown]
# In a model the permutation is folded into the rows of W_q and W_k, and the scores are then identical.
# This is what checkpoint converters between the two styles do; loading weights trained with one pairing
# into code that uses the other gives a model that runs without error and produces garbage.
#
# **This course rotates with `"half"`** wherever a model rotates: it is `apply_rope`'s default, and what
# `RotaryMultiHeadAttention`, notebook 07's `GroupedQueryAttention(rope=True)` and notebook 09's GPT use.
# Two reasons. The pairs are two contiguous halves, so the rotation is two slices and one concatenation
# instead of strided views of every other channel that must be stacked and interleaved again. And it is
# the layout of the GPT-NeoX checkpoints and of Llama's in the Hugging Face format, so their W_q and W_k
# load without reordering rows. The interleaved picture above is the same rotation, and the easier one to
# draw.
#
# ### Absolute positions with a cache
#
# When a model generates text with a KV cache (notebook 08), the keys of earlier tokens are stored
# already rotated, and each new token must be rotated at its *absolute* position t0, t0 + 1, ..., not at
# 0. That is what the `positions` argument is for. Rotating the last 3 rows at positions 5, 6, 7 gives the
# same numbers as rotating all 8 rows and keeping the last 3:

# %%
x_full = torch.randn(1, H, 8, D, generator=g)
t0 = 5
new_rows = apply_rope(x_full[..., t0:, :], positions=torch.arange(t0, 8))  # pairing="half", the default
print("rotated at absolute positions == slice of the full rotation:",
      torch.allclose(new_rows, apply_rope(x_full)[..., t0:, :]))
print("rotated at 0, 1, 2 instead:", torch.allclose(apply_rope(x_full[..., t0:, :]), apply_rope(x_full)[..., t0:, :]))

# %% [markdown]
# ### Angles need float32 at least
#
# The angle of pair i at position t is t * theta_i, and t reaches thousands in a long context. A 16-bit
# float cannot hold such a number finely: bfloat16 keeps 8 significant bits, so between 1024 and 2048 its
# steps are 8 apart. An angle computed in bfloat16 can be off by whole radians, which is another rotation,
# not a small error (float32's steps there are 1/8192). At position 2000 with D = 64:

# %%
D_big, t_big = 64, 2000
theta_big = 10000.0 ** (-torch.arange(0, D_big, 2, dtype=torch.float64) / D_big)  # (D/2,)
exact_angles = t_big * theta_big  # (D/2,), float64
angle_error = {}
for dtype in (torch.bfloat16, torch.float32):
    angles_low = torch.tensor(float(t_big), dtype=dtype) * theta_big.to(dtype)  # the angles computed in dtype
    angle_error[dtype] = (angles_low.double() - exact_angles).abs().max().item()
print(f"bfloat16: largest angle error {angle_error[torch.bfloat16]:.1f} radians, more than 1 radian:",
      angle_error[torch.bfloat16] > 1)
print("float32: largest angle error below 1e-4 radian:", angle_error[torch.float32] < 1e-4)

# %% [markdown]
# So `apply_rope` computes the angles in float64. Notebook 09's GPT rotates at every layer and step, so it
# keeps the cos and sin of every position ready in a `RotaryTable`: the angles in float64, once, and the
# rotation in x's dtype but **at least float32**. A model that runs in bfloat16 still turns each pair by
# the right angle; only the result is rounded to bfloat16. The same bfloat16 rows at positions 2000 to 2003,
# rotated by the table and with angles made in bfloat16, against float64 all the way:

# %%
x_bf = torch.randn(1, 1, 4, D_big, generator=torch.Generator().manual_seed(6)).bfloat16()  # (B, H, T, D)
positions_big = torch.arange(t_big, t_big + 4)  # (T,)
exact = apply_rope(x_bf.double(), positions_big)  # (B, H, T, D), float64
by_table = RotaryTable(D_big).rotate(x_bf, start=t_big)  # bfloat16, rotated in float32
angles_bf = positions_big.bfloat16()[:, None] * theta_big.bfloat16()  # (T, D/2), in bfloat16
x1, x2 = x_bf.chunk(2, dim=-1)  # the "half" pairing: channel i with channel i + D/2
by_bf16 = torch.cat([x1 * angles_bf.cos() - x2 * angles_bf.sin(), x1 * angles_bf.sin() + x2 * angles_bf.cos()], dim=-1)
for name, got in [("RotaryTable (float32 inside)", by_table), ("angles in bfloat16", by_bf16)]:
    print(f"{name:28s} {got.dtype}, equals float64 to bfloat16's rounding (rtol 2^-7, atol 1e-3):",
          torch.allclose(got.double(), exact, rtol=2**-7, atol=1e-3))

# %% [markdown]
# ### RoPE inside multi-head attention
#
# `RotaryMultiHeadAttention` is `MultiHeadAttention` with one step added: after `split_heads`, rotate the
# queries and the keys (not the values), with the half pairing. It has no extra parameters. Here is that step written out, and
# checked against the module:

# %%
torch.manual_seed(0)
rope_mha = RotaryMultiHeadAttention(C, H)
x5 = embed(words)  # (1, T, C)
T5 = x5.shape[1]
q5, k5, v5 = (split_heads(t, H) for t in rope_mha.qkv_proj(x5).chunk(3, dim=-1))  # (1, H, T, D) each
q5, k5 = apply_rope(q5, pairing="half"), apply_rope(k5, pairing="half")  # the one new step
out5, weights5 = scaled_dot_product_attention(q5, k5, v5, causal_mask(T5))
out5 = rope_mha.out_proj(out5.transpose(1, 2).reshape(1, T5, C))
torch.testing.assert_close(rope_mha(x5, causal_mask(T5)), out5)
print("matches RotaryMultiHeadAttention | parameters:",
      {n: tuple(p.shape) for n, p in rope_mha.named_parameters()})

# %% [markdown]
# And the permutation test from section 1 now fails, as it should: the layer sees order.

# %%
print("RoPE layer: shuffled outputs == outputs shuffled:",
      torch.allclose(rope_mha(x[:, perm]), rope_mha(x)[:, perm], atol=1e-6))

# %% [markdown]
# ## 5. ALiBi: a distance penalty on the scores
#
# ALiBi ("Attention with Linear Biases", Press et al., 2022) is simpler still. No embedding, no rotation:
# subtract from each score a penalty proportional to the distance between query and key,
#
# $$\text{scores}_{h,i,j} = \frac{q_i \cdot k_j}{\sqrt{D}} - m_h\,(i - j),$$
#
# with a fixed slope m_h per head. The slopes form a geometric sequence, 2^(-8/H), 2^(-16/H), ..., 2^(-8):
# for 8 heads, 1/2, 1/4, ..., 1/256. Steep heads look only at the last few tokens; gentle heads look far back.

# %%
slopes = alibi_slopes(8)
print("slopes for H = 8:", [f"1/{round(1 / s)}" for s in slopes.tolist()])
print("slopes for H = 6:", [f"1/{round(1 / s)}" for s in alibi_slopes(6).tolist()])

# %% [markdown]
# When H is not a power of two, the paper's reference code takes the slopes of the nearest smaller power of
# two (4 here: 1/4, 1/16, 1/64, 1/256), then fills up with every other slope of the next power (8: 1/2, 1/8, ...),
# the ones that fall between them. `alibi_bias(H, T)` is the (H, T, T) table of penalties, -m_h |i - j|
# (the causal mask removes the keys after the query anyway):

# %%
bias = alibi_bias(4, 8)  # (H, T, T)
print("bias", tuple(bias.shape), "| head 0 (slope 1/4), query 5:", bias[0, 5])
fig, axes = plt.subplots(1, 4, figsize=(9, 2.6))
for h, ax in enumerate(axes):
    shown = bias[h].masked_fill(~causal_mask(8), float("nan"))  # blank out the masked future
    ax.imshow(shown, cmap="viridis", vmin=float(bias.min()), vmax=0)
    ax.set_title(f"head {h}: m = 1/{round(1 / alibi_slopes(4)[h].item())}")
    ax.set_xlabel("key j")
axes[0].set_ylabel("query i")
fig.suptitle("ALiBi bias -m (i - j), causal part only")
fig.tight_layout()
plt.show()

# %% [markdown]
# The bias only depends on i - j, so ALiBi is relative by construction, and nothing about it stops at a
# trained length. It goes into `scaled_dot_product_attention` through its `bias` argument (added to the
# scaled scores before the mask and the softmax). With all q and k equal to zero, so that only the bias
# speaks, the weights of the last query decay geometrically with distance, by a factor e^(-m) per step:

# %%
T8 = 8
zeros = torch.zeros(1, 4, T8, 2)
_, w_alibi = scaled_dot_product_attention(zeros, zeros, torch.randn(1, 4, T8, 2, generator=g),
                                          causal_mask(T8), bias=alibi_bias(4, T8))
for h in range(4):
    print(f"head {h}: weights of query 7 over keys 0..7:", " ".join(f"{w:.2f}" for w in w_alibi[0, h, -1].tolist()))

# %% [markdown]
# A side note that confuses readers of the reference code: it adds `+m * j` (a function of the *key*
# position only) instead of `-m (i - j)`. The two differ by `m * i`, the same for every key of query i,
# and a softmax ignores a constant added to a whole row. Same weights:

# %%
i_idx, j_idx = torch.arange(T8)[:, None].float(), torch.arange(T8)[None, :].float()
m4 = alibi_slopes(4)[:, None, None]  # (H, 1, 1)
_, w_paper = scaled_dot_product_attention(zeros, zeros, torch.ones(1, 4, T8, 2), causal_mask(T8),
                                          bias=(m4 * j_idx).expand(4, T8, T8))
print("+m j and -m (i - j) give the same weights:", torch.allclose(w_paper, w_alibi, atol=1e-6))

# %% [markdown]
# `ALiBiMultiHeadAttention` is `MultiHeadAttention` with that one argument added:

# %%
torch.manual_seed(0)
alibi_mha = ALiBiMultiHeadAttention(C, H)
qa, ka, va = (split_heads(t, H) for t in alibi_mha.qkv_proj(x5).chunk(3, dim=-1))
out_a, _ = scaled_dot_product_attention(qa, ka, va, causal_mask(T5), bias=alibi_bias(H, T5))
out_a = alibi_mha.out_proj(out_a.transpose(1, 2).reshape(1, T5, C))
torch.testing.assert_close(alibi_mha(x5, causal_mask(T5)), out_a)
print("matches ALiBiMultiHeadAttention | runs on 500 positions:", tuple(alibi_mha(torch.randn(1, 500, C)).shape))

# %% [markdown]
# ## 6. Explore: what each scheme does to a score
#
# The picture below puts the schemes side by side. For a query vector q and a key vector k that are *the
# same* at every position, it shows the score of query position i against key position j, all five panels
# on one colour scale so that a colour means the same score in each. With no positions every score is
# equal. Learned embeddings (random here, untrained) add a random row to q and to k and give noise, the
# largest effect of the five. The sinusoidal panel adds the table straight to the query and to the key
# vector, PE[i] to q and PE[j] to k (a real model adds it to the input x, before W_q and W_k, which mixes it
# further): the score (q + PE[i]) . (k + PE[j]) has a term PE[i] . PE[j] that depends only on i - j, and
# two cross terms, q . PE[j] and PE[i] . k, that depend on where each token sits. RoPE gives a pattern that
# is constant along every diagonal (it depends only on i - j), and ALiBi (the steepest slope of an 8-head
# model, m = 1/2) a plain ramp away from the diagonal.

# %%
def explorer_scores(scheme, T=24, C=16, pairs=None, seed=0):
    """Scores (T, T) of a fixed query vector at position i against a fixed key vector at position j.

    ``pairs`` (a list of channel-pair indices) keeps only those pairs of the q, k vectors (RoPE, sinusoidal).
    """
    gen = torch.Generator().manual_seed(seed)
    qv, kv = torch.randn(C, generator=gen), torch.randn(C, generator=gen)
    if pairs is not None:
        keep = torch.zeros(C, dtype=torch.bool)
        for p in pairs:
            keep[2 * p: 2 * p + 2] = True
        qv, kv = qv * keep, kv * keep
    qs, ks = qv.expand(T, C), kv.expand(T, C)  # the same vector at every position
    if scheme == "none":
        return qs @ ks.T
    if scheme == "learned (untrained)":
        table = torch.randn(T, C, generator=gen)
        return (qs + table) @ (ks + table).T
    if scheme == "sinusoidal":  # PE[i] added to the query, PE[j] to the key
        table = sinusoidal_encoding(T, C)
        return (qs + table) @ (ks + table).T
    if scheme == "rope":  # pairs (2i, 2i + 1), like the sinusoidal table and the `pairs` argument
        return apply_rope(qs[None], pairing="interleaved")[0] @ apply_rope(ks[None], pairing="interleaved")[0].T
    if scheme == "alibi":
        return qs @ ks.T + alibi_bias(8, T)[0]  # head 0 of 8: slope 1/2
    raise ValueError(f"unknown scheme {scheme!r}")


EXPLORER_SCHEMES = ("none", "learned (untrained)", "sinusoidal", "rope", "alibi")


def plot_scores(scheme, ax, vmin=None, vmax=None, **kw):
    s = explorer_scores(scheme, **kw)
    image = ax.imshow(s, cmap="magma", vmin=vmin, vmax=vmax)
    ax.set_title(scheme, fontsize=9)
    ax.set_xlabel("key position j")
    return s, image


all_scores = torch.stack([explorer_scores(scheme) for scheme in EXPLORER_SCHEMES])  # (5, T, T)
low, high = all_scores.min().item(), all_scores.max().item()  # one colour scale for the five panels
fig, axes = plt.subplots(1, 5, figsize=(13, 2.8), layout="constrained")
for scheme, ax in zip(EXPLORER_SCHEMES, axes):
    _, image = plot_scores(scheme, ax, vmin=low, vmax=high)
axes[0].set_ylabel("query position i")
fig.colorbar(image, ax=axes.tolist(), label="score", shrink=0.9)
plt.show()

# %% [markdown]
# The RoPE claim in numbers: every diagonal of its score table is constant.

# %%
s_rope = explorer_scores("rope")
print("RoPE: each diagonal constant:",
      all(torch.allclose(d, d[0].expand_as(d), atol=1e-4) for d in (torch.diagonal(s_rope, o) for o in range(-23, 24))))
s_sin = explorer_scores("sinusoidal")
print("sinusoidal added to q and k: each diagonal constant:",
      all(torch.allclose(d, d[0].expand_as(d), atol=1e-4) for d in (torch.diagonal(s_sin, o) for o in range(-23, 24))))
pe24 = sinusoidal_encoding(24, 16)  # the table the explorer added
g0 = torch.Generator().manual_seed(0)
q16, k16 = torch.randn(16, generator=g0), torch.randn(16, generator=g0)  # the explorer's q and k (seed 0)
cross = q16 @ pe24.T + (pe24 @ k16)[:, None]  # q . PE[j] (varies along a row) + PE[i] . k (down a column)
print("same scores without the cross terms: each diagonal constant:",
      all(torch.allclose(d, d[0].expand_as(d), atol=1e-4)
          for d in (torch.diagonal(s_sin - cross, o) for o in range(-23, 24))))

# %% [markdown]
# Try it (needs a running kernel): pick a scheme, a length and which channel pairs of q and k to keep. With
# RoPE and only pair 0 (the fastest, theta = 1 radian per position), the score oscillates quickly along
# each row; with only the last pair (the slowest), it barely changes over dozens of positions. The plot on the
# right shows one row of the table: the scores of the query at position i.

# %%
# NBVAL_IGNORE_OUTPUT
from ipywidgets import Dropdown, IntSlider, SelectMultiple, interact


def _explore(scheme, T, pairs, query):
    chosen = list(pairs) if pairs else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3))
    s, _ = plot_scores(scheme, ax1, T=T, pairs=chosen)
    ax1.set_ylabel("query position i")
    i = min(query, T - 1)
    ax2.plot(s[i], marker=".")
    ax2.axvline(i, color="grey", lw=0.8)
    ax2.set_xlabel("key position j")
    ax2.set_title(f"scores of query {i}", fontsize=9)
    fig.tight_layout()
    plt.show()


_ = interact(_explore,
             scheme=Dropdown(options=EXPLORER_SCHEMES, value="rope", description="scheme"),
             T=IntSlider(value=24, min=4, max=64, description="positions T"),
             pairs=SelectMultiple(options=list(range(8)), value=(), description="pairs (none = all)"),
             query=IntSlider(value=12, min=0, max=63, description="query i"))

# %% [markdown]
# ## 7. An experiment: which schemes carry over to longer sequences?
#
# The task ("last letter"): a sequence mixes *letters* (8 token types) and *fillers* (8 other types).
# At every position the model must name the most recent letter at or before it. The rule is about
# relative position (look back to the nearest letter) and is the same at position 5 as at 500. Without any
# positions, one causal layer sees the tokens before t as a set (section 1): it can tell *which* letters
# came before, not which of them came last.
#
# We train the same tiny model (one pre-norm block with 4 heads, C = 32, and an MLP) once per scheme,
# on sequences of length 16, with the same data in the same order, for the same number of steps. Then we
# test on sequences of length 8 to 128. The accuracy counts only the filler positions, where the model
# has to look back. The model and the training loop are in `course_utils/length_generalisation.py`;
# the learned table there has 128 rows, but only the first 16 are ever trained.

# %%
from course_utils.length_generalisation import (
    POSITIONS,
    LengthGenConfig,
    accuracy_by_length,
    evaluate,
    make_batch,
    train_model,
)

FULL_RUN = False  # True: a wider, 2-layer model, longer training, tests up to length 256 (a few minutes)
config = LengthGenConfig.full() if FULL_RUN else LengthGenConfig.tiny()
print(config)
tokens, targets = make_batch(config, 1, 12, torch.Generator().manual_seed(0))
show = lambda ids: " ".join("abcdefgh"[t] if t < config.num_letters else "." for t in ids.tolist())
print("input :", show(tokens[0]), "  (letters a-h, fillers shown as .)")
print("answer:", show(targets[0]))

# %% [markdown]
# Training: a few seconds per scheme on one CPU thread (the bar shows progress when you run it yourself).

# %%
# NBVAL_IGNORE_OUTPUT
import time

from tqdm.auto import tqdm

models, curves, seconds = {}, {}, {}
for positions in POSITIONS:
    start = time.perf_counter()
    bar = tqdm(range(config.steps), desc=f"{positions:>10s}", leave=False)
    models[positions], curves[positions] = train_model(config, positions, progress=bar)
    seconds[positions] = time.perf_counter() - start
print("seconds per scheme:", {s: round(t, 1) for s, t in seconds.items()})

# %% [markdown]
# First the validation loss and accuracy at the training length 16, on fresh sequences:

# %%
print(f"{'scheme':>10s}  {'val loss':>8s}  {'val acc':>7s}")
for positions in POSITIONS:
    loss, acc = evaluate(models[positions], config.train_length)
    print(f"{positions:>10s}  {loss:8.2f}  {acc:7.2f}")

# %% [markdown]
# Every scheme with positions learns the task at the training length; without positions the model is
# stuck far behind. Now the longer sequences:

# %%
acc_by_len = {positions: accuracy_by_length(models[positions], config.eval_lengths) for positions in POSITIONS}
print(f"{'length':>10s}", "".join(f"{T:>6d}" for T in config.eval_lengths))
for positions in POSITIONS:
    print(f"{positions:>10s}", "".join(f"{acc_by_len[positions][T]:6.2f}" for T in config.eval_lengths))

fig, ax = plt.subplots(figsize=(6, 3.4))
for positions in POSITIONS:
    accuracies = [acc_by_len[positions][T] for T in config.eval_lengths]
    ax.plot(config.eval_lengths, accuracies, marker="o", label=positions)
ax.axvline(config.train_length, color="grey", ls="--", lw=1)
ax.text(config.train_length, 0.05, " trained length", color="grey")
ax.set_xscale("log", base=2)
ax.set_xlabel("test sequence length")
ax.set_ylabel("accuracy at fillers")
ax.set_ylim(0, 1.02)
ax.legend(fontsize=8)
ax.set_title("same model, same budget, different positions")
plt.show()

# %% [markdown]
# What the curves say (read the numbers above; your own runs with other seeds move them by a few points):
#
# - **none**: without positions this one-layer model cannot single out the most recent letter, even at the
#   trained length, and it gets worse as more earlier letters compete. (`FULL_RUN`'s two layers could in
#   principle recover order through the causal mask, section 1.)
# - **learned**: perfect up to length 16, then it falls: positions 16 and beyond have rows nobody trained.
# - **sinusoidal**: every position has a vector, but vectors the model never saw; it degrades about as fast.
# - **RoPE**: the scores depend only on i - j, so the rule transfers to somewhat longer sequences; far
#   beyond the trained length, rotation angles the model never saw appear, and it degrades too. (This is
#   why long-context models rescale RoPE's frequencies; see further reading.)
# - **ALiBi**: a little below the others at length 16 on this budget, but almost flat as sequences grow: its
#   built-in preference for nearby keys is exactly what this task needs, and it means the same at any length.
#
# This is one small task. On a task that needs to look far back, ALiBi's recency penalty is a handicap,
# and in large language models RoPE (with frequency rescaling) won. The experiment's point is the mechanism:
# absolute schemes have to *see* a position to use it; relative ones reuse what they learned about distances.
#
# ## 8. Closing check against `course_utils`
#
# Our inline versions against the package, on fresh inputs:

# %%
torch.testing.assert_close(sinusoidal_loops(7, 10), sinusoidal_encoding(7, 10))
torch.testing.assert_close(sinusoidal_vectorised(50, 64), sinusoidal_encoding(50, 64))
x_check = torch.randn(2, 3, 9, 6, generator=g)
p_check = torch.arange(4, 13)
torch.testing.assert_close(rope_interleaved(x_check, p_check), apply_rope(x_check, p_check, pairing="interleaved"))
pair = x_check[0, 0, 3, :2]  # interleaved pair 0 of the row at position 7 (theta_0 = 1)
torch.testing.assert_close(rotate(pair, 7 * 1.0), apply_rope(x_check, p_check, pairing="interleaved")[0, 0, 3, :2])
perm6 = rope_pairing_permutation(6)
torch.testing.assert_close(apply_rope(x_check[..., perm6], p_check), rope_interleaved(x_check, p_check)[..., perm6])
slopes_by_hand = torch.tensor([2.0 ** (-8 * (h + 1) / 8) for h in range(8)])
torch.testing.assert_close(slopes_by_hand, alibi_slopes(8))
print("matches course_utils")

# %% [markdown]
# ## 9. Exercises
#
# Each exercise is a function for you to write; the cell below it checks it and, when it is wrong, tries
# to name the mistake. Use plain PyTorch, not the `course_utils.positional` function the exercise is about.
#
# ### Exercise 06.1: the sinusoidal table
#
# Write `my_sinusoidal_encoding(T, C)` returning the (T, C) float32 table of section 3: positions
# t = 0 ... T - 1, PE[t, 2i] = sin(t omega_i), PE[t, 2i + 1] = cos(t omega_i), omega_i = 10000^(-2i/C).

# %%
def my_sinusoidal_encoding(T, C):
    ### BEGIN SOLUTION
    omega = 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)  # (C/2,)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * omega  # (T, C/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, C).float()
    ### END SOLUTION


check("06.1", my_sinusoidal_encoding)

# %% [markdown]
# ### Exercise 06.2: RoPE
#
# Write `my_apply_rope(x, positions)` for `x` of shape (B, H, T, D) with D even and `positions` a 1-D
# integer tensor of length T (the absolute position of each row). Use the interleaved pairing, channels
# (2i, 2i + 1), rotate pair i of row r counter-clockwise by positions[r] * theta_i with
# theta_i = 10000^(-2i/D), and return a tensor of the same shape and dtype. (Computing the angles in
# float64 and casting cos and sin back to float32 keeps them accurate at large positions.)

# %%
def my_apply_rope(x, positions):
    ### BEGIN SOLUTION
    D = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * theta  # (T, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    ### END SOLUTION


check("06.2", my_apply_rope)

# %% [markdown]
# ### Exercise 06.3: the causal ALiBi bias
#
# Write `my_alibi_bias(H, T)` for H a power of two, returning the (H, T, T) float32 tensor that a causal
# ALiBi model adds to its scaled scores: -m_h (i - j) where key j is at or before query i, and `-inf`
# where j > i (the causal mask, in its additive form: `-inf` exactly, since this table is the mask; a
# large negative number is a different table). The slopes are m_h = 2^(-8 (h + 1) / H), h = 0 ... H - 1.

# %%
def my_alibi_bias(H, T):
    ### BEGIN SOLUTION
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)])  # (H,)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    bias = -slopes[:, None, None] * (i - j).float()  # (H, T, T)
    return bias.masked_fill(j > i, float("-inf"))
    ### END SOLUTION


check("06.3", my_alibi_bias)

# %% [markdown]
# ## Summary
#
# - Without positions, self-attention is permutation-equivariant: shuffling the tokens shuffles the outputs
#   and changes nothing else. A causal mask leaks position (an even average over the visible keys depends
#   on how many there are), which deeper causal models can learn to use; one layer cannot recover order.
# - **Learned** embeddings: a trained row per position, added to the input. Flexible, but there is no row
#   past the trained context, and untrained rows are noise.
# - **Sinusoidal**: a fixed (sin, cos) pair per frequency, omega_i = 10000^(-2i/C). A shift by k positions
#   is a rotation M_k that does not depend on t, and dot products depend on the distance only.
# - **RoPE** rotates pair i of q and k counter-clockwise by t * theta_i, so scores depend only on i - j and
#   norms are kept (clockwise would work too, for q and k alike). Two pairings exist (interleaved, half);
#   they differ by a fixed permutation of channels, and this course's models use half. With a cache, rotate
#   new keys at their absolute positions.
# - **ALiBi** adds -m_h (i - j) to the scores, with geometric slopes per head; no parameters, no length limit,
#   a built-in preference for recent tokens.
# - In `course_utils`, RoPE and ALiBi change one step of `MultiHeadAttention`; the experiment shows the
#   relative schemes carrying a rule to longer sequences where the absolute ones fail.
#
# Next, notebook 07 makes attention cheaper (grouped-query heads, local windows, linear mixers), and
# notebook 08 speeds up generation with a KV cache, where `apply_rope(..., positions=...)` is needed.
#
# ## Further reading
#
# - Vaswani et al., "Attention Is All You Need" (2017), section 3.5: https://arxiv.org/abs/1706.03762
# - Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021):
#   https://arxiv.org/abs/2104.09864, and the EleutherAI blog post "Rotary Embeddings: A Relative
#   Revolution": https://blog.eleuther.ai/rotary-embeddings/
# - Press, Smith, Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
#   Extrapolation" (ICLR 2022): https://arxiv.org/abs/2108.12409 (reference code:
#   https://github.com/ofirpress/attention_with_linear_biases)
# - Haviv, Ram, Press, Izsak, Levy, "Transformer Language Models without Positional Encodings Still Learn
#   Positional Information" (Findings of EMNLP 2022): https://arxiv.org/abs/2203.16634
# - Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in Transformers" (2023):
#   https://arxiv.org/abs/2305.19466 (including models with no positional encoding at all)
# - Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models" (2023):
#   https://arxiv.org/abs/2309.00071, on rescaling RoPE's frequencies for longer contexts
