"""Exercises of notebook 09 (a tiny GPT): cut training windows, score the unigram baseline, schedule the
learning rate, write a post-norm block, weigh attention by what it moves.

Each reference solution is built from :mod:`course_utils.data`, :mod:`course_utils.runs`,
:mod:`course_utils.train`, :mod:`course_utils.gpt` and :mod:`course_utils.inspect_gpt`; each mistake is one that
shows up in real code: targets that are not shifted (or shifted the wrong way), windows one token short,
frequencies counted on the data being scored, bits instead of nats, a warmup that starts at a learning rate of
zero, a cosine that decays to zero or runs past the end, a block normalised in pre-norm order or on its branch
only, a residual left out, a value's norm taken over the wrong axis or of the wrong key, or broadcast against the
weights without an axis for the queries.
"""

from __future__ import annotations

import math

import torch

from course_utils.checking import Exercise, Mistake
from course_utils.gpt import MLP, Block, CausalSelfAttention, GPTConfig
from course_utils.inspect_gpt import weighted_value_norms
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
    return [
        ((data, torch.tensor([0, 5, 20]), 4), {}),
        ((data, torch.tensor([3]), 8), {}),
        ((data, torch.tensor([34, 0]), 4), {}),  # near the end: ids 34 .. 38 (39 is the last)
    ]


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


def _windows_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(4):
        N, T, B = _int(g, 12, 200), _int(g, 1, 49), _int(g, 1, 17)
        N = max(N, T + 2)
        data = torch.randint(0, _int(g, 2, 100), (N,), generator=g)
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
    return [((train, val, 6), {}), ((skewed, even, 3), {})]


def _unigram_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        V = _int(g, 2, 65)
        p = torch.rand(V, generator=g) ** 3  # skewed frequencies
        p[_int(g, 0, V)] = 0.0  # a character never seen in training
        p = p + (p.sum() == 0).float()
        train = torch.multinomial(p, _int(g, 20, 500), replacement=True, generator=g)
        val = torch.randint(0, V, (_int(g, 5, 80),), generator=g)
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
    return cases


def _lr_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(2):
        warmup = _int(g, 0, 25)
        total = warmup + _int(g, 1, 300)
        top = float(10 ** torch.empty(()).uniform_(-4, 0, generator=g))
        bottom = top * float(torch.rand((), generator=g)) * 0.5
        steps = {0, max(warmup - 1, 0), warmup, total - 1, total, total + _int(g, 1, 50), _int(g, 0, total + 10)}
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


# --- 11.2 a post-norm block -------------------------------------------------------------------------


def _post_norm_solution(
    x: torch.Tensor, attn: torch.nn.Module, mlp: torch.nn.Module, ln_1: torch.nn.Module, ln_2: torch.nn.Module
) -> torch.Tensor:
    C = x.shape[-1]
    config = GPTConfig(
        vocab_size=2,
        context_length=x.shape[-2],
        embed_dim=C,
        num_heads=attn.num_heads,
        num_layers=1,
        norm_position="post",
    )
    block = Block(config)
    block.attn, block.mlp, block.ln_1, block.ln_2 = attn, mlp, ln_1, ln_2  # the given sublayers, not copies
    return block(x)  # (B, T, C)


def _sublayers(g: torch.Generator, C: int, H: int, T: int) -> tuple[torch.nn.Module, ...]:
    """A causal attention, an MLP and two LayerNorms of width C, every parameter drawn from ``g``.

    Large enough weights that each branch changes x visibly, and LayerNorm gains and biases away from 1 and 0,
    so that using one LayerNorm for the other, or leaving one out, changes the result."""
    config = GPTConfig(vocab_size=2, context_length=T, embed_dim=C, num_heads=H, num_layers=1)
    mods = (CausalSelfAttention(config), MLP(config), torch.nn.LayerNorm(C), torch.nn.LayerNorm(C))
    with torch.no_grad():
        for m in mods[:2]:
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 / math.sqrt(C) if p.dim() > 1 else 0.1))
        for ln in mods[2:]:
            ln.weight.copy_(1.0 + 0.5 * torch.randn(C, generator=g))
            ln.bias.copy_(0.3 * torch.randn(C, generator=g))
    return mods


def _post_norm_case(g: torch.Generator, B: int, T: int, C: int, H: int) -> tuple[tuple, dict]:
    x = 2.0 * torch.randn(B, T, C, generator=g) + 1.0  # not normalised already: LayerNorm changes it
    return (x, *_sublayers(g, C, H, T)), {}


def _post_norm_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(94)
    return [_post_norm_case(g, 2, 5, 8, 2), _post_norm_case(g, 1, 7, 12, 3), _post_norm_case(g, 3, 4, 16, 4)]


def _post_norm_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        H = _int(g, 1, 7)
        cases.append(_post_norm_case(g, _int(g, 1, 5), _int(g, 1, 41), H * _int(g, 1, 13), H))
    return cases


def _post_norm_pre_order(x, attn, mlp, ln_1, ln_2):
    x = x + attn(ln_1(x))  # pre-norm: the LayerNorm reads the branch's input
    return x + mlp(ln_2(x))


def _post_norm_branch_only(x, attn, mlp, ln_1, ln_2):
    h = x + ln_1(attn(x))  # the branch's output normalised, the sum left as it is
    return h + ln_2(mlp(h))


def _post_norm_no_residual(x, attn, mlp, ln_1, ln_2):
    h = ln_1(attn(x))  # x itself never added back
    return ln_2(mlp(h))


def _post_norm_mlp_reads_x(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x))
    return ln_2(h + mlp(x))  # the second sublayer reads the block's input, not the first sum


def _post_norm_norms_swapped(x, attn, mlp, ln_1, ln_2):
    h = ln_2(x + attn(x))
    return ln_1(h + mlp(h))


# --- 11.1 value-weighted attention norms ------------------------------------------------------------


def _weighted_norms_solution(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return weighted_value_norms(weights, v)  # (B, H, T, S)


def _weighted_norms_case(g: torch.Generator, B: int, H: int, T: int, S: int, D: int) -> tuple[tuple, dict]:
    scores = torch.randn(B, H, T, S, generator=g) * 2.0
    visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # causal, bottom-right aligned when T < S
    weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)  # (B, H, T, S)
    scale = 0.1 + 4.0 * torch.rand(B, H, S, 1, generator=g)  # values whose norms differ by key, as they do
    return (weights, torch.randn(B, H, S, D, generator=g) * scale), {}


def _weighted_norms_cases() -> list[tuple[tuple, dict]]:
    g = torch.Generator().manual_seed(95)
    return [
        _weighted_norms_case(g, 2, 3, 6, 6, 4),
        _weighted_norms_case(g, 1, 2, 5, 5, 8),
        _weighted_norms_case(g, 2, 2, 3, 7, 4),
    ]  # T < S: three new queries after a cache of four keys


def _weighted_norms_draw(g: torch.Generator) -> list[tuple[tuple, dict]]:
    cases = []
    for _ in range(3):
        T = _int(g, 1, 49)
        S = T + (_int(g, 0, 17) if bool(torch.rand((), generator=g) < 0.5) else 0)
        cases.append(_weighted_norms_case(g, _int(g, 1, 4), _int(g, 1, 13), T, S, _int(g, 1, 65)))
    return cases


def _weighted_norms_weights_only(weights, v):
    return weights.clone()  # the weights, as if every value had norm 1


def _weighted_norms_squared(weights, v):
    return weights * (v**2).sum(dim=-1).unsqueeze(-2)  # squared norm: no square root


def _weighted_norms_query_value(weights, v):
    return weights * v.norm(dim=-1).unsqueeze(-1)  # (B, H, S, 1): the norm of value i, broadcast along the row


def _weighted_norms_over_positions(weights, v):
    return weights * v.norm(dim=-2).unsqueeze(-2)  # norm over the S positions: (B, H, 1, D), one per channel


def _weighted_norms_not_unsqueezed(weights, v):
    return weights * v.norm(dim=-1)  # (B, H, T, S) * (B, H, S): lines S up with S, but H with T and B with H


def _weighted_norms_of_the_sum(weights, v):
    return (weights @ v).norm(dim=-1)  # (B, H, T): the norm of the output, not of each key's term


EXERCISES = (
    Exercise(
        key="10.1",
        title="training windows",
        signature="make_windows(data, starts, T) -> (x, y), each (B, T) of data's dtype: "
        "y is x shifted one token ahead",
        solution=_windows_solution,
        cases=_windows_cases,
        draw=_windows_draw,
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
        title="the unigram baseline",
        signature="unigram_baseline(train_ids, val_ids, vocab_size) -> float, nats per character",
        solution=_unigram_solution,
        cases=_unigram_cases,
        draw=_unigram_draw,
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
        rtol=1e-5,  # float32 arithmetic is accurate to about 1e-7 relative: a rate computed in float32 passes
    ),
    Exercise(
        key="11.2",
        title="a post-norm block",
        signature="post_norm_block(x, attn, mlp, ln_1, ln_2) -> (B, T, C): ln_1 after the attention's residual "
        "add, ln_2 after the MLP's",
        solution=_post_norm_solution,
        cases=_post_norm_cases,
        draw=_post_norm_draw,
        mistakes=(
            Mistake(
                "pre-norm order",
                "That is the pre-norm block the course's GPT uses. Post-norm normalises AFTER each residual "
                "add: the sublayer reads the stream as it is, and the LayerNorm reads the sum.",
                _post_norm_pre_order,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
            Mistake(
                "the LayerNorm on the branch only",
                "The LayerNorm takes the sum of the stream and the branch, not the branch alone: the output "
                "of a post-norm block is normalised as a whole.",
                _post_norm_branch_only,
                fix="h = ln_1(x + attn(x)), not x + ln_1(attn(x))",
            ),
            Mistake(
                "a residual left out",
                "Each sublayer's input is added back to its output before the LayerNorm; without it the "
                "block forgets its input.",
                _post_norm_no_residual,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
            Mistake(
                "the MLP reads the block's input",
                "The two sublayers run one after the other: the MLP reads, and adds back to, the stream "
                "after the first LayerNorm.",
                _post_norm_mlp_reads_x,
                fix="return ln_2(h + mlp(h)) with h = ln_1(x + attn(x))",
            ),
            Mistake(
                "the LayerNorms swapped",
                "Each LayerNorm belongs to one sublayer and has its own gain and bias: the first follows "
                "the attention, the second the MLP.",
                _post_norm_norms_swapped,
                fix="h = ln_1(x + attn(x)); return ln_2(h + mlp(h))",
            ),
        ),
    ),
    Exercise(
        key="11.1",
        title="value-weighted attention norms",
        signature="weighted_norms(weights, v) -> (B, H, T, S), entry [b, h, i, j] = ||weights[b, h, i, j] * "
        "v[b, h, j]||",
        solution=_weighted_norms_solution,
        cases=_weighted_norms_cases,
        draw=_weighted_norms_draw,
        mistakes=(
            Mistake(
                "the weights alone",
                "That is the attention map itself. The point is to scale each weight by the size of the "
                "value it multiplies.",
                _weighted_norms_weights_only,
                fix="weights * v.norm(dim=-1).unsqueeze(-2)",
            ),
            Mistake(
                "the squared norm",
                "The length of a vector is the square root of the sum of its squares.",
                _weighted_norms_squared,
                fix="v.norm(dim=-1), not (v ** 2).sum(-1)",
            ),
            Mistake(
                "the value of the query's position, not the key's",
                "Entry (i, j) multiplies value j, the key's, so each key's norm must run along a row "
                "(the last axis), the same for every query.",
                _weighted_norms_query_value,
                fix="v.norm(dim=-1).unsqueeze(-2): (B, H, 1, S)",
            ),
            Mistake(
                "a norm over the positions, not the channels",
                "A value vector lives along the last axis of v (its D channels); the norm sums over those, "
                "giving one number per key.",
                _weighted_norms_over_positions,
                fix="v.norm(dim=-1), not v.norm(dim=-2)",
            ),
            Mistake(
                "the norm of the sum",
                "The norm of weights @ v is the size of the whole output: one number per query. The "
                "exercise asks for each key's term on its own, one number per (query, key).",
                _weighted_norms_of_the_sum,
                fix="weights * v.norm(dim=-1).unsqueeze(-2)",
            ),
            Mistake(
                "the norms broadcast against the wrong axes",
                "The norms are (B, H, S), one per key, and the weights (B, H, T, S). Broadcasting lines "
                "shapes up from the right, so the norms' H meets the weights' T and their B meets H. The "
                "norms need an axis of size 1 where the queries are, so that every query's row gets the "
                "same norms.",
                _weighted_norms_not_unsqueezed,
                fix="weights * v.norm(dim=-1).unsqueeze(-2): (B, H, T, S) * (B, H, 1, S)",
            ),
        ),
    ),
)
