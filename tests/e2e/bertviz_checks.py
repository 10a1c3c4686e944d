"""Checks on the attention views of ``course_utils.attention_view`` as a browser shows them.

``assert_head_view_rendered(page)`` works on any Playwright page: a notebook in JupyterLab (notebook 11's
head view in a cell output) or a page written by ``attention_view.save_html``. Every view carries what it
was asked to draw in its ``data-*`` attributes; the check compares bertviz's SVG with them.

What it reads of bertviz 1.4.1's head view: inside the view's ``svg``, ``g#left`` and ``g#right`` hold one
``text`` per token, and the one ``g`` without an id holds one coloured ``rect`` per head (the boxes that
switch heads on and off); the ``select`` above it has one ``option`` per layer.
"""

from __future__ import annotations

import json

HEAD_VIEWS = '[data-course-view="head"]'

# One record per head view on the page: what its attributes ask for and what its SVG shows.
_READ_HEAD_VIEWS = """sel => [...document.querySelectorAll(sel)].map(v => {
    const svg = v.querySelector('svg');
    const texts = side => svg ? [...svg.querySelectorAll(`:scope > g#${side} text`)].map(t => t.textContent)
                              : [];
    return {
        heads: Number(v.dataset.heads), layers: Number(v.dataset.layers),
        tokens: JSON.parse(v.dataset.tokens),
        has_svg: Boolean(svg),
        head_boxes: svg ? svg.querySelectorAll(':scope > g:not([id]) > rect').length : 0,
        left: texts('left'), right: texts('right'),
        layer_options: v.querySelectorAll('select#layer option').length,
    };
})"""
_ALL_DRAWN = f"""([sel, count]) => {{ const views = ({_READ_HEAD_VIEWS})(sel);
    return views.length >= Math.max(count, 1) && views.every(v => v.head_boxes > 0); }}"""


def assert_head_view_rendered(page, timeout_ms: float = 30_000, count: int | None = None) -> list[dict]:
    """Assert that every head view on ``page`` draws as many heads, tokens and layers as its data-* attributes say,
    once at least ``count`` (default 1) views hold bertviz's SVG (waiting up to ``timeout_ms``). With ``count``,
    the page must have exactly that many. Returns one record per view (what was asked for and what was drawn)."""
    try:
        page.wait_for_function(_ALL_DRAWN, arg=[HEAD_VIEWS, count or 1], timeout=timeout_ms)
    except Exception as e:  # Playwright's TimeoutError: say what the page shows instead
        views = page.evaluate(_READ_HEAD_VIEWS, HEAD_VIEWS)
        shown = json.dumps(views, ensure_ascii=False)[:2000]
        raise AssertionError(
            f"head views not drawn within {timeout_ms / 1000:.0f} s: found {len(views)} "
            f"{HEAD_VIEWS} element(s): {shown}"
        ) from e
    views = page.evaluate(_READ_HEAD_VIEWS, HEAD_VIEWS)
    if count is not None:
        assert len(views) == count, f"expected {count} head view(s) on the page, found {len(views)}"
    for i, v in enumerate(views):
        where = f"head view {i + 1} of {len(views)}"
        assert v["head_boxes"] == v["heads"], (
            f"{where}: data-heads says {v['heads']} heads, the SVG has {v['head_boxes']} head boxes"
        )
        for side in ("left", "right"):
            assert v[side] == v["tokens"], (
                f"{where}: data-tokens says {v['tokens']}, the SVG's {side} column shows {v[side]}"
            )
        assert v["layer_options"] == v["layers"], (
            f"{where}: data-layers says {v['layers']} layers, the layer menu has {v['layer_options']}"
        )
    return views
