"""Interactive explorers (notebooks 01-04, 11, 12): a plot function per picture, and a widget that drives it.

A **plot function** (``plot_lookup`` ...) is deterministic and returns a matplotlib ``Figure``, the static picture
nbval checks. An **explorer** (``lookup_explorer`` ...) is an :class:`Explorer`: labelled controls above an
``Output`` that shows the plot function's picture for the controls' values, so it can be driven from plain Python:
``ex = mask_explorer(); ex.control("mask").value = "causal"; ex.caption``. A plot function labels its figure with
a one-line summary of what it shows (``fig.get_label()``), which the explorer shows as its caption.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, partial

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_utils._validate import (
    check_bool,
    check_choice,
    check_float_tensor,
    check_int,
    check_nonnegative_number,
    check_number,
    check_str,
    check_tensor,
)
from course_utils.attention import scaled_dot_product_attention, softmax
from course_utils.environment import figure_scale
from course_utils.masking import causal_mask, combine_masks, mask_scores, padding_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.plotting import char_labels, plot_weights

__all__ = [
    "Explorer",
    "LOOKUP_KEYS",
    "LOOKUP_VALUES",
    "plot_lookup",
    "lookup_explorer",
    "SCALINGS",
    "ENTROPY_DIMS",
    "plot_entropy",
    "entropy_explorer",
    "MASK_KINDS",
    "FILLS",
    "MASK_SENTENCE",
    "plot_mask",
    "mask_explorer",
    "plot_head",
    "head_explorer",
    "plot_gpt_head",
    "gpt_attention_explorer",
    "plot_induction_head",
    "induction_explorer",
]


# --- The widget container shared by all explorers, and the heatmap most of them draw -------------------------


class Explorer(widgets.VBox):
    """Labelled controls above an ``Output``; every change of a control redraws the picture.

    ``plot(**values)`` returns a figure, shown as a PNG and closed, and kept in :attr:`figure` with its label in
    :attr:`caption`. :attr:`renders` counts the redraws. An error of the first drawing is raised (the explorer was
    given bad arguments); a later one is shown in place of the picture.
    """

    def __init__(self, controls: Mapping[str, widgets.ValueWidget], plot: Callable[..., Figure]) -> None:
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.figure: Figure | None = None
        self.caption = ""
        self.renders = 0
        self._plot = plot
        super().__init__([*self.controls.values(), self.output])
        for c in self.controls.values():
            c.observe(lambda change: self.update(), names="value")
        self.update()

    def control(self, description: str) -> widgets.ValueWidget:
        """The control whose label (``description``) is ``description``."""
        for c in self.controls.values():
            if c.description == description:
                return c
        labels = [c.description for c in self.controls.values()]
        raise KeyError(f"no control labelled {description!r}; the labels are {labels}")

    def update(self) -> None:
        """Redraw the picture for the current values (called on every change)."""
        try:
            fig = self._plot(**{name: c.value for name, c in self.controls.items()})
        except (ValueError, TypeError) as e:
            if not self.renders:  # bad arguments fail where the explorer is made, not inside the widget
                raise
            self.caption = f"{type(e).__name__}: {e}"  # show the message, keep the widget alive
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": self.caption + "\n"},)
            return
        buf, scale = io.BytesIO(), figure_scale()
        # the plot functions already call tight_layout; white and sharp as the notebook's own figures are
        fig.savefig(buf, format="png", dpi=fig.dpi * scale, facecolor="white")
        plt.close(fig)  # shown once, in the Output; not again by the inline backend
        self.figure, self.caption = fig, fig.get_label()
        self.renders += 1
        width, height = (round(x * fig.dpi) for x in fig.get_size_inches())
        metadata = {"image/png": {"width": width, "height": height}} if scale > 1 else {}
        data = {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"), "text/plain": self.caption}
        self.output.outputs = ({"output_type": "display_data", "metadata": metadata, "data": data},)


_STYLE = {"description_width": "initial"}  # labels as wide as their text


def _slider(kind: type, description: str, **settings) -> widgets.ValueWidget:
    """A labelled slider that reports its value when released."""
    return kind(description=description, continuous_update=False, style=_STYLE, **settings)


def _heatmap(weights: torch.Tensor, labels: list[str], title: str, caption: str, ax=None, cell=0.5, **kw) -> Figure:
    """``plot_weights`` of (T, T) weights labelled both ways, on a figure of ``cell`` inches a position (or ``ax``)."""
    T = len(labels)
    if ax is None:  # 0.3 inches more for each line of the title after the first
        _, ax = plt.subplots(figsize=(cell * T + 1.8, 0.9 * cell * T + 1.2 + 0.3 * title.count("\n")))
    plot_weights(weights, labels, labels, ax=ax, **kw)
    ax.set_title(title, fontsize=9)
    ax.figure.tight_layout()
    ax.figure.set_label(caption)
    return ax.figure


# --- Notebook 01: the soft lookup ---------------------------------------------------------------------------

LOOKUP_KEYS = torch.tensor([[0.95, 0.05], [0.10, 0.90], [0.80, 0.20]])  # (S, 2): cat, dog, mostly cat
LOOKUP_VALUES = torch.tensor([0.0, 1.0, 0.0])  # (S,): the dog entry holds 1


def plot_lookup(
    angle_deg: float = 0.0,
    length: float = 1.0,
    keys: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
) -> Figure:
    """The soft lookup of one 2-D query: keys and query as arrows (left), the weights and output (right).

    The query is ``length * (cos angle, sin angle)``, the weights ``softmax(keys @ query)`` (no scale).
    Shape: keys (S, 2), values (S,), by default notebook 01's. Used in notebook 01.
    """
    keys = LOOKUP_KEYS if keys is None else keys
    values = LOOKUP_VALUES if values is None else values
    check_float_tensor("keys", keys, min_dim=0)
    check_float_tensor("values", values, min_dim=0)
    if keys.dim() != 2 or keys.shape[1] != 2 or keys.shape[0] == 0:
        raise ValueError(f"keys must be a (S, 2) tensor, S >= 1 (2-D, to be drawn as arrows), got {tuple(keys.shape)}")
    if values.shape != keys.shape[:1]:
        raise ValueError(f"values must be a ({keys.shape[0]},) tensor, one number per key, got {tuple(values.shape)}")
    for name, t in (("keys", keys), ("values", values)):
        if not torch.isfinite(t).all():
            raise ValueError(f"{name} must be finite numbers (to be drawn), got {t.tolist()}")
    if keys.dtype != values.dtype:  # named here: the attention call below would blame q, k and v
        raise TypeError(f"keys and values must share a dtype, got keys {keys.dtype} and values {values.dtype}")
    angle_deg = check_number("angle_deg", angle_deg, "a number of degrees")
    length = check_nonnegative_number("length", length)
    if length > 1e3:
        raise ValueError(f"length must be at most 1,000 (the slider's scale is 0 to 8), got {length:g}")
    if not math.isfinite(angle_deg):
        raise ValueError(f"angle_deg must be a finite number of degrees, got {angle_deg}")
    a = math.radians(angle_deg)
    q = length * torch.tensor([[math.cos(a), math.sin(a)]], dtype=keys.dtype)  # (T=1, 2)
    out, weights = scaled_dot_product_attention(q, keys, values[:, None], scale=1.0)  # (1, 1), (1, S)
    out, weights = out.item(), weights[0].tolist()

    top = float(values.max())
    colors = ["tab:orange" if float(val) == top else "tab:grey" for val in values]
    offsets = [(4, -10), (4, -2), (4, 4)]  # label positions (points), so keys 0 and 2 of the toy stay apart
    fig, (ax_vec, ax_w) = plt.subplots(1, 2, figsize=(7.0, 3.0))
    for j, (kx, ky) in enumerate(keys.tolist()):
        ax_vec.annotate("", xy=(kx, ky), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=colors[j], lw=1.5))
        ax_vec.annotate(
            f"key {j}",
            xy=(kx, ky),
            xytext=offsets[j % len(offsets)],
            textcoords="offset points",
            fontsize=8,
            color=colors[j],
        )
    ax_vec.annotate("", xy=tuple(q[0].tolist()), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color="tab:red", lw=2))
    lim = max(1.2, 1.2 * length, 1.2 * float(keys.abs().max()))
    ax_vec.set(
        xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", title=f"query (red): {angle_deg:.0f} deg, length {length:g}"
    )
    ax_vec.axhline(0, color="lightgrey", lw=0.5)
    ax_vec.axvline(0, color="lightgrey", lw=0.5)
    ax_w.bar([f"key {j}\nvalue {float(v):g}" for j, v in enumerate(values)], weights, color=colors)
    for j, w in enumerate(weights):
        ax_w.text(j, w + 0.02, f"{w:.2f}", ha="center", fontsize=8)
    ax_w.set(ylim=(0, 1.1), ylabel="weight", title=f"out = {out:.3f}")
    fig.tight_layout()
    fig.set_label(f"angle {angle_deg:g}, length {length:g}: weights {[round(w, 3) for w in weights]}, out {out:.3f}")
    return fig


def lookup_explorer(keys: torch.Tensor | None = None, values: torch.Tensor | None = None) -> Explorer:
    """Turn and stretch the query of notebook 01's soft lookup; see the weights and the output.

    Controls: ``angle`` (degrees, 0-360), ``length`` (0-8). Draws :func:`plot_lookup`. Used in notebook 01.
    """
    controls = {
        "angle_deg": _slider(widgets.FloatSlider, description="angle", value=45, min=0, max=360, step=5),
        "length": _slider(widgets.FloatSlider, description="length", value=1.0, min=0.0, max=8.0, step=0.5),
    }
    return Explorer(controls, partial(plot_lookup, keys=keys, values=values))


# --- Notebook 02: head size, scale and the entropy of the weights -------------------------------------------

SCALINGS: dict[str, Callable[[int], float]] = {
    "none": lambda D: 1.0,
    "1/sqrt(D)": lambda D: D**-0.5,
    "1/D": lambda D: 1.0 / D,
}
ENTROPY_DIMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_ENTROPY_T = 32  # queries and keys per sample


def _random_weights(head_dim: int, scaling: str, n: int = 8, seed: int = 0) -> torch.Tensor:
    """Weights (n, T, T) of random unit-variance q, k of size head_dim under one scaling (as notebook 02)."""
    check_choice("scaling", scaling, list(SCALINGS))
    check_int("head_dim", head_dim)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, _ENTROPY_T, head_dim, generator=g)  # (n, T, D)
    k = torch.randn(n, _ENTROPY_T, head_dim, generator=g)  # (n, S, D), S = T
    scores = q @ k.transpose(-2, -1) * SCALINGS[scaling](head_dim)  # (n, T, S)
    return softmax(scores, dim=-1)  # (n, T, S)


def _mean_entropy(weights: torch.Tensor) -> float:
    return float(-torch.special.xlogy(weights, weights).sum(dim=-1).mean())  # 0 log 0 counts as 0


@lru_cache(maxsize=None)
def _entropy_curve(scaling: str) -> tuple[float, ...]:
    return tuple(_mean_entropy(_random_weights(D, scaling)) for D in ENTROPY_DIMS)


def plot_entropy(head_dim: int = 64, scaling: str = "1/sqrt(D)") -> Figure:
    """Weights of random q, k for one head size and scale (left), and where they sit on the entropy curves (right).

    q and k have unit-variance entries; the right panel is the mean entropy (nats) over 8 samples of (32, 32)
    weights for every size in ``ENTROPY_DIMS`` and scale in ``SCALINGS``. Used in notebook 02.
    """
    w = _random_weights(head_dim, scaling)  # (8, T, S)
    here = _mean_entropy(w)
    fig, (ax_w, ax_h) = plt.subplots(1, 2, figsize=(9, 3.0), width_ratios=[1.3, 1])
    image = ax_w.imshow(w[0, :8].numpy(), cmap="Blues", vmin=0, vmax=0.5)  # (8, 32): 8 queries, all keys
    fig.colorbar(image, ax=ax_w, label="weight (capped at 0.5)", shrink=0.8)
    ax_w.set_title(f"D = {head_dim}, scale {scaling}: 8 queries, colours capped at 0.5", fontsize=9)
    ax_w.set_xlabel("key")
    ax_w.set_ylabel("query")
    for name in SCALINGS:
        ax_h.semilogx(
            ENTROPY_DIMS,
            _entropy_curve(name),
            "o-",
            ms=3,
            label=name,
            base=2,
            lw=2.5 if name == scaling else 1,
            alpha=1 if name == scaling else 0.4,
        )
    ax_h.plot([head_dim], [here], "r*", ms=12)
    ax_h.axhline(math.log(_ENTROPY_T), color="k", ls=":", lw=1)
    ax_h.set_title(f"mean entropy {here:.2f} (uniform: {math.log(_ENTROPY_T):.2f})", fontsize=9)
    ax_h.set_xlabel("head_dim D")
    ax_h.set_ylabel("mean entropy (nats)")
    ax_h.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.set_label(f"D = {head_dim}, scale {scaling}: mean entropy {here:.3f}")
    return fig


def entropy_explorer() -> Explorer:
    """Pick a head size and a scale; see the weights and their entropy. Draws :func:`plot_entropy`.

    Controls: ``head_dim D`` (1 ... 1024), ``scale`` (none, 1/sqrt(D), 1/D). Used in notebook 02.
    """
    controls = {
        "head_dim": widgets.Dropdown(options=list(ENTROPY_DIMS), value=64, description="head_dim D", style=_STYLE),
        "scaling": widgets.Dropdown(options=list(SCALINGS), value="1/sqrt(D)", description="scale", style=_STYLE),
    }
    return Explorer(controls, plot_entropy)


# --- Notebook 03: masks -------------------------------------------------------------------------------------

MASK_KINDS = ("none", "causal", "padding", "causal + padding", "causal + left padding")
FILLS = ("-inf", "finfo.min")
MASK_SENTENCE = ("the", "cat", "sat", "on", "the", "mat", "and", "slept")


def plot_mask(
    kind: str = "causal",
    length: int = 5,
    fill: str = "-inf",
    ax: plt.Axes | None = None,
) -> Figure:
    """Attention weights of a sentence under one mask: blocked cells hatched, NaN written in red.

    ``kind`` is one of ``MASK_KINDS``; with padding, ``length`` words are real and the rest ``<pad>``. ``fill``
    is what blocked scores become before a bare softmax (``FILLS``). Shape: -> a (T, T) heatmap of
    ``MASK_SENTENCE``. Used in notebook 03.
    """
    check_choice("kind", kind, list(MASK_KINDS))
    check_choice("fill", fill, list(FILLS))
    T = len(MASK_SENTENCE)
    check_int("length (the number of real tokens)", length, minimum=0, maximum=T)
    real, pads = list(MASK_SENTENCE[:length]), ["<pad>"] * (T - length)
    left, padded = kind == "causal + left padding", "padding" in kind
    labels = pads + real if left else real + pads if padded else list(MASK_SENTENCE)

    g = torch.Generator().manual_seed(0)  # one random vector per distinct word: same word, same q and k
    vocab = sorted(set(labels))
    emb = torch.randn(len(vocab), 8, generator=g)  # (V, C)
    W_q, W_k = (torch.randn(8, 4, generator=g) / math.sqrt(8) for _ in range(2))  # (C, D) each
    x = emb[[vocab.index(t) for t in labels]]  # (T, C)
    scores = (x @ W_q) @ (x @ W_k).T / math.sqrt(4)  # (T, D) @ (D, T) -> (T, T)

    key_mask = padding_mask([length], T)[0]  # (S,): True at the first `length` positions
    key_mask = key_mask.flip(-1) if left else key_mask  # left padding: the real tokens at the end
    causal = causal_mask(T) if "causal" in kind else None
    mask = combine_masks(torch.ones(T, T, dtype=torch.bool), causal, key_mask if padded else None)  # (T, S)
    fill_value = None if fill == "-inf" else torch.finfo(scores.dtype).min
    weights = softmax(mask_scores(scores, mask, fill_value=fill_value), dim=-1)  # (T, S); NaN if a row sees nothing

    leaks = int(((~mask) & (weights > 0)).any(dim=-1).sum())
    n_nan = int(weights.isnan().any(dim=-1).sum())
    status = f"{n_nan} rows NaN" if n_nan else f"{leaks} rows leak" if leaks else "rows sum to 1"
    caption = f"mask {kind}, length {length}, fill {fill}: {n_nan} NaN rows, {int(mask.sum())} visible pairs"
    return _heatmap(weights, labels, f"{kind}, fill {fill}: {status}\n(hatched = blocked)", caption, ax, mask=mask)


def mask_explorer() -> Explorer:
    """Switch between masks and fills on one sentence and see the weights. Draws :func:`plot_mask`.

    Controls: ``mask`` (``MASK_KINDS``), ``length`` (real tokens, 0 ... T; only used with padding),
    ``fill`` (``-inf`` or ``finfo.min``). Used in notebook 03.
    """
    T = len(MASK_SENTENCE)
    kind = widgets.Dropdown(options=list(MASK_KINDS), value="causal + left padding", description="mask", style=_STYLE)
    length = _slider(widgets.IntSlider, description="length", value=min(5, T), min=0, max=T)
    fill = widgets.ToggleButtons(options=list(FILLS), value="-inf", description="fill", style=_STYLE)

    def enable_length(change: dict) -> None:
        length.disabled = "padding" not in change["new"]

    kind.observe(enable_length, names="value")  # the first mask pads: the length starts enabled
    return Explorer({"kind": kind, "length": length, "fill": fill}, plot_mask)


# --- Notebook 04: one head of a multi-head layer ------------------------------------------------------------


def _head_weights(
    layer: MultiHeadAttention, x: torch.Tensor, head: int, causal: bool, tokens: Sequence[str]
) -> torch.Tensor:
    if not isinstance(layer, MultiHeadAttention):
        raise TypeError(f"layer must be a course_utils.multihead.MultiHeadAttention, got {type(layer).__name__}")
    check_int(f"head (the layer has {layer.num_heads} heads)", head, minimum=0, maximum=layer.num_heads - 1)
    check_tensor("x", x, min_dim=0)
    if x.dim() == 2:
        x = x[None]  # (T, C) -> (1, T, C)
    if x.dim() != 3 or x.shape[0] != 1:
        raise ValueError(f"x must be one sequence, (T, C) or (1, T, C), got shape {tuple(x.shape)}")
    T = x.shape[1]
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of {T} labels, one per position of x, got {type(tokens).__name__}")
    if len(tokens) != T:
        raise ValueError(f"tokens has {len(tokens)} entries, x has {T} positions")
    with torch.no_grad():
        _, weights = layer(x, causal_mask(T) if causal else None, need_weights=True)  # (1, H, T, T)
    return weights[0, head]  # (T, T)


def plot_head(
    layer: MultiHeadAttention,
    x: torch.Tensor,
    tokens: Sequence[str],
    head: int = 0,
    causal: bool = True,
) -> Figure:
    """The attention weights of one head of ``layer`` on one sequence, with or without the causal mask.

    Shape: x (T, C) or (1, T, C), tokens T labels -> a (T, T) heatmap. Used in notebook 04.
    """
    check_bool("causal", causal)
    w = _head_weights(layer, x, head, causal, tokens)
    T = w.shape[0]
    mask = causal_mask(T) if causal else torch.ones(T, T, dtype=torch.bool)
    title = f"head {head} of {layer.num_heads}, {'causal (hatched = blocked)' if causal else 'no mask'}"
    top = " ".join(f"{tokens[i]}->{tokens[j]}" for i, j in enumerate(w.argmax(dim=-1).tolist()))
    caption = f"head {head}, {'causal' if causal else 'no mask'}: each query's top key {top}"
    return _heatmap(w, list(tokens), title, caption, mask=mask)


def head_explorer(layers: Mapping[str, MultiHeadAttention], x: torch.Tensor, tokens: Sequence[str]) -> Explorer:
    """Pick a layer, a head and the causal mask on or off; see that head's weights. Draws :func:`plot_head`.

    ``layers``: ``MultiHeadAttention`` layers by name. Shape: x (T, C) or (1, T, C), tokens T labels.
    Used in notebook 04.
    """
    if not isinstance(layers, Mapping):
        raise TypeError(
            f"layers must be a dict of MultiHeadAttention layers by name, e.g. {{'trained': layer}}, "
            f"got {type(layers).__name__}"
        )
    layers = dict(layers)
    if not layers:
        raise ValueError("layers is empty: pass at least one MultiHeadAttention")
    for layer in layers.values():
        _head_weights(layer, x, 0, True, tokens)  # bad layers, x or tokens fail here, not inside the widget
    names = list(layers)
    pick = widgets.Dropdown(
        options=names,
        value=names[0],
        description="layer",
        style=_STYLE,
        layout=widgets.Layout(display="flex" if len(names) > 1 else "none"),
    )
    head = _slider(widgets.IntSlider, description="head", value=0, min=0, max=layers[names[0]].num_heads - 1)
    causal = widgets.Checkbox(value=True, description="causal", style=_STYLE)

    def fit_heads(change: dict) -> None:
        head.max = layers[change["new"]].num_heads - 1  # clamps head.value when the new layer has fewer

    pick.observe(fit_heads, names="value")

    def plot(name: str, head: int, causal: bool) -> Figure:
        fig = plot_head(layers[name], x, tokens, head, causal)
        fig.set_label(f"{name}, {fig.get_label()}")
        return fig

    return Explorer({"name": pick, "head": head, "causal": causal}, plot)


# --- Notebooks 11 and 12: one head of a trained model, a GPT on a prompt or the induction model ---------------


def _check_model(model: object) -> None:
    if not hasattr(model, "config") or not callable(getattr(model, "attention_maps", None)):
        raise TypeError(f"model must have config and attention_maps (a course model), got {type(model).__name__}")


def _one_head(model, idx: torch.Tensor, layer: int, head: int) -> torch.Tensor:
    """The (T, T) weights of head ``head`` of layer ``layer`` on the first row of ``idx``, in eval mode."""
    L, H = model.config.num_layers, model.config.num_heads
    for name, i, n in (("layer", layer, L), ("head", head, H)):
        check_int(name, i, minimum=0, maximum=n - 1, expected=f"an int in [0, {n - 1}]")
    was_training = model.training
    model.eval()
    maps = model.attention_maps(idx[:1])  # L x (1, H, T, T)
    model.train(was_training)
    return maps[layer][0, head].float().cpu()


def plot_gpt_head(model, tokenizer, prompt: str, layer: int = 0, head: int = 0) -> Figure:
    """The attention weights of one head of a trained GPT on a prompt (its last context_length characters).

    Shape: prompt T characters -> a (T, T) heatmap. Used in notebook 11.
    """
    _check_model(model)
    if isinstance(tokenizer, str) or not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must have an encode(text) method (a CharTokenizer), got {type(tokenizer).__name__}")
    check_str("prompt", prompt)
    if not prompt:
        raise ValueError("type a prompt of at least one character")
    text = prompt[-model.config.context_length :]
    idx = tokenizer.encode(text)[None].to(next(model.parameters()).device)  # (1, T); ValueError if unknown chars
    w = _one_head(model, idx, layer, head)
    labels = char_labels(text)
    T, last = len(labels), w.argmax(dim=-1).tolist()[-8:]
    pairs = " ".join(f"{labels[i]}->{labels[j]}" for i, j in enumerate(last, start=T - len(last)))
    name = f"layer {layer}, head {head}"
    caption = f"{name}: the last queries' top keys {pairs}"
    return _heatmap(w, labels, f"{name}: row = query, column = key", caption, cell=0.28, annotate=False)


def gpt_attention_explorer(model, tokenizer, prompt: str = "ROMEO:\nBut soft, what light") -> Explorer:
    """Pick a layer, a head and a prompt; see what that head of a trained GPT attends to.

    A prompt with characters the model never saw shows the tokenizer's message instead of a picture.
    Draws :func:`plot_gpt_head`. Used in notebook 11.
    """
    _check_model(model)  # before the sliders read its config; the first drawing checks the rest
    check_str("prompt", prompt)  # before the text box holds it
    layer = _slider(widgets.IntSlider, description="layer", value=0, min=0, max=model.config.num_layers - 1)
    head = _slider(widgets.IntSlider, description="head", value=0, min=0, max=model.config.num_heads - 1)
    # the prompt applies on Enter (continuous_update=False)
    text = _slider(widgets.Text, description="prompt", value=prompt, layout=widgets.Layout(width="95%"))
    return Explorer({"layer": layer, "head": head, "prompt": text}, partial(plot_gpt_head, model, tokenizer))


def plot_induction_head(model, tokens: torch.Tensor, layer: int = 0, head: int = 0, ax=None) -> Figure:
    """One head's weights on a sequence of N tokens repeated twice, with the two diagonals that name a head's job:
    the previous token (key i - 1) and the induction stripe (key i - N + 1, for the queries of the second repeat).
    Shape: tokens (B, 2N) token ids; the first row is drawn -> a (2N, 2N) heatmap. Used in notebook 12.
    """
    _check_model(model)
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[1] % 2 or 0 in tokens.shape:
        got = f"shape {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(
            "tokens must be a non-empty (B, 2N) tensor of token ids: a sequence of N tokens, then the same N again; "
            f"got {got}"
        )
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    w = _one_head(model, tokens, layer, head)  # (2N, 2N)
    T = w.shape[-1]
    N = T // 2
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 3.8))
    fig = ax.figure
    im = ax.imshow(w.numpy(), vmin=0, vmax=1, cmap="viridis")
    i = list(range(1, T))
    ax.plot([q - 1 for q in i], i, ls="none", marker="_", color="tab:orange", ms=4, label="previous token (i - 1)")
    i = list(range(N, T))
    ax.plot([q - N + 1 for q in i], i, ls="none", marker="|", color="tab:red", ms=4, label="induction (i - N + 1)")
    ax.axhline(N - 0.5, color="white", lw=0.5, ls=":")
    ax.set_title(f"layer {layer}, head {head}", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    prev = w.diagonal(offset=-1).mean().item()
    ind = w[torch.arange(N, 2 * N), torch.arange(1, N + 1)].mean().item()
    fig.set_label(f"layer {layer}, head {head}: previous-token score {prev:.2f}, induction score {ind:.2f}")
    return fig


def induction_explorer(model, tokens: torch.Tensor) -> Explorer:
    """Pick a layer and a head of the induction model; see its weights on one repeated sequence, with its scores.

    Draws :func:`plot_induction_head`. Used in notebook 12.
    """
    _check_model(model)  # before the sliders read its config; the first drawing checks the tokens
    layer = _slider(widgets.IntSlider, description="layer", value=0, min=0, max=model.config.num_layers - 1)
    head = _slider(widgets.IntSlider, description="head", value=0, min=0, max=model.config.num_heads - 1)
    return Explorer({"layer": layer, "head": head}, partial(plot_induction_head, model, tokens))
