"""A tiny experiment for notebook 06: one small model per kind of positions, tested on longer sequences.

The task, "last letter": sequences mix letters (tokens 0 .. num_letters - 1) and fillers; at every position
the answer is the most recent letter at or before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import (
    check_choice,
    check_fraction,
    check_heads,
    check_int,
    check_positive_number,
    check_token_ids,
)
from course_utils.block import Block
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import (
    ALiBiMultiHeadAttention,
    LearnedPositionalEmbedding,
    sinusoidal_encoding,
)
from course_utils.variants import GroupedQueryAttention

__all__ = [
    "POSITIONS",
    "LengthGenConfig",
    "make_batch",
    "TinyPositionalModel",
    "train_model",
    "evaluate",
    "accuracy_by_length",
]

POSITIONS = ("none", "learned", "sinusoidal", "rope", "alibi")  # the values of a model's ``positions``


@dataclass(frozen=True)
class LengthGenConfig:
    """Everything the experiment depends on: ``tiny()`` takes seconds on a CPU, ``full()`` is the real run."""

    num_letters: int = 8
    num_fillers: int = 8
    letter_prob: float = 0.25
    embed_dim: int = 32
    num_heads: int = 4
    num_layers: int = 1
    train_length: int = 16
    eval_lengths: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128)
    max_steps: int = 400
    batch_size: int = 32
    learning_rate: float = 3e-3
    eval_batch_size: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        for name in "num_letters num_fillers num_layers train_length max_steps batch_size eval_batch_size".split():
            check_int(name, getattr(self, name))
        check_fraction("letter_prob", self.letter_prob, zero_allowed=False)
        check_positive_number("learning_rate", self.learning_rate)
        check_int("seed", self.seed, minimum=0)
        check_heads(self.embed_dim, self.num_heads)
        if self.embed_dim % (2 * self.num_heads) != 0:
            raise ValueError(
                f"embed_dim ({self.embed_dim}) must be divisible by 2 * num_heads "
                f"({2 * self.num_heads}) so that RoPE has an even head_dim"
            )
        if not isinstance(self.eval_lengths, tuple):
            raise TypeError(f"eval_lengths must be a tuple of positive ints, got {type(self.eval_lengths).__name__}")
        if not self.eval_lengths:
            raise ValueError(f"eval_lengths must be positive lengths, got {self.eval_lengths}")
        for i, T in enumerate(self.eval_lengths):
            check_int(f"eval_lengths[{i}]", T)

    @property
    def vocab_size(self) -> int:
        return self.num_letters + self.num_fillers

    @property
    def context_length(self) -> int:
        """The longest sequence the model sees (training or test): the rows of the learned table."""
        return max(self.train_length, *self.eval_lengths)

    @classmethod
    def tiny(cls) -> LengthGenConfig:
        """A few seconds per kind of positions on one CPU thread."""
        return cls()

    @classmethod
    def full(cls) -> LengthGenConfig:
        """A wider model, longer run and longer test sequences (a minute or two each on a CPU)."""
        return cls(embed_dim=64, num_layers=2, max_steps=1500, batch_size=64, eval_lengths=(8, 16, 32, 64, 128, 256))


def make_batch(
    config: LengthGenConfig, batch_size: int, T: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences of the "last letter" task and their answers; position 0 is always a letter.

    Shape: -> tokens (B, T) long, targets (B, T) long. Taught in notebook 06.
    """
    _check_config(config)
    check_int("batch_size", batch_size)
    check_int("T", T)
    is_letter = torch.rand(batch_size, T, generator=generator) < config.letter_prob  # (B, T)
    is_letter[:, 0] = True
    letters = torch.randint(0, config.num_letters, (batch_size, T), generator=generator)
    fillers = torch.randint(config.num_letters, config.vocab_size, (batch_size, T), generator=generator)
    tokens = torch.where(is_letter, letters, fillers)  # (B, T)
    # index of the most recent letter at or before t: a running maximum of (t if letter else 0)
    last = torch.where(is_letter, torch.arange(T), torch.zeros((), dtype=torch.long)).cummax(dim=1).values
    return tokens, tokens.gather(1, last)  # (B, T), (B, T)


def _check_config(config: object) -> None:
    if not isinstance(config, LengthGenConfig):
        raise TypeError(f"config must be a LengthGenConfig (LengthGenConfig.tiny(), say), got {type(config).__name__}")


_ATTENTION = {  # else MultiHeadAttention; the GPT's layer with RoPE, with the bias MultiHeadAttention has
    "rope": lambda C, H: GroupedQueryAttention(C, H, bias=True, rope=True),
    "alibi": ALiBiMultiHeadAttention,
}


class TinyPositionalModel(nn.Module):
    """Token embedding, ``positions`` (one of :data:`POSITIONS`), pre-norm causal blocks, a linear read-out.

    "learned" and "sinusoidal" add a vector to the embeddings, "rope" and "alibi" change the attention, "none"
    has no positions. Shape: tokens (B, T) long -> logits (B, T, num_letters). Taught in notebook 06.
    """

    def __init__(self, config: LengthGenConfig, positions: str) -> None:
        super().__init__()
        _check_config(config)
        check_choice("positions", positions, POSITIONS)
        self.config, self.positions = config, positions
        self.tok_emb = nn.Embedding(config.vocab_size, config.embed_dim)
        learned = positions == "learned"
        self.pos_emb = LearnedPositionalEmbedding(config.context_length, config.embed_dim) if learned else None
        attention = _ATTENTION.get(positions, MultiHeadAttention)
        self.blocks = nn.ModuleList(
            Block(config.embed_dim, attention(config.embed_dim, config.num_heads)) for _ in range(config.num_layers)
        )  # pre-norm
        self.ln_f = nn.LayerNorm(config.embed_dim)
        self.head = nn.Linear(config.embed_dim, config.num_letters)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_token_ids("tokens", tokens, self.config.vocab_size)
        T = tokens.shape[1]
        x = self.tok_emb(tokens)  # (B, T) -> (B, T, C)
        if self.positions == "learned":
            x = self.pos_emb(x)  # (B, T, C) + a trained row per position
        elif self.positions == "sinusoidal":
            x = x + sinusoidal_encoding(T, self.config.embed_dim).to(x)  # (B, T, C) + (T, C)
        mask = causal_mask(T, device=tokens.device)  # (T, T)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))  # (B, T, num_letters)


def train_model(
    config: LengthGenConfig, positions: str, progress: Iterable[int] | None = None
) -> tuple[TinyPositionalModel, list[float]]:
    """Train a fresh model for ``config.max_steps`` AdamW steps at length ``config.train_length``, seeded alike.

    ``progress`` may wrap ``range(config.max_steps)`` (a tqdm bar). Returns the model in eval mode and the losses.
    """
    _check_config(config)
    torch.manual_seed(config.seed)
    model = TinyPositionalModel(config, positions)
    opt = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    g = torch.Generator().manual_seed(config.seed + 1)
    losses = []
    for _ in progress if progress is not None else range(config.max_steps):
        tokens, targets = make_batch(config, config.batch_size, config.train_length, g)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


@torch.no_grad()
def evaluate(model: TinyPositionalModel, T: int) -> tuple[float, float]:
    """Loss and accuracy on ``config.eval_batch_size`` fresh sequences of length T (the same ones for every model),
    counted at the fillers (letters need no position)."""
    if not isinstance(model, TinyPositionalModel):
        raise TypeError(f"model must be a TinyPositionalModel (from train_model), got {type(model).__name__}")
    config = model.config
    tokens, targets = make_batch(config, config.eval_batch_size, T, torch.Generator().manual_seed(1234))
    logits = model(tokens)  # (B, T, num_letters)
    filler = tokens >= config.num_letters  # (B, T)
    loss = F.cross_entropy(logits[filler], targets[filler]).item()
    acc = (logits.argmax(-1) == targets)[filler].float().mean().item()
    return loss, acc


def accuracy_by_length(model: TinyPositionalModel, lengths: Iterable[int]) -> dict[int, float]:
    """Accuracy at filler positions for each sequence length (see :func:`evaluate`)."""
    if isinstance(lengths, (int, str)) or not isinstance(lengths, Iterable):
        raise TypeError(f"lengths must be a list of sequence lengths, e.g. [16, 32], got {lengths!r}")
    return {T: evaluate(model, T)[1] for T in lengths}
