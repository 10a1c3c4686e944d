"""course_utils.attention_view (notebook 11) and course_tools.vendor_js, without a browser.

The browser side (the views draw, nothing is fetched) is tests/e2e/test_e2e_bertviz.py.
"""

from __future__ import annotations

import html
import json
import re
import shutil

import pytest
import torch
from IPython.display import HTML

from course_tools import vendor_js
from course_utils.attention_view import head_view, model_view, save_html
from course_utils.gpt import GPT, GPTConfig

torch.set_num_threads(1)

TEXT = "to be or\nnot to be"
# A string each vendored library is known to contain; the views must carry all three.
MARKERS = {"require.js": "@license RequireJS 2.3.6", "d3": "https://d3js.org v5.7.0", "jquery": "/*! jQuery v2.2.4"}


@pytest.fixture(scope="module")
def maps() -> list[torch.Tensor]:
    """The attention maps of an untrained tiny GPT over TEXT: 2 tensors (1, 4, 17, 17)."""
    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    model = GPT(GPTConfig.preset("tiny", vocab_size=len(chars))).eval()
    idx = torch.tensor([[chars.index(c) for c in TEXT]])  # (1, T)
    with torch.no_grad():
        return model.attention_maps(idx)


def _random_maps(L: int = 2, B: int = 1, H: int = 3, T: int = 5) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.rand(B, H, T, T, generator=g).softmax(-1) for _ in range(L)]


def _params(view: HTML) -> dict:
    """The settings bertviz's script was given: the weights, the layer and heads shown."""
    return json.loads(re.search(r"const params = (\{.*?\}); // HACK", view.data).group(1))


def _attrs(view: HTML) -> dict[str, str]:
    start = re.match(r"<div ([^>]*)>", view.data)
    assert start, view.data[:200]
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', start.group(1))}


# ----------------------------------------------------------------------------------------------
# The HTML
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [head_view, model_view], ids=["head", "model"])
def test_libraries_are_inlined_and_nothing_is_fetched(maps, make):
    page = make(maps, TEXT).data
    assert "cdnjs" not in page
    fetched = re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert not fetched, fetched
    assert not re.search(r"url\(\s*[\"']?(?:https?:)?//", page), "a CSS url() to the network"
    bertviz_script = page.rpartition('<script type="text/javascript">')[2]
    assert "Transformer Visualization D3 javascript" in bertviz_script  # it is bertviz's
    assert not re.search(r"paths\s*:", bertviz_script), "a require.config path (require.js would fetch it)"
    assert "require.config(" not in bertviz_script
    assert "requirejs(['jquery', 'd3']" not in page  # the names bertviz used are replaced by the inlined ones
    assert "sourceMappingURL" not in page
    # Every http(s) URL left is a comment, an XML namespace or text in an error message, never fetched:
    for url in set(re.findall(r"https?://[^\s\"')]+", page)):
        assert re.match(
            r"https?://(www\.w3\.org/|github\.com/|d3js\.org|requirejs\.org/docs/errors|"
            r"dev\.jquery\.com/ticket/|connect\.microsoft\.com/|webkit\.org/b/)",
            url,
        ), url
    for name, marker in MARKERS.items():
        assert page.count(marker) == 1, name
    assert page.count('<script type="text/javascript">') == 3  # require.js, the two modules, bertviz's own
    assert "<script src" not in page
    assert "define(name, [], function () { return module.exports; })" in page
    assert '"course_utils/vendor/jquery-2.2.4"' in page and '"course_utils/vendor/d3-5.7.0"' in page


def test_the_views_say_what_they_show(maps):
    view = head_view(maps, TEXT)
    assert isinstance(view, HTML)
    a = _attrs(view)
    assert a["data-course-view"] == "head"
    assert (a["data-heads"], a["data-layers"]) == ("4", "2")
    tokens = json.loads(a["data-tokens"])
    assert "".join(tokens) == "to␣be␣or⏎not␣to␣be" and len(tokens) == 18
    assert len(tokens) == maps[0].shape[-1]
    a = _attrs(model_view(maps, TEXT, include_layers=[1]))
    assert (a["data-course-view"], a["data-heads"], a["data-layers"]) == ("model", "4", "1")
    assert json.loads(a["data-tokens"])[8] == "⏎"


def test_prettify_off_and_token_lists():
    att = _random_maps(T=3)
    assert json.loads(_attrs(head_view(att, "a b", prettify=False))["data-tokens"]) == ["a", " ", "b"]
    assert json.loads(_attrs(head_view(att, ["x", "\n", "\t"]))["data-tokens"]) == ["x", "⏎", "⇥"]
    assert json.loads(_attrs(head_view(_random_maps(T=2), ["a b", "\n"]))["data-tokens"]) == ["a␣b", "⏎"]


def test_attention_values_reach_the_page():
    """bertviz's script holds the weights (rounded to 4 decimals) of every layer, in order."""
    att = _random_maps(L=2, H=2, T=3)
    params = _params(head_view(att, "abc"))
    got = torch.tensor(params["attention"][0]["attn"], dtype=torch.float64)  # (L, H, T, T)
    torch.testing.assert_close(got, torch.stack([a[0] for a in att]).double(), atol=5e-5, rtol=0)


def test_tokens_cannot_end_the_script():
    att = _random_maps(T=2)
    page = head_view(att, ["</script>", "<!--"]).data
    script = page.rpartition('<script type="text/javascript">')[2]
    assert script.lower().count("</script") == 1  # only the real end tag
    assert "<!--" not in script


def test_options_reach_bertviz():
    att = _random_maps(L=3, H=3)
    params = _params(head_view(att, "abcde", layer=2, heads=[0, 2]))
    assert (params["layer"], params["heads"], params["include_layers"]) == (2, [0, 2], [0, 1, 2])
    params = _params(model_view(att, "abcde", include_layers=[0, 2]))
    assert params["include_layers"] == [0, 2]
    assert len(params["attention"][0]["attn"]) == 2


def test_two_views_differ_in_root_id():
    att = _random_maps()
    ids = [re.search(r'id="(bertviz-[0-9a-f]+)"', head_view(att, "abcde").data).group(1) for _ in range(2)]
    assert ids[0] != ids[1]


def test_accepts_gpu_style_input(maps):
    """Tensors that need grad, in float16: detached and converted, the page is the same shape."""
    att = [m.clone().half().requires_grad_(False) for m in maps]
    att[0] = maps[0].clone().requires_grad_(True)
    assert _attrs(head_view(att, TEXT))["data-heads"] == "4"


def test_save_html(tmp_path, maps):
    h, m = head_view(maps, TEXT), model_view(maps, TEXT)
    one = save_html(h, tmp_path / "one.html")
    assert one.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert h.data in one.read_text(encoding="utf-8")
    both = save_html([h, m], tmp_path / "both.html").read_text(encoding="utf-8")
    assert both.count('data-course-view="') == 2 and '<meta charset="utf-8">' in both


# ----------------------------------------------------------------------------------------------
# Bad input: (call, given tmp_path holding a file "a-file"; exception; a pattern the message must match)
# ----------------------------------------------------------------------------------------------

BAD_MAPS = [  # (attention, tokens) -> the same refusal from head_view and model_view
    ([], "abc", ValueError, r"at least one layer, got an empty list"),
    (torch.rand(1, 2, 3, 3), "abc", TypeError, r"attention must be a list of tensors .* got Tensor"),
    ([torch.rand(1, 2, 3, 3), [[0.5]]], "abc", TypeError, r"attention\[1\] must be a torch.Tensor .* got list"),
    ([torch.rand(2, 3, 3)], "abc", ValueError,
     r"attention\[0\] must be the self-attention weights \(1, H, T, T\) of one sequence, got shape \(2, 3, 3\)$"),
    ([torch.rand(2, 2, 3, 3)], "abc", ValueError,
     r"got shape \(2, 2, 3, 3\); pick one, e.g. \[a\[:1\] for a in attention\]"),
    ([torch.rand(1, 2, 3, 4)], "abc", ValueError,
     r"must be the self-attention weights \(1, H, T, T\) of one sequence, got shape \(1, 2, 3, 4\)$"),
    ([torch.rand(1, 2, 3, 3), torch.rand(1, 3, 3, 3)], "abc", ValueError,
     r"same shape: attention\[0\] is \(1, 2, 3, 3\), attention\[1\] is \(1, 3, 3, 3\)"),
    ([torch.rand(1, 2, 0, 0)], "", ValueError, r"of one sequence, got shape \(1, 2, 0, 0\)$"),
    ([torch.rand(1, 2, 3, 3, device="meta")], "abc", ValueError, r"attention\[0\] is on the meta device"),
    ([torch.rand(1, 2, 3, 3)], "abcd", ValueError, r"covers T=3 positions but 4 tokens were given"),
    ([torch.rand(1, 2, 3, 3)], ["a", 1, "c"], TypeError, r"tokens\[1\] must be a str, got int"),
    ([torch.rand(1, 2, 3, 3)], 3, TypeError, r"tokens must be a list of strings .* got int"),
    ([torch.rand(1, 2, 3, 3, dtype=torch.complex64)], "abc", TypeError,
     r"floating-point tensor, got dtype torch.complex64"),
]  # fmt: skip
MESSAGES = [
    *[(lambda tmp, m=make, a=a, t=t: m(a, t), error, match)
      for make in (head_view, model_view) for a, t, error, match in BAD_MAPS],
    *[(lambda tmp, m=make, kw=kw: m(_random_maps(), "abcde", **kw), error, match)
      for make, kw, error, match in [
        (head_view, {"layer": 2}, ValueError, r"layer must be in \[0, 1\], got 2"),
        (head_view, {"layer": -1}, ValueError, r"layer must be in \[0, 1\], got -1"),
        (head_view, {"layer": 1.0}, TypeError, r"layer must be an int, got float"),
        (head_view, {"heads": [0, 3]}, ValueError, r"heads\[1\] must be in \[0, 2\], got 3"),
        (head_view, {"heads": []}, ValueError, r"heads must name at least one index, got an empty list"),
        (head_view, {"heads": [1, 1]}, ValueError, r"heads must not repeat an index, got \[1, 1\]"),
        (head_view, {"heads": 1}, TypeError, r"heads must be a list of ints, got int"),
        (head_view, {"prettify": "yes"}, TypeError, r"prettify must be True or False, got 'yes'"),
        (model_view, {"include_layers": [2]}, ValueError, r"include_layers\[0\] must be in \[0, 1\], got 2"),
        (model_view, {"include_layers": []}, ValueError, r"include_layers must name at least one index"),
        (model_view, {"include_layers": "01"}, TypeError, r"include_layers must be a list of ints, got str"),
        (model_view, {"include_layers": [True]}, TypeError, r"include_layers\[0\] must be an int, got bool"),
    ]],
    *[(lambda tmp, v=view, p=path: save_html(v, None if p is None else tmp / p), error, match)
      for view, path, error, match in [
        (3, "x.html", TypeError, r"view must be what head_view or model_view returned .* got int"),
        ([], "x.html", TypeError, r"non-empty list of them, got list"),
        ([HTML("<p>x</p>"), 1], "x.html", TypeError, r"got list of \['HTML', 'int'\]"),
        ("<p>x</p>", None, TypeError, "path must be a str or os.PathLike, got NoneType"),
        ("<p>x</p>", "", ValueError, r"is a folder: give a file name, e.g. .*attention.html"),
        ("<p>x</p>", "a-file/page.html", OSError, r"could not write .*page.html: .*choose a folder you can write to"),
    ]],
    (lambda tmp: vendor_js._verify_integrity(b"some bytes!", _sha512(b"some bytes"), "x@1"), ValueError,
     r"x@1: tarball sha512 is .*, the registry says"),
    (lambda tmp: vendor_js._verify_integrity(b"some bytes", "sha1-abc", "x@1"), ValueError,
     r"expected a sha512 integrity from the registry, got 'sha1-abc'"),
]  # fmt: skip


def _sha512(data: bytes) -> str:
    """The integrity string npm's registry gives for these bytes."""
    import base64
    import hashlib

    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


@pytest.mark.parametrize("call, error, match", MESSAGES)
def test_each_bad_input_gets_its_message(tmp_path, call, error, match):
    (tmp_path / "a-file").write_text("x")  # a file where a path needs a folder
    with pytest.raises(error, match=match):
        call(tmp_path)


# ----------------------------------------------------------------------------------------------
# The vendored files
# ----------------------------------------------------------------------------------------------


def test_vendor_check_passes(capsys):
    assert vendor_js.main(["--check"]) == 0
    assert "ok: 3 packages" in capsys.readouterr().out


def test_vendor_sources_record_npm():
    records = json.loads((vendor_js.VENDOR_DIR / "SOURCES.json").read_text(encoding="utf-8"))
    assert [(r["package"], r["version"]) for r in records] == [
        ("requirejs", "2.3.6"),
        ("d3", "5.7.0"),
        ("jquery", "2.2.4"),
    ]
    for r in records:
        assert r["tarball"] == f"https://registry.npmjs.org/{r['package']}/-/{r['package']}-{r['version']}.tgz"
        assert r["integrity"].startswith("sha512-")
        assert (vendor_js.VENDOR_DIR / r["license_file"]).is_file()


@pytest.fixture
def vendor_copy(tmp_path):
    copy = tmp_path / "vendor"
    shutil.copytree(vendor_js.VENDOR_DIR, copy)
    return copy


def test_vendor_check_detects_a_changed_file(vendor_copy, capsys):
    assert vendor_js.check(vendor_copy) == []
    f = vendor_copy / "d3.min.js"
    f.write_bytes(f.read_bytes() + b"\n")
    problems = vendor_js.check(vendor_copy)
    assert len(problems) == 1
    assert re.match(r"d3\.min\.js \(d3@5\.7\.0\) has sha256 [0-9a-f]{64}, SOURCES\.json says", problems[0])
    assert vendor_js.main(["--check", "--dir", str(vendor_copy)]) == 1
    assert "FAILED: d3.min.js" in capsys.readouterr().out


def test_vendor_check_detects_missing_files(vendor_copy, monkeypatch):
    (vendor_copy / "LICENSE.jquery").unlink()
    assert vendor_js.check(vendor_copy) == ["LICENSE.jquery (jquery@2.2.4) is missing"]
    monkeypatch.setattr(
        vendor_js,
        "PACKAGES",
        vendor_js.PACKAGES
        + (vendor_js.Package("left-pad", "1.0.0", "index.js", "left-pad.js", None, "LICENSE.left-pad"),),
    )
    assert "left-pad@1.0.0 is not in SOURCES.json" in vendor_js.check(vendor_copy)
    (vendor_copy / "SOURCES.json").unlink()
    assert "SOURCES.json is missing" in vendor_js.check(vendor_copy)[0]


def test_vendor_integrity_check_passes_the_registrys_sha512():
    vendor_js._verify_integrity(b"some bytes", _sha512(b"some bytes"), "x@1")  # the refusals: MESSAGES


def test_a_changed_vendored_file_stops_the_views(monkeypatch, vendor_copy):
    """attention_view checks what it inlines against SOURCES.json (on a copy, never the real files)."""
    from course_utils import attention_view

    (vendor_copy / "jquery.min.js").write_text("alert(1)", encoding="utf-8")
    monkeypatch.setattr(attention_view, "VENDOR_DIR", vendor_copy)
    attention_view._vendored.cache_clear()
    attention_view._library_scripts.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"jquery.min.js does not match SOURCES.json"):
            head_view(_random_maps(), "abcde")
    finally:
        attention_view._vendored.cache_clear()
        attention_view._library_scripts.cache_clear()
