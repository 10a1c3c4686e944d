"""The transformer block, around any attention module: the one block of every model in the course.

:class:`MLP` is the position-wise feed-forward network; :class:`Block` adds an attention branch and an MLP
branch to the residual stream, pre-norm (GPT-2 onwards) or post-norm (the original Transformer). The
attention module is a parameter, so the length-generalisation models (notebook 06), the
:class:`~course_utils.variants.TinyDecoder` (notebook 08) and the :class:`~course_utils.gpt.GPT`
(notebook 09) share this one class; each calls its block with what its attention takes (a mask, a cache).

Shapes: B batch, T length, C embed_dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils._validate import check_bool, check_choice, check_embedded, check_fraction, check_int

__all__ = ["MLP", "Block"]

NORM_POSITIONS = ("pre", "post")


class MLP(nn.Module):
    """The position-wise feed-forward network: C -> mlp_ratio * C -> GELU -> C, then dropout.

    Shape:
        x: (B, T, C) -> (B, T, C)
    """

    def __init__(self, embed_dim: int, mlp_ratio: int = 4, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        hidden = check_int("mlp_ratio", mlp_ratio) * check_int("embed_dim", embed_dim)
        self.fc_in = nn.Linear(embed_dim, hidden, bias=check_bool("bias", bias))
        self.fc_out = nn.Linear(hidden, embed_dim, bias=bias)
        self.dropout = nn.Dropout(check_fraction("dropout", dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            check_embedded("x", x, self.fc_in.in_features, self)
        h = F.gelu(self.fc_in(x))  # (B, T, C) -> (B, T, 4C)
        return self.dropout(self.fc_out(h))  # (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """A transformer block around ``attn``: pre-norm x + attn(ln_1(x)), then x + mlp(ln_2(x)) (the default),
    or post-norm ln_1(x + attn(x)), then ln_2(x + mlp(x)) (``norm_position="post"``).

    Shape:
        x: (B, T, C) -> (B, T, C)

    ``block(x, *args, **kwargs)`` passes everything after ``x`` to ``attn`` (a mask, a cache, ...), which
    returns (B, T, C). Pre-norm keeps an untouched path from the embeddings to the output, which lets deep
    stacks train without a careful warmup (GPT-2; Xiong et al. 2020); post-norm normalises the sum. Taught in
    notebook 09.
    """

    def __init__(self, embed_dim: int, attn: nn.Module, mlp_ratio: int = 4, bias: bool = True,
                 dropout: float = 0.0, norm_position: str = "pre") -> None:
        super().__init__()
        check_int("embed_dim", embed_dim)
        if not isinstance(attn, nn.Module):
            raise TypeError(f"attn must be an nn.Module (an attention layer), got {type(attn).__name__}")
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.norm_position = norm_position
        self.ln_1 = nn.LayerNorm(embed_dim, bias=check_bool("bias", bias))
        self.attn = attn
        self.ln_2 = nn.LayerNorm(embed_dim, bias=bias)
        self.mlp = MLP(embed_dim, mlp_ratio, bias=bias, dropout=dropout)

    def attend(self, x: torch.Tensor, *args, **kwargs):
        """The attention branch alone, attn(ln_1(x)) pre-norm or attn(x) post-norm: (B, T, C) -> (B, T, C)
        (and whatever else ``attn`` returns, such as its weights)."""
        return self.attn(self.ln_1(x) if self.norm_position == "pre" else x, *args, **kwargs)

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            check_embedded("x", x, self.ln_1.normalized_shape[0], self)
        return self.add_branches(x, self.attend(x, *args, **kwargs))

    def add_branches(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The rest of the block, given its attention branch ``a = self.attend(x)``: (B, T, C) -> (B, T, C)."""
        if self.norm_position == "pre":
            x = x + a  # (B, T, C)
            return x + self.mlp(self.ln_2(x))  # (B, T, C)
        x = self.ln_1(x + a)  # post-norm: normalise the sum (B, T, C)
        return self.ln_2(x + self.mlp(x))  # (B, T, C)
