# %% [markdown]
# # 11 Inside the trained GPT: attention maps and what they do not show
#
# The GPT of notebook 10, opened up: what does each head attend to, and how far can a picture of attention
# be trusted? Two appendices measure choices notebook 10 made: pre-norm blocks, and how training's cost is
# counted. (Induction heads, which this notebook once held, have their own notebook now: 12.)
#
# **What you will learn**
#
# - per-head attention heatmaps, an explorer, and bertviz's head and model views, working offline;
# - what they do not show: weights are not explanations; above layer 0 a column mixes earlier characters
#   (attention rollout traces it back); a weight multiplies a value; a bright first column may be a sink;
# - appendix: pre-norm against post-norm, measured, and the FLOP count behind the model FLOPs utilisation.
#
# **Prerequisites:** notebook 10. Its run is optional: this notebook opens the model the course ships.
#
# **Time:** about 45 minutes. **Runs on:** a CPU, in well under a minute (it trains nothing).
#
# **Shapes**: `B` batch, `T` context length, `C` embed_dim, `H` num_heads, `D` head_dim, `V` vocab_size,
# `L` num_layers.

# %%
# NBVAL_IGNORE_OUTPUT
import dataclasses
import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from torch.utils.flop_counter import FlopCounterMode

import course_utils
from course_utils.attention_view import head_view, model_view
from course_utils.data import CharTokenizer, get_batch, load_corpus, split_data
from course_utils.environment import best_device, setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.gpt import GPT, GPTConfig
from course_utils.inspect_gpt import (
    attention_and_values,
    attention_rollout,
    first_key_share,
    layer_grad_norms,
    rank_correlation,
    selected_key_ratios,
    top_key_disagreement,
    uniform_first_key_share,
    weighted_value_norms,
    xavier_init_,
)
from course_utils.plotting import char_labels, plot_attention_maps, plot_weights
from course_utils.runs import RUN_SIZES, choose_size, run_folder
from course_utils.train import load_model
from course_utils.widgets import gpt_attention_explorer

device = setup_notebook(seed=0)
ROOT = Path(course_utils.__file__).resolve().parent.parent
print(f"torch {torch.__version__}, device: {device}")

# %% [markdown]
# ## 1. The trained model and its text
#
# Notebook 10's corpus and the model the course ships (the `cpu` size, trained by the course's command).
# Every figure stated here is measured on that model. Set `USE_MY_RUN = True` to draw the pictures of
# your own run of notebook 10 instead.

# %%
# NBVAL_IGNORE_OUTPUT
text = load_corpus()

# %%
tokenizer = CharTokenizer.from_text(text)
V = tokenizer.vocab_size
train_ids, val_ids = split_data(tokenizer.encode(text))  # (N,) -> the first 90% and the last 10%
shipped, shipped_tokenizer, _ = load_model(ROOT / "checkpoints" / "shakespeare_cpu.pt")
assert shipped_tokenizer.chars == tokenizer.chars, "the shipped model reads the same characters"

USE_MY_RUN = False  # True: your run of notebook 10 (runs/10_<size>/), where there is one
my_checkpoint = run_folder(choose_size(best_device())) / "checkpoint.pt"
if USE_MY_RUN and my_checkpoint.exists():
    inside, _, _ = load_model(my_checkpoint, device=device)
    inside_name = f"your run ({my_checkpoint.parent.name})"
else:
    inside, inside_name = shipped, "the shipped cpu-size model"
c = inside.config
print(f"{inside_name}: {c.num_layers} layers of {c.num_heads} heads, C = {c.embed_dim}, T = {c.context_length}")

# %% [markdown]
# ## 2. Attention maps
#
# `GPT.attention_maps(idx)` runs the model with the course's attention and returns every layer's
# weights, `(1, H, T, T)` each. Row = the character that asks (query), column = the characters it reads
# (keys); the upper triangle is empty because the model is causal. Some heads look at the previous
# character or two; others jump back to the last space or newline, or to the start of the line.

# %%
text_in = "ROMEO:\nBut soft, what light through yonder"[-inside.config.context_length:]
labels = char_labels(text_in)
maps = inside.attention_maps(tokenizer.encode(text_in)[None].to(next(inside.parameters()).device))
maps = [m.cpu() for m in maps]
print(f"{inside_name}: {len(maps)} layers of {tuple(maps[0].shape)}")
for m in maps:
    torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:-1]))  # every row is a distribution
    assert (m.triu(1) == 0).all()  # and nothing above the diagonal: no peeking at the future
fig = plot_attention_maps(maps, labels)
display(fig)

# %% [markdown]
# Explore one head at a time: choose the layer and head, and type your own prompt (press Enter to apply).

# %%
# NBVAL_IGNORE_OUTPUT
gpt_attention_explorer(inside, tokenizer, text_in)

# %% [markdown]
# ## 3. bertviz: the head view and the model view
#
# [bertviz](https://github.com/jessevig/bertviz) draws attention as lines from each character (left) to
# the characters it reads (right), one colour per head; hover over a character to see only its lines,
# double-click a colour to show one head. `course_utils.attention_view` inlines the JavaScript bertviz
# would fetch, so the views work without wifi.

# %%
# NBVAL_IGNORE_OUTPUT
head_view(maps, labels, layer=len(maps) - 1)

# %% [markdown]
# The model view: every head of every layer at once, one thumbnail each (click one to enlarge it).

# %%
# NBVAL_IGNORE_OUTPUT
model_view(maps, labels)

# %% [markdown]
# ## 4. What attention maps do and do not show
#
# These pictures are weights, and weights are easy to over-read:
#
# - **They are not an explanation.** Jain and Wallace (2019) found that quite different attention
#   distributions often leave a prediction unchanged; Wiegreffe and Pinter (2019) replied that it depends
#   on what one asks of an explanation. A heatmap shows where a head reads, not why the model predicts
#   what it does.
# - **Above layer 0, a column is not its character.** Layer 0's keys are the characters themselves (and
#   their positions). A later layer's key `j` is the residual stream at position `j`, into which earlier
#   layers have already mixed the positions before it, so labelling that column with character `j`
#   over-reads the map. Abnar and Zuidema (2020) trace the mixing back to the input: **attention
#   rollout** averages each layer's map over its heads, adds the identity for the residual connection
#   ($A = (I + W) / 2$, rows still summing to 1) and multiplies the layers, $A_{L-1} \cdots A_1 A_0$; **attention
#   flow** computes a maximum flow through the layers instead, at a higher cost. Both are estimates that
#   leave out the MLPs and the values' sizes.
# - **A weight multiplies a vector.** Query $i$'s output is $\sum_j w_{ij} f(x_j)$, $f(x_j)$ being key $j$'s
#   value passed through the head's share of the output projection. A large weight on a short vector can
#   move the output less than a small one on a long vector: Kobayashi et al. (2020) look at
#   $\lVert w_{ij} f(x_j) \rVert$ instead (exercise 11.1).
# - **Attention sinks.** Xiao et al. (2023) found that in large language models many heads put much of
#   their weight on the first token, whatever it is: softmax must put the weight somewhere, and the
#   first token becomes a place to park it.
#
# The last layer's map, averaged over its heads, beside its rollout (`course_utils.inspect_gpt.attention_rollout`)
# on the same line, and how far back each reaches on average:

# %%
rolled = attention_rollout(maps)  # L x (1, T, T): layer l rolled out through layers 0 .. l
last_raw, last_rolled = maps[-1][0].mean(dim=0), rolled[-1][0]  # (H, T, T) -> (T, T), and (T, T)
positions = torch.arange(len(text_in))
back = (positions[:, None] - positions[None, :]).clamp(min=0).float()  # (T, T): i - j, how far key j lies back
print(f"{inside_name}, last layer: its own map reads on average {(last_raw * back).sum(-1).mean():.1f} "
      f"characters back; rolled out, {(last_rolled * back).sum(-1).mean():.1f}")
fig, axes = plt.subplots(1, 2, figsize=(12, 6))
plot_weights(last_raw, labels, labels, ax=axes[0], title=f"layer {len(maps) - 1}, mean of the heads: weights")
plot_weights(last_rolled, labels, labels, ax=axes[1], title=f"rollout through layers 0-{len(maps) - 1}")
for ax in axes:
    ax.tick_params(labelsize=6)  # one label per character: small enough not to overlap
fig.tight_layout()
plt.show()

# %% [markdown]
# On the shipped model the rollout reaches about twice as far back as the last layer's own map (4.6
# characters against 2.4): what that layer reads at a column already blends the characters before it.

# %% [markdown]
# ## 5. Sinks and value norms, measured
#
# Measured on the shipped model, over 64 windows of the validation text (`course_utils.inspect_gpt`).
# First, the share of each head's weight on position 0, from queries 1 to `T - 1`, against what a head
# that spreads its weight evenly would give it:

# %%
T_in = shipped.config.context_length
starts = torch.linspace(0, len(val_ids) - T_in - 1, 64).long()
windows = val_ids[starts[:, None] + torch.arange(T_in)]  # (64, T)
pairs = attention_and_values(shipped, windows)  # per layer: weights (64, H, T, T), values f(x_j) (64, H, T, C)
even = uniform_first_key_share(T_in)
print(f"an even head: {even:.2f}")
for layer, (w, _) in enumerate(pairs):
    share = first_key_share(w)  # (H,)
    print(f"layer {layer}, heads 0-{len(share) - 1}:", "  ".join(f"{x:.2f}" for x in share.tolist()),
          " all below the even share:", bool((share < even).all()))

# %% [markdown]
# No sinks here: every head gives the first position *less* than an even spread would. This model is
# small, and its windows start anywhere in the text; Xiao et al. saw sinks in pretrained models of
# billions of parameters. Measure before you read a bright first column either way.
#
# Second, weights against `||w_ij f(x_j)||`: how alike they rank a row's keys (Spearman's rank
# correlation, 1 = the same order), how often the largest weight is not the key that moves the output
# most, and what happens to the space, the most frequent key:

# %%
space = windows == tokenizer.encode(" ")[0]  # (64, T)
for layer, (w, f) in enumerate(pairs):
    norms = weighted_value_norms(w, f)  # (64, H, T, T)
    rho, differs = rank_correlation(w, norms), top_key_disagreement(w, norms)  # (H,) each
    drawn, length = selected_key_ratios(w, f, space)  # (H,) each, relative to the other characters
    print(f"layer {layer}: rank correlation {rho.mean():.2f}; top key differs in {differs.mean():.0%} of rows")
    lopsided = [h for h in range(len(drawn)) if drawn[h] > 1.0 and length[h] < 0.75]
    for h in lopsided:
        print(f"  head {h}: a space draws {drawn[h]:.1f}x the weight of another character, "
              f"but its value is {length[h]:.1f}x as long")

# %% [markdown]
# The two pictures mostly agree, but not everywhere: in about a seventh of the rows the brightest key is not
# the one that moves the output most. Spaces show why. Several heads give a space more weight than other
# characters while its value is much shorter, so their maps overstate what they take from spaces. One
# such head on the line from above, its weights beside `||w_ij f(x_j)||` rescaled to sum to 1 per row
# (look at the spaces' columns):

# %%
layer_k, head_k = 1, 2
w_one, f_one = attention_and_values(shipped, tokenizer.encode(text_in)[None])[layer_k]  # (1, H, T, T), (1, H, T, C)
moved = weighted_value_norms(w_one, f_one)[0, head_k]  # (T, T)
moved = moved / moved.sum(-1, keepdim=True)  # each row sums to 1, as the weights do
on_space = torch.tensor([c == " " for c in text_in])  # (T,)
print(f"the spaces get {w_one[0, head_k][:, on_space].sum(-1).mean():.0%} of this head's weight, "
      f"but {moved[:, on_space].sum(-1).mean():.0%} of ||w f(x)||")
fig, axes = plt.subplots(1, 2, figsize=(12, 6))
plot_weights(w_one[0, head_k], labels, labels, ax=axes[0], title=f"layer {layer_k}, head {head_k}: weights")
plot_weights(moved, labels, labels, ax=axes[1],
             title="||w_ij f(x_j)||, rescaled to sum to 1 per row")
for ax in axes:
    ax.tick_params(labelsize=6)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 6. Check against course_utils
#
# Weighted norms and a two-layer rollout by hand, against `course_utils.inspect_gpt`:

# %%
w0, f0 = pairs[0]  # layer 0 of the 64 windows: weights (64, H, T, T), values (64, H, T, C)
norms_by_hand = w0 * f0.norm(dim=-1)[:, :, None, :]  # (64, H, T, T) * (64, H, 1, T)
torch.testing.assert_close(norms_by_hand, weighted_value_norms(w0, f0))
eye = torch.eye(len(text_in))  # (T, T)
a0, a1 = ((eye + m.mean(dim=1)) / 2 for m in maps[:2])  # (1, H, T, T) -> (1, T, T) each
torch.testing.assert_close(a1 @ a0, attention_rollout(maps)[1])
print("matches course_utils")

# %% [markdown]
# ## 7. Exercises
#
# (Exercise 11.4 is in Appendix A. Exercises 11.2 and 11.3 moved to notebook 12 with the induction heads, as
# 12.1 and 12.2; 11.5 is new.)

# %% [markdown]
# ### Exercise 11.1: value-weighted attention norms (8 min, core)
#
# Write `weighted_norms(weights, v)`: `weights` is `(B, H, T, S)` and `v` is `(B, H, S, D)`. Return the `(B, H, T, S)` tensor whose entry `[b, h, i, j]` is the length of the term
# key `j` adds to query `i`'s output, `||weights[b, h, i, j] * v[b, h, j]||` (section 4), without a
# Python loop. Here `v` plays section 4's `f(x_j)`.

# %%
def weighted_norms(weights, v):
    ### BEGIN SOLUTION
    return weights * v.norm(dim=-1).unsqueeze(-2)  # (B, H, T, S) * (B, H, 1, S)
    ### END SOLUTION


check("11.1", weighted_norms)

# %% [markdown]
# ### Exercise 11.5: attention rollout (8 min, core)
#
# Write `rollout(weights)`: `weights` is `(L, B, H, T, T)`, layer `l`'s maps at `weights[l]`, `T >= 2`. Average
# each layer's heads, add the residual as in section 4, $A_l = (I + W_l) / 2$, and return the product
# $A_{L-1} \cdots A_1 A_0$, `(B, T, T)`.

# %%
# Inputs: `weights` may be float64 (the result is then float64, to float64's precision).
def rollout(weights):
    ### BEGIN SOLUTION
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)  # (T, T)
    out = None
    for w in weights:  # (B, H, T, T), layer 0 first
        a = (eye + w.mean(dim=1)) / 2  # (B, T, T)
        out = a if out is None else a @ out  # the new layer on the left
    return out
    ### END SOLUTION


check("11.5", rollout)

# %% [markdown]
# ## Appendix A. Pre-norm or post-norm? Measured
#
# The original Transformer (Vaswani et al. 2017) puts the LayerNorm *after* the residual add,
# **post-norm**: $x \leftarrow \operatorname{LN}(x + \operatorname{sublayer}(x))$. GPT-2 moved it *before* the
# sublayer, **pre-norm**: $x \leftarrow x + \operatorname{sublayer}(\operatorname{LN}(x))$, with one more LayerNorm
# before the output layer. In pre-norm the residual
# stream runs from the embeddings to the output as a plain sum; in post-norm every path goes through
# every later LayerNorm. `GPTConfig(norm_position="post")` builds the post-norm model (exercise 11.4
# writes its block), with no final LayerNorm: its last block ends in one.
#
# Post-norm is known to need a learning-rate **warm-up**. Xiong et al. (2020) show, at Xavier
# initialisation (`xavier_init_`), that the gradient reaching the last layer shrinks like $1 / \sqrt{L}$ in
# pre-norm and does not in post-norm. Under plain SGD large gradients make large steps. Under Adam (and
# AdamW, which trains this GPT) they do not: each weight's step is its gradient divided by a running
# estimate of the gradient's own size, about the learning rate whatever the scale. Liu et al. (2020) find
# the trouble elsewhere: a post-norm block leans heavily on its own residual branch, so a step of a given
# size changes the model's *output* far more than in pre-norm, and the changes add up through the layers.
# A warm-up keeps the first steps, and those changes, small. The gradients (the last block's MLP weight,
# at 2 and 16 layers, one batch):

# %%
xg, yg = get_batch(train_ids, batch_size=8, context_length=32, generator=torch.Generator().manual_seed(0))
print(f"{'last block, gradient norm':<30}{'2 layers':>9}{'16 layers':>10}{'ratio':>7}")
for init in ("course", "xavier"):
    for norm in ("pre", "post"):
        last = []
        for L in (2, 16):
            torch.manual_seed(0)
            deep = GPT(GPTConfig(vocab_size=V, context_length=32, embed_dim=32, num_heads=4, num_layers=L,
                                 norm_position=norm))
            if init == "xavier":
                xavier_init_(deep)
            last.append(layer_grad_norms(deep, xg, yg)[-1].item())  # (L,) -> the last block's
        print(f"{norm + '-norm, ' + init + ' init':<30}{last[0]:>9.2g}{last[1]:>10.2g}{last[1] / last[0]:>7.2f}")

# %% [markdown]
# With Xavier initialisation, 16 layers shrink pre-norm's last-layer gradient to about a quarter (the ratio
# above; with another seed for the weights and the batch, about 0.4) and do not shrink post-norm's, which ends several times larger. Xiong et al.'s Theorem 1 bounds the
# pre-norm gradient by a quantity that scales like $1 / \sqrt{L}$: from 2 to 16 layers that scaling is
# $1 / \sqrt{8} = 0.35$. It is the bound's scaling, not a prediction of the measured ratio, which may sit below it. With
# the course's own initialisation neither shrinks: GPT-2 scales each residual branch's output projection
# by $1 / \sqrt{2L}$. (There, post-norm's gradients are more than ten times smaller than pre-norm's: the
# embeddings start tiny, std 0.02, and pre-norm's LayerNorms, which divide by the size of the stream,
# scale its gradients up; with embeddings of std 1 the two are within a factor of 2. AdamW divides that
# scale out.)
#
# **Training both.** `benchmarks/norm_position.py` trains them with notebook 10's loop
# (`course_utils.train.train`): 6 layers, 48 wide, context 32, 150 steps of 16 windows, a peak learning
# rate of 1e-2 (high on purpose), no warm-up or a linear one over the first 75 steps, three seeds each.
# Its saved curves (smoothed over 10 steps; one line per seed):

# %%
bench = json.loads((ROOT / "benchmarks" / "results" / "norm_position_cpu.json").read_text())
meta, runs = bench["meta"], bench["runs"]
print(f"{meta['command']}\n{meta['date']}, {meta['device']}, torch {meta['torch']}")
print(f"\nvalidation loss after {meta['steps']} steps, seeds {meta['seeds']} "
      f"(the unigram model: {meta['unigram_val_loss']:.2f})")
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, warmup in zip(axes, meta["warmup_steps"]):
    for norm, colour in (("pre", "tab:blue"), ("post", "tab:orange")):
        mine = [r for r in runs if r["norm_position"] == norm and r["warmup_steps"] == warmup]
        print(f"  {norm:>4}-norm, warm-up {warmup:>2} steps:", "  ".join(f"{r['val_loss']:.2f}" for r in mine))
        for i, r in enumerate(mine):
            curve = torch.tensor(r["history"]).unfold(0, 10, 1).mean(-1)  # a moving mean over 10 steps
            ax.plot(range(10, len(r["history"]) + 1), curve, color=colour, lw=1,
                    label=f"{norm}-norm" if i == 0 else None)
    ax.axhline(meta["unigram_val_loss"], color="grey", ls="--", lw=1, label="unigram")
    ax.set_title(f"warm-up: {warmup} steps")
    ax.set_xlabel("step")
axes[0].set_ylabel("training loss")
axes[0].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# What the runs show:
#
# - **Without warm-up, post-norm learns nothing but the character frequencies**, in all three seeds: its
#   validation loss stops at the unigram model's. Pre-norm learns in every seed.
# - **With the warm-up, pre-norm improves in every seed, and so does post-norm, but not reliably**: one
#   seed of three trains as well as pre-norm, the other two stay well above it.
#
# So at this learning rate post-norm needs the warm-up and is fragile even with it; pre-norm trains
# without one, though the warm-up helps it too. Conditions differ far more than seeds, except post-norm
# with warm-up, whose seeds disagree. The course's GPT stays pre-norm.
#
# **The limits of this test.** One learning rate (1e-2, decaying to 1e-3), one model (6 layers, 48
# wide), 150 steps with the warm-up taking half of them, gradients clipped to norm 1, three seeds, on a
# CPU. At another learning rate, length or depth the two blocks may compare otherwise.

# %% [markdown]
# ### Exercise 11.4: a post-norm block (8 min, core)
#
# Write `post_norm_block(x, attn, mlp, ln_1, ln_2)`, the forward pass of a post-norm block (above)
# given its four sublayers: the attention, whose residual add is followed by `ln_1`, then the MLP, whose
# residual add is followed by `ln_2`. `x` is `(B, T, C)`; `attn` and `mlp` map `(B, T, C)` to `(B, T, C)`.
# The check compares it with a post-norm `Block`.

# %%
def post_norm_block(x, attn, mlp, ln_1, ln_2):
    ### BEGIN SOLUTION
    h = ln_1(x + attn(x))  # (B, T, C)
    return ln_2(h + mlp(h))  # (B, T, C)
    ### END SOLUTION


check("11.4", post_norm_block)

# %% [markdown]
# ## Appendix B. The FLOP count and MFU
#
# `benchmarks/train_gpu.py` reports the **model FLOPs utilisation** (MFU) of the `gpu` run: the FLOPs
# training needs per token, times tokens per second, divided by the GPU's peak (989 TFLOP/s in bfloat16
# on an H100 SXM). `GPT.flops_per_token` counts them, for $L$ layers, as
#
# $$\text{FLOPs per token} = 6N + 6LTC:$$
#
# - each weight meets each token once in the forward pass (a multiply and an add, 2 FLOPs) and twice in the
#   backward pass (the gradient of its input and its own gradient): 6 FLOPs per parameter and token, $6N$
#   for $N$ parameters (the table of learned positions is looked up, not multiplied, and is left out);
# - attention's two matrix products, $q k^\top$ and weights times $v$, have no parameters. Per layer and token
#   each costs $2TC$ in the forward pass, twice that backward: $3 \cdot 2 \cdot 2TC \cdot L = 12LTC$. But under
#   a causal mask a query has on average only half the keys: the work the *model* needs is half, $6LTC$. That
#   halving counts **model FLOPs**, what the mathematics requires, whatever a kernel does. What a kernel
#   really computes, the **hardware FLOPs**, is more: a flash kernel skips whole masked tiles but computes the
#   diagonal tiles in full, so with 128-wide tiles at $T = 256$ it computes 3 of the 4 tiles, not 2. PaLM
#   (Chowdhery et al. 2022, appendix B) names the two ratios apart: model FLOPs utilisation (MFU) from the
#   first, hardware FLOPs utilisation from the second. The course reports MFU.
#
# The course's own attention computes the whole square and then masks it, so a FLOP counter run on one
# training step of it (`torch.utils.flop_counter`) finds the full $12LTC$:

# %%
counted = GPT(dataclasses.replace(shipped.config, attention="course"))  # the shipped size; weights do not matter
L_f, T_f, C_f = counted.config.num_layers, counted.config.context_length, counted.config.embed_dim
n_f = counted.num_parameters()  # rotary positions: no position table to leave out
ids = torch.zeros(1, T_f, dtype=torch.long)  # one window of T characters
with FlopCounterMode(display=False) as counter:
    counted(ids, ids)[1].backward()  # forward and backward of the loss
ops = counter.get_flop_counts()["Global"]
attention_f = ops[torch.ops.aten.bmm] / T_f  # per token: attention's products are the only batched ones
weights_f = (ops[torch.ops.aten.mm] + ops[torch.ops.aten.addmm]) / T_f
print(f"{L_f} layers, T = {T_f}, C = {C_f}, N = {n_f:,} parameters")
print(f"attention, counted: {attention_f:,.0f} FLOPs per token = 12 L T C:", attention_f == 12 * L_f * T_f * C_f)
print("weights, counted: within 2% of 6 N:", abs(weights_f - 6 * n_f) < 0.02 * 6 * n_f)
print(f"flops_per_token() = 6 N + 6 L T C = {counted.flops_per_token():,.0f}:",
      counted.flops_per_token() == 6 * n_f + 6 * L_f * T_f * C_f)

# %% [markdown]
# The weights' count falls a little short of $6N$ because biases and layer norms are added, not multiplied.
# At the `gpu` size (built on the `meta` device: shapes without memory) attention is a small share:

# %%
with torch.device("meta"):
    gpu_model = GPT(dataclasses.replace(RUN_SIZES["gpu"].model_config, vocab_size=V))
c_g = gpu_model.config
attention_g = 6 * c_g.num_layers * c_g.context_length * c_g.embed_dim
print(f"gpu size: flops_per_token() = {gpu_model.flops_per_token():,.0f}, of which 6 L T C = {attention_g:,} "
      f"({attention_g / gpu_model.flops_per_token():.0%})")

# %% [markdown]
# **Comparing MFU figures.** PaLM's definition of MFU (Chowdhery et al. 2022, appendix B) counts attention
# in full, $6N + 12LTC$, and nanoGPT's `estimate_mfu` follows it. The course halves attention's share for
# the causal mask, so from the same tokens per second the course's MFU reads lower than a figure reported
# PaLM's way, by the ratio of the two counts:

# %%
palm = gpu_model.flops_per_token() + attention_g  # 6 N + 12 L T C: attention's products counted in full
ratio = gpu_model.flops_per_token() / palm
print(f"gpu size: the course counts {gpu_model.flops_per_token():,.0f} FLOPs per token, PaLM's way {palm:,.0f}")
print(f"the course's MFU is {ratio:.2f} times PaLM's: {1 - ratio:.0%} lower")


# %% [markdown]
# ## Summary
#
# - Heatmaps and bertviz show weights, not explanations. Above layer 0 a column is a mixture of earlier characters
#   (rollout traces it back, as an estimate); a weight on a short value moves little (look at
#   `||w_ij f(x_j)||`); a bright first column may be a sink. This small model has no sinks, and its
#   weights and weighted norms mostly agree.
# - Pre-norm against post-norm: at a high learning rate, post-norm learns nothing without a warm-up and
#   is fragile with one; pre-norm trains either way (one budget, three seeds). Under AdamW, Liu et al.
#   (2020) trace it to how far a step moves post-norm's output, not to its gradients' size.
# - Training needs about 6 N + 6 L T C model FLOPs per token under a causal mask (a real kernel computes more:
#   hardware FLOPs); PaLM and nanoGPT count 6 N + 12 L T C, so their MFU reads higher for the same run.
#
# ## Further reading
#
# - Vig, [A Multiscale Visualization of Attention in the Transformer Model](https://arxiv.org/abs/1906.05714)
#   (2019): bertviz.
# - Jain and Wallace, [Attention is not Explanation](https://arxiv.org/abs/1902.10186) (2019); Wiegreffe and
#   Pinter, [Attention is not not Explanation](https://arxiv.org/abs/1908.04626) (2019).
# - Abnar and Zuidema, [Quantifying Attention Flow in Transformers](https://arxiv.org/abs/2005.00928) (2020):
#   attention rollout and attention flow.
# - Kobayashi et al., [Attention is Not Only a Weight: Analyzing Transformers with Vector Norms](https://arxiv.org/abs/2004.10102)
#   (2020); Xiao et al., [Efficient Streaming Language Models with Attention Sinks](https://arxiv.org/abs/2309.17453)
#   (2023).
# - Vaswani et al., [Attention Is All You Need](https://arxiv.org/abs/1706.03762) (2017): the post-norm
#   Transformer; Xiong et al., [On Layer Normalization in the Transformer Architecture](https://arxiv.org/abs/2002.04745)
#   (2020); Liu et al., [Understanding the Difficulty of Training Transformers](https://arxiv.org/abs/2004.08249)
#   (2020): why post-norm needs a warm-up under Adam.
# - Chowdhery et al., [PaLM: Scaling Language Modeling with Pathways](https://arxiv.org/abs/2204.02311)
#   (2022), appendix B: model FLOPs utilisation, and hardware FLOPs utilisation beside it.
