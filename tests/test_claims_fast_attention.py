"""What the prose of notebook 08 (fast attention) claims about memory under autograd and its saved runs, pinned.

The claims about measured time and memory are pinned against the saved benchmark runs the notebook plots
(benchmarks/results/attention_cost_cpu.json, made by benchmarks/attention_cost.py, and flash_attention_cpu.json), so
the prose cannot drift from the file it describes. That tiling never builds the (T, S) scores is pinned in
test_claims_variants.py, from when fast attention shared a notebook with the variants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.fast_attention import saved_for_backward, tiled_attention
from course_utils.masking import causal_mask

ROOT = Path(__file__).resolve().parent.parent
SAVED = ROOT / "benchmarks" / "results" / "attention_cost_cpu.json"


def _saved_megabytes(attention, q, k, v, **kwargs) -> float:
    """The notebook's count, in MB (course_utils.fast_attention.saved_for_backward, which its check cell matches)."""
    return saved_for_backward(attention, q, k, v, **kwargs) / 1e6


def _plain(q, k, v, is_causal=False):
    mask = causal_mask(q.shape[-2], k.shape[-2]) if is_causal else None
    return scaled_dot_product_attention(q, k, v, mask=mask)[0]


@pytest.fixture(scope="module")
def kept():
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=g, requires_grad=True) for _ in range(3))
    return {
        (name, causal): _saved_megabytes(fn, q, k, v, is_causal=causal)
        for causal in (False, True)
        for name, fn in (("plain", _plain), ("tiled", tiled_attention))
    }


def test_08_under_autograd_tiled_attention_keeps_more_than_plain_attention(kept):
    """'Tiled attention under autograd keeps *more* than plain attention, which keeps its (T, S) weights once'"""
    weights_mb = 4 * 1024 * 1024 * 4 / 1e6  # one (H, T, S) float32 matrix
    assert kept["plain", False] >= weights_mb
    assert kept["tiled", False] > 2 * kept["plain", False], kept
    assert kept["tiled", False] > 3 * weights_mb, "the tiles of scores and exponentials cover (T, S) more than once"


def test_08_with_a_causal_mask_tiled_comes_out_a_little_ahead(kept):
    """'With a causal mask the skipped tiles are not kept, and the plain version keeps its mask and masked
    scores too, so tiled comes out a little ahead'"""
    assert kept["tiled", True] < kept["plain", True] < 1.5 * kept["tiled", True], kept
    assert kept["tiled", True] < kept["tiled", False], "the skipped future tiles are not kept"


def test_08_the_load_averages_are_what_the_prose_says(saved):
    """'The run started on a quiet machine (a load average of 0.5)': 'the 1-minute average was about 0.5 ... the
    5- and 15-minute averages (about 2 and 3.4) ... the benchmark's own two threads bring the 1-minute average to
    about 2'"""
    meta = saved[0]["meta"]
    one, five, fifteen = meta["load_average_1_5_15min"]["before"]
    assert round(one, 1) == 0.5 and 1.8 <= five <= 2.2 and 3.2 <= fifteen <= 3.6
    assert 1.8 <= meta["load_average_1_5_15min"]["after"][0] <= 2.4


def test_08_delta_from_the_output_equals_rowsum_of_p_times_dp():
    """'Σ_j P_ij dP_ij = dO_i · O_i, so Δ = rowsum(dO ⊙ O), computed from the output without P'"""
    g = torch.Generator().manual_seed(7)
    shapes = [(3, 5, 4), (3, 7, 4), (3, 7, 2), (3, 5, 2)]
    q, k, v, d_out = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes)
    P = torch.softmax(q @ k.transpose(-2, -1) / 2, dim=-1)
    out = P @ v
    torch.testing.assert_close((d_out * out).sum(-1), (P * (d_out @ v.transpose(-2, -1))).sum(-1), rtol=0, atol=1e-12)


FLASH_RUN = ROOT / "benchmarks" / "results" / "flash_attention_cpu.json"


@pytest.fixture(scope="module")
def flash_run():
    data = json.loads(FLASH_RUN.read_text())
    return data, {(r["method"], r["T"]): r for r in data["results"]}


def test_08_the_flash_run_says_where_when_and_how(flash_run):
    meta = flash_run[0]["meta"]
    assert (
        meta["device"].startswith("cpu") and meta["date"] and meta["command"].endswith("benchmarks/flash_attention.py")
    )
    assert {r["T"] for r in flash_run[0]["results"]} == {1024, 2048, 4096, 8192}


def test_08_flash_keeps_what_the_fused_kernel_keeps_in_about_one_and_a_half_times_its_time(flash_run):
    """'Flash keeps exactly what the fused kernel keeps and takes about one and a half times its time'; the
    issue's goals: memory within 2x of SDPA's at 8k, time within 3x at 4k."""
    _, by = flash_run
    for T in (1024, 2048, 4096, 8192):
        assert by[("flash", T)]["saved_mb_vs_sdpa"] == 1.0
        assert 1.2 <= by[("flash", T)]["cpu_s_vs_sdpa"] <= 1.8, T
    assert by[("flash", 8192)]["peak_mb_vs_sdpa"] <= 2.0 and by[("flash", 4096)]["time_s_vs_sdpa"] <= 3.0


@pytest.mark.parametrize("is_causal", [False, True])
def test_08_the_backward_does_five_tile_products_to_the_forwards_two_so_2_5_times_its_flops(is_causal):
    """'the backward is 5 / 2 = 2.5 times the forward's arithmetic, the recompute included' (D = Dv)"""
    from torch.utils.flop_counter import FlopCounterMode

    from course_utils.fast_attention import flash_attention

    g = torch.Generator().manual_seed(28)
    q, k, v = (torch.randn(2, 40, 16, generator=g, requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as forward:
        out = flash_attention(q, k, v, is_causal=is_causal, q_tile=8, kv_tile=12)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    assert forward.get_total_flops() > 0
    assert backward.get_total_flops() == 5 * forward.get_total_flops() // 2


def test_08_flash_keeps_twice_as_much_per_doubling_and_its_peak_grows_toward_that(flash_run):
    """'What flash and PyTorch's fused kernel keep doubles with each doubling of T ... Their measured peaks grow
    by less than that (x1.47, x1.66, x1.73 for flash) ... the slope tends to 1. Plain attention's grows about 4x';
    what plain and tiled keep quadruples (slope 2), and their peaks follow."""
    _, by = flash_run

    def growth(method: str, key: str) -> list[float]:
        return [by[(method, 2 * t)][key] / by[(method, t)][key] for t in (1024, 2048, 4096)]

    for method in ("flash", "sdpa"):
        assert all(abs(x - 2) < 0.01 for x in growth(method, "saved_mb")), method
        peak = growth(method, "peak_mb")
        assert all(1 < x < 2 for x in peak) and peak == sorted(peak), (method, peak)
    assert [round(x, 2) for x in growth("flash", "peak_mb")] == [1.47, 1.66, 1.73] and min(
        growth("sdpa", "peak_mb")
    ) > 1.5
    for method in ("plain", "tiled"):
        assert all(3.5 < x < 4.5 for x in growth(method, "saved_mb") + growth(method, "peak_mb")), method


# --- notebook 08: the saved cost curves ------------------------------------------------------------


@pytest.fixture(scope="module")
def saved():
    data = json.loads(SAVED.read_text())
    return data, {(r["method"], r["T"]): r for r in data["results"]}


def test_08_the_saved_run_says_where_when_and_how(saved):
    data, _ = saved
    meta = data["meta"]
    assert meta["command"].startswith(".venv/bin/python benchmarks/attention_cost.py")
    assert meta["device"].startswith("cpu") and meta["date"] and meta["torch"]
    methods = {r["method"] for r in data["results"]}
    assert {"naive", "torch_sdpa", "tiled", "sliding_window", "topk", "linformer", "aft_simple"} <= methods
    assert {r["T"] for r in data["results"]} >= {128, 4096, 8192}


def test_08_naive_memory_quadruples_when_t_doubles_and_tiled_about_doubles(saved):
    """'Doubling T from 4096 to 8192 multiplies the naive method's memory by about 4 ... Tiled attention's
    grows by less than 2, like its inputs and output ... The fused kernel's grows the same way'"""
    _, by = saved
    growth = {m: by[(m, 8192)]["peak_mb"] / by[(m, 4096)]["peak_mb"] for m in ("naive", "tiled", "torch_sdpa")}
    assert 3.5 <= growth["naive"] <= 4.5, growth
    assert growth["tiled"] < 2 and growth["torch_sdpa"] < 2, growth  # 'by less than 2 ... the same way'
    assert by[("tiled", 8192)]["peak_mb"] < by[("naive", 8192)]["peak_mb"] / 10


def test_08_topk_saves_memory_not_time_and_the_window_blocks_do_not_grow(saved):
    """'Top-k saves memory, not time: it computes the scores twice and sorts them'; 'the sliding window's blocks
    do not grow at all'"""
    _, by = saved
    for T in (128, 256, 512, 1024, 2048, 4096, 8192):
        assert by[("topk", T)]["time_ms"] > by[("naive", T)]["time_ms"], T
    assert by[("topk", 8192)]["peak_mb"] < by[("naive", 8192)]["peak_mb"] / 10
    assert by[("sliding_window", 4096)]["analytic_mb"] == by[("sliding_window", 8192)]["analytic_mb"]


def test_08_linformer_and_aft_simple_are_the_cheapest(saved):
    """'Linformer and AFT-simple are the cheapest'"""
    _, by = saved
    times = {
        m: by[(m, 8192)]["time_ms"]
        for m in ("naive", "torch_sdpa", "tiled", "sliding_window", "topk", "linformer", "aft_simple")
    }
    assert sorted(times, key=times.get)[:2] == ["aft_simple", "linformer"], times


def test_08_torchs_cpu_kernel_here_is_its_flash_attention_for_the_cpu():
    """'On a CPU, F.scaled_dot_product_attention runs _scaled_dot_product_flash_attention_for_cpu'"""
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, 4, 256, 64) for _ in range(3))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in {e.key for e in prof.key_averages()}


def test_08_the_tiled_loop_is_4_to_6_times_slower_than_the_fused_kernel_and_beats_naive_from_512(saved):
    """'The tiled loop is *slower* than the fused kernel at every length': 'about 4 to 6 times from 256 tokens up';
    'From 512 tokens up it is still faster than naive attention'"""
    _, by = saved
    assert by[("tiled", 128)]["time_ms"] > by[("torch_sdpa", 128)]["time_ms"]
    for T in (256, 512, 1024, 2048, 4096, 8192):
        assert 3.5 < by[("tiled", T)]["time_ms"] / by[("torch_sdpa", T)]["time_ms"] < 6.5, T
    for T in (512, 1024, 2048, 4096, 8192):
        assert by[("tiled", T)]["time_ms"] < by[("naive", T)]["time_ms"], T
