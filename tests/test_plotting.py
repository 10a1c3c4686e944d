"""Tests for course_utils.plotting: what the heatmaps contain, and every error message."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch
from strategies import refusals_test

from course_utils.plotting import plot_heads, plot_weights, shared_colorbar


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _weights(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


def _labels(ticks) -> list[str]:
    return [t.get_text() for t in ticks]


def _colorbars(fig) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def _panels(fig) -> list:
    """The heatmaps' axes, without the colourbars."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_plot_weights_labels_and_image():
    w = _weights(3, 4)
    ax = plot_weights(w, ["the", "cat", "sat"], ["a", "b", "c", "d"], title="one head")
    assert isinstance(ax, plt.Axes)
    assert _labels(ax.get_yticklabels()) == ["the", "cat", "sat"]
    assert _labels(ax.get_xticklabels()) == ["a", "b", "c", "d"]
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query" and ax.get_title() == "one head"
    (image,) = ax.get_images()
    torch.testing.assert_close(torch.as_tensor(image.get_array().data), w)  # rows are queries, columns keys
    assert image.get_clim() == (0.0, 1.0)  # weights are probabilities: one scale for every picture


def test_plot_weights_default_labels_are_positions_and_it_takes_float64_grad_tensors():
    ax = plot_weights(_weights(2, 5).double().requires_grad_(True) * 1.0)
    assert _labels(ax.get_xticklabels()) == ["0", "1", "2", "3", "4"]
    assert _labels(ax.get_yticklabels()) == ["0", "1"]
    assert ax.get_title() == ""


def test_plot_weights_draws_on_a_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    assert plot_weights(_weights(3, 3), ax=right) is right
    assert len(right.get_images()) == 1 and len(left.get_images()) == 0
    assert len(_panels(fig)) == 2 and len(_colorbars(fig)) == 1


def test_plot_weights_annotates_small_matrices_only():
    w = _weights(3, 4)
    texts = [t.get_text() for t in plot_weights(w).texts]
    assert len(texts) == 12 and texts[0] == f"{w[0, 0].item():.2f}"
    assert len(plot_weights(_weights(11, 11)).texts) == 0  # 121 cells: too many to read
    assert len(plot_weights(_weights(11, 11), annotate=True).texts) == 121
    assert len(plot_weights(w, annotate=False).texts) == 0


@pytest.mark.parametrize("H, n_axes, n_visible", [(1, 1, 1), (3, 3, 3), (4, 4, 4), (6, 8, 6)])
def test_plot_heads_one_axes_per_head(H, n_axes, n_visible):
    w = _weights(H, 3, 3)
    fig = plot_heads(w, labels=["x", "y", "z"], title="heads")
    assert isinstance(fig, plt.Figure)
    assert len(_panels(fig)) == n_axes
    visible = [ax for ax in _panels(fig) if ax.axison]
    assert len(visible) == n_visible
    assert [ax.get_title() for ax in visible] == [f"head {h}" for h in range(H)]
    for h, ax in enumerate(visible):
        assert _labels(ax.get_xticklabels()) == ["x", "y", "z"] == _labels(ax.get_yticklabels())
        torch.testing.assert_close(torch.as_tensor(ax.get_images()[0].get_array().data), w[h])
    assert fig.get_suptitle() == "heads"


def test_plot_weights_vmax_none_stretches_to_the_matrix_and_a_number_is_kept():
    w = _weights(3, 4)
    assert plot_weights(w, vmax=None).get_images()[0].get_clim() == (0.0, pytest.approx(w.max().item()))
    assert plot_weights(w, vmax=0.5).get_images()[0].get_clim() == (0.0, 0.5)


def test_plot_heads_side_by_side_share_one_colour_scale():
    """Panels compared side by side: the same colour is the same weight in every head (issue #13)."""
    w = torch.stack([_weights(3, 3), torch.full((3, 3), 1 / 3)])  # a peaked head and a uniform one
    w[0, 0] = torch.tensor([0.9, 0.05, 0.05])
    fig = plot_heads(w)
    assert [ax.get_images()[0].get_clim() for ax in _panels(fig)] == [(0.0, 1.0)] * 2  # weights on [0, 1]
    (bar,) = _colorbars(fig)  # one colourbar for the grid, on the panels' scale
    assert bar.get_ylim() == (0.0, 1.0) and bar.get_ylabel() == "weight"


def test_plot_heads_labels_only_the_matching_axis():
    fig = plot_heads(_weights(2, 2, 4), labels=["p", "q"])  # T == 2 != S == 4
    ax = fig.axes[0]
    assert _labels(ax.get_yticklabels()) == ["p", "q"]
    assert _labels(ax.get_xticklabels()) == ["0", "1", "2", "3"]


def test_every_weight_heatmap_has_a_colourbar_on_its_scale():
    for kwargs, top in (({}, 1.0), ({"vmax": 0.5}, 0.5), ({"mask": torch.ones(3, 4, dtype=torch.bool)}, 1.0)):
        ax = plot_weights(_weights(3, 4), **kwargs)
        (bar,) = _colorbars(ax.figure)
        assert bar.get_ylim() == (0.0, top) and bar.get_ylabel() == "weight"
    assert _colorbars(plot_weights(_weights(3, 4), colorbar=False).figure) == []
    assert (
        _colorbars(plot_weights(_weights(3, 4), mask=torch.ones(3, 4, dtype=torch.bool), colorbar=False).figure) == []
    )


def test_shared_colorbar_draws_one_bar_for_panels_on_one_scale():
    fig, axes = plt.subplots(1, 3, layout="constrained")
    for ax in axes:
        plot_weights(_weights(3, 3), ax=ax, colorbar=False)
    bar = shared_colorbar(list(axes))
    assert _colorbars(fig) == [bar.ax] and bar.ax.get_ylim() == (0.0, 1.0)


def test_shared_colorbar_refuses_panels_on_different_scales_or_no_panels():
    fig, axes = plt.subplots(1, 2, layout="constrained")
    plot_weights(_weights(3, 3), ax=axes[0], colorbar=False)
    with pytest.raises(ValueError, match="none of the axes holds a heatmap"):
        shared_colorbar([axes[1]])
    plot_weights(_weights(3, 3), ax=axes[1], colorbar=False, vmax=0.5)
    with pytest.raises(ValueError, match=r"the panels use 2 colour scales .*: draw them with one vmax"):
        shared_colorbar(list(axes))
    with pytest.raises(TypeError, match="axes must be a non-empty list of the panels' axes, got Axes"):
        shared_colorbar(axes[0])


# --- notebook 11: a trained GPT -------------------------------------------------------------------------

from course_utils.plotting import LiveLossPlot, char_labels, plot_attention_maps, plot_loss_curve  # noqa: E402


def test_char_labels_make_blanks_visible():
    assert char_labels("a b\n\t") == ["a", "␣", "b", "⏎", "⇥"]


def _maps(L=2, H=3, T=5):
    g = torch.Generator().manual_seed(0)
    return [torch.softmax(torch.randn(1, H, T, T, generator=g), dim=-1) for _ in range(L)]


def test_plot_attention_maps_draws_one_panel_per_layer_and_head():
    maps = _maps()
    fig = plot_attention_maps(maps, list("hello"))
    titles = [ax.get_title() for ax in _panels(fig)]
    assert titles == [f"layer {r}, head {h}" for r in range(2) for h in range(3)]
    shown = fig.axes[4].images[0].get_array()  # layer 1, head 1
    torch.testing.assert_close(torch.tensor(shown.data), maps[1][0, 1])
    assert [t.get_text() for t in fig.axes[3].get_xticklabels()] == list("hello")  # the bottom row labels keys
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list("hello")  # the left column, queries


def test_the_twelve_panel_grid_has_one_colourbar_and_legible_ticks():
    """Issue #17: a 42-character prompt over 2 layers of 6 heads had 42 tick labels at 6 points on every panel."""
    text = "ROMEO:\nBut soft, what light through yonder"  # notebook 11's prompt
    assert len(text) == 42
    fig = plot_attention_maps(_maps(L=2, H=6, T=42), char_labels(text))
    assert len(_panels(fig)) == 12
    (bar,) = _colorbars(fig)  # one for the grid
    assert bar.get_ylim() == (0.0, 1.0) and bar.get_ylabel() == "weight"
    for i, ax in enumerate(_panels(fig)):
        xs, ys = _labels(ax.get_xticklabels()), _labels(ax.get_yticklabels())
        assert (any(xs), any(ys)) == (i >= 6, i % 6 == 0)  # keys below the bottom row, queries left of column 0
        assert len(ax.get_xticks()) <= 15 and list(ax.get_xticks())[-1] == 41  # thinned, the last one kept
        assert all(len(t) <= 1 for t in xs + ys)  # one character per tick
        assert all(t.get_fontsize() >= 7 for t in ax.get_xticklabels() + ax.get_yticklabels())
    bottom_left = _panels(fig)[6]
    ticks = [int(t) for t in bottom_left.get_xticks()]
    assert _labels(bottom_left.get_xticklabels()) == [char_labels(text)[t] for t in ticks]


def test_plot_loss_curve_shows_history_evals_and_baselines():
    fig = plot_loss_curve(
        [4.0, 3.0, 2.0, 1.0], [[2, 3.1, 3.2], [4, 1.1, 1.3]], {"unigram": 3.3}, total_steps=10, smooth=2
    )
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == [
        "train loss (each step)",
        "train loss (mean of 2 steps)",
        "validation loss (estimate)",
        "unigram: 3.30",
    ]
    assert list(ax.get_lines()[1].get_ydata()) == [4.0, 3.5, 2.5, 1.5]
    assert list(ax.get_lines()[2].get_ydata()) == [3.2, 1.3] and ax.get_xlim() == (0, 10)


def test_live_loss_plot_collects_events_and_fills_intervals():
    plot = LiveLossPlot(total_steps=20, baselines={"unigram": 3.0}, every=2)
    for step, loss in ((5, 4.0), (10, 3.0)):
        plot({"kind": "train", "step": step, "loss": loss, "lr": 1e-3, "tokens_per_s": 1.0})
    plot({"kind": "eval", "step": 10, "train_loss": 3.0, "val_loss": 3.1})
    assert plot.updates == 2  # every 2nd train event, and each evaluation
    ys = list(plot.figure().axes[0].get_lines()[0].get_ydata())
    assert ys == [4.0] * 5 + [3.0] * 5 and plot.evals == [[10, 3.0, 3.1]]


# --- bad arguments a learner might pass (issue 9) -------------------------------------------------------


# (call, exception type, a pattern the message must match)
MESSAGES = [
    (lambda: plot_weights([[0.5, 0.5]]), TypeError, "weights must be a torch.Tensor, got list"),
    (lambda: plot_heads(_weights(2, 2, 2).numpy()), TypeError, "weights must be a torch.Tensor, got ndarray"),
    (
        lambda: plot_weights(_weights(2, 3, 4)),
        ValueError,
        r"plot_weights takes one \(T, S\) matrix, got shape \(2, 3, 4\); use plot_heads for \(H, T, S\)",
    ),
    (lambda: plot_weights(_weights(4)), ValueError, r"plot_weights takes one \(T, S\) matrix, got shape \(4,\)"),
    (
        lambda: plot_weights(_weights(3, 4), query_labels=["a", "b"]),
        ValueError,
        "query_labels has 2 entries, the weights have 3",
    ),
    (
        lambda: plot_weights(_weights(3, 4), key_labels=list("abcde")),
        ValueError,
        "key_labels has 5 entries, the weights have 4",
    ),
    (lambda: plot_heads(_weights(3, 4)), ValueError, r"plot_heads takes \(H, T, S\) weights, got shape \(3, 4\)"),
    (
        lambda: plot_heads(_weights(1, 2, 3, 4)),
        ValueError,
        r"plot_heads takes \(H, T, S\) weights, got shape \(1, 2, 3, 4\)",
    ),
    (lambda: plot_weights(_weights(2, 2), vmax=0), ValueError, "vmax must be a positive finite number, got 0.0"),
    (
        lambda: plot_weights(_weights(2, 2), vmax="max"),
        TypeError,
        r"vmax must be a positive number, got 'max' \(str\)",
    ),
    (
        lambda: plot_weights(torch.rand(0, 0)),
        ValueError,
        r"weights is empty \(shape \(0, 0\)\): there is nothing to plot",
    ),
    (
        lambda: plot_weights(torch.rand(2, 2, device="meta")),
        ValueError,
        "weights is on the meta device, which holds no values",
    ),
    (
        lambda: plot_weights(torch.rand(2, 2), mask=torch.ones(2, 2)),
        ValueError,
        r"mask must be a boolean tensor of the weights' shape \(2, 2\), got torch.float32 \(2, 2\)",
    ),
    (lambda: char_labels(["a"]), TypeError, "text must be a str, got list"),
    (
        lambda: plot_attention_maps([torch.rand(1, 2, 3, 3)], None),
        TypeError,
        r"labels must be a list of T strings \(char_labels\(text\), say\), got NoneType",
    ),
    (
        lambda: plot_attention_maps(None, list("abc")),
        TypeError,
        r"maps must be a list of tensors \(1, H, T, T\), one per layer, as GPT.attention_maps returns, got None",
    ),
    (lambda: plot_loss_curve(None), TypeError, "history must be a list of losses, one per step, got NoneType"),
    (
        lambda: plot_loss_curve([1.0, 2.0], evals=[(1, 2.0)]),
        ValueError,
        r"evals must hold rows \(step, train_loss, val_loss\), got \(1, 2.0\) at index 0",
    ),
    (
        lambda: plot_loss_curve([1.0, 2.0], baselines=[2.0]),
        TypeError,
        r"baselines must be a dict of name -> loss, e.g. \{'unigram': 3.3\}, got list",
    ),
    (lambda: plot_loss_curve([1.0, 2.0], smooth=0), ValueError, "smooth must be at least 1, got 0"),
    (lambda: LiveLossPlot("100"), TypeError, "total_steps must be an int, got str"),
    (lambda: LiveLossPlot(10, every=0), ValueError, "every must be at least 1, got 0"),
    (lambda: LiveLossPlot(10, every=True), TypeError, "every must be an int, got bool"),
    (
        lambda: plot_attention_maps([torch.ones(1, 3, 5, 5, dtype=torch.long)], list("abcde")),
        TypeError,
        r"maps\[0\] must hold weights, a floating-point tensor, got dtype torch.int64",
    ),
    (
        lambda: plot_attention_maps([], list("abcde")),
        ValueError,
        "maps must hold at least one layer, got an empty list",
    ),
    (
        lambda: plot_attention_maps([torch.rand(2, 3, 5, 5)], list("abcde")),
        ValueError,
        r"maps\[0\] .* of one sequence, got shape \(2, 3, 5, 5\); pick one",
    ),
    (
        lambda: plot_attention_maps([torch.rand(3, 5, 4)], list("abcde")),
        ValueError,
        r"maps\[0\] must be the self-attention weights \(1, H, T, T\) of one sequence, got shape \(3, 5, 4\)$",
    ),
    (
        lambda: plot_attention_maps([torch.rand(1, 3, 5, 5)], list("abc")),
        ValueError,
        "labels has 3 entries, the weights have 5 positions",
    ),
    (
        lambda: plot_attention_maps([torch.full((1, 3, 5, 5), float("nan"))], list("abcde")),
        ValueError,
        r"maps\[0\] holds NaN or infinite weights",
    ),
]
test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True)


def test_plot_weights_with_a_mask_hatches_blocked_cells_and_writes_nan():
    w = torch.tensor([[float("nan"), float("nan")], [0.25, 0.75]])
    mask = torch.tensor([[False, False], [True, True]])
    ax = plot_weights(w, mask=mask, vmax=None)
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["NaN", "NaN", "0.25", "0.75"] and len(ax.patches) == 2  # the two blocked cells
    assert ax.get_images()[0].norm.vmax == pytest.approx(0.75)  # the NaN row does not collapse the scale
