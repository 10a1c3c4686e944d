"""What the prose of notebooks 07 (attention variants) and 08 (fast attention and decoding) claims, pinned.

Each test names the claim it pins. The claims about the saved benchmark runs (measured time and memory) are pinned in
test_claims_fast_attention.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import seeds
from torch.utils._python_dispatch import TorchDispatchMode

from course_utils.attention import scaled_dot_product_attention
from course_utils.fast_attention import tiled_attention
from course_utils.generation import beam_search, generate
from course_utils.gpt import GPT, GPTConfig
from course_utils.masking import causal_mask
from course_utils.variants import (
    aft_full,
    kv_cache_bytes,
    linformer_attention,
    sliding_window_attention,
    sliding_window_mask,
    topk_attention,
)

pytestmark = pytest.mark.usefixtures("one_thread")


class _Largest(TorchDispatchMode):
    """Records the number of elements of the largest tensor any operation produces."""

    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def _largest_tensor(attend, *qkv) -> int:
    with _Largest() as probe:
        attend(*qkv)
    return probe.largest


# --- notebook 07 ------------------------------------------------------------------------------------


def test_07_the_kv_cache_of_eight_4096_token_sequences_of_a_7b_mha_model_is_16_gib():
    """'eight sequences of 4096 tokens need 16 GiB of cache, as much as the float16 weights (about 14 GB)'"""
    assert kv_cache_bytes(32, 32, 128, num_tokens=4096, batch_size=8) == 16 * 2**30
    assert kv_cache_bytes(32, 32, 128, num_tokens=4096, batch_size=8) > 7e9 * 2  # 7B parameters, 2 bytes each


@pytest.mark.parametrize("T", [1, 5, 12])
@pytest.mark.parametrize("W", [0, 1, 3, 4, 9, 20])
def test_07_mistrals_distance_w_and_flash_attentions_left_are_the_course_window_minus_1(T, W):
    """'Mistral 7B writes W as a distance: position i attends to i - W .. i, W + 1 keys, window = W + 1 here';
    'FlashAttention's window_size=(left, 0) means keys i - left .. i, window = left + 1': the course's translation
    of FlashAttention's documented [i - left, i + right] with right = 0"""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    keys = (j >= i - W) & (j <= i + 0)  # keys in [i - W, i + 0], both ends included
    assert torch.equal(sliding_window_mask(T, W + 1), keys)
    assert (sliding_window_mask(T, W + 1).sum(-1) == torch.clamp(torch.arange(T) + 1, max=W + 1)).all()


@pytest.mark.parametrize("window, layers", [(2, 1), (4, 3), (5, 4), (7, 2)])
def test_07_layers_reach_back_layers_times_window_minus_1(window, layers):
    """'L layers reach back L (window - 1) positions: in Mistral's terms, L x W'"""
    T = layers * (window - 1) + 6
    step = sliding_window_mask(T, window).double()
    reach = torch.linalg.matrix_power(step, layers) > 0  # can input j reach output i in L layers?
    earliest = int(reach[-1].nonzero().min())
    assert (T - 1) - earliest == layers * (window - 1)


def test_07_mistral_7b_reaches_131040_or_131072_positions_back():
    """'32 x 4095 = 131,040 earlier positions with the cache's window = 4096 (32 x 4096 = 131,072 with the text's
    4097): either way the "131K tokens" of the paper'"""
    assert 32 * (4096 - 1) == 131_040 and 32 * (4097 - 1) == 131_072
    assert round(131_040 / 1000) == round(131_072 / 1000) == 131
    assert int(sliding_window_mask(5000, 4095 + 1)[-1].sum()) == 4096  # FlashAttention's (4095, 0)


@pytest.mark.parametrize("W", [1, 2, 3, 7])
def test_07_a_rolling_buffer_of_w_slots_holds_the_keys_of_window_w(W):
    """'the paper's rolling-buffer cache has W slots (the query and the W - 1 positions before it) ... W = 4096 runs
    as window = 4096'; the notebook's buffer holds [6, 7] after position 7 with W = 2"""
    T = 12
    slots: list[int | None] = [None] * W
    for p in range(T):
        slots[p % W] = p  # position p overwrites the slot of position p - W
        held = sorted(s for s in slots if s is not None)
        assert held == sliding_window_mask(T, W)[p].nonzero().flatten().tolist()
        assert len(held) == min(p + 1, W)
    if W == 2:
        assert held == [T - 2, T - 1]


@pytest.mark.parametrize("W", [1, 2, 3, 7, 16])
def test_07_mistrals_reference_prefill_mask_keeps_w_plus_1_keys_where_its_rolling_cache_keeps_w(W):
    """'the prefill mask of Mistral's one-file reference code, triu(tril(ones), diagonal=-W), keeps i - W .. i: W + 1
    keys ... so a prompt read at once and the same tokens decoded one at a time differ by the oldest key'"""
    T = W + 6
    prefill = torch.triu(torch.ones(T, T).tril(), diagonal=-W).bool()
    assert torch.equal(prefill, sliding_window_mask(T, W + 1))
    assert prefill[-1].sum() == W + 1
    slots = [None] * W  # the rolling-buffer cache: position p goes to slot p % W
    for p in range(T):
        slots[p % W] = p
    assert sorted(slots) == sliding_window_mask(T, W)[-1].nonzero().flatten().tolist()  # decoding: W keys
    oldest = prefill[-1].nonzero().flatten().tolist()
    assert set(oldest) - set(slots) == {T - 1 - W}  # the one key prefill sees and decoding does not


# --- notebook 07: memory bandwidth of decoding -------------------------------------------------------

# the notebook's table: KV heads, cache MiB, attention FLOPs per byte, and FLOPs per byte at batch 1, 64 and 512
GPU_TABLE = {
    "MHA (6)": (6, 2.25, 1.0, (1.0, 8.9, 10.0)),
    "GQA (2)": (2, 0.75, 3.0, (1.1, 19.8, 26.1)),
    "MQA (1)": (1, 0.38, 6.0, (1.1, 30.6, 48.8)),
}


def _decode_step(cfg: GPTConfig, batch: int) -> tuple[float, float]:
    """FLOPs and bytes read (float16) of one decoding step at full context, as the notebook counts them."""
    with torch.device("meta"):
        n_params = GPT(cfg).num_parameters()
    D = cfg.embed_dim // cfg.num_heads
    attn = cfg.num_layers * cfg.num_heads * 4 * cfg.context_length * D
    cache = kv_cache_bytes(cfg.num_layers, cfg.num_kv_heads or cfg.num_heads, D, num_tokens=cfg.context_length)
    return batch * (2 * n_params + attn), 2 * n_params + batch * cache


@pytest.mark.parametrize("name", GPU_TABLE)
def test_07_decoding_intensity_of_the_gpu_gpt(name):
    """The notebook's table for the gpu preset: cache per sequence, attention's H / Hkv FLOPs per byte (float16)
    whatever the batch, and the whole step's FLOPs per byte at batch 1, 64 and 512."""
    Hkv, mib, attention, per_batch = GPU_TABLE[name]
    cfg = GPTConfig.preset("gpu", num_kv_heads=Hkv)
    assert (cfg.num_layers, cfg.num_heads, cfg.embed_dim // cfg.num_heads, cfg.context_length) == (6, 6, 64, 256)
    H, D, S, L = 6, 64, 256, 6
    cache = kv_cache_bytes(L, Hkv, D, num_tokens=S)
    assert round(cache / 2**20, 2) == mib
    for context in (1, 17, 256):  # 'whatever the batch and the context'
        assert (L * H * 4 * context * D) / kv_cache_bytes(L, Hkv, D, num_tokens=context) == H / Hkv == attention
    got = tuple(round(f / b, 1) for f, b in (_decode_step(cfg, batch) for batch in (1, 64, 512)))
    assert got == per_batch


def test_07_with_mha_no_batch_lifts_decoding_above_about_10_flops_per_byte():
    """'with MHA no batch lifts a step above about 10 FLOPs per byte here, far below the few hundred where
    arithmetic would limit' (the H100 SXM: about 990 TFLOP/s dense float16 and 3.35 TB/s)"""
    cfg = GPTConfig.preset("gpu")
    ceiling = [f / b for f, b in (_decode_step(cfg, batch) for batch in (1, 2**10, 2**20, 2**30))]
    assert ceiling == sorted(ceiling) and 10.0 < ceiling[-1] < 10.2
    ridge = 990e12 / 3.35e12  # FLOPs the GPU can do per byte it reads
    assert 250 < ridge < 350 and ceiling[-1] < ridge / 25
    for kv in (2, 1):
        f, b = _decode_step(GPTConfig.preset("gpu", num_kv_heads=kv), 2**30)
        assert f / b < ridge / 5  # MQA and GQA are memory-bound too


def test_07_two_flops_per_parameter_plus_attention_is_what_a_decoding_step_computes():
    """The count behind the table: one new token at full context costs 2 x parameters + 4 L H S D FLOPs, to
    within 2% (the parameter count includes the position table, layer norms and biases, which do no matmul);
    and the cache it reads is the kv_cache_bytes the table uses (counted here in float32, 4 bytes a number)."""
    from torch.utils.flop_counter import FlopCounterMode

    for kv in (6, 2, 1):
        torch.manual_seed(0)
        cfg = GPTConfig.preset("gpu", num_kv_heads=kv, dropout=0.0, attention="course")
        model = GPT(cfg).eval()
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.zeros(1, cfg.context_length - 1, dtype=torch.long), cache=cache)  # the prefix
            with FlopCounterMode(display=False) as counter:
                model(torch.zeros(1, 1, dtype=torch.long), cache=cache)  # the new token sees S = 256 keys
        flops, _ = _decode_step(cfg, batch=1)
        assert abs(counter.get_total_flops() - flops) / flops < 0.02, (kv, counter.get_total_flops(), flops)
        assert cache.length == cfg.context_length
        assert cache.memory_bytes() == 2 * kv_cache_bytes(6, kv, 64, num_tokens=256)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, S=st.integers(1, 40), extra=st.integers(1, 30), R=st.integers(1, 12), T=st.integers(1, 10))
def test_07_linformer_slicing_its_projections_is_zero_padding_the_sequence(seed, S, extra, R, T):
    """'A shorter input uses the first S columns of E and F, which is exactly zero-padding it to L'"""
    g = torch.Generator().manual_seed(seed)
    L = S + extra
    shapes = [(2, T, 8), (2, S, 8), (2, S, 5), (R, L), (R, L)]
    q, k, v, E, F_ = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes)
    sliced = linformer_attention(q, k, v, E, F_)
    k_pad = torch.cat([k, torch.zeros(2, extra, 8, dtype=torch.float64)], dim=1)  # (B, L, D)
    v_pad = torch.cat([v, torch.zeros(2, extra, 5, dtype=torch.float64)], dim=1)
    torch.testing.assert_close(sliced, linformer_attention(q, k_pad, v_pad, E, F_))
    torch.testing.assert_close(sliced, linformer_attention(q, k, v, E[:, :S], F_[:, :S]))


def test_07_linformer_is_not_causal():
    """'changing the last token changes the first output'"""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=g) for _ in range(3))
    E, F_ = (torch.randn(8, 64, generator=g) / math.sqrt(8) for _ in range(2))
    k2 = k.clone()
    k2[:, :, -1] += 1.0
    change = (linformer_attention(q, k2, v, E, F_) - linformer_attention(q, k, v, E, F_))[:, :, 0].abs().max()
    assert change > 1e-3


def test_07_factorised_aft_overflows_near_logits_of_100_and_the_softmax_form_does_not():
    """'the factorised exp(w) @ (exp(k) v) gives NaN at logits near 100; computed as a softmax it cannot overflow'"""
    g = torch.Generator().manual_seed(3)
    q, v = torch.randn(1, 6, 4, generator=g), torch.randn(1, 6, 4, generator=g)
    k = 100.0 * torch.randn(1, 6, 4, generator=g)
    w_bias = torch.randn(6, 6, generator=g)
    w = w_bias.masked_fill(~causal_mask(6), float("-inf"))
    naive = torch.sigmoid(q) * (torch.exp(w) @ (torch.exp(k) * v)) / (torch.exp(w) @ torch.exp(k))
    assert naive.isnan().any()
    assert torch.isfinite(aft_full(q, k, v, w_bias, causal_mask(6))).all()


# (T, S, attention on (B, H, D) = (1, 2, 8), the most elements its largest block may hold): 07 'its scores are
# (chunk, chunk + window - 1), whatever T is'; 07 'peak memory O(chunk x S) instead of O(T x S)'; 08 'the scores in
# memory are never more than (q_tile, kv_tile), whatever T and S are'
NEVER_BUILT = {
    "07 sliding window": (200, 200, lambda *qkv: sliding_window_attention(*qkv, window=7, chunk_size=16), 16 * 22),
    "07 top-k": (128, 128, lambda *qkv: topk_attention(*qkv, top_k=4, chunk_size=16, causal=True), 16 * 128),
    "08 tiled": (96, 160, lambda *qkv: tiled_attention(*qkv, q_tile=16, kv_tile=16), 16 * 16),
    "08 tiled, causal": (96, 160, lambda *qkv: tiled_attention(*qkv, is_causal=True, q_tile=16, kv_tile=16), 16 * 16),
}


@pytest.mark.parametrize("name", NEVER_BUILT)
def test_07_08_chunked_and_tiled_attention_never_build_the_t_by_s_scores(name):
    T, S, attend, block = NEVER_BUILT[name]
    q, k, v = torch.randn(1, 2, T, 8), torch.randn(1, 2, S, 8), torch.randn(1, 2, S, 8)
    bound = max(2 * block, q.numel(), k.numel())  # a block per head, or the inputs and the output
    assert _largest_tensor(attend, q, k, v) <= bound < 2 * T * S // 4
    assert _largest_tensor(scaled_dot_product_attention, q, k, v, causal_mask(T, S)) >= 2 * T * S  # the probe works


# --- notebook 08: tiled attention ------------------------------------------------------------------


def test_08_tiled_memory_for_8192_tokens():
    """'(T, S) scores: 1073.7 MB' against 'one tile: 1.0 MB' for 4 heads, float32"""
    assert round(4 * 8192 * 8192 * 4 / 1e6, 1) == 1073.7
    assert round(4 * 256 * 256 * 4 / 1e6, 1) == 1.0


# --- notebook 09: what the KV cache saves ---------------------------------------------------------


def _work(model: torch.nn.Module, N: int, use_cache: bool) -> tuple[int, int, list[int]]:
    """Tokens fed to the model, (query, key) pairs its first attention layer scores, and the pairs per step."""
    fed, pairs = [], []
    original = model.forward

    def counting(idx, cache=None):
        fed.append(idx.shape[1])
        S = idx.shape[1] + (0 if cache is None else cache.length)
        pairs.append(idx.shape[1] * S)  # T queries against S keys
        return original(idx, cache)

    model.forward = counting
    try:
        generate(model, torch.zeros(1, 1, dtype=torch.long), N, greedy=True, use_cache=use_cache)
    finally:
        del model.forward
    return sum(fed), sum(pairs), pairs


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    return GPT(GPTConfig.preset("tiny", vocab_size=16, num_kv_heads=2, context_length=300)).eval().for_generation()


@pytest.mark.parametrize("N", [1, 2, 7, 40, 64, 128])
def test_08_token_passes_and_score_pairs_with_and_without_the_cache(decoder, N):
    """'About N^2/2 token-passes and N^3/3 pairs without a cache; N token-passes and about N^2/2 pairs with it': exact
    counts, so from N = 64 to 128 'it grows as N^2 (no cache) vs N^1 (cache) in token-passes, N^3 vs N^2 in pairs'"""
    tokens, pairs, _ = _work(decoder, N, use_cache=False)
    assert tokens == N * (N + 1) // 2  # step n runs the prefix of n tokens
    assert pairs == sum(n * n for n in range(1, N + 1))
    tokens, pairs, per_step = _work(decoder, N, use_cache=True)
    assert tokens == N  # the prompt, then one token per step (the last token is never fed back)
    assert pairs == N * (N + 1) // 2
    assert per_step == list(range(1, N + 1))  # 'each cached step still attends over the whole context'


@pytest.mark.parametrize("use_cache", [False, True])
def test_08_the_notebooks_count_is_what_the_attention_kernel_computes(decoder, use_cache, monkeypatch):
    """The notebook counts (T, S) pairs from the calls to the model; the kernel each layer runs sees the same."""
    seen, real = [], torch.nn.functional.scaled_dot_product_attention

    def kernel(q, k, v, **kwargs):
        seen.append(q.shape[-2] * k.shape[-2])  # (B, H, T, D), (B, H, S, D): T * S pairs per head
        return real(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", kernel)
    _, pairs, _ = _work(decoder, 20, use_cache=use_cache)
    assert pairs == sum(seen) // decoder.gpt.config.num_layers > 0


def test_08_beam_search_has_no_end_token_and_no_length_penalty(decoder):
    """'every beam gets exactly max_new_tokens new tokens'; its scores are plain sums of log-probabilities"""
    prompt = torch.zeros(1, 3, dtype=torch.long)
    beams, scores = beam_search(decoder, prompt, beam_width=3, max_new_tokens=6)
    assert beams.shape == (3, 9)
    for beam, score in zip(beams, scores):
        logits = decoder(beam[None, :-1])[0, 2:]  # (6, V): the logits that chose each new token
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, beam[3:, None]).sum()
        torch.testing.assert_close(score, logp, atol=1e-4, rtol=1e-5)
