"""The explorers of course_utils.widgets: pure plots draw what they claim, widgets redraw on change."""

import math

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
import torch
from strategies import refusals_test

from course_utils.data import CharTokenizer
from course_utils.gpt import GPT, GPTConfig
from course_utils.masking import causal_mask
from course_utils.multihead import MultiHeadAttention
from course_utils.widgets import (
    ENTROPY_DIMS,
    FILLS,
    MASK_KINDS,
    MASK_SENTENCE,
    SCALINGS,
    Explorer,
    entropy_explorer,
    gpt_attention_explorer,
    head_explorer,
    lookup_explorer,
    mask_explorer,
    plot_entropy,
    plot_gpt_head,
    plot_head,
    plot_lookup,
    plot_mask,
)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def png_of(ex: Explorer) -> str:
    (item,) = ex.output.outputs
    assert item["output_type"] == "display_data"
    assert item["data"]["text/plain"] == ex.caption
    return item["data"]["image/png"]


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def labels_of(ex: Explorer) -> list[str]:
    return [c.description for c in ex.children if isinstance(c, widgets.ValueWidget)]


# ---- notebook 01: the soft lookup -------------------------------------------------------------------


def test_plot_lookup_bars_are_the_softmax_of_the_scores():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    values = torch.tensor([0.0, 1.0, 2.0])
    fig = plot_lookup(90, 2.0, keys, values)
    ax_vec, ax_w = fig.axes
    heights = torch.tensor([p.get_height() for p in ax_w.patches], dtype=torch.float32)
    expected = torch.softmax(keys @ torch.tensor([0.0, 2.0]), dim=-1)
    torch.testing.assert_close(heights, expected, atol=1e-6, rtol=0)
    assert ax_w.get_title() == f"out = {(expected @ values).item():.3f}"
    assert "90 deg, length 2" in ax_vec.get_title()
    heights = [p.get_height() for p in plot_lookup(45).axes[1].patches]  # notebook 01's table at 45 degrees
    assert heights == pytest.approx([1 / 3] * 3, abs=1e-6)


def test_lookup_explorer_redraws_when_a_slider_moves():
    ex = lookup_explorer()
    assert labels_of(ex) == ["angle", "length"]
    before, caption = png_of(ex), ex.caption
    ex.control("angle").value = 90
    assert ex.renders == 2
    assert png_of(ex) != before
    assert ex.caption != caption and ex.caption.startswith("angle 90")
    assert ex.figure.axes[0].get_title().startswith("query (red): 90 deg")


# ---- notebook 02: entropy ---------------------------------------------------------------------------


def test_plot_entropy_shows_every_curve_and_the_chosen_point():
    fig = plot_entropy(256, "none")
    ax_w, ax_h, bar = fig.axes
    assert bar.get_ylabel() == "weight (capped at 0.5)", "the weights carry a colourbar on their capped scale"
    curves = [line for line in ax_h.get_lines() if len(line.get_xdata()) == len(ENTROPY_DIMS)]
    assert [line.get_label() for line in curves] == list(SCALINGS)
    (star,) = [line for line in ax_h.get_lines() if line.get_marker() == "*"]
    assert list(star.get_xdata()) == [256]
    assert float(star.get_ydata()[0]) < 1.0  # unscaled D = 256: nearly one-hot
    assert ax_w.get_images()[0].get_array().shape == (8, 32)


def test_entropy_scaled_stays_near_uniform_unscaled_collapses():
    def star(fig):
        return float([ln for ln in fig.axes[1].get_lines() if ln.get_marker() == "*"][0].get_ydata()[0])

    assert star(plot_entropy(1024, "1/sqrt(D)")) == pytest.approx(star(plot_entropy(4, "1/sqrt(D)")), abs=0.15)
    assert star(plot_entropy(1024, "1/D")) > math.log(32) - 0.05


def test_entropy_explorer_redraws():
    ex = entropy_explorer()
    assert labels_of(ex) == ["head_dim D", "scale"]
    before = png_of(ex)
    ex.control("scale").value = "none"
    assert png_of(ex) != before and "scale none" in ex.caption
    ex.control("head_dim D").value = 1024
    assert "D = 1024" in ex.caption and ex.renders == 3


# ---- notebook 03: masks -----------------------------------------------------------------------------


def heatmap(fig) -> torch.Tensor:
    return torch.as_tensor(fig.axes[0].get_images()[0].get_array().data, dtype=torch.float32)


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("fill", FILLS)
def test_plot_mask_rows_sum_to_one_or_are_flagged(kind, fill):
    fig = plot_mask(kind, 5, fill)
    w = heatmap(fig)
    T = len(MASK_SENTENCE)
    assert w.shape == (T, T)
    empty_rows = {"causal + left padding": 3}.get(kind, 0)
    sums = w.sum(-1)
    if fill == "-inf":  # empty rows are NaN, drawn as 0 and written "NaN"
        assert int((sums < 0.5).sum()) == empty_rows
        assert texts(fig).count("NaN") == empty_rows * T
    else:  # empty rows are uniform over keys they may not see
        torch.testing.assert_close(sums, torch.ones(T))
        assert "NaN" not in texts(fig)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels.count("<pad>") == (3 if "padding" in kind else 0)


def test_plot_mask_causal_is_lower_triangular_and_hatched():
    fig = plot_mask("causal")
    w = heatmap(fig)
    T = len(MASK_SENTENCE)
    assert torch.equal(w > 0, causal_mask(T))
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == T * (T - 1) // 2


def test_plot_mask_left_padding_leaks_with_finfo_min():
    fig = plot_mask("causal + left padding", 5, "finfo.min")
    w = heatmap(fig)
    torch.testing.assert_close(w[:3], torch.full((3, 8), 1 / 8))
    assert "3 rows leak" in fig.axes[0].get_title()


def test_mask_explorer_controls_and_redraws():
    ex = mask_explorer()
    assert labels_of(ex) == ["mask", "length", "fill"]
    assert "3 NaN rows" in ex.caption
    before = png_of(ex)
    ex.control("fill").value = "finfo.min"
    assert png_of(ex) != before and "0 NaN rows" in ex.caption
    ex.control("mask").value = "causal"
    assert ex.control("length").disabled  # length only matters with padding
    assert f"{8 * 9 // 2} visible pairs" in ex.caption
    ex.control("mask").value = "padding"
    assert not ex.control("length").disabled
    ex.control("length").value = 2
    assert "length 2" in ex.caption and f"{8 * 2} visible pairs" in ex.caption
    assert ex.renders == 5


# ---- notebook 04: one head --------------------------------------------------------------------------


def small_layer(num_heads=2, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(8, num_heads)


def test_plot_head_draws_that_heads_weights():
    layer, x = small_layer(), torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(1))
    tokens = list("abcde")
    _, weights = layer(x, causal_mask(5), need_weights=True)
    for h in range(2):
        fig = plot_head(layer, x, tokens, head=h, causal=True)
        torch.testing.assert_close(heatmap(fig), weights[0, h].detach())
        assert fig.axes[0].get_title().startswith(f"head {h} of 2, causal")
    fig = plot_head(layer, x[0], tokens, head=0, causal=False)  # (T, C) works too
    assert bool((heatmap(fig) > 0).all()) and "no mask" in fig.axes[0].get_title()


def test_head_explorer_draws_and_redraws():
    tokens = ("the", "dog", "saw", "the", "cat", "and", "the", "bird")
    ex = head_explorer({"untrained (4 heads)": small_layer(4)}, torch.randn(1, len(tokens), 8), tokens)
    assert labels_of(ex) == ["layer", "head", "causal"]
    assert ex.control("head").max == 3
    assert [t.get_text() for t in ex.figure.axes[0].get_yticklabels()] == list(tokens)
    before = png_of(ex)
    ex.control("head").value = 2
    after_head = png_of(ex)
    assert after_head != before and "head 2" in ex.caption
    ex.control("causal").value = False
    assert png_of(ex) != after_head and "no mask" in ex.caption


def test_head_explorer_layer_dropdown_fits_the_head_slider():
    x, tokens = torch.randn(1, 4, 8), list("wxyz")
    ex = head_explorer({"two": small_layer(2), "four": small_layer(4)}, x, tokens)
    assert ex.control("head").max == 1
    ex.control("layer").value = "four"
    assert ex.control("head").max == 3
    ex.control("head").value = 3
    ex.control("layer").value = "two"  # head 3 does not exist there: the slider clamps to 1
    assert ex.control("head").value == 1 and ex.caption.startswith("two, head 1")


def test_explorer_shows_errors_instead_of_raising():
    def draw(n):
        if n < 0:
            raise ValueError("n must be >= 0")
        fig, ax = plt.subplots(label=f"n = {n}")  # the label is the caption
        ax.set_title(str(n))
        return fig

    ex = Explorer({"n": widgets.IntSlider(value=1, min=-2, max=2, description="n")}, draw)
    assert ex.caption == "n = 1"
    ex.control("n").value = -1
    (item,) = ex.output.outputs
    assert item == {"output_type": "stream", "name": "stdout", "text": "ValueError: n must be >= 0\n"}
    assert ex.figure.axes[0].get_title() == "1"  # the last good picture is kept
    assert not plt.get_fignums()  # every figure drawn was closed


# --- notebook 11: a trained GPT's heads -----------------------------------------------------------------


def _tiny_gpt():
    torch.manual_seed(0)
    tok = CharTokenizer.from_text("ROMEO:\nBut soft, what light abcdefghijklmnopqrstuvwxyz")
    return GPT(GPTConfig.preset("tiny", vocab_size=tok.vocab_size)).eval(), tok


MODEL, TOK = _tiny_gpt()  # the explorers only read it


def test_plot_gpt_head_shows_that_heads_weights():
    fig = plot_gpt_head(MODEL, TOK, "But soft", layer=1, head=2)
    expected = MODEL.attention_maps(TOK.encode("But soft")[None])[1][0, 2]
    torch.testing.assert_close(torch.tensor(fig.axes[0].images[0].get_array().data), expected)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("But␣soft")


def test_gpt_attention_explorer_redraws_and_reports_bad_prompts():
    ex = gpt_attention_explorer(MODEL, TOK, "But soft")
    first = ex.figure.axes[0].images[0].get_array().copy()
    ex.control("head").value = 3
    assert ex.renders == 2 and "layer 0, head 3" in ex.caption
    assert not (ex.figure.axes[0].images[0].get_array() == first).all()
    ex.control("prompt").value = "But soft!"  # '!' is not in the tokenizer
    assert "never seen 1 character" in ex.caption and ex.renders == 2
    ex.control("prompt").value = "what light"
    assert ex.renders == 3 and ex.figure.axes[0].get_title().startswith("layer 0, head 3")
    assert ex.control("layer").max == 1 and ex.control("head").max == 3


# ---- every message a learner can meet here (issue 9): (call, given the tiny GPT and its tokenizer; exception; words)


class _NoEncode:
    pass


X4, WXYZ = torch.randn(1, 4, 8), list("wxyz")
MESSAGES = [
    # notebook 01: the lookup, drawn or as an explorer
    *[
        row
        for draw in (plot_lookup, lambda *a: lookup_explorer(*a[2:]))
        for row in [
            (lambda d=draw: d(0, 1.0, torch.ones(3, 3), torch.zeros(3)), ValueError, r"keys must be a \(S, 2\) tensor"),
            (lambda d=draw: d(0, 1.0, torch.ones(3, 2), torch.zeros(4)), ValueError, r"values must be a \(3,\) tensor"),
            (
                lambda d=draw: d(0, 1.0, torch.ones(3, 2, dtype=torch.float64), torch.zeros(3)),
                TypeError,
                "keys and values must share a dtype, got keys torch.float64 and values torch.float32",
            ),
        ]
    ],
    (lambda: plot_lookup(angle_deg="45"), TypeError, r"angle_deg must be a number of degrees, got '45' \(str\)"),
    (lambda: plot_lookup(angle_deg=math.nan), ValueError, "angle_deg must be a finite number of degrees, got nan"),
    (lambda: plot_lookup(length=None), TypeError, r"length must be a number >= 0, got None \(NoneType\)"),
    (lambda: plot_lookup(length=-1.0), ValueError, "length must be a finite number >= 0, got -1"),
    (lambda: plot_lookup(length=1e308), ValueError, "length must be at most 1,000"),
    (
        lambda: plot_lookup(keys=torch.tensor([[1, 0], [0, 1], [1, 1]])),
        TypeError,
        "keys must be a floating-point tensor, got dtype torch.int64",
    ),
    (
        lambda: plot_lookup(values=torch.tensor([0, 1, 0])),
        TypeError,
        "values must be a floating-point tensor, got dtype torch.int64",
    ),
    (lambda: plot_lookup(keys=torch.zeros(0, 2), values=torch.zeros(0)), ValueError, r"S >= 1 .*, got \(0, 2\)"),
    (lambda: plot_lookup(keys=torch.full((3, 2), math.inf)), ValueError, "keys must be finite numbers"),
    (lambda: plot_lookup(values=torch.tensor([0.0, math.nan, 0.0])), ValueError, "values must be finite numbers"),
    # notebook 02: entropy
    (
        lambda: plot_entropy(64, "1/C"),
        ValueError,
        r"scaling must be one of \['none', '1/sqrt\(D\)', '1/D'\], got '1/C'",
    ),
    (lambda: plot_entropy(0, "none"), ValueError, "head_dim must be at least 1, got 0"),
    (lambda: plot_entropy(64.0), TypeError, "head_dim must be an int, got float"),
    # notebook 03: masks, and the explorer's controls
    (lambda: plot_mask(kind="triangle"), ValueError, "kind must be one of"),
    (lambda: plot_mask(fill="-1e9"), ValueError, r"fill must be one of \['-inf', 'finfo.min'\], got '-1e9'"),
    (lambda: plot_mask(length=9), ValueError, r"length \(the number of real tokens\) must be in \[0, 8\], got 9"),
    (lambda: plot_mask(length=2.5), TypeError, r"length \(the number of real tokens\) must be an int, got float"),
    (
        lambda: mask_explorer().control("colour"),
        KeyError,
        r"no control labelled 'colour'; the labels are \['mask', 'length', 'fill'\]",
    ),
    # notebook 04: one head
    (
        lambda: plot_head(MultiHeadAttention(8, 2), X4, WXYZ, head=2),
        ValueError,
        r"head \(the layer has 2 heads\) must be in \[0, 1\], got 2",
    ),
    (lambda: plot_head(MultiHeadAttention(8, 2), X4, WXYZ[:3]), ValueError, "tokens has 3 entries, x has 4 positions"),
    (
        lambda: plot_head(MultiHeadAttention(8, 2), torch.randn(2, 4, 8), WXYZ),
        ValueError,
        r"x must be one sequence, \(T, C\) or \(1, T, C\), got shape \(2, 4, 8\)",
    ),
    (
        lambda: plot_head(torch.nn.Linear(8, 8), X4, WXYZ),
        TypeError,
        "layer must be a course_utils.multihead.MultiHeadAttention, got Linear",
    ),
    (lambda: head_explorer({}, X4, WXYZ), ValueError, "layers is empty"),
    (
        lambda: head_explorer([MultiHeadAttention(8, 2)], X4, WXYZ),
        TypeError,
        r"layers must be a dict of MultiHeadAttention layers by name, e.g. \{'trained': layer\}, got list",
    ),
    # notebook 11: a trained GPT's heads
    (lambda: plot_gpt_head(MODEL, TOK, "But", layer="0"), TypeError, r"layer must be an int in \[0, 1\], got str"),
    (lambda: plot_gpt_head(MODEL, TOK, "But", head=1.5), TypeError, r"head must be an int in \[0, 3\], got float"),
    (lambda: plot_gpt_head(MODEL, TOK, "But", head=-1), ValueError, r"head must be in \[0, 3\], got -1"),
    (
        lambda: plot_gpt_head(MultiHeadAttention(8, 2), TOK, "But"),
        TypeError,
        r"model must have config and attention_maps \(a course model\), got MultiHeadAttention",
    ),
    (
        lambda: gpt_attention_explorer(MODEL, _NoEncode(), "But"),
        TypeError,
        r"tokenizer must have an encode\(text\) method \(a CharTokenizer\), got _NoEncode",
    ),
    (lambda: gpt_attention_explorer(MODEL, "ROMEO"), TypeError, r"tokenizer must have an encode.*got str"),
    (lambda: gpt_attention_explorer(MODEL, TOK, 5), TypeError, "prompt must be a str, got int"),
    (lambda: plot_gpt_head(MODEL, TOK, None), TypeError, "prompt must be a str, got NoneType"),
    (lambda: gpt_attention_explorer(MODEL, TOK, ""), ValueError, "type a prompt of at least one character"),
]


test_each_bad_input_gets_its_message = refusals_test(MESSAGES, regex=True)
