"""The tiny GPT: its configuration, its two attention paths, its KV cache, its initialisation."""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import pytest
import torch

from course_utils.generation import generate
from course_utils.gpt import GPT, PRESETS, GPTConfig
from course_utils.variants import GroupedQueryAttention, KVCache

TINY = dict(vocab_size=11, context_length=16, embed_dim=16, num_heads=4, num_layers=2)


def make(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, **overrides})).eval()


def ids(B: int, T: int, V: int = TINY["vocab_size"], seed: int = 1) -> torch.Tensor:
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed))


VARIANTS = {
    "learned": dict(positions="learned"),
    "rope": dict(positions="rope"),
    "rope, course attention": dict(positions="rope", attention="course"),
    "grouped-query, rope": dict(positions="rope", num_kv_heads=2),
    "grouped-query, learned": dict(positions="learned", num_kv_heads=1),
    "post-norm, rope": dict(positions="rope", norm_position="post"),
    "post-norm, grouped-query": dict(positions="learned", num_kv_heads=2, norm_position="post"),
    "sliding window": dict(window=3),
    "sliding window, rope, multi-query": dict(positions="rope", window=4, num_kv_heads=1),
}


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


def test_numpy_numbers_in_the_config_are_stored_as_python_ones_so_checkpoints_load_with_weights_only(tmp_path):
    import numpy as np

    numpy_fields = dict(num_heads=np.int64(4), num_kv_heads=np.int64(2), dropout=np.float64(0.1), bias=np.bool_(False))
    cfg = GPTConfig(**{**TINY, **numpy_fields})
    torch.save(cfg.to_dict(), tmp_path / "config.pt")
    loaded = torch.load(tmp_path / "config.pt", weights_only=True)
    assert GPTConfig.from_dict(loaded) == cfg
    assert [type(loaded[k]) for k in ("num_heads", "num_kv_heads", "dropout", "bias")] == [int, int, float, bool]
    assert all(isinstance(v, (int, float, str, bool, type(None))) for v in loaded.values())


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GPTConfig().embed_dim = 3


def test_presets():
    assert {"tiny", "cpu", "gpu"} <= set(PRESETS)
    gpu = GPTConfig.preset("gpu")  # nanoGPT's baby Shakespeare model
    assert (gpu.num_layers, gpu.num_heads, gpu.embed_dim, gpu.context_length, gpu.dropout) == (6, 6, 384, 256, 0.2)
    assert GPTConfig.preset("tiny", dropout=0.1).dropout == 0.1
    assert GPTConfig.preset("tiny") == PRESETS["tiny"]
    assert GPT(GPTConfig.preset("tiny")).num_parameters() < 50_000, "the tiny preset must train in seconds"
    assert 10.6e6 < GPT(gpu).num_parameters() < 10.9e6  # nanoGPT reports 10.65M without the position table


# ----------------------------------------------------------------------------------------------
# Shapes, loss, parameters, initialisation
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_shapes_and_loss(variant):
    model = make(**VARIANTS[variant])
    idx = ids(3, 10)
    logits, loss = model(idx)
    assert logits.shape == (3, 10, TINY["vocab_size"]) and loss is None
    logits2, loss = model(idx, targets=ids(3, 10, seed=2))
    torch.testing.assert_close(logits2, logits)
    assert loss.shape == ()
    assert abs(loss.item() - math.log(TINY["vocab_size"])) < 0.3, (
        "at initialisation every token is about equally likely"
    )


def test_weight_tying_and_parameter_count():
    model = make()
    assert model.lm_head.weight is model.tok_emb.weight
    unique = {id(p): p.numel() for p in model.parameters()}
    assert model.num_parameters() == sum(unique.values())
    by_name = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert by_name - model.num_parameters() == TINY["vocab_size"] * TINY["embed_dim"]  # the tied matrix, once
    C, T, V = TINY["embed_dim"], TINY["context_length"], TINY["vocab_size"]
    assert model.num_parameters(non_embedding=True) == model.num_parameters() - V * C - T * C
    assert make(positions="rope").num_parameters() == model.num_parameters() - T * C


def test_residual_scaled_initialisation():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, context_length=32, embed_dim=128, num_heads=4, num_layers=8)
    model = GPT(cfg)
    block = model.blocks[3]
    for w in (block.attn.qkv_proj.weight, block.mlp.fc_in.weight, model.tok_emb.weight):
        assert abs(w.std().item() - 0.02) < 0.002
    for w in (block.attn.out_proj.weight, block.mlp.fc_out.weight):
        assert abs(w.std().item() - 0.02 / math.sqrt(2 * 8)) < 0.0005
    assert torch.count_nonzero(block.attn.qkv_proj.bias) == 0
    torch.testing.assert_close(block.ln_1.weight, torch.ones(128))


def test_learned_positions_are_the_course_module():
    model = make()
    idx = ids(2, 9)
    torch.testing.assert_close(model._embed(idx, 0), model.pos_emb(model.tok_emb(idx)))
    torch.testing.assert_close(model._embed(idx, 3), model.pos_emb(model.tok_emb(idx), torch.arange(3, 12)))


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_torch_compile_sees_one_graph(positions):
    """No graph breaks: nothing in the forward pass reads a tensor's value back into Python."""
    model = GPT(GPTConfig.preset("tiny", positions=positions))
    explanation = torch._dynamo.explain(model)(ids(2, 8, V=65), ids(2, 8, V=65, seed=2))
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_flops_per_token():
    model = make(positions="rope")
    c = model.config
    assert model.flops_per_token() == 6 * model.num_parameters() + 6 * c.num_layers * c.context_length * c.embed_dim
    assert model.flops_per_token(T=4) < model.flops_per_token()


# ----------------------------------------------------------------------------------------------
# The two attention paths, causality, attention maps
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_course_and_torch_attention_give_the_same_logits_and_gradients(positions):
    course = make(positions=positions, attention="course")
    fast = make(positions=positions, attention="torch")
    fast.load_state_dict(course.state_dict())
    idx, targets = ids(2, 16), ids(2, 16, seed=3)
    logits_c, loss_c = course(idx, targets)
    logits_f, loss_f = fast(idx, targets)
    torch.testing.assert_close(logits_f, logits_c, atol=1e-5, rtol=1e-5)
    loss_c.backward()
    loss_f.backward()
    for (name, p), q in zip(course.named_parameters(), fast.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_changing_later_tokens_never_changes_earlier_logits(variant):
    model = make(**VARIANTS[variant])
    idx = ids(2, 12)
    logits, _ = model(idx)
    for t in range(11):
        changed = idx.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1 + t % 5) % TINY["vocab_size"]  # never a multiple of V
        logits2, _ = model(changed)
        torch.testing.assert_close(logits2[:, : t + 1], logits[:, : t + 1])
        assert (logits2[:, t + 1 :] - logits[:, t + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_attention_maps(variant):
    model = make(**VARIANTS[variant])
    maps = model.attention_maps(ids(2, 9))
    assert len(maps) == TINY["num_layers"]
    for weights in maps:
        assert weights.shape == (2, TINY["num_heads"], 9, 9)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, TINY["num_heads"], 9))
        assert torch.count_nonzero(weights.triu(diagonal=1)) == 0, "no weight on the future"


def test_a_window_hides_every_position_more_than_window_minus_1_back():
    """One layer with window 3: position t sees t - 2 .. t, so changing token 0 moves positions 0-2 only."""
    model = make(window=3, num_layers=1)
    idx = ids(1, 8)
    changed = idx.clone()
    changed[0, 0] = (idx[0, 0] + 1) % TINY["vocab_size"]
    logits, changed_logits = model(idx)[0], model(changed)[0]
    assert (changed_logits[:, :3] - logits[:, :3]).abs().amax(-1).min() > 1e-4
    torch.testing.assert_close(changed_logits[:, 3:], logits[:, 3:], atol=0, rtol=0)
    weights = model.attention_maps(idx)[0]  # (1, H, T, T)
    assert torch.count_nonzero(weights.tril(diagonal=-3)) == 0, "no weight beyond the window"


def test_attention_maps_are_the_weights_the_model_uses():
    """Recompute layer 0's output by hand from its map and the values: it matches the module's output."""
    model = make()
    idx = ids(1, 7)
    weights = model.attention_maps(idx)[0]  # (1, H, T, T)
    block = model.blocks[0]
    h = block.ln_1(model._embed(idx, 0))
    v = h @ block.attn.qkv_proj.weight[2 * 16 :].T + block.attn.qkv_proj.bias[2 * 16 :]  # (1, T, C)
    v = v.view(1, 7, 4, 4).transpose(1, 2)  # (1, H, T, D)
    out = block.attn.out_proj((weights @ v).transpose(1, 2).reshape(1, 7, 16))
    torch.testing.assert_close(out, block.attend(model._embed(idx, 0)), atol=1e-6, rtol=1e-5)


def test_dropout_only_in_training_mode():
    model = make(dropout=0.5)
    idx = ids(2, 8)
    torch.testing.assert_close(model(idx)[0], model(idx)[0])
    model.train()
    assert (model(idx)[0] - model(idx)[0]).abs().max() > 1e-3


def test_grouped_query_is_a_setting_of_the_one_attention_layer():
    """One attention class in the GPT: num_kv_heads sizes its packed projection, (H + 2 Hkv) D rows."""
    for kv, rows in ((None, 3 * 16), (4, 3 * 16), (2, 16 + 2 * 2 * 4), (1, 16 + 2 * 4)):
        attn = make(num_kv_heads=kv).blocks[0].attn
        assert type(attn) is GroupedQueryAttention and attn.qkv_proj.weight.shape == (rows, 16)


def test_the_gpt_layer_is_notebook_07s_module_with_the_causal_mask_built_in():
    """The GPT's layer (causal=True, no mask) computes what notebook 07's GroupedQueryAttention computes with
    causal_mask(T) passed in, from the same weights, with and without RoPE."""
    from course_utils.masking import causal_mask

    torch.manual_seed(0)
    for positions in ("learned", "rope"):
        attn = make(num_kv_heads=2, positions=positions, bias=False, attention="course").blocks[0].attn.double()
        gqa = GroupedQueryAttention(16, 4, 2, rope=positions == "rope").double()
        gqa.load_state_dict(attn.state_dict())
        x = torch.randn(2, 9, 16, dtype=torch.float64)
        torch.testing.assert_close(gqa(x, causal_mask(9)), attn(x))


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_rope_base_moves_the_logits_on_both_attention_paths(num_kv_heads):
    """Issue #17: with num_kv_heads=2 the GQA blocks rotated with 10000 whatever rope_base said."""
    idx = ids(2, 12)
    logits = {}
    for base in (10000.0, 500000.0):
        model = make(positions="rope", num_kv_heads=num_kv_heads, rope_base=base)
        torch.manual_seed(1)
        with torch.no_grad():  # the same weights for both bases, large enough that attention is far from uniform
            for p in model.parameters():
                p.normal_(std=0.5)
        logits[base] = model(idx)[0]
    assert (logits[10000.0] - logits[500000.0]).abs().max() > 1e-3  # about 0.03 on either path; float noise 1e-6


@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_attention_dropout_acts_in_training_mode_only_on_both_attention_paths(num_kv_heads):
    """Issue #17: GPTConfig(num_kv_heads=2, dropout=...) built its GQA blocks without attention dropout.

    In training, some visible weights are zeroed and the rest scaled by 1 / (1 - p); the branch's output is
    dropped too (exact zeros), as on the multi-head path; in eval mode the branch is deterministic.
    """
    model = make(num_kv_heads=num_kv_heads, dropout=0.5)
    block = model.blocks[0]
    x = torch.randn(2, 10, 16, generator=torch.Generator().manual_seed(3))
    out, w = block.attend(x, need_weights=True)  # eval: (B, T, C), (B, H, T, T)
    torch.testing.assert_close(block.attend(x), out)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 10))
    model.train()
    out_train, w_train = block.attend(x, need_weights=True)
    kept = w_train != 0
    assert ((w > 0) & ~kept).sum() > 0.3 * (w > 0).sum()  # about half the visible weights dropped
    torch.testing.assert_close(w_train[kept], (w / 0.5)[kept])  # the others scaled by 1 / (1 - p)
    dropped = block.resid_dropout(out_train)  # the branch's output dropout is the block's, GPT-2's resid_pdrop
    assert 0.3 < (dropped == 0).float().mean() < 0.7  # about half the entries zero
    assert not torch.allclose(block.attend(x), block.attend(x))


# ----------------------------------------------------------------------------------------------
# KV cache
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_forward_in_chunks_equals_one_full_forward(variant):
    model = make(**VARIANTS[variant])
    idx = ids(2, 14)
    full, _ = model(idx)
    cache = model.new_cache()
    parts = []
    for a, b in [(0, 5), (5, 6), (6, 11), (11, 14)]:
        assert cache.length == a
        parts.append(model(idx[:, a:b], cache=cache)[0])
    assert cache.length == 14
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("part", ["attn", "block"])
@pytest.mark.parametrize("variant", ["rope", "grouped-query, rope"])
def test_a_layer_called_with_a_cache_continues_from_what_the_cache_holds(variant, part):
    block = make(**VARIANTS[variant]).blocks[0]
    layer = block if part == "block" else block.attn
    x = torch.randn(2, 6, TINY["embed_dim"], generator=torch.Generator().manual_seed(3))
    cache = KVCache(1, TINY["context_length"])  # the layer is layer 0: one slot
    parts = [layer(x[:, :2], cache=cache), layer(x[:, 2:5], cache=cache), layer(x[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), layer(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sampling", [{"greedy": True}, {"temperature": 0.9, "top_k": 6, "top_p": 0.9}])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_generation_equals_recomputing_the_prefix(variant, sampling):
    """Tokens and each step's logits, greedy or sampled from one seed, and each step's logits are the full pass's."""
    model = make(**VARIANTS[variant]).for_generation()
    prompt = ids(2, 3)
    run = functools.partial(generate, model, prompt, 12, return_logits=True, **sampling)
    cached, full = (run(use_cache=use, generator=torch.Generator().manual_seed(7)) for use in (True, False))
    torch.testing.assert_close(cached[0], full[0], atol=0, rtol=0)
    torch.testing.assert_close(cached[1], full[1], atol=1e-5, rtol=1e-5)
    assert cached[0].shape == (2, 15) and cached[1].shape == (2, 12, TINY["vocab_size"])
    torch.testing.assert_close(cached[1], model(cached[0][:, :-1])[:, 2:], atol=1e-5, rtol=1e-5)


def test_for_generation_shares_parameters():
    model = make()
    wrapped = model.for_generation()
    assert wrapped.context_length == 16
    assert wrapped.gpt is model and next(wrapped.parameters()) is next(model.parameters())
    torch.testing.assert_close(wrapped(ids(1, 4)), model(ids(1, 4))[0])


def test_the_committed_checkpoint_was_trained_with_the_half_pairing(course_corpus):
    """checkpoints/shakespeare_cpu.pt loads, and its logits are those of apply_rope(pairing="half") in every layer.

    With the interleaved pairing instead, the same weights predict far worse: the pairing is part of the model.
    """
    from pathlib import Path

    import torch.nn.functional as F

    from course_utils.positional import apply_rope
    from course_utils.train import load_model

    root = Path(__file__).resolve().parents[1]
    model, tokenizer, info = load_model(root / "checkpoints" / "shakespeare_cpu.pt")
    assert info["model_config"]["positions"] == "rope" and info["model_config"]["num_kv_heads"] is None
    text = course_corpus
    start = int(len(text) * 0.95)  # inside the validation split (the last 10%)
    tokens = torch.as_tensor(tokenizer.encode(text[start : start + 8 * 64 + 1]))
    x, y = tokens[:-1].view(8, 64), tokens[1:].view(8, 64)

    def logits_and_loss():
        with torch.no_grad():
            logits, _ = model(x)
        return logits, F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()

    logits, loss = logits_and_loss()
    assert loss < 1.8  # the file records a validation loss of 1.77
    base = info["model_config"]["rope_base"]
    for pairing, agrees in (("half", True), ("interleaved", False)):
        for block in model.blocks:  # every layer's rotation replaced by apply_rope with this pairing
            rotate = lambda t, s, p=pairing: apply_rope(t, torch.arange(s, s + t.shape[-2]), base, p)  # noqa: E731
            block.attn.rotary.rotate_unchecked = rotate
        swapped, swapped_loss = logits_and_loss()
        assert torch.allclose(swapped, logits, rtol=1e-4, atol=1e-4) is agrees
        assert (swapped_loss < 1.8) is agrees  # on this sample: 1.57 nats with half, 2.92 with interleaved


# ----------------------------------------------------------------------------------------------
# Bad arguments a learner might pass (issue 9): checked where the learner calls, with what arrived
# ----------------------------------------------------------------------------------------------


def _with(value, position=(1, 2)):
    idx = ids(2, 5)
    idx[position] = value
    return idx


def _config(**overrides) -> GPTConfig:
    return GPTConfig(**{**TINY, **overrides})


def _full_cache(model):
    """A cache that already holds context_length positions: it cannot grow past the context."""
    cache = model.new_cache()
    model(ids(1, 16), cache=cache)
    return cache


def _layer(model, part):
    block = model.blocks[0]
    return {"attn": block.attn, "mlp": block.mlp, "block": block}[part]


def _masked(attention, mask):
    return _layer(make(attention=attention), "attn")(torch.randn(2, 5, 16), mask=mask, need_weights=True)


# (call, given a tiny GPT; exception; what the message must say): those tests/bad_inputs.json does not pin already
MESSAGES = [
    # the configuration
    (lambda m: _config(embed_dim=10, num_heads=3), ValueError,
     r"embed_dim \(10\) must be divisible by num_heads \(3\)"),
    (lambda m: _config(dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
    (lambda m: _config(dropout="0.1"), TypeError, r"dropout must be a number in \[0, 1\), got '0.1' \(str\)"),
    *[(lambda m, f=f: GPTConfig(**{f: 5}), TypeError, rf"{f} must be one of .*, got 5 \(int\)")
      for f in ("positions", "attention", "norm_position")],  # a choice of the wrong type is a TypeError
    (lambda m: _config(bias="yes"), TypeError, r"bias must be True or False, got 'yes' \(str\)"),
    (lambda m: _config(num_kv_heads=3), ValueError, r"num_heads \(4\) must be divisible by num_kv_heads \(3\)"),
    (lambda m: _config(embed_dim=12, num_heads=4, positions="rope"), ValueError,
     "rotary positions need an even head_dim, got 3"),
    (lambda m: _config(positions="rope", rope_base=1.0), ValueError, "rope_base must be a number greater than 1"),
    (lambda m: _config(positions="rope", rope_base="big"), TypeError,
     r"rope_base must be a number greater than 1, got 'big' \(str\)"),
    (lambda m: _config(positions="rope", rope_base=float("inf")), ValueError,
     "rope_base must be a number greater than 1, got inf"),
    # every model checks rope_base, since checkpoints store it (GPTConfig(positions='learned', rope_base='x') was saved)
    *[(lambda m, b=b: GPTConfig(positions="learned", rope_base=b), error, r"rope_base must be a number greater than 1")
      for b, error in (("x", TypeError), (True, TypeError), (-1.0, ValueError), (float("nan"), ValueError))],
    (lambda m: GPTConfig.from_dict({**GPTConfig.preset("cpu", vocab_size=70).to_dict(), "colour": "red"}), ValueError,
     "unknown GPTConfig field"),
    # the model's forward and its methods
    (lambda m: m(_with(70)), ValueError,
     r"idx must be token ids in \[0, vocab_size=11\), got 70 at position \(1, 2\) \(min 0, max 70\)"),
    (lambda m: m(_with(-1)), ValueError, r"idx must be token ids in \[0, vocab_size=11\), got -1 at position \(1, 2\)"),
    (lambda m: m.attention_maps(_with(11)), ValueError, r"idx must be token ids in \[0, vocab_size=11\), got 11"),
    (lambda m: m(ids(2, 5), ids(2, 4)), ValueError,
     r"targets must have the shape of idx \(2, 5\) \(the next token at every position\), got \(2, 4\)"),
    (lambda m: m(ids(2, 5), _with(11)), ValueError,
     r"targets must be token ids in \[0, vocab_size=11\) \(or -100, ignored\), got 11 at position \(1, 2\)"),
    (lambda m: m(ids(2, 5), ids(2, 5).float()), TypeError,
     r"targets must hold integer token ids \(torch.long\), got dtype torch.float32"),
    (lambda m: m(ids(2, 5), m.new_cache()), TypeError,
     r"got a KVCache as targets \(the second argument\): pass it as cache="),
    (lambda m: m(torch.zeros(2, 3, 4)), ValueError,
     r"idx must be a \(B, T\) tensor of token ids, got shape \(2, 3, 4\)"),
    (lambda m: m(torch.zeros(2, 3)), TypeError,
     r"idx must hold integer token ids \(torch.long\), got dtype torch.float32"),
    (lambda m: m(ids(1, 17)), ValueError, r"positions 0..16 do not fit in context_length = 16"),
    (lambda m: m.num_parameters(non_embedding="yes"), TypeError,
     r"non_embedding must be True or False, got 'yes' \(str\)"),
    (lambda m: GPT(TINY), TypeError, "GPT takes a GPTConfig, got dict"),
    (lambda m: GPTConfig.preset("huge"), ValueError, r"unknown preset 'huge'; choose one of \['cpu', 'gpu', 'tiny'\]"),
    (lambda m: GPTConfig.preset("tiny", n_embd=3), ValueError, r"unknown GPTConfig field\(s\) \['n_embd'\]"),
    (lambda m: m(ids(1, 0), ids(1, 0)), ValueError, r"idx must hold at least one token, got shape \(1, 0\)"),
    (lambda m: m(ids(2, 5).to(torch.uint8)), TypeError,
     r"idx must hold int64 or int32 token ids \(what nn.Embedding takes\), got dtype torch.uint8"),
    (lambda m: m(ids(2, 5), ids(2, 5).to(torch.int16)), TypeError, "targets must hold int64 or int32 token ids"),
    (lambda m: m(ids(2, 5), cache=KVCache(1, 16)), ValueError,
     r"the cache has 1 layer\(s\), the model 2: use model.new_cache\(\)"),
    (lambda m: m(ids(1, 1), cache=_full_cache(m)), ValueError, r"positions 16..16 do not fit in context_length = 16"),
    # layers called on their own check x; a layer that calls the unchecked kernel still checks the caller's mask (#20)
    *[row for part in ("attn", "mlp", "block") for row in [
        (lambda m, p=part: _layer(m, p)(torch.randn(5, 16)), ValueError,
         r"x must have at least 3 dimensions, got shape \(5, 16\)"),
        (lambda m, p=part: _layer(m, p)(torch.randn(2, 5, 8)), ValueError,
         r"x must have shape \(B, T, C=16\), got \(2, 5, 8\)")]],
    *[row for a in ("course", "torch") for row in [
        (lambda m, a=a: _masked(a, torch.zeros(5, 5)), TypeError,
         r"mask must be boolean \(True = may attend\), got dtype torch.float32"),
        (lambda m, a=a: _masked(a, torch.ones(5, 4, dtype=torch.bool)), ValueError,
         r"mask of shape \(5, 4\) does not broadcast to the scores' shape")]],
]  # fmt: skip


@pytest.mark.parametrize("call, error, match", MESSAGES, ids=[re.sub(r"\\(.)", r"\1", m)[:60] for *_, m in MESSAGES])
def test_each_bad_input_gets_its_message(call, error, match):
    with pytest.raises(error, match=match):
        call(make())


def test_int32_ids_and_targets_give_the_logits_and_loss_of_int64_ones():
    model, idx, targets = make(), ids(2, 5), ids(2, 5, seed=2)
    logits, loss = model(idx, targets)
    logits32, loss32 = model(idx.int(), targets.int())
    torch.testing.assert_close((logits32, loss32), (logits, loss))


def test_targets_of_minus_100_are_ignored_as_in_cross_entropy():
    model = make()
    idx, targets = ids(2, 5), ids(2, 5, seed=2)
    _, full = model(idx, targets)
    masked = targets.clone()
    masked[0, 0] = -100
    logits, partial = model(idx, masked)
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1)[1:], targets.flatten()[1:])
    torch.testing.assert_close(partial, expected)
    assert not torch.isclose(partial, full)


def test_a_training_step_off_the_cpu_never_reads_the_ids_to_check_them():
    """Checking the ids' range reads them back from the device: a wait for the GPU at every step. On a device
    that cannot be read at all (meta), a training forward must still run, and an eval forward must say the ids
    need a real device."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**TINY))
        idx = torch.zeros(2, 5, dtype=torch.long)
    logits, loss = model.train()(idx, idx)
    assert logits.shape == (2, 5, TINY["vocab_size"]) and logits.device.type == "meta"
    with pytest.raises(ValueError, match="is on the meta device, which holds no values"):
        model.eval()(idx)
    with pytest.raises(TypeError, match="integer token ids"):  # type and shape are still checked: no read needed
        model.train()(idx.float())


@pytest.mark.parametrize("attention", ["course", "torch"])
def test_a_layer_that_calls_the_unchecked_kernel_still_checks_the_callers_mask(attention):
    """The GPT's attention layer calls attention's unchecked kernel after its own checks (#20): a mask the caller
    passes is checked as scaled_dot_product_attention checked it, and a good one gives the causal result."""
    from course_utils.masking import causal_mask

    layer = make(attention=attention).blocks[0].attn
    x = torch.randn(2, 5, 16)  # a bad mask: MESSAGES
    out, weights = layer(x, mask=causal_mask(5), need_weights=True)
    expected, expected_weights = layer(x, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert torch.all(weights.triu(diagonal=1) == 0)


def _calls(fn, keep) -> list[str]:
    """The names of the functions called while ``fn()`` runs whose frame ``keep(frame)`` accepts."""
    import sys

    calls = []

    def tracer(frame, event, arg):
        if event == "call" and keep(frame):
            calls.append(frame.f_code.co_name)
        return None

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return calls


def _validate_calls(fn) -> int:
    """How many calls of course_utils._validate's functions (nested ones included) running ``fn()`` makes."""
    return len(_calls(fn, lambda frame: frame.f_code.co_filename.endswith("_validate.py")))


def _entry_checks(frame) -> bool:
    """A check function (check_*, in any course_utils file) called by code that is not itself a check."""
    name, caller = frame.f_code.co_name, frame.f_back.f_code.co_name if frame.f_back else ""
    return "course_utils" in frame.f_code.co_filename and name.startswith("check") and not caller.startswith("check")


@pytest.mark.parametrize("attention", ["torch", "course"])
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_a_rope_forward_runs_the_same_checks_with_one_layer_or_four(attention, num_kv_heads):
    """Issue #25: a GPT forward with RoPE checks its input once, at the model's door: every call of a _validate
    primitive counted, the count is the same for 1 and 4 layers, in a training forward and in the decoding steps
    with a KV cache (a prompt, one token, then two: the causal mask of T < S is built, unchecked, in the layer)."""
    counts = {}
    for num_layers in (1, 4):
        model = make(positions="rope", num_kv_heads=num_kv_heads, attention=attention, num_layers=num_layers)
        idx = ids(2, 9)
        cache = model.new_cache()
        steps = [(idx, idx, None), (idx[:, :5], None, cache), (idx[:, 5:6], None, cache), (idx[:, 6:8], None, cache)]
        counts[num_layers] = [_validate_calls(functools.partial(model, *step)) for step in steps]
    assert counts[1] == counts[4], counts
    assert all(n > 0 for n in counts[1])  # the door itself is counted: the tracer sees _validate's calls


@pytest.mark.parametrize("positions", ["rope", "learned"])
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_a_forward_pass_checks_its_arguments_once(positions, num_kv_heads):
    """Issue #25: the model checks idx once at its door; its blocks, attention, MLP and rotary table trust it.
    Counted: every entry check made during one forward pass with every layer run."""
    model = make(positions=positions, num_kv_heads=num_kv_heads, num_layers=3)
    assert _calls(functools.partial(model, ids(2, 9)), _entry_checks) == ["check_ids"]
    block = functools.partial(model.blocks[0], torch.randn(2, 9, 16))  # a learner calling a block on its own
    assert _calls(block, _entry_checks) == ["check_call"]  # the block's door, once
