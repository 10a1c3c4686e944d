"""A tiny experiment for notebook 06: train the same small model with each positional scheme, then test it
on sequences longer than any it was trained on.

The task, "last letter": a sequence mixes *letters* (tokens 0 .. num_letters - 1) and *fillers* (the other
tokens). At every position the model must output the most recent letter at or before that position. The
answer is a fixed rule about *relative* position (the nearest letter looking back), the same at position 5
as at position 500, so a scheme that sees relative positions can carry it to longer sequences; one that
learned absolute positions has to have seen every position. Without any positions, a model cannot tell
which of the earlier letters is the most recent.

Read top to bottom: the configuration (with a tiny CI preset and a full preset), the data, the model, the
training loop, the evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import (
    check_choice,
    check_fraction,
    check_int,
    check_positive_int,
    check_positive_number,
    check_token_ids,
)
from course_utils.block import Block
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import (
    ALiBiMultiHeadAttention,
    LearnedPositionalEmbedding,
    RotaryMultiHeadAttention,
    sinusoidal_encoding,
)

__all__ = ["SCHEMES", "LengthGenConfig", "make_batch", "TinyPositionalModel", "train_model", "evaluate",
           "accuracy_by_length"]

SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi")


@dataclass(frozen=True)
class LengthGenConfig:
    """Everything the experiment depends on. ``tiny()`` runs in seconds on a CPU (CI); ``full()`` is the real run."""

    num_letters: int = 8
    num_fillers: int = 8
    letter_prob: float = 0.25
    embed_dim: int = 32
    num_heads: int = 4
    num_layers: int = 1
    train_length: int = 16
    eval_lengths: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128)
    steps: int = 400
    batch_size: int = 32
    lr: float = 3e-3
    eval_batch: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_letters", "num_fillers", "embed_dim", "num_heads", "num_layers", "train_length",
                     "steps", "batch_size", "eval_batch"):
            check_positive_int(name, getattr(self, name))
        check_fraction("letter_prob", self.letter_prob, zero_allowed=False)
        check_positive_number("lr", self.lr)
        check_int("seed", self.seed, minimum=0)
        if self.embed_dim % (2 * self.num_heads) != 0:
            raise ValueError(f"embed_dim ({self.embed_dim}) must be divisible by 2 * num_heads "
                             f"({2 * self.num_heads}) so that RoPE has an even head_dim")
        if not isinstance(self.eval_lengths, tuple):
            raise TypeError(f"eval_lengths must be a tuple of positive ints, got {type(self.eval_lengths).__name__}")
        if not self.eval_lengths:
            raise ValueError(f"eval_lengths must be positive lengths, got {self.eval_lengths}")
        for i, T in enumerate(self.eval_lengths):
            check_positive_int(f"eval_lengths[{i}]", T)

    @property
    def vocab_size(self) -> int:
        return self.num_letters + self.num_fillers

    @property
    def max_length(self) -> int:
        return max(self.train_length, *self.eval_lengths)

    @classmethod
    def tiny(cls) -> LengthGenConfig:
        """A few seconds per scheme on one CPU thread: enough to see the differences."""
        return cls()

    @classmethod
    def full(cls) -> LengthGenConfig:
        """A longer run with a wider model and longer test sequences (a minute or two per scheme on a CPU)."""
        return cls(embed_dim=64, num_layers=2, steps=1500, batch_size=64, eval_lengths=(8, 16, 32, 64, 128, 256))

    def with_(self, **changes) -> LengthGenConfig:
        return replace(self, **changes)


def make_batch(cfg: LengthGenConfig, batch_size: int, T: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sequences of the "last letter" task and their answers.

    Shape:
        -> tokens: (B, T) long, targets: (B, T) long

    Position 0 is always a letter, so every position has an answer.
    """
    _check_config(cfg)
    check_positive_int("batch_size", batch_size)
    check_positive_int("T", T)
    is_letter = torch.rand(batch_size, T, generator=generator) < cfg.letter_prob  # (B, T)
    is_letter[:, 0] = True
    letters = torch.randint(0, cfg.num_letters, (batch_size, T), generator=generator)
    fillers = torch.randint(cfg.num_letters, cfg.vocab_size, (batch_size, T), generator=generator)
    tokens = torch.where(is_letter, letters, fillers)  # (B, T)
    # index of the most recent letter at or before t: a running maximum of (t if letter else 0)
    last = torch.where(is_letter, torch.arange(T), torch.zeros((), dtype=torch.long)).cummax(dim=1).values
    return tokens, tokens.gather(1, last)  # (B, T), (B, T)


def _check_config(cfg: object) -> None:
    if not isinstance(cfg, LengthGenConfig):
        raise TypeError(f"cfg must be a LengthGenConfig (LengthGenConfig.tiny(), say), got {type(cfg).__name__}")


_ATTENTION = {"rope": RotaryMultiHeadAttention, "alibi": ALiBiMultiHeadAttention}  # else MultiHeadAttention


class TinyPositionalModel(nn.Module):
    """Token embedding, positions by ``scheme``, ``num_layers`` pre-norm causal blocks, a linear read-out.

    Shape:
        tokens: (B, T) long -> logits: (B, T, num_letters)

    ``scheme`` is one of :data:`SCHEMES`. "learned" and "sinusoidal" add a position vector to the token
    embeddings; "rope" and "alibi" change the attention (:class:`RotaryMultiHeadAttention`,
    :class:`ALiBiMultiHeadAttention`); "none" uses plain :class:`MultiHeadAttention` and no positions.
    The learned table has ``cfg.max_length`` rows, but only the first ``train_length`` are ever trained.
    """

    def __init__(self, cfg: LengthGenConfig, scheme: str) -> None:
        super().__init__()
        _check_config(cfg)
        check_choice("scheme", scheme, SCHEMES)
        self.cfg, self.scheme = cfg, scheme
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        self.pos_emb = LearnedPositionalEmbedding(cfg.max_length, cfg.embed_dim) if scheme == "learned" else None
        attention = _ATTENTION.get(scheme, MultiHeadAttention)
        self.blocks = nn.ModuleList(Block(cfg.embed_dim, attention(cfg.embed_dim, cfg.num_heads))
                                    for _ in range(cfg.num_layers))  # pre-norm
        self.ln_f = nn.LayerNorm(cfg.embed_dim)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_letters)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_token_ids("tokens", tokens, self.cfg.vocab_size)
        T = tokens.shape[1]
        x = self.tok_emb(tokens)  # (B, T) -> (B, T, C)
        if self.scheme == "learned":
            x = self.pos_emb(x)  # (B, T, C) + a trained row per position
        elif self.scheme == "sinusoidal":
            x = x + sinusoidal_encoding(T, self.cfg.embed_dim).to(x)  # (B, T, C) + (T, C)
        mask = causal_mask(T, device=tokens.device)  # (T, T)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))  # (B, T, num_letters)


def train_model(cfg: LengthGenConfig, scheme: str, progress: Iterable[int] | None = None) -> tuple[TinyPositionalModel, list[float]]:
    """Train a fresh model for ``cfg.steps`` steps of AdamW on sequences of length ``cfg.train_length``.

    The same seed for every scheme: the same data, in the same order. ``progress`` may wrap
    ``range(cfg.steps)`` (a tqdm bar, say). Returns the model (in eval mode) and the loss of every step.
    """
    _check_config(cfg)
    torch.manual_seed(cfg.seed)
    model = TinyPositionalModel(cfg, scheme)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in progress if progress is not None else range(cfg.steps):
        tokens, targets = make_batch(cfg, cfg.batch_size, cfg.train_length, g)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


@torch.no_grad()
def evaluate(model: TinyPositionalModel, T: int, batch_size: int | None = None, seed: int = 1234) -> tuple[float, float]:
    """Loss and accuracy on fresh sequences of length T, counting only positions holding a filler.

    At a letter the answer is the token itself, which needs no position; the fillers are where the model
    has to find the most recent letter.
    """
    if not isinstance(model, TinyPositionalModel):
        raise TypeError(f"model must be a TinyPositionalModel (from train_model), got {type(model).__name__}")
    cfg = model.cfg
    check_positive_int("T", T)
    batch_size = cfg.eval_batch if batch_size is None else check_positive_int("batch_size", batch_size)
    g = torch.Generator().manual_seed(seed)
    tokens, targets = make_batch(cfg, batch_size, T, g)
    logits = model(tokens)  # (B, T, num_letters)
    filler = tokens >= cfg.num_letters  # (B, T)
    loss = F.cross_entropy(logits[filler], targets[filler]).item()
    acc = (logits.argmax(-1) == targets)[filler].float().mean().item()
    return loss, acc


def accuracy_by_length(model: TinyPositionalModel, lengths: Iterable[int]) -> dict[int, float]:
    """Accuracy at filler positions for each sequence length (see :func:`evaluate`)."""
    if isinstance(lengths, (int, str)) or not isinstance(lengths, Iterable):
        raise TypeError(f"lengths must be a list of sequence lengths, e.g. [16, 32], got {lengths!r}")
    return {T: evaluate(model, T)[1] for T in lengths}
