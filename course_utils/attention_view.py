"""bertviz's head view and model view of a GPT's attention, made to work without internet (notebook 11).

require.js, d3 and jQuery, which bertviz loads from a CDN, are inlined from ``course_utils/static/vendor/`` as
named AMD modules. The outer ``div`` carries ``data-course-view``, ``data-heads``, ``data-layers`` and
``data-tokens`` (JSON) for the browser tests. Shapes: L layers, B batch (must be 1), H num_heads, T tokens.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from IPython.display import HTML

from course_utils._files import sha256_bytes, write_atomic
from course_utils._validate import check_bool, check_int, check_path, check_str
from course_utils.plotting import char_labels, stack_maps

__all__ = ["head_view", "model_view", "save_html"]

# What bertviz 1.4.1 emits, replaced below; each must occur exactly once, so that a bertviz that changes
# them fails loudly here instead of quietly reaching for the CDN.
_CDN_REQUIRE = '<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>'
_CDN_PATHS = re.compile(r"require\.config\(\{\s*paths:\s*\{[^{}]*\}\s*\}\);")
_DEPS = "requirejs(['jquery', 'd3'],"
_SCRIPT_OPEN = '\n<script type="text/javascript">\n'


# --- The two views ------------------------------------------------------------------------------------------


def head_view(
    attention: Sequence[torch.Tensor],
    tokens: Sequence[str] | str,
    *,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
    prettify: bool = True,
) -> HTML:
    """bertviz's head view (one layer at a time, each head a colour), working offline (notebook 11).

    Shape: attention, a list of L tensors (1, H, T, T) as ``GPT.attention_maps(idx)`` returns for one sequence;
    tokens, T strings (a str is read as its characters) -> an IPython ``HTML`` object.
    ``layer`` is shown first (default 0) with ``heads`` on (default all); ``prettify`` makes blanks visible
    (:func:`~course_utils.plotting.char_labels`).
    """
    from bertviz import head_view as bertviz_head_view

    weights, shown = _check(attention, tokens, prettify)  # (L, H, T, T)
    if layer is not None:
        check_int("layer", layer, minimum=0, maximum=weights.shape[0] - 1)
    heads = None if heads is None else _check_indices("heads", heads, weights.shape[1])
    return _view("head", bertviz_head_view, weights, shown, weights.shape[0], layer=layer, heads=heads)


def model_view(
    attention: Sequence[torch.Tensor],
    tokens: Sequence[str] | str,
    *,
    include_layers: Sequence[int] | None = None,
    prettify: bool = True,
) -> HTML:
    """bertviz's model view (a small picture per layer and head; click one to enlarge), offline (notebook 11).

    Shapes and ``prettify`` as :func:`head_view`; ``include_layers`` picks the layers drawn (default all).
    """
    from bertviz import model_view as bertviz_model_view

    weights, shown = _check(attention, tokens, prettify)  # (L, H, T, T)
    layers = None if include_layers is None else _check_indices("include_layers", include_layers, weights.shape[0])
    shown_layers = weights.shape[0] if layers is None else len(layers)
    return _view("model", bertviz_model_view, weights, shown, shown_layers, include_layers=layers, display_mode="light")


def _view(kind: str, bertviz_view, weights: torch.Tensor, tokens: list[str], num_layers: int, **options) -> HTML:
    """bertviz's view of (L, H, T, T) weights made offline, in a ``div`` that says what it shows (for the browser
    tests): its kind, the heads, the layers drawn and the tokens."""
    view = bertviz_view(list(weights.unsqueeze(1)), tokens, prettify_tokens=False, html_action="return", **options)
    attrs = (
        f'data-course-view="{kind}" data-heads="{weights.shape[1]}" data-layers="{num_layers}" '
        f'data-tokens="{html.escape(json.dumps(tokens, ensure_ascii=False), quote=True)}"'
    )
    return HTML(f'<div class="course-attention-view" {attrs}>\n{_offline(view.data)}\n</div>')


def save_html(view: HTML | str | Sequence[HTML | str], path: str | Path, title: str = "Attention") -> Path:
    """Write one view of :func:`head_view` or :func:`model_view`, or a list of them, to one offline HTML page."""
    views = [view] if isinstance(view, (HTML, str)) else list(view) if isinstance(view, Sequence) else None
    if not views or not all(isinstance(v, (HTML, str)) for v in views):
        raise TypeError(
            f"view must be what head_view or model_view returned (IPython HTML), or a non-empty "
            f"list of them, got {type(view).__name__}" + (f" of {[type(v).__name__ for v in views]}" if views else "")
        )
    body = "\n".join(v.data if isinstance(v, HTML) else v for v in views)
    check_path("path", path)
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path {path} is a folder: give a file name, e.g. {path / 'attention.html'}")
    page = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
    try:
        write_atomic(path, page.encode("utf-8"))
    except OSError as e:
        raise OSError(f"could not write {path}: {e.strerror or e}; choose a folder you can write to") from None
    return path


# --- Checking the input -------------------------------------------------------------------------------------


def _check(
    attention: Sequence[torch.Tensor], tokens: Sequence[str] | str, prettify: bool
) -> tuple[torch.Tensor, list[str]]:
    """Validate, then stack to (L, H, T, T) on the CPU as float64 rounded to 4 decimals (a smaller page)."""
    check_bool("prettify", prettify)
    weights = stack_maps(attention, "attention").double().round(decimals=4)  # L x (1, H, T, T) -> (L, H, T, T)
    if isinstance(tokens, str):
        tokens = list(tokens)
    elif not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of strings (or a str of characters), got {type(tokens).__name__}")
    for i, t in enumerate(tokens):
        check_str(f"tokens[{i}]", t)
    T = weights.shape[-1]
    if len(tokens) != T:
        raise ValueError(f"attention covers T={T} positions but {len(tokens)} tokens were given")
    return weights, ["".join(char_labels(t)) for t in tokens] if prettify else list(tokens)


def _check_indices(name: str, indices: Sequence[int], n: int) -> list[int]:
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence):
        raise TypeError(f"{name} must be a list of ints, got {type(indices).__name__}")
    if len(indices) == 0:
        raise ValueError(f"{name} must name at least one index, got an empty list")
    out = [check_int(f"{name}[{k}]", i, minimum=0, maximum=n - 1) for k, i in enumerate(indices)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat an index, got {out}")
    return out


# --- Making bertviz's HTML self-contained -------------------------------------------------------------------


# The JavaScript the views inline, and SOURCES.json, written by course_tools.vendor_js
VENDOR_DIR = Path(__file__).resolve().parent / "static" / "vendor"


def _record(pkg_name: str) -> dict:
    records = json.loads((VENDOR_DIR / "SOURCES.json").read_text(encoding="utf-8"))
    return next(r for r in records if r["package"] == pkg_name)


def _module_name(pkg_name: str) -> str:
    return f"course_utils/vendor/{pkg_name}-{_record(pkg_name)['version']}"


@functools.lru_cache(maxsize=None)
def _vendored(pkg_name: str) -> str:
    """The vendored file of one package, checked against SOURCES.json (a changed file is a broken install)."""
    record = _record(pkg_name)
    data = (VENDOR_DIR / record["file"]).read_bytes()
    if sha256_bytes(data) != record["sha256"]:
        raise RuntimeError(
            f"{VENDOR_DIR / record['file']} does not match SOURCES.json: the course's copy is damaged; "
            "install it again (python3 course.py lab), or in the full course run "
            "python -m course_tools.vendor_js --check"
        )
    text = data.decode("utf-8")
    text = re.sub(r"^//# sourceMappingURL=.*$", "", text, flags=re.MULTILINE)  # no source-map request either
    assert "</script" not in text.lower() and "<!--" not in text, f"{record['file']} cannot go in a <script>"
    return text


@functools.lru_cache(maxsize=None)
def _library_scripts() -> str:
    """require.js as a classic script, then d3 and jQuery as named AMD modules, each defined once per page (their
    UMD wrappers run with a ``module`` of their own, leaving ``window`` alone)."""
    define_once = (
        "(function () {\n"
        "  function defineOnce(name, factory) {\n"
        "    if (requirejs.specified(name) || requirejs.defined(name)) { return; }\n"
        "    var module = {exports: {}};\n"
        "    factory.call(module.exports, module, module.exports, undefined);\n"
        "    define(name, [], function () { return module.exports; });\n"
        "  }\n"
    )
    for pkg in ("jquery", "d3"):
        name = json.dumps(_module_name(pkg))
        define_once += f"  defineOnce({name}, function (module, exports, define) {{\n{_vendored(pkg)}\n  }});\n"
    define_once += "})();\n"
    return (
        f'<script type="text/javascript">\n{_vendored("requirejs")}\n</script>\n'
        f'<script type="text/javascript">\n{define_once}</script>\n'
    )


def _replace_once(text: str, old: str | re.Pattern, new: str, what: str) -> str:
    found = len(old.findall(text)) if isinstance(old, re.Pattern) else text.count(old)
    if found != 1:
        raise RuntimeError(
            f"expected bertviz's HTML to contain {what} exactly once, found it {found} times "
            f"(is bertviz 1.4.1 installed?)"
        )
    return old.sub(lambda _: new, text) if isinstance(old, re.Pattern) else text.replace(old, new)


def _offline(bertviz_html: str) -> str:
    """bertviz's HTML with the CDN script and the CDN paths replaced by the inlined libraries."""
    text = _replace_once(bertviz_html, _CDN_REQUIRE, _library_scripts(), "the require.js CDN script")
    text = _replace_once(
        text,
        _CDN_PATHS,
        "// d3 and jQuery: inlined above as named modules (course_utils)",
        "require.config with CDN paths",
    )
    deps = f"requirejs([{json.dumps(_module_name('jquery'))}, {json.dumps(_module_name('d3'))}],"
    text = _replace_once(text, _DEPS, deps, "requirejs(['jquery', 'd3'], ...)")
    # bertviz's own script holds the tokens as JSON; "</" or "<!--" in a token must not end the <script>.
    head, sep, script = text.rpartition(_SCRIPT_OPEN)
    if not sep:
        raise RuntimeError("expected bertviz's HTML to end with its <script> (is bertviz 1.4.1 installed?)")
    body, end, tail = script.rpartition("</script>")
    body = body.replace("</", "<\\/").replace("<!--", "<\\!--")
    return head + sep + body + end + tail
