"""The transformer block around any attention module, shared by every model in the course.

Reading order: :class:`MLP`, then :class:`Block`; used in notebooks 06, 08 and 09.
``forward`` checks its input; a model that checked it calls ``forward_unchecked``.
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

    Shape: x (B, T, C) -> (B, T, C). Taught in notebook 10.
    """

    def __init__(self, embed_dim: int, mlp_ratio: int = 4, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        check_int("mlp_ratio", mlp_ratio)
        check_int("embed_dim", embed_dim)
        check_bool("bias", bias)
        check_fraction("dropout", dropout)
        hidden = mlp_ratio * embed_dim
        self.fc_in = nn.Linear(embed_dim, hidden, bias=bias)
        self.fc_out = nn.Linear(hidden, embed_dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_embedded("x", x, self.fc_in.in_features, self)
        return self.forward_unchecked(x)

    def forward_unchecked(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc_in(x))  # (B, T, C) -> (B, T, 4C)
        return self.dropout(self.fc_out(h))  # (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """A transformer block around ``attn``: pre-norm x + attn(ln_1(x)), then x + mlp(ln_2(x)) (the default),
    or post-norm ln_1(x + attn(x)), then ln_2(x + mlp(x)). ``dropout`` acts on both branches' outputs.

    ``block(x, *args, **kwargs)`` passes everything after ``x`` to ``attn``, which returns (B, T, C).
    Shape: x (B, T, C) -> (B, T, C). Taught in notebook 10.
    """

    def __init__(
        self,
        embed_dim: int,
        attn: nn.Module,
        mlp_ratio: int = 4,
        bias: bool = True,
        dropout: float = 0.0,
        norm_position: str = "pre",
    ) -> None:
        super().__init__()
        check_int("embed_dim", embed_dim)
        if not isinstance(attn, nn.Module):
            raise TypeError(f"attn must be an nn.Module (an attention layer), got {type(attn).__name__}")
        check_choice("norm_position", norm_position, NORM_POSITIONS)
        check_bool("bias", bias)
        self.norm_position = norm_position
        self.ln_1 = nn.LayerNorm(embed_dim, bias=bias)
        self.attn = attn
        self.ln_2 = nn.LayerNorm(embed_dim, bias=bias)
        self.mlp = MLP(embed_dim, mlp_ratio, bias=bias, dropout=dropout)
        self.resid_dropout = nn.Dropout(dropout)  # on the attention branch; the MLP drops its own output

    def attend(self, x: torch.Tensor, *args, **kwargs):
        """The attention branch alone, attn(ln_1(x)) (post-norm: attn(x)), and whatever else attn returns."""
        return self.attn(self.ln_1(x) if self.norm_position == "pre" else x, *args, **kwargs)

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        check_embedded("x", x, self.ln_1.normalized_shape[0], self)
        if kwargs.get("need_weights", False) is not False:
            raise TypeError("a block returns x only: for the attention weights call block.attend(x, need_weights=True)")
        return self.forward_unchecked(x, *args, **kwargs)

    def forward_unchecked(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return self.add_branches(x, self.attend(x, *args, **kwargs))

    def add_branches(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The rest of the block, given its attention branch ``a = self.attend(x)``: (B, T, C)."""
        a = self.resid_dropout(a)  # (B, T, C)
        if self.norm_position == "pre":
            x = x + a  # (B, T, C)
            return x + self.mlp.forward_unchecked(self.ln_2(x))  # (B, T, C)
        x = self.ln_1(x + a)  # post-norm: normalise the sum (B, T, C)
        return self.ln_2(x + self.mlp.forward_unchecked(x))  # (B, T, C)
