"""Pictures of attention: heatmaps of weights with token labels, one head or many (notebooks 01 to 11).

Every heatmap of weights carries a colourbar; panels drawn together share one colour scale and one colourbar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.colorbar import Colorbar
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course_utils._validate import check_holds_values, check_int, check_positive_number, check_str, check_tensor

__all__ = [
    "plot_weights",
    "shared_colorbar",
    "plot_heads",
    "char_labels",
    "stack_maps",
    "plot_attention_maps",
    "plot_loss_curve",
    "LiveLossPlot",
]


def _as_2d(weights: torch.Tensor, what: str) -> torch.Tensor:
    check_tensor(what, weights, min_dim=0)
    check_holds_values(what, weights)
    if weights.numel() == 0:
        raise ValueError(f"{what} is empty (shape {tuple(weights.shape)}): there is nothing to plot")
    return weights.detach().float().cpu()


def plot_weights(
    weights: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    vmax: float | None = 1.0,
    mask: torch.Tensor | None = None,
    colorbar: bool = True,
) -> plt.Axes:
    """Heatmap of one attention matrix (T, S), with a colourbar: rows are queries, columns are keys.

    The colour scale runs from 0 to ``vmax`` (1: weights are probabilities; None: this matrix's largest).
    Values are written in the cells when the matrix is small (``annotate=None`` decides by size). With a
    boolean ``mask`` (T, S) every cell is written: blocked cells hatched and blank unless weight leaked into
    them, a NaN weight in red. ``colorbar=False`` is for panels that share one (:func:`shared_colorbar`).
    """
    w = _as_2d(weights, "weights")
    if w.dim() != 2:
        raise ValueError(
            f"plot_weights takes one (T, S) matrix, got shape {tuple(w.shape)}; use plot_heads for (H, T, S)"
        )
    T, S = w.shape
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != w.shape):
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor of the weights' shape {tuple(w.shape)}, got {got}")
    for name, labels, n in (("query_labels", query_labels, T), ("key_labels", key_labels, S)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} entries, the weights have {n}")
    nan = w.isnan()
    w = torch.nan_to_num(w, nan=0.0)  # the colour scale needs finite numbers: a NaN row (fully masked) must not set it
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * S + 1.8, 0.4 * T + 1.2))
    top = check_positive_number("vmax", vmax) if vmax is not None else max(1e-9, float(w.max()))
    image = ax.imshow(w.numpy(), cmap="Blues", vmin=0.0, vmax=top)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="weight", fraction=0.046, pad=0.04)
    ax.set_xticks(range(S), labels=list(key_labels) if key_labels is not None else range(S), rotation=90)
    ax.set_yticks(range(T), labels=list(query_labels) if query_labels is not None else range(T))
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title)
    if mask is None and not (annotate if annotate is not None else T * S <= 100):
        return ax
    peak = top if mask is None else float(w.max())
    for i in range(T):
        for j in range(S):
            v = float(w[i, j])
            color = "white" if v > 0.6 * peak else "black"  # white on the darkest colours
            if mask is not None and not mask[i, j]:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", lw=0, edgecolor="0.7"))
            if nan[i, j]:
                ax.text(j, i, "NaN", ha="center", va="center", fontsize=7, color="tab:red", weight="bold")
            elif mask is None or mask[i, j] or v > 0:  # a blocked cell with weight > 0 is leakage: show it
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color=color)
    return ax


def shared_colorbar(axes: Sequence[plt.Axes], label: str = "weight") -> Colorbar:
    """One colourbar for several heatmaps drawn on one colour scale (``plot_weights(..., colorbar=False)``).

    The panels must share one ``vmax``; draw them in a figure with ``layout="constrained"``.
    """
    if isinstance(axes, plt.Axes) or not isinstance(axes, Sequence) or not axes:
        raise TypeError(f"axes must be a non-empty list of the panels' axes, got {type(axes).__name__}")
    images = [image for ax in axes for image in ax.get_images()]
    if not images:
        raise ValueError("none of the axes holds a heatmap: draw the panels first (plot_weights(..., colorbar=False))")
    scales = sorted({tuple(round(float(c), 6) for c in image.get_clim()) for image in images})
    if len(scales) > 1:
        raise ValueError(f"the panels use {len(scales)} colour scales {scales}: draw them with one vmax to share a bar")
    return axes[0].figure.colorbar(images[0], ax=list(axes), label=label, shrink=0.85)


def plot_heads(
    weights: torch.Tensor,
    labels: Sequence[str] | None = None,
    title: str | None = None,
) -> plt.Figure:
    """One heatmap per head, four to a row, all on one colour scale (0 to 1) with one colourbar.

    Shape: weights (H, T, S); labels label both queries and keys when T == S.
    """
    w = _as_2d(weights, "weights")
    if w.dim() != 3:
        raise ValueError(f"plot_heads takes (H, T, S) weights, got shape {tuple(w.shape)}")
    H, T, S = w.shape
    cols = min(H, 4)
    rows = (H + cols - 1) // cols
    fig, axes = plt.subplots(
        rows, cols, figsize=(2.6 * cols + 0.8, 2.4 * rows + 0.4), squeeze=False, layout="constrained"
    )
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.axis("off")
            continue
        plot_weights(
            w[h],
            labels if labels is not None and len(labels) == T else None,
            labels if labels is not None and len(labels) == S else None,
            ax=ax,
            title=f"head {h}",
            annotate=False,
            colorbar=False,
        )
    shared_colorbar(list(axes.flat[:H]))
    if title:
        fig.suptitle(title)
    return fig


# --- Notebooks 10 and 11: a trained character-level GPT -----------------------------------------------------

_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥"}


def char_labels(text: str) -> list[str]:
    """One label per character, with blanks made visible: a space is '␣', a newline '⏎', a tab '⇥'."""
    check_str("text", text)
    return [_VISIBLE.get(c, c) for c in text]


def stack_maps(maps: Sequence[torch.Tensor], name: str = "maps") -> torch.Tensor:
    """Every layer's weights on one sequence, as ``GPT.attention_maps`` returns them, checked and stacked.

    Shape: maps, a list of L tensors (1, H, T, T) -> (L, H, T, T), detached, on the CPU. Used in notebook 11.
    """
    if isinstance(maps, torch.Tensor) or not isinstance(maps, Sequence):
        raise TypeError(
            f"{name} must be a list of tensors (1, H, T, T), one per layer, as GPT.attention_maps returns, "
            f"got {type(maps).__name__}"
        )
    if len(maps) == 0:
        raise ValueError(f"{name} must hold at least one layer, got an empty list")
    for i, a in enumerate(maps):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{name}[{i}] must be a torch.Tensor (1, H, T, T), got {type(a).__name__}")
        check_holds_values(f"{name}[{i}]", a)
        if a.ndim != 4 or a.shape[0] != 1 or a.shape[2] != a.shape[3] or 0 in a.shape:
            raise ValueError(
                f"{name}[{i}] must be the self-attention weights (1, H, T, T) of one sequence, got shape "
                f"{tuple(a.shape)}"
                + (f"; pick one, e.g. [a[:1] for a in {name}]" if a.ndim == 4 and a.shape[0] > 1 else "")
            )
        if a.shape != maps[0].shape:
            raise ValueError(
                f"every layer must have the same shape: {name}[0] is {tuple(maps[0].shape)}, {name}[{i}] is "
                f"{tuple(a.shape)}"
            )
        if not a.is_floating_point():
            raise TypeError(f"{name}[{i}] must hold weights, a floating-point tensor, got dtype {a.dtype}")
        if not torch.isfinite(a).all():
            raise ValueError(f"{name}[{i}] holds NaN or infinite weights: a softmax over a row with every key masked?")
    return torch.stack([a.detach().cpu()[0] for a in maps])  # L x (1, H, T, T) -> (L, H, T, T)


def plot_attention_maps(maps: Sequence[torch.Tensor], labels: Sequence[str]) -> Figure:
    """A grid of heatmaps: one row per layer, one column per head, for one sequence, with one colourbar.

    Shape: maps, a list over layers of (1, H, T, T) weights (``GPT.attention_maps``); labels T.
    Every panel runs from 0 to 1. Only the bottom row labels keys and the left column queries, at evenly spaced
    positions that fit a panel (the last always). Used in notebook 11.
    """
    w = stack_maps(maps).float()  # (L, H, T, T)
    if not isinstance(labels, (Sequence, str)):
        raise TypeError(f"labels must be a list of T strings (char_labels(text), say), got {type(labels).__name__}")
    L, H, T, _ = w.shape
    if len(labels) != T:
        raise ValueError(f"labels has {len(labels)} entries, the weights have {T} positions")
    cell, fontsize = 2.2, 7.0  # inches per panel; labels about 1.5 font sizes apart on a panel
    step = math.ceil(T / int(cell * 72 / (1.5 * fontsize)))
    ticks = list(range(T - 1, -1, -step))[::-1]  # evenly spaced, ending at the last position
    shown = [str(labels[t]) for t in ticks]
    fig = Figure(figsize=(cell * H + 0.9, cell * L + 0.5), layout="constrained")
    axes = fig.subplots(L, H, squeeze=False)
    for r in range(L):
        for h in range(H):
            ax = axes[r][h]
            image = ax.imshow(w[r, h].numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
            ax.set_xticks(ticks, labels=shown if r == L - 1 else [], fontsize=fontsize, rotation=0)
            ax.set_yticks(ticks, labels=shown if h == 0 else [], fontsize=fontsize)
            ax.set_title(f"layer {r}, head {h}", fontsize=fontsize + 1)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="weight", shrink=0.8)
    return fig


def plot_loss_curve(
    history: Sequence[float],
    evals: Sequence[Sequence[float]] = (),
    baselines: Mapping[str, float] | None = None,
    total_steps: int | None = None,
    smooth: int = 20,
) -> Figure:
    """Training loss per step (light), its running mean over ``smooth`` steps, evaluations, and baselines.

    ``history`` holds the loss of every step; ``evals`` rows ``(step, train_loss, val_loss)``; ``baselines``
    draws a dashed line per name (e.g. the unigram model). Used in notebook 10.
    """
    if isinstance(history, str) or not hasattr(history, "__len__"):
        raise TypeError(f"history must be a list of losses, one per step, got {type(history).__name__}")
    for i, row in enumerate(evals):
        if isinstance(row, str) or not hasattr(row, "__len__") or len(row) != 3:
            raise ValueError(f"evals must hold rows (step, train_loss, val_loss), got {row!r} at index {i}")
    if baselines is not None and not isinstance(baselines, Mapping):
        raise TypeError(
            f"baselines must be a dict of name -> loss, e.g. {{'unigram': 3.3}}, got {type(baselines).__name__}"
        )
    if total_steps is not None:
        check_int("total_steps", total_steps, minimum=0)
    check_int("smooth", smooth)
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.subplots()
    steps = torch.arange(1, len(history) + 1)
    if len(history):
        h = torch.tensor(list(history), dtype=torch.float64)
        ax.plot(steps, h, color="tab:blue", alpha=0.25, linewidth=0.8, label="train loss (each step)")
        k = max(1, min(smooth, len(h)))
        running = torch.tensor([float(h[max(0, i - k + 1) : i + 1].mean()) for i in range(len(h))])
        ax.plot(steps, running, color="tab:blue", linewidth=1.5, label=f"train loss (mean of {k} steps)")
    if len(evals):
        e = torch.tensor([list(r) for r in evals], dtype=torch.float64)
        ax.plot(e[:, 0], e[:, 2], "o-", color="tab:orange", markersize=4, label="validation loss (estimate)")
    for i, (name, value) in enumerate((baselines or {}).items()):
        ax.axhline(value, linestyle="--", linewidth=1, color=f"C{i + 2}", label=f"{name}: {value:.2f}")
    ax.set_xlim(0, max(total_steps or 0, len(history), 1))
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


class LiveLossPlot:
    """A loss curve that redraws itself while a model trains: ``train(..., callback=LiveLossPlot(...))``.

    In a notebook it redraws in place every ``every`` logged intervals and at each evaluation.
    """

    def __init__(
        self,
        total_steps: int,
        baselines: Mapping[str, float] | None = None,
        every: int = 5,
    ) -> None:
        check_int("every", every)
        check_int("total_steps", total_steps, minimum=0)
        self.total_steps = total_steps
        self.baselines = dict(baselines or {})
        self.every = every
        self.points: list[tuple[int, float]] = []  # (step, mean loss over the logged interval)
        self.evals: list[list[float]] = []
        self.updates = 0
        self._handle = None

    def __call__(self, event: dict) -> None:
        if event["kind"] == "train":
            self.points.append((event["step"], event["loss"]))
            if len(self.points) % self.every == 0:
                self.show()
        elif event["kind"] == "eval":
            self.evals.append([event["step"], event["train_loss"], event["val_loss"]])
            self.show()

    def figure(self) -> Figure:
        """The picture so far: the logged interval means stand in for per-step losses while training runs."""
        history: list[float] = []
        last = 0
        for step, loss in self.points:  # fill each logged interval with its mean, up to the step it ends at
            history.extend([loss] * max(0, step - last))
            last = max(last, step)
        return plot_loss_curve(history, self.evals, self.baselines, self.total_steps, smooth=1)

    def show(self) -> None:
        """Draw (the first time) or redraw in place (later); outside IPython, do nothing."""
        from IPython import get_ipython
        from IPython.display import display

        self.updates += 1
        if get_ipython() is None:
            return
        fig = self.figure()
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
