"""Exercises of notebook 10 (the tiny GPT): cut training windows, score the unigram baseline, schedule the
learning rate, run the GPT's forward pass from its parts.

Each reference solution is built from :mod:`course_utils.runs` and :mod:`course_utils.train`; each mistake is
one that shows up in real code: targets that are not shifted (or shifted the wrong way), windows one token short,
frequencies counted on the data being scored, bits instead of nats, a warmup that starts at a learning rate of
zero, a cosine that decays to zero or runs past the end; a forward pass with post-norm blocks, the residual
around the normalised stream, ReLU for GELU, no causal mask, no final LayerNorm or no positions.
Notebook 11's exercises are in :mod:`course_utils.exercises.inspect_gpt`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.exercises._draws import randint
from course_utils.exercises._engine import Exercise, Mistake
from course_utils.exercises._engine.domain import Domain
from course_utils.gpt import GPT, GPTConfig
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import LearnedPositionalEmbedding
from course_utils.runs import unigram_loss
from course_utils.train import TrainConfig, learning_rate

__all__ = ["EXERCISES"]


# --- 10.1 training windows --------------------------------------------------------------------------


def _windows_solution(data: torch.Tensor, starts: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = starts[:, None] + torch.arange(T + 1)  # (B, T + 1)
    window = data[idx]  # (B, T + 1)
    return window[:, :-1], window[:, 1:]  # x, y: (B, T) each


def _windows_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(8)
    data = torch.randint(0, 50, (40,), generator=g)
    short = torch.randint(0, 9, (7,), generator=g, dtype=torch.int32)
    return [
        ((data, torch.tensor([0, 5, 20]), 4), {}),
        ((data, torch.tensor([3]), 8), {}),
        ((data, torch.tensor([34, 0]), 4), {}),  # near the end: ids 34 .. 38 (39 is the last)
        ((data, torch.tensor([35, 12, 35]), 4), {}),  # the last window ends on the last id; one start twice
        ((short, torch.tensor([0]), 6), {}),  # int32 ids, one window of all of them (T == len(data) - 1)
        ((short, torch.tensor([2, 5, 0, 4]), 1), {}),  # T == 1
    ]


def _windows_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        N, T, B = randint(g, 12, 200), randint(g, 1, 49), randint(g, 1, 17)
        N = max(N, T + 2)
        data = torch.randint(0, randint(g, 2, 100), (N,), generator=g)
        starts = torch.randint(0, N - T - 1, (B,), generator=g)  # the window and one more token fit in data
        cases.append(((data, starts, T), {}))
    return cases


def _windows_unshifted(data, starts, T):
    x = data[starts[:, None] + torch.arange(T)]
    return x, x.clone()  # y = x: the model learns to copy its input


def _windows_shifted_back(data, starts, T):
    idx = starts[:, None] + torch.arange(T)
    return data[idx], data[(idx - 1).clamp(min=0)]  # the PREVIOUS token: the model would predict the past


def _windows_too_long(data, starts, T):
    idx = starts[:, None] + torch.arange(T + 1)
    return data[idx], data[idx + 1]  # T + 1 positions


def _windows_swapped(data, starts, T):
    x, y = _windows_solution(data, starts, T)
    return y, x


# --- 10.2 the unigram baseline ----------------------------------------------------------------------


def _unigram_solution(train_ids: torch.Tensor, val_ids: torch.Tensor, vocab_size: int) -> float:
    return unigram_loss(train_ids, val_ids, vocab_size)


def _unigram_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(9)
    p = torch.tensor([0.4, 0.3, 0.2, 0.08, 0.02, 0.0])  # character 5 never appears in training
    train = torch.multinomial(p, 300, replacement=True, generator=g)
    val = torch.cat([torch.multinomial(p, 60, replacement=True, generator=g), torch.tensor([5])])
    skewed = torch.multinomial(torch.tensor([0.1, 0.1, 0.8]), 200, replacement=True, generator=g)
    even = torch.multinomial(torch.tensor([0.45, 0.45, 0.1]), 50, replacement=True, generator=g)
    # ids 0 .. 4 only, of a vocabulary of 8: characters 5, 6 and 7 are in neither text
    few = torch.multinomial(torch.tensor([0.3, 0.3, 0.2, 0.1, 0.1]), 80, replacement=True, generator=g)
    return [
        ((train, val, 6), {}),
        ((skewed, even, 3), {}),
        ((few, torch.tensor([0, 4, 1, 3, 0, 2]), 8), {}),
        ((skewed, torch.tensor([1]), 3), {}),  # one validation character
    ]


def _unigram_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        V = randint(g, 2, 65)
        p = torch.rand(V, generator=g) ** 3  # skewed frequencies
        p[randint(g, 0, V)] = 0.0  # a character never seen in training
        p = p + (p.sum() == 0).float()
        train = torch.multinomial(p, randint(g, 20, 500), replacement=True, generator=g)
        val = torch.randint(0, V, (randint(g, 5, 80),), generator=g)
        cases.append(((train, val, V), {}))
    return cases


def _smoothed_log_probs(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    counts = torch.bincount(ids, minlength=vocab_size).double() + 1.0
    return (counts / counts.sum()).log()  # (V,)


def _unigram_no_smoothing(train_ids, val_ids, vocab_size):
    counts = torch.bincount(train_ids, minlength=vocab_size).double()
    return float(-(counts / counts.sum()).log()[val_ids].mean())  # inf for an unseen character


def _unigram_bits(train_ids, val_ids, vocab_size):
    return float(-_smoothed_log_probs(train_ids, vocab_size)[val_ids].mean() / math.log(2))


def _unigram_counted_on_val(train_ids, val_ids, vocab_size):
    return float(-_smoothed_log_probs(val_ids, vocab_size)[val_ids].mean())


def _unigram_entropy_of_train(train_ids, val_ids, vocab_size):
    logp = _smoothed_log_probs(train_ids, vocab_size)
    return float(-(logp.exp() * logp).sum())  # the entropy of the training distribution, not a score on val


# --- 10.3 warmup and cosine decay -------------------------------------------------------------------


def _lr_solution(step: int, warmup_steps: int, max_steps: int, max_lr: float, min_lr: float) -> float:
    cfg = TrainConfig(max_steps=max_steps, warmup_steps=warmup_steps, learning_rate=max_lr, min_lr=min_lr)
    return learning_rate(step, cfg)


def _lr_cases() -> list[tuple[tuple, dict]]:
    cases = []
    for warmup, total, top, bottom in ((10, 100, 1.0, 0.1), (4, 20, 3e-3, 3e-4), (0, 10, 1.0, 0.0)):
        for step in sorted({0, 1, max(warmup - 1, 0), warmup, (warmup + total) // 2, total - 1, total, total + 5}):
            cases.append(((step, warmup, total, top, bottom), {}))
    cases.append(
        ((299, 0, 300, 1.0, 0.0), {})
    )  # the last step of a long decay to 0: a rate of 3e-5 (float32: 1e-4 off)
    cases += [((step, 6, 7, 2e-3, 1e-4), {}) for step in (5, 6, 7)]  # a cosine of one step: max_lr, then min_lr
    return cases


def _lr_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(2):
        warmup = randint(g, 0, 25)
        total = warmup + randint(g, 1, 300)
        top = float(10 ** torch.empty(()).uniform_(-4, 0, generator=g))
        bottom = top * float(torch.rand((), generator=g)) * 0.5
        steps = {0, max(warmup - 1, 0), warmup, total - 1, total, total + randint(g, 1, 50), randint(g, 0, total + 10)}
        cases += [((step, warmup, total, top, bottom), {}) for step in sorted(steps)]
    return cases


def _lr_warmup_from_zero(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * step / warmup_steps  # step 0 trains with a learning rate of 0: a wasted step
    return _lr_solution(step, warmup_steps, max_steps, max_lr, min_lr)


def _lr_decays_to_zero(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress)) * max_lr


def _lr_to_zero_then_floor(step, warmup_steps, max_steps, max_lr, min_lr):
    if step >= max_steps:
        return min_lr  # the floor, as the statement says; but the cosine before it ends at 0
    return _lr_decays_to_zero(step, warmup_steps, max_steps, max_lr, min_lr)


def _lr_to_zero_cut_at_floor(step, warmup_steps, max_steps, max_lr, min_lr):
    return max(min_lr, _lr_decays_to_zero(step, warmup_steps, max_steps, max_lr, min_lr))  # cut, not shifted


def _lr_cosine_from_step_zero(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, step / max_steps)  # ignores the warmup: starts part-way down the cosine
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)


def _lr_no_floor_after_end(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)  # past 1 the cosine climbs again
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)


def _lr_linear(step, warmup_steps, max_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return max_lr - progress * (max_lr - min_lr)


# --- 10.4 the GPT's forward pass from its parts -----------------------------------------------------


def _parts_model(g: torch.Generator, V: int, T: int, C: int, H: int, L: int) -> nn.Module:
    """A GPT's parts, named as :class:`course_utils.gpt.GPT` names them, with no forward of their own (calling the
    model or a block raises), every parameter drawn from ``g``: the attention is notebook 04's, which is causal
    only when given the mask. Weights large enough that each part changes the logits visibly, LayerNorm gains and
    biases away from 1 and 0, and the head tied to the token embedding."""
    model = nn.Module()
    model.tok_emb = nn.Embedding(V, C)
    model.pos_emb = LearnedPositionalEmbedding(T, C)
    model.blocks = nn.ModuleList()
    for _ in range(L):
        block = nn.Module()
        block.ln_1, block.attn, block.ln_2 = nn.LayerNorm(C), MultiHeadAttention(C, H), nn.LayerNorm(C)
        block.mlp = nn.Module()
        block.mlp.fc_in, block.mlp.fc_out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        model.blocks.append(block)
    model.ln_f = nn.LayerNorm(C)
    model.lm_head = nn.Linear(C, V, bias=False)
    model.lm_head.weight = model.tok_emb.weight  # tied, as in the GPT
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.4 * torch.randn(p.shape, generator=g))
            elif p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def _forward_solution(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """The course's GPT (learned positions, the course's attention) loaded with the parts' state dict."""
    C, T = model.tok_emb.embedding_dim, model.pos_emb.context_length
    config = GPTConfig(
        vocab_size=model.tok_emb.num_embeddings,
        context_length=T,
        embed_dim=C,
        num_heads=model.blocks[0].attn.num_heads,
        num_layers=len(model.blocks),
        attention="course",
    )
    gpt = GPT(config).to(model.tok_emb.weight.dtype)
    gpt.load_state_dict(model.state_dict())  # strict: every name and shape must match
    gpt.eval()
    return gpt(idx)[0]  # (B, T, V)


def _forward_case(g: torch.Generator, B: int, T: int, context: int, C: int, H: int, L: int) -> tuple[tuple, dict]:
    V = 11
    model = _parts_model(g, V, context, C, H, L)
    return (model, torch.randint(0, V, (B, T), generator=g)), {}


def _forward_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(104)
    return [
        _forward_case(g, 2, 6, 8, 8, 2, 2),
        _forward_case(g, 1, 8, 8, 12, 3, 1),  # a full window, one block
        _forward_case(g, 3, 5, 7, 16, 4, 3),
        _forward_case(g, 2, 1, 4, 6, 1, 2),  # one token, one head
    ]


def _forward_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    H, context = randint(g, 1, 5), randint(g, 9, 21)  # longer and wider than any fixed case
    cases = [_forward_case(g, randint(g, 4, 7), context, context, H * randint(g, 1, 7), H, randint(g, 1, 4))]
    for _ in range(2):
        H, context = randint(g, 1, 5), randint(g, 1, 20)
        cases.append(
            _forward_case(g, randint(g, 1, 4), randint(g, 1, context + 1), context, H * randint(g, 1, 7), H,
                          randint(g, 1, 4))
        )  # fmt: skip
    return cases


def _mlp(block: nn.Module, h: torch.Tensor, act=F.gelu) -> torch.Tensor:
    return block.mlp.fc_out(act(block.mlp.fc_in(h)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


def _forward_with(model, idx, step, positions=True, final_norm=True, mask=True):
    T = idx.shape[1]
    x = model.tok_emb(idx) + (model.pos_emb.embedding.weight[:T] if positions else 0.0)  # (B, T, C)
    m = causal_mask(T) if mask else None
    for block in model.blocks:
        x = step(block, x, m)  # (B, T, C)
    return model.lm_head(model.ln_f(x) if final_norm else x)  # (B, T, V)


def _pre_norm(block, x, m, act=F.gelu):
    x = x + block.attn(block.ln_1(x), m)
    return x + _mlp(block, block.ln_2(x), act)


def _forward_post_norm(model, idx):
    def step(block, x, m):  # the original Transformer's order: normalise the sum
        x = block.ln_1(x + block.attn(x, m))
        return block.ln_2(x + _mlp(block, x))

    return _forward_with(model, idx, step)


def _forward_residual_of_the_norm(model, idx):
    def step(block, x, m):
        h = block.ln_1(x)
        x = h + block.attn(h, m)  # the normalised stream added back, not the stream itself
        h = block.ln_2(x)
        return h + _mlp(block, h)

    return _forward_with(model, idx, step)


def _forward_relu(model, idx):
    return _forward_with(model, idx, lambda block, x, m: _pre_norm(block, x, m, act=F.relu))


def _forward_no_mask(model, idx):
    return _forward_with(model, idx, _pre_norm, mask=False)


def _forward_mask_inverted(model, idx):
    def step(block, x, m):  # PyTorch's convention (True = blocked) given to notebook 04's (True = may attend)
        return _pre_norm(block, x, ~m)

    return _forward_with(model, idx, step)


def _forward_probabilities(model, idx):
    return _forward_with(model, idx, _pre_norm).softmax(dim=-1)  # (B, T, V) probabilities, not logits


def _forward_tanh_gelu(model, idx):
    def tanh_gelu(h):  # GPT-2's code: 0.5 h (1 + tanh(sqrt(2 / pi) (h + 0.044715 h^3)))
        return F.gelu(h, approximate="tanh")

    return _forward_with(model, idx, lambda block, x, m: _pre_norm(block, x, m, act=tanh_gelu))


def _forward_no_final_norm(model, idx):
    return _forward_with(model, idx, _pre_norm, final_norm=False)


def _forward_no_positions(model, idx):
    return _forward_with(model, idx, _pre_norm, positions=False)


def _forward_mlp_reads_block_input(model, idx):
    def step(block, x, m):  # both branches read the block's input (a "parallel" block)
        return x + block.attn(block.ln_1(x), m) + _mlp(block, block.ln_2(x))

    return _forward_with(model, idx, step)


EXERCISES = (
    Exercise(
        key="10.1",
        domain=Domain(ints={"data": (torch.int64, torch.int32)}),
        title="training windows",
        signature="make_windows(data, starts, T) -> (x, y), each (B, T) of data's dtype: "
        "y is x shifted one token ahead",
        solution=_windows_solution,
        cases=_windows_cases,
        draw=_windows_draw,
        edges={
            "B == 1": lambda data, starts, T: len(starts) == 1,
            "T == 1": lambda data, starts, T: T == 1,
            "a start at 0": lambda data, starts, T: bool((starts == 0).any()),
            "a window ending on the last id": lambda data, starts, T: bool((starts + T == len(data) - 1).any()),
            "one window of the whole data (T == len(data) - 1)": lambda data, starts, T: T == len(data) - 1,
            "starts not in order": lambda data, starts, T: bool((starts.diff() < 0).any()),
            "one start twice": lambda data, starts, T: len(set(starts.tolist())) < len(starts),
            "ids of a dtype other than int64": lambda data, starts, T: data.dtype != torch.int64,
        },
        mistakes=(
            Mistake(
                "targets not shifted",
                "y must hold the NEXT token at every position, not the same window as x (the model would "
                "learn to copy its input).",
                _windows_unshifted,
                fix="y = data[s + 1 : s + T + 1]: cut T + 1 ids, x = window[:, :-1], y = window[:, 1:]",
            ),
            Mistake(
                "targets shifted the wrong way",
                "y is one token AHEAD of x, not one behind: the model predicts the future.",
                _windows_shifted_back,
                fix="y = window[:, 1:] with window = data[starts[:, None] + torch.arange(T + 1)]",
            ),
            Mistake(
                "windows one token too long",
                "Both x and y have exactly T columns; the T + 1 ids you cut are shared between them.",
                _windows_too_long,
                fix="x = window[:, :-1], y = window[:, 1:]",
            ),
            Mistake(
                "x and y swapped",
                "x is the input, the window itself; y, the target, is the one shifted ahead.",
                _windows_swapped,
                fix="return window[:, :-1], window[:, 1:] in that order",
            ),
        ),
    ),
    Exercise(
        key="10.2",
        domain=Domain(ints={"train_ids": (torch.int64, torch.int32), "val_ids": (torch.int64, torch.int32)}),
        title="the unigram baseline",
        signature="unigram_baseline(train_ids, val_ids, vocab_size) -> float, nats per character",
        solution=_unigram_solution,
        cases=_unigram_cases,
        draw=_unigram_draw,
        edges={
            "a character of validation never seen in training": lambda train_ids, val_ids, vocab_size: bool(
                (torch.bincount(train_ids, minlength=vocab_size)[val_ids] == 0).any()
            ),
            "a character in neither text (vocab_size > the largest id + 1)": lambda train_ids, val_ids, vocab_size: (
                vocab_size > max(int(train_ids.max()), int(val_ids.max())) + 1
            ),
            "every character seen in training": lambda train_ids, val_ids, vocab_size: bool(
                (torch.bincount(train_ids, minlength=vocab_size) > 0).all()
            ),
            "one validation character": lambda train_ids, val_ids, vocab_size: len(val_ids) == 1,
        },
        mistakes=(
            Mistake(
                "no smoothing: an unseen character costs infinity",
                "A character absent from training gets probability 0, and -log 0 is infinite; the "
                "exercise asks for one extra count for every character.",
                _unigram_no_smoothing,
                fix="counts = torch.bincount(train_ids, minlength=vocab_size) + 1",
            ),
            Mistake(
                "bits instead of nats",
                "The model's loss (F.cross_entropy) uses the natural log; a baseline in another unit "
                "does not compare with it.",
                _unigram_bits,
                fix="use .log(), not .log2() (or drop the division by math.log(2))",
            ),
            Mistake(
                "frequencies counted on the validation text",
                "The frequencies must come from the TRAINING ids; counting on the text you score is "
                "peeking at the answers and makes the baseline look better than it is.",
                _unigram_counted_on_val,
                fix="torch.bincount(train_ids, ...), not val_ids",
            ),
            Mistake(
                "entropy of the training distribution, not a score on validation",
                "The baseline scores the validation characters with probabilities from the training "
                "counts; the entropy of the training distribution never looks at the validation text.",
                _unigram_entropy_of_train,
                fix="return float(-log_p[val_ids].mean())",
            ),
        ),
        atol=1e-6,
    ),
    Exercise(
        key="10.3",
        title="warmup and cosine decay",
        signature="lr_at(step, warmup_steps, max_steps, max_lr, min_lr) -> float",
        solution=_lr_solution,
        cases=_lr_cases,
        draw=_lr_draw,
        edges={
            "step 0": lambda step, w, n, top, bottom: step == 0,
            "warmup_steps == 0": lambda step, w, n, top, bottom: w == 0,
            "the last warmup step": lambda step, w, n, top, bottom: w > 0 and step == w - 1,
            "the first step after warmup": lambda step, w, n, top, bottom: w > 0 and step == w,
            "the middle of the cosine": lambda step, w, n, top, bottom: w < step < n - 1,
            "the step before max_steps": lambda step, w, n, top, bottom: step == n - 1 and w < step,
            "step == max_steps": lambda step, w, n, top, bottom: step == n,
            "a step past max_steps": lambda step, w, n, top, bottom: step > n,
            "min_lr == 0": lambda step, w, n, top, bottom: bottom == 0,
            "a cosine of one step (max_steps == warmup_steps + 1)": lambda step, w, n, top, bottom: n == w + 1,
            "a rate below 1e-4 of max_lr (the end of a long decay to 0)": lambda step, w, n, top, bottom: (
                w <= step < n and _lr_solution(step, w, n, top, bottom) < 1e-4 * top
            ),
        },
        mistakes=(
            Mistake(
                "warmup starts at zero",
                "Step 0 should already move the weights, and the last warmup step should reach max_lr.",
                _lr_warmup_from_zero,
                fix="max_lr * (step + 1) / warmup_steps during warmup",
            ),
            Mistake(
                "decays to zero instead of min_lr",
                "The cosine ends at min_lr, not at 0.",
                _lr_decays_to_zero,
                fix="min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)",
            ),
            Mistake(
                "the cosine ends at 0, then the rate jumps to min_lr",
                "The floor after max_steps is right, but the cosine before it must end at min_lr too: "
                "it runs from max_lr down to min_lr, not to 0.",
                _lr_to_zero_then_floor,
                fix="min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)",
            ),
            Mistake(
                "the cosine runs to 0 and is cut off at min_lr",
                "max(min_lr, ...) stops the rate falling below min_lr, but the curve above it is still the cosine "
                "to 0: lower everywhere, and flat once it reaches min_lr. The cosine itself runs from max_lr to "
                "min_lr.",
                _lr_to_zero_cut_at_floor,
                fix="min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)",
            ),
            Mistake(
                "cosine measured from step 0, not from the end of warmup",
                "The cosine starts at max_lr right after warmup: its progress counts the steps since "
                "warmup ended, over the steps left after warmup.",
                _lr_cosine_from_step_zero,
                fix="p = (step - warmup_steps) / (max_steps - warmup_steps)",
            ),
            Mistake(
                "the cosine climbs again after max_steps",
                "A resumed or extended run goes past max_steps; from there on the rate stays at its floor.",
                _lr_no_floor_after_end,
                fix="if step >= max_steps: return min_lr",
            ),
            Mistake(
                "linear decay instead of a cosine",
                "The decay follows half a cosine wave, slow at both ends, not a straight line.",
                _lr_linear,
                fix="min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (max_lr - min_lr)",
            ),
        ),
        atol=1e-10,
        # Python floats (float64) are exact to about 1e-16 relative. float32 is not enough: near the end of a long
        # decay to 0 the rate is the difference of two numbers near 1 (1 + cos(pi * p), cos near -1), and float32's
        # rounding of cos (6e-8) is then 1e-4 of the rate or more. The statement asks for Python floats.
        rtol=1e-5,
    ),
    Exercise(
        key="10.4",
        title="the GPT's forward pass",
        minutes=12,
        signature="gpt_forward(model, idx) -> logits (B, T, V): embeddings and positions, pre-norm blocks with a "
        "causal mask, the final LayerNorm, the tied head",
        solution=_forward_solution,
        cases=_forward_cases,
        draw=_forward_draw,
        edges={
            "B == 1": lambda model, idx: idx.shape[0] == 1,
            "T == 1": lambda model, idx: idx.shape[1] == 1,
            "a full window (T == context_length)": lambda model, idx: idx.shape[1] == model.pos_emb.context_length,
            "one block": lambda model, idx: len(model.blocks) == 1,
            "one head": lambda model, idx: model.blocks[0].attn.num_heads == 1,
        },
        mistakes=(
            Mistake(
                "post-norm where pre-norm was asked",
                "The GPT normalises a copy of the stream BEFORE each sublayer and adds the sublayer's output "
                "to the stream as it was; normalising the sum is the original Transformer's post-norm.",
                _forward_post_norm,
                fix="x = x + block.attn(block.ln_1(x), mask); x = x + mlp(block.ln_2(x))",
            ),
            Mistake(
                "the residual around the normalised stream",
                "The residual adds the sublayer's output to the stream x itself, not to its normalised copy: "
                "the LayerNorm sits on the branch only, and the stream runs from the embeddings to ln_f as a "
                "plain sum.",
                _forward_residual_of_the_norm,
                fix="x = x + block.attn(block.ln_1(x), mask), not h = block.ln_1(x); x = h + block.attn(h, mask)",
            ),
            Mistake(
                "ReLU where the MLP uses GELU",
                "The MLP between fc_in and fc_out uses GELU, as GPT-2 does (its exact form here); ReLU cuts every "
                "negative value to 0.",
                _forward_relu,
                fix="block.mlp.fc_out(F.gelu(block.mlp.fc_in(h)))",
            ),
            Mistake(
                "the causal mask missing",
                "Notebook 04's attention lets every position see every other unless it is given a mask: "
                "without the causal mask each position reads the characters it must predict.",
                _forward_no_mask,
                fix="block.attn(block.ln_1(x), causal_mask(T))",
            ),
            Mistake(
                "the mask's meaning inverted",
                "Notebook 04's attention reads True as MAY attend (notebook 03's causal mask, the lower triangle); "
                "PyTorch's attn_mask of booleans reads True as blocked. Flipped, each position sees only the "
                "characters after it.",
                _forward_mask_inverted,
                fix="block.attn(block.ln_1(x), causal_mask(T)) with causal_mask from course_utils.masking",
            ),
            Mistake(
                "probabilities where logits were asked",
                "Return the head's raw scores (logits), as the GPT does: the loss and the sampler apply the "
                "softmax themselves.",
                _forward_probabilities,
                fix="return model.lm_head(model.ln_f(x)) with no softmax after it",
            ),
            Mistake(
                "GELU's tanh approximation",
                "The course's GPT uses the exact GELU (x times the normal CDF at x); GPT-2's code used the tanh "
                "approximation, which differs by up to about 3e-4 here, more than the check allows.",
                _forward_tanh_gelu,
                fix="F.gelu(block.mlp.fc_in(h)) with the default approximate='none'",
            ),
            Mistake(
                "no final LayerNorm",
                "A pre-norm stream is a plain sum that no block normalises at the end: normalise it once more "
                "before the head.",
                _forward_no_final_norm,
                fix="return model.lm_head(model.ln_f(x))",
            ),
            Mistake(
                "no positions",
                "Without the position table the order of the characters reaches the model only through the "
                "causal mask: add row t of the learned positions to the token embedding at position t.",
                _forward_no_positions,
                fix="x = model.tok_emb(idx) + model.pos_emb.embedding.weight[:T]",
            ),
            Mistake(
                "the MLP reads the block's input",
                "The two sublayers run one after the other: the MLP reads the stream after the attention's "
                "output was added to it.",
                _forward_mlp_reads_block_input,
                fix="x = x + block.attn(block.ln_1(x), mask) first, then x = x + mlp(block.ln_2(x))",
            ),
        ),
        atol=1e-5,
        rtol=1e-4,
    ),
)
