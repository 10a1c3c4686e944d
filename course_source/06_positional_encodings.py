# %% [markdown]
# # 06 Positional encodings: telling attention where each token is
#
# Attention compares queries with keys by dot products, and nothing in that knows *where* a token sits.
# Here are the four answers in use today, each built from scratch and checked, and a small experiment on
# sequences longer than any seen in training.
#
# **What you will learn**
#
# - why attention without positions is *permutation-equivariant*, and how a causal mask leaks position;
# - learned embeddings (GPT-2) and their limit: no position beyond the trained context;
# - the sinusoidal table (the original Transformer), in which a shift by k positions is a rotation;
# - RoPE (Llama, Mistral, Qwen): rotating pairs of channels of q and k so that scores depend on the
#   positions only through i - j; its direction, its two pairings, and rotating cached keys;
# - ALiBi (BLOOM, MPT): a distance penalty with one slope per head;
# - how each scheme changes one step of `MultiHeadAttention`, and what the experiment shows.
#
# **Prerequisites:** notebooks 02 (scaled dot-product attention), 03 (masking), 04 (multi-head attention).
#
# **Time:** about 50 minutes. **Runs on:** a CPU; the experiment takes under a minute (one switch makes
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
    RotaryTable,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_pairing_permutation,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)
from course_utils.variants import GroupedQueryAttention

device = setup_notebook(seed=0)
print("torch", torch.__version__, "| device:", device)

# %% [markdown]
# ## 1. The problem: attention cannot see order
#
# Embed each word as a (random) vector and run a sentence through a `MultiHeadAttention` layer; then the
# *shuffled* sentence, and "dog bit man" against "man bit dog".

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
a, b = embed("dog bit man".split()), embed("man bit dog".split())
print("output for 'bit' in both sentences is the same:", torch.allclose(mha(a)[0, 1], mha(b)[0, 1], atol=1e-6))

# %% [markdown]
# Shuffling the input shuffles the output the same way and changes nothing else: **permutation
# equivariance**, `attn(x[perm]) == attn(x)[perm]`. Each output is a weighted average over a *set* of keys
# and values, and the scores `q_i . k_j` depend on the two vectors, not on i or j.
#
# This layer has no mask, so one such layer cannot recover the order of its input. A **causal** mask
# changes that a little: token t sees only the keys 0 .. t, so a head whose scores are all equal returns
# the plain average of the t + 1 values it can see, and that average moves with t. A start token of value
# 1 followed by tokens of value 0 makes it exact:

# %%
flat = torch.zeros(1, 1, 6, 1)  # q = k = 0: every score equal, so the weights are uniform over the visible keys
v_start = torch.tensor([1.0, 0, 0, 0, 0, 0]).view(1, 1, 6, 1)  # (B, H, T, D): a start token, then five others
avg_causal, _ = scaled_dot_product_attention(flat, flat, v_start, causal_mask(6))
avg_full, _ = scaled_dot_product_attention(flat, flat, v_start)
print("causal mask, average at t = 0..5:", " ".join(f"{a:.3f}" for a in avg_causal.flatten().tolist()))
print("no mask,     average at t = 0..5:", " ".join(f"{a:.3f}" for a in avg_full.flatten().tolist()))

# %% [markdown]
# The causal average at position t is 1 / (t + 1), while without a mask every position gets the same 1/6.
# A model can read its position off that number. One causal layer still sees the tokens before t as a
# *set* (their count, not their order); a second layer can combine the counts of different prefixes, and
# causal language models trained with no positional encoding do learn positions (Haviv et al., 2022;
# Kazemnejad et al., 2023 found such "NoPE" decoders generalising to longer inputs better than explicit
# encodings on their tasks). Section 7's model has one layer, and without positions it does badly.
#
# The schemes below make position explicit. Two families:
#
# - **absolute**: add a vector for position t to the token's embedding (learned, sinusoidal);
# - **relative**: make the scores depend on the distance i - j (RoPE, ALiBi).
#
# ## 2. Learned position embeddings
#
# The simplest idea (BERT, GPT-2): a trainable table, `context_length` rows of `C` numbers, row t added to
# the embedding of token t: `LearnedPositionalEmbedding`, an `nn.Embedding(context_length, C)`. It has no
# row past context_length - 1: a GPT-2 trained with 1024 positions has no vector for position 1024.

# %%
torch.manual_seed(0)
pos_emb = LearnedPositionalEmbedding(context_length=8, embed_dim=C)
print("table", tuple(pos_emb.embedding.weight.shape))
x_pos = pos_emb(x)  # (1, T, C) + rows 0 .. T-1
print("x + positions", tuple(x_pos.shape))
print("with positions, shuffled outputs == outputs shuffled:",
      torch.allclose(mha(pos_emb(x[:, perm])), mha(x_pos)[:, perm], atol=1e-6))
try:
    pos_emb(torch.randn(1, 9, C))  # 9 positions, 8 rows
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# The two "the"s now get different inputs, and the equivariance is gone. A table longer than the training
# sequences would not help: its extra rows never receive a gradient and stay random (section 7 measures
# the effect).
#
# ## 3. Sinusoidal encodings
#
# The original Transformer (Vaswani et al., 2017) uses a fixed table with a value for *every* position.
# Channel pair i of position t holds a sine and a cosine of the angle t * omega_i, with frequencies
# falling geometrically from 1 to almost 1/10000:
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
# positions (T, 1) and the frequencies (1, C/2). In the picture the first channels oscillate fast (1 radian
# per position) and the last ones barely move, like a clock with hands of many speeds.

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
# `PE[t] . PE[s] = sum_i cos((t - s) omega_i)`, a function of t - s alone: largest at distance 0
# (C/2 = 16), falling with ripples as positions move apart:

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
# function of PE[t]". For one pair, with a = t omega and b = k omega, the addition formulas give
#
# $$\begin{pmatrix}\sin(a+b)\\ \cos(a+b)\end{pmatrix} =
#   \begin{pmatrix}\cos b & \sin b\\ -\sin b & \cos b\end{pmatrix}
#   \begin{pmatrix}\sin a\\ \cos a\end{pmatrix}.$$
#
# The 2x2 matrix is a rotation by k omega, and it does not involve t. One block per pair on the diagonal
# makes a (C, C) matrix `M_k` with `PE[t + k] = M_k PE[t]` for *every* t:

# %%
k_shift = 3
M = sinusoidal_shift_matrix(k_shift, 32).float()  # (C, C), block diagonal
print("M_3", tuple(M.shape), "| first block (omega = 1):\n", M[:2, :2])
print("PE[t + 3] == M_3 @ PE[t] for t = 0 .. 60:", torch.allclose(pe[:-k_shift] @ M.T, pe[k_shift:], atol=1e-5))
print("M_3 is a rotation (M M^T = I):", torch.allclose(M @ M.T, torch.eye(32), atol=1e-6))

# %% [markdown]
# So "three positions back" is one linear map everywhere, which a projection could learn to use; but the
# table is *added* to the token embedding, and the projections see the sum. RoPE keeps the map clean.
#
# ## 4. Rotary position embeddings (RoPE)
#
# RoPE (Su et al., 2021) rotates the queries and keys themselves, *after* the projections. Cut the D
# channels into D/2 pairs, each a point in the plane, and rotate pair p of the vector at position t by
# the angle t * theta_p, theta_p = 10000^(-2p/D). Rotating q by a and k by b turns their dot product into
# q^T R(a)^T R(b) k = q^T R(b - a) k: with a query at position i and a key at j (a = i theta_p,
# b = j theta_p), the score depends on the positions only through **i - j**. One pair by hand:

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
# The same distance, the same score, wherever the pair sits; and rotations keep norms.
#
# `rotate` turns **counter-clockwise**, (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos), the convention of
# the paper and of `course_utils`. Clockwise serves as well *if q and k turn the same way*: the scores
# still depend on i - j alone, just other numbers (those of counter-clockwise with the second channel of
# every pair negated, a sign W_q and W_k absorb). Turning q one way and k the other makes the score depend
# on i + j.

# %%
for i, j in [(5, 2), (12, 9)]:
    both_cw = rotate(q2, -i * theta) @ rotate(k2, -j * theta)
    mixed = rotate(q2, i * theta) @ rotate(k2, -j * theta)
    print(f"i = {i:2d}, j = {j}: both clockwise {both_cw.item():+.4f} | "
          f"q counter-clockwise, k clockwise {mixed.item():+.4f}")

# %% [markdown]
# Both clockwise, distance 3 scores +1.1495 at either place: the counter-clockwise score of distance -3
# above. The direction is a convention, like the pairing: a trained model works only with its own.
#
# Now a whole (B, H, T, D) tensor, pair i = channels (2i, 2i + 1) (the RoFormer paper's *interleaved*
# pairing). Moving every query and key 100 positions along changes no score:

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

rope_i = lambda t, p: apply_rope(t, p, pairing="interleaved")  # the paper's pairing, as above
scores = rope_i(q, pos) @ rope_i(k, pos).transpose(-2, -1)  # (B, H, T, T)
scores_shifted = rope_i(q, pos + 100) @ rope_i(k, pos + 100).transpose(-2, -1)
print("scores at positions 0..5 == scores at 100..105, to 1e-5 (float32 rounding of the angles):",
      (scores - scores_shifted).abs().max().item() < 1e-5)

# %% [markdown]
# ### Two pairings, one rotation
#
# RoFormer (and Meta's original Llama code) pairs neighbours, (0, 1), (2, 3), ...; GPT-NeoX and the
# Hugging Face Llama code pair channel i with i + D/2 (`apply_rope`'s `pairing="interleaved"` and
# `"half"`). They differ on the same input, yet are one rotation with the channels in another order:
# reordered as (0, 2, 4, ..., 1, 3, 5, ...), interleaved pair i lands on half pair i:

# %%
inter = apply_rope(q, pos, pairing="interleaved")
half = apply_rope(q, pos, pairing="half")
print("same result:", torch.allclose(inter, half))
perm_D = rope_pairing_permutation(D)
print("permutation:", perm_D.tolist())
print("half(x[perm]) == interleaved(x)[perm]:",
      torch.allclose(apply_rope(q[..., perm_D], pos, pairing="half"), inter[..., perm_D], atol=1e-6))

# %% [markdown]
# Checkpoint converters fold this permutation into the rows of W_q and W_k. Weights trained with one
# pairing, loaded into code using the other, run without error and produce garbage.
#
# **This course rotates with `"half"`** wherever a model rotates: `apply_rope`'s default, and what
# notebook 07's `GroupedQueryAttention(rope=True)`, notebook 10's GPT layer, uses.
# It takes two slices instead of strided views, and GPT-NeoX and Hugging Face Llama checkpoints load
# without reordering rows.
#
# ### Absolute positions with a cache
#
# With a KV cache (notebook 09), earlier keys are stored already rotated, and each new token must be
# rotated at its *absolute* position t0, t0 + 1, ..., not at 0: the `positions` argument. Rotating the
# last 3 rows at positions 5, 6, 7 equals rotating all 8 and keeping the last 3:

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
# The angle t * theta_i reaches thousands in a long context, and bfloat16 keeps 8 significant bits: between
# 1024 and 2048 its steps are 8 apart (float32's are 1/8192). An angle made in bfloat16 can be off by whole
# radians: another rotation, not a small error. At position 2000, D = 64:

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
# So `apply_rope` computes the angles in float64. Notebook 10's GPT keeps the cos and sin of every
# position ready in a `RotaryTable`: the angles in float64, once, and the rotation in x's dtype but
# **at least float32**, so a bfloat16 model turns each pair by the right angle and only the result is
# rounded to bfloat16. Rows at positions 2000 to 2003, rotated by the table and with angles made in
# bfloat16, against float64:

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
# `GroupedQueryAttention(C, H, rope=True)` (notebook 07; with one key/value head per head it is
# `MultiHeadAttention`) adds one step and no parameters: after `split_heads`, rotate the queries and the keys
# (not the values). Written out and checked against the module; the permutation test of section 1 now fails.

# %%
torch.manual_seed(0)
rope_mha = GroupedQueryAttention(C, H, rope=True)  # num_kv_heads defaults to H
x5 = embed(words)  # (1, T, C)
T5 = x5.shape[1]
q5, k5, v5 = (split_heads(t, H) for t in rope_mha.qkv_proj(x5).chunk(3, dim=-1))  # (1, H, T, D) each
q5, k5 = apply_rope(q5, pairing="half"), apply_rope(k5, pairing="half")  # the one new step
out5, weights5 = scaled_dot_product_attention(q5, k5, v5, causal_mask(T5))
out5 = rope_mha.out_proj(out5.transpose(1, 2).reshape(1, T5, C))
torch.testing.assert_close(rope_mha(x5, causal_mask(T5)), out5)
print("matches GroupedQueryAttention(rope=True) | parameters:",
      {n: tuple(p.shape) for n, p in rope_mha.named_parameters()})
print("RoPE layer: shuffled outputs == outputs shuffled:",
      torch.allclose(rope_mha(x[:, perm]), rope_mha(x)[:, perm], atol=1e-6))

# %% [markdown]
# ## 5. ALiBi: a distance penalty on the scores
#
# ALiBi (Press et al., ICLR 2022) is simpler still: no embedding, no rotation, just a penalty proportional to
# the distance between query and key,
#
# $$\text{scores}_{h,i,j} = \frac{q_i \cdot k_j}{\sqrt{D}} - m_h\,(i - j),$$
#
# with a fixed slope m_h per head, 2^(-8/H), 2^(-16/H), ..., 2^(-8): for 8 heads, 1/2, 1/4, ..., 1/256.
# Steep heads look at the last few tokens; gentle heads look far back.

# %%
slopes = alibi_slopes(8)
print("slopes for H = 8:", [f"1/{round(1 / s)}" for s in slopes.tolist()])
print("slopes for H = 6:", [f"1/{round(1 / s)}" for s in alibi_slopes(6).tolist()])

# %% [markdown]
# For H not a power of two (6 above), the reference code takes the slopes of the nearest smaller power (4: 1/4,
# 1/16, 1/64, 1/256) and adds every other slope of the next (8: 1/2, 1/8, ...). `alibi_bias(H, T)` is the
# (H, T, T) table -m_h |i - j| (the causal mask removes later keys anyway):

# %%
bias = alibi_bias(4, 8)  # (H, T, T)
print("bias", tuple(bias.shape), "| head 0 (slope 1/4), query 5:", bias[0, 5])
fig, axes = plt.subplots(1, 4, figsize=(10, 2.6), layout="constrained")
for h, ax in enumerate(axes):
    shown = bias[h].masked_fill(~causal_mask(8), float("nan"))  # blank out the masked future
    image = ax.imshow(shown, cmap="viridis", vmin=float(bias.min()), vmax=0)  # one scale for the four heads
    ax.set_title(f"head {h}: m = 1/{round(1 / alibi_slopes(4)[h].item())}")
    ax.set_xlabel("key j")
axes[0].set_ylabel("query i")
fig.colorbar(image, ax=axes.tolist(), label="bias", shrink=0.9)
fig.suptitle("ALiBi bias -m (i - j), causal part only")
plt.show()

# %% [markdown]
# The bias depends only on i - j, so ALiBi is relative by construction, and stops at no length. It enters
# `scaled_dot_product_attention` as `bias`, added to the scaled scores before the mask and the softmax.
# With q and k zero, the last query's weights decay by a factor e^(-m) per step of distance:

# %%
T8 = 8
zeros = torch.zeros(1, 4, T8, 2)
_, w_alibi = scaled_dot_product_attention(zeros, zeros, torch.randn(1, 4, T8, 2, generator=g),
                                          causal_mask(T8), bias=alibi_bias(4, T8))
for h in range(4):
    print(f"head {h}: weights of query 7 over keys 0..7:", " ".join(f"{w:.2f}" for w in w_alibi[0, h, -1].tolist()))

# %% [markdown]
# The reference code adds `+m * j` (the *key* position only) instead of `-m (i - j)`: they differ by
# `m * i`, constant along a row, which a softmax ignores. Same weights; and `ALiBiMultiHeadAttention` is
# `MultiHeadAttention` with that one argument added:

# %%
i_idx, j_idx = torch.arange(T8)[:, None].float(), torch.arange(T8)[None, :].float()
m4 = alibi_slopes(4)[:, None, None]  # (H, 1, 1)
_, w_paper = scaled_dot_product_attention(zeros, zeros, torch.ones(1, 4, T8, 2), causal_mask(T8),
                                          bias=(m4 * j_idx).expand(4, T8, T8))
print("+m j and -m (i - j) give the same weights:", torch.allclose(w_paper, w_alibi, atol=1e-6))

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
# One query vector q and one key vector k, *the same* at every position: each panel shows the score of
# query position i against key position j, all on one colour scale. With no positions every score is
# equal. Learned embeddings (random, untrained) add a random row to q and k: noise, the largest effect.
# The sinusoidal panel adds PE[i] to q and PE[j] to k (a real model adds the table to x, before W_q and
# W_k): (q + PE[i]) . (k + PE[j]) has a term PE[i] . PE[j] that depends only on i - j, and two cross terms,
# q . PE[j] and PE[i] . k, that depend on where each token sits. RoPE is constant along every diagonal,
# and ALiBi (slope 1/2) a plain ramp away from the diagonal.

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
# In numbers: every diagonal of RoPE's table is constant, and of the sinusoidal one without the cross terms.

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
# Try it (needs a running kernel): pick a scheme, a length and the channel pairs of q and k to keep. With
# RoPE and only pair 0 (1 radian per position) the score oscillates quickly along each row; with only the
# last pair it barely changes over dozens of positions. The right plot shows query i's row.

# %%
# NBVAL_IGNORE_OUTPUT
from ipywidgets import Dropdown, IntSlider, SelectMultiple, interact


def _explore(scheme, T, pairs, query):
    chosen = list(pairs) if pairs else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.5, 3))
    s, image = plot_scores(scheme, ax1, T=T, pairs=chosen)
    ax1.set_ylabel("query position i")
    fig.colorbar(image, ax=ax1, label="score")
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
# The task ("last letter"): a sequence mixes *letters* (8 token types) and *fillers* (8 others); at every
# position the model must name the most recent letter at or before it. The rule is relative (look back
# to the nearest letter), the same at position 5 as at 500. Without positions, one causal layer sees the
# earlier tokens as a set (section 1): *which* letters came before, not which came last.
#
# The same tiny model (one pre-norm block, 4 heads, C = 32) is trained once per scheme on sequences of
# length 16, same data, same steps, then tested on lengths 8 to 128. Accuracy counts only the fillers,
# where the model must look back. Model and loop: `course_utils/length_generalisation.py`; its learned
# table has 128 rows, of which only the first 16 are trained. (A *pre-norm block*, built in notebook 10:
# `x + attention(LayerNorm(x))`, then `x + MLP(LayerNorm(x))`; LayerNorm rescales each token's vector to
# mean 0, variance 1.)

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
# Training: a few seconds per scheme on one CPU thread.

# %%
# NBVAL_IGNORE_OUTPUT
import time

from tqdm.auto import tqdm

models, curves, seconds = {}, {}, {}
for positions in POSITIONS:
    start = time.perf_counter()
    bar = tqdm(range(config.max_steps), desc=f"{positions:>10s}", leave=False)
    models[positions], curves[positions] = train_model(config, positions, progress=bar)
    seconds[positions] = time.perf_counter() - start
print("seconds per scheme:", {s: round(t, 1) for s, t in seconds.items()})

# %% [markdown]
# At the training length 16, on fresh sequences:

# %%
print(f"{'scheme':>10s}  {'val loss':>8s}  {'val acc':>7s}")
for positions in POSITIONS:
    loss, acc = evaluate(models[positions], config.train_length)
    print(f"{positions:>10s}  {loss:8.2f}  {acc:7.2f}")

# %% [markdown]
# Every scheme with positions learns the task at length 16; without positions the model is far behind.
# Now longer sequences:

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
ax.axhline(1 / config.num_letters, color="grey", ls=":", lw=1)  # a uniform guess among the letters
ax.text(config.eval_lengths[-1], 1 / config.num_letters + 0.02, f"chance (1/{config.num_letters})",
        color="grey", ha="right")
ax.set_xscale("log", base=2)
ax.set_xlabel("test sequence length")
ax.set_ylabel("accuracy at fillers")
ax.set_ylim(0, 1.02)
ax.legend(fontsize=8)
ax.set_title("same model, same budget, different positions")
plt.show()

# %% [markdown]
# What the numbers say, for one seed of one tiny model on one small task (other seeds
# were not run here):
#
# - **none** cannot single out the most recent letter even at length 16, and gets worse as more letters
#   compete. (`FULL_RUN`'s two layers could recover order through the causal mask, section 1.)
# - **learned** falls beyond length 16: those positions have rows nobody trained.
# - **sinusoidal** has a vector for every position, but vectors the model never saw; it falls as fast.
# - **RoPE** holds to twice the trained length; further out come rotation angles the model never saw, and
#   it falls too, to about 0.4 at eight times the length (why long-context models rescale RoPE's
#   frequencies; see further reading).
# - **ALiBi**, a little below the others at 16, stays almost flat: its preference for nearby keys is what
#   this task needs, at any length.
#
# On a task that must look far back, ALiBi's recency penalty is a handicap, and in large language models
# RoPE (with frequency rescaling) won. The mechanism is general: an absolute scheme must *see* a position
# to use it; RoPE reuses what it learned about distances only as far as the angles it saw.
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
# Each exercise is a function, checked in its cell, where a wrong answer's likely mistake is named. Use plain
# PyTorch, not the `course_utils.positional` function the exercise is about.
#
# ### Exercise 06.1: the sinusoidal table (8 min, core)
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
# ### Exercise 06.2: RoPE (8 min, core)
#
# Write `my_apply_rope(x, positions)` for `x` of shape (B, H, T, D) with D even and `positions` a 1-D
# integer tensor of length T (the absolute position of each row, in any order, with gaps). Use the interleaved
# pairing, channels (2i, 2i + 1), rotate pair i of row r counter-clockwise by positions[r] * theta_i with
# theta_i = 10000^(-2i/D), and return a tensor of the same shape and dtype. Compute the angles in float64: the
# check has positions up to 10^6, where float32 angles miss its tolerance.

# %%
# Inputs: `x` may be float64 (the result is then float64, to float64's precision).
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
# ### Exercise 06.3: the causal ALiBi bias (8 min, core)
#
# Write `my_alibi_bias(H, T)` for H a power of two, returning the (H, T, T) float32 tensor that a causal
# ALiBi model adds to its scaled scores: -m_h (i - j) where key j is at or before query i, and `-inf`
# where j > i (the causal mask in additive form: exactly `-inf`, not a large negative number). The slopes
# are m_h = 2^(-8 (h + 1) / H), h = 0 ... H - 1.

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
# - Without positions, attention is permutation-equivariant. A causal mask leaks position (an even average
#   depends on how many keys are visible), which deeper causal models can learn to use.
# - **Learned**: a trained row per position; none past the trained context.
# - **Sinusoidal**: (sin, cos) pairs at frequencies 10000^(-2i/C); a shift by k is a rotation M_k
#   that does not depend on t.
# - **RoPE** rotates pair p of q and k at position t by t * theta_p, so a score depends on the positions
#   i and j only through i - j. q and k must turn alike; the two pairings differ by a channel permutation
#   (the course uses half). Rotate cached keys at their absolute positions, with angles in float32 at least.
# - **ALiBi** adds -m_h (i - j) to the scores: no parameters, no length limit, a preference for recent
#   tokens.
# - In the experiment (one seed, one small task, trained at length 16), learned and sinusoidal positions
#   fell beyond 16; RoPE held to 32, then fell to about 0.4 at 128; ALiBi, whose recency bias suits this
#   task, stayed near 0.9.
#
# Next: cheaper attention (notebook 07), then the KV cache (notebook 09), where
# `apply_rope(..., positions=...)` is needed.
#
# ## Further reading
#
# - Vaswani et al., "Attention Is All You Need" (2017), section 3.5: https://arxiv.org/abs/1706.03762
# - Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021):
#   https://arxiv.org/abs/2104.09864, and the EleutherAI blog post "Rotary Embeddings: A Relative
#   Revolution": https://blog.eleuther.ai/rotary-embeddings/
# - Press, Smith, Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
#   Extrapolation" (ICLR 2022; arXiv 2021): https://arxiv.org/abs/2108.12409 (reference code:
#   https://github.com/ofirpress/attention_with_linear_biases)
# - Haviv, Ram, Press, Izsak, Levy, "Transformer Language Models without Positional Encodings Still Learn
#   Positional Information" (Findings of EMNLP 2022): https://arxiv.org/abs/2203.16634
# - Kazemnejad et al., "The Impact of Positional Encoding on Length Generalization in Transformers" (2023):
#   https://arxiv.org/abs/2305.19466
# - Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models" (2023):
#   https://arxiv.org/abs/2309.00071, on rescaling RoPE's frequencies for longer contexts
