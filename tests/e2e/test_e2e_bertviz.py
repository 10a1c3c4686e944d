"""The offline attention views of course_utils.attention_view, opened in headless Chromium with no network.

Each page is a file written by ``attention_view.save_html`` for a tiny untrained GPT, opened by conftest's
offline_page (a view that reached for a CDN would also fail to draw). The checks on the drawing come from
bertviz_checks.py, which the JupyterLab test of notebook 11 uses as well.
"""

from __future__ import annotations

import json

import pytest
import torch
from bertviz_checks import assert_head_view_rendered
from harness import assert_offline

from course_utils.attention_view import head_view, model_view, save_html
from course_utils.gpt import GPT, GPTConfig

pytestmark = pytest.mark.browser

TEXT = "the cat sat\non the mat"


@pytest.fixture(scope="module")
def maps() -> list[torch.Tensor]:
    """Attention maps of an untrained tiny GPT (2 layers, 4 heads) over TEXT: 2 tensors (1, 4, 22, 22)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    model = GPT(GPTConfig.preset("tiny", vocab_size=len(chars))).eval()
    with torch.no_grad():
        idx = torch.tensor([[chars.index(c) for c in TEXT]])  # (1, T)
        return model.attention_maps(idx)  # L x (1, H, T, T)


MODEL_VIEWS = """() => [...document.querySelectorAll('[data-course-view="model"]')].map(v => ({
    heads: Number(v.dataset.heads), layers: Number(v.dataset.layers),
    thumbnails: v.querySelectorAll('svg rect.attn_background').length }))"""


def test_head_view_offline_and_the_check_fails_on_a_wrong_drawing(offline_page, maps, tmp_path, screenshots):
    """assert_head_view_rendered compares the SVG with the attributes, so a mismatch fails it."""
    page = offline_page()
    page.goto(save_html(head_view(maps, TEXT, layer=1), tmp_path / "head.html").as_uri())
    (view,) = assert_head_view_rendered(page, count=1)
    assert (view["heads"], view["layers"], len(view["tokens"])) == (4, 2, len(TEXT))
    assert view["tokens"][3] == "␣" and view["tokens"][11] == "⏎"
    # one line per (head, query, key): causal weights are zero above the diagonal but drawn transparent
    lines = page.locator('[data-course-view="head"] svg g#attention line').count()
    assert lines == 4 * len(TEXT) ** 2
    assert page.locator('[data-course-view="head"] select#layer').input_value() == "1"
    page.locator('[data-course-view="head"] select#layer').select_option("0")  # bertviz redraws layer 0
    assert_head_view_rendered(page, count=1)
    page.screenshot(path=str(screenshots / "bertviz_head_view.png"), full_page=True)
    assert_offline(page)
    page.evaluate("""() => document.querySelector('[data-course-view="head"]').dataset.heads = '5'""")
    with pytest.raises(AssertionError, match=r"data-heads says 5 heads, the SVG has 4 head boxes"):
        assert_head_view_rendered(page)
    page.evaluate("""() => { const v = document.querySelector('[data-course-view="head"]');
        v.dataset.heads = '4'; v.dataset.tokens = JSON.stringify(JSON.parse(v.dataset.tokens).slice(1)); }""")
    with pytest.raises(AssertionError, match=r"the SVG's left column shows"):
        assert_head_view_rendered(page)
    with pytest.raises(AssertionError, match=r"head views not drawn within 2 s: found 1 "):
        assert_head_view_rendered(page, timeout_ms=2_000, count=2)  # waits for a second view that never comes


def test_views_share_one_page(offline_page, maps, tmp_path):
    """Four views in one page: require.js and the two libraries are set up once, every view draws."""
    views = [
        head_view(maps, TEXT),
        model_view(maps, TEXT),
        head_view([m[:, :, :7, :7] for m in maps], TEXT[:7], heads=[0, 2]),  # the first 7 tokens
        model_view(maps, TEXT, include_layers=[1]),
    ]
    page = offline_page()
    page.goto(save_html(views, tmp_path / "four.html").as_uri())
    first, second = assert_head_view_rendered(page, count=2)
    assert (first["heads"], len(first["tokens"])) == (4, len(TEXT))
    assert (second["heads"], second["tokens"]) == (4, list("the␣cat"))
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-course-view="model"]')]
        .every(v => v.querySelector('svg rect.attn_background'))"""
    )
    assert page.evaluate(MODEL_VIEWS) == [
        {"heads": 4, "layers": 2, "thumbnails": 8},
        {"heads": 4, "layers": 1, "thumbnails": 4 * 1},
    ]
    # the libraries stayed inside require.js: no globals, and each module defined once
    globals_ = page.evaluate("() => [typeof window.d3, typeof window.jQuery, typeof window.$]")
    assert globals_ == ["undefined"] * 3
    names = page.evaluate("() => Object.keys(requirejs.s.contexts._.defined).sort()")
    assert names == ["course_utils/vendor/d3-5.7.0", "course_utils/vendor/jquery-2.2.4"]
    assert_offline(page)


def test_check_fails_when_nothing_draws(offline_page, maps, tmp_path):
    """bertviz's own HTML fetches require.js from a CDN: offline it draws nothing, and both checks see it (the
    page's recorder of requests, conftest's offline_page, is the one every file: page of the e2e tests uses)."""
    from bertviz import head_view as bertviz_head_view

    online = bertviz_head_view(maps, list(TEXT), html_action="return").data
    attrs = f'data-course-view="head" data-heads="4" data-layers="2" data-tokens=\'{json.dumps(list(TEXT))}\''
    page = offline_page()
    page.goto(save_html(f"<div {attrs}>{online}</div>", tmp_path / "online.html").as_uri())
    with pytest.raises(AssertionError, match=r"head views not drawn within 3 s: found 1"):
        assert_head_view_rendered(page, timeout_ms=3_000)
    assert any("cdnjs.cloudflare.com" in url for url in page.network), page.network
    with pytest.raises(AssertionError, match="tried to reach the network"):
        assert_offline(page)
