"""Pictures of attention: heatmaps of weights with token labels, one head or many.

Used from notebook 01 on; later notebooks (08) reuse them for a trained model.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

__all__ = ["plot_weights", "plot_heads"]


def _as_2d(weights: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(weights).__name__}")
    return weights.detach().float().cpu()


def plot_weights(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
) -> plt.Axes:
    """Heatmap of one attention matrix: rows are queries, columns are keys.

    Shape:
        weights: (T, S)

    Masked entries (weight 0) show as the lightest colour; values are written in the cells when the
    matrix is small enough to read (``annotate=None`` decides by size).
    """
    w = _as_2d(weights, "weights")
    if w.dim() != 2:
        raise ValueError(f"plot_weights takes one (T, S) matrix, got shape {tuple(w.shape)}; use plot_heads for (H, T, S)")
    T, S = w.shape
    for name, labels, n in (("query_labels", query_labels, T), ("key_labels", key_labels, S)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} entries, the weights have {n}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * S + 1.8, 0.4 * T + 1.2))
    top = max(1e-9, float(torch.nan_to_num(w, nan=0.0).max()))  # a NaN row (fully masked) must not set the scale
    ax.imshow(w.numpy(), cmap="Blues", vmin=0.0, vmax=top)
    ax.set_xticks(range(S), labels=list(key_labels) if key_labels is not None else range(S), rotation=90)
    ax.set_yticks(range(T), labels=list(query_labels) if query_labels is not None else range(T))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    if annotate if annotate is not None else (T * S <= 100):
        for i in range(T):
            for j in range(S):
                v = float(w[i, j])
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if v > 0.6 * top else "black")
    return ax


def plot_heads(
    weights: torch.Tensor,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    max_cols: int = 4,
) -> plt.Figure:
    """One heatmap per head, side by side.

    Shape:
        weights: (H, T, S); labels label both queries and keys when T == S
    """
    w = _as_2d(weights, "weights")
    if w.dim() != 3:
        raise ValueError(f"plot_heads takes (H, T, S) weights, got shape {tuple(w.shape)}")
    H, T, S = w.shape
    cols = min(H, max_cols)
    rows = (H + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.4 * rows + 0.4), squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.axis("off")
            continue
        plot_weights(w[h], labels if labels is not None and len(labels) == T else None,
                     labels if labels is not None and len(labels) == S else None,
                     ax=ax, title=f"head {h}", annotate=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
