"""The offline attention views of course_utils.attention_view, opened in headless Chromium with no network.

Each page is a file written by ``attention_view.save_html`` for a tiny untrained GPT. The browser may load
``file:`` URLs and nothing else: every other request is recorded and aborted, and each test asserts that the
list is empty (a view that reached for a CDN would also fail to draw). The checks on the drawing come from
bertviz_checks.py, which the JupyterLab test of notebook 11 uses as well. The browser is conftest.py's.
"""

from __future__ import annotations

import json

import pytest
import torch
from bertviz_checks import assert_head_view_rendered
from harness import local_pages

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


@pytest.fixture
def offline_page(browser):
    """Make pages that load file: URLs only; ``page.network`` lists every other request (each aborted)."""
    make, close = local_pages(browser, ("file:",), viewport=(1100, 900))
    yield make
    close()


def _open(page, path) -> None:
    page.goto(path.as_uri())


def _assert_offline(page) -> None:
    assert page.network == [], f"the page tried to reach the network: {page.network}"
    assert page.websockets == [], page.websockets
    assert page.js_errors == [], page.js_errors


MODEL_VIEWS = """() => [...document.querySelectorAll('[data-course-view="model"]')].map(v => ({
    heads: Number(v.dataset.heads), layers: Number(v.dataset.layers),
    thumbnails: v.querySelectorAll('svg rect.attn_background').length }))"""


def test_head_view_offline(offline_page, maps, tmp_path, screenshots):
    path = save_html(head_view(maps, TEXT, layer=1), tmp_path / "head.html")
    page = offline_page()
    _open(page, path)
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
    _assert_offline(page)


def test_model_view_offline(offline_page, maps, tmp_path):
    path = save_html(model_view(maps, TEXT, include_layers=[1]), tmp_path / "model.html")
    page = offline_page()
    _open(page, path)
    page.wait_for_selector('[data-course-view="model"] svg rect.attn_background')
    (view,) = page.evaluate(MODEL_VIEWS)
    assert view == {"heads": 4, "layers": 1, "thumbnails": 4 * 1}
    _assert_offline(page)


def test_views_share_one_page(offline_page, maps, tmp_path):
    """Three views in one page: require.js and the two libraries are set up once, every view draws."""
    views = [
        head_view(maps, TEXT),
        model_view(maps, TEXT),
        head_view([m[:, :, :7, :7] for m in maps], TEXT[:7], heads=[0, 2]),
    ]  # the first 7 tokens
    path = save_html(views, tmp_path / "three.html")
    page = offline_page()
    _open(page, path)
    first, second = assert_head_view_rendered(page, count=2)
    assert (first["heads"], len(first["tokens"])) == (4, len(TEXT))
    assert (second["heads"], second["tokens"]) == (4, list("the␣cat"))
    page.wait_for_selector('[data-course-view="model"] svg rect.attn_background')
    assert page.evaluate(MODEL_VIEWS) == [{"heads": 4, "layers": 2, "thumbnails": 8}]
    # the libraries stayed inside require.js: no globals, and each module defined once
    globals_ = page.evaluate("() => [typeof window.d3, typeof window.jQuery, typeof window.$]")
    assert globals_ == ["undefined"] * 3
    names = page.evaluate("() => Object.keys(requirejs.s.contexts._.defined).sort()")
    assert names == ["course_utils/vendor/d3-5.7.0", "course_utils/vendor/jquery-2.2.4"]
    _assert_offline(page)


def test_check_fails_on_a_wrong_drawing(offline_page, maps, tmp_path):
    """assert_head_view_rendered compares the SVG with the attributes, so a mismatch fails it."""
    path = save_html(head_view(maps, TEXT), tmp_path / "head.html")
    page = offline_page()
    _open(page, path)
    assert_head_view_rendered(page)
    page.evaluate("""() => document.querySelector('[data-course-view="head"]').dataset.heads = '5'""")
    with pytest.raises(AssertionError, match=r"data-heads says 5 heads, the SVG has 4 head boxes"):
        assert_head_view_rendered(page)
    page.evaluate("""() => { const v = document.querySelector('[data-course-view="head"]');
        v.dataset.heads = '4'; v.dataset.tokens = JSON.stringify(JSON.parse(v.dataset.tokens).slice(1)); }""")
    with pytest.raises(AssertionError, match=r"the SVG's left column shows"):
        assert_head_view_rendered(page)
    with pytest.raises(AssertionError, match=r"head views not drawn within 2 s: found 1 "):
        assert_head_view_rendered(page, timeout_ms=2_000, count=2)  # waits for a second view that never comes


def test_check_fails_when_nothing_draws(offline_page, maps, tmp_path):
    """bertviz's own HTML fetches require.js from a CDN: offline it draws nothing, and both checks see it."""
    from bertviz import head_view as bertviz_head_view

    online = bertviz_head_view(maps, list(TEXT), html_action="return").data
    attrs = f'data-course-view="head" data-heads="4" data-layers="2" data-tokens=\'{json.dumps(list(TEXT))}\''
    path = save_html(f"<div {attrs}>{online}</div>", tmp_path / "online.html")
    page = offline_page()
    _open(page, path)
    with pytest.raises(AssertionError, match=r"head views not drawn within 3 s: found 1"):
        assert_head_view_rendered(page, timeout_ms=3_000)
    assert any("cdnjs.cloudflare.com" in url for url in page.network), page.network
