"""A battery of bad inputs for every public entry of the reference modules, and what each one raises.

Each entry is a good call; every argument in turn is swapped for each value of a pool of wrong ones (wrong
types, out-of-range numbers, tensors of another shape or dtype), and the result recorded as
``(exception type, message, where it was raised)`` or ``ok``. ``tests/test_bad_inputs.py`` compares the
record with ``tests/bad_inputs.json``: a message may change only on purpose, and none may come from inside torch.

    .venv/bin/python tests/bad_inputs.py --write   # record again, after a change of wording made on purpose
"""

from __future__ import annotations

import json
import math
import re
import sys
import traceback
from pathlib import Path

import torch
from torch import nn

RECORD = Path(__file__).with_name("bad_inputs.json")

SCALARS = {
    "None": None,
    "str": "a",
    "float": 1.5,
    "neg": -1,
    "zero": 0,
    "bool": True,
    "nan": math.nan,
    "list": [1, 2],
}


def _tensor_mutations(t: torch.Tensor) -> dict[str, object]:
    out: dict[str, object] = {
        "t0": torch.tensor(1.0),
        "t_long": t.long() if t.dim() else torch.ones(2, 3, dtype=torch.long),
        "t_bool": t.bool() if t.dim() else torch.ones(2, 3, dtype=torch.bool),
        "t_double": t.double(),
        "t_fewer": t[0] if t.dim() else t,
        "t_more": t[None],
    }
    if t.dim():
        out["t_last+1"] = torch.cat([t, t[..., :1]], dim=-1)
    if t.dim() >= 2:
        out["t_rows+1"] = torch.cat([t, t[..., :1, :]], dim=-2)
    return out


def _gen():
    return torch.Generator().manual_seed(0)


def _entries():
    """(name, function, positional args, keyword args): good calls of every public entry."""
    from course_utils import attention as A
    from course_utils import block as BL
    from course_utils import fast_attention as FA
    from course_utils import generation as G
    from course_utils import gpt as GP
    from course_utils import linear_attention as LA
    from course_utils import masking as M
    from course_utils import multihead as MH
    from course_utils import positional as P
    from course_utils import variants as VA

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    qs = torch.randn(3, 4)
    x = torch.randn(2, 5, 8)
    x4 = torch.randn(2, 4, 5, 2)
    mask = M.causal_mask(3, 5)
    yield "attention_loops", A.attention_loops, (qs, torch.randn(5, 4), torch.randn(5, 6)), {"scale": 1.0}
    yield "attention_matmul", A.attention_matmul, (q, k, v), {"scale": 1.0}
    yield "simple_self_attention", A.simple_self_attention, (x,), {}
    yield "softmax_naive", A.softmax_naive, (x,), {"dim": -1}
    yield "softmax", A.softmax, (x,), {"dim": -1}
    yield (
        "sdpa",
        A.scaled_dot_product_attention,
        (q, k, v),
        {
            "mask": mask,
            "dropout_p": 0.0,
            "scale": 0.5,
            "bias": torch.zeros(3, 5),
        },
    )
    yield "grad_norms", A.attention_grad_norms, (q, k, v, torch.randn(2, 3, 6)), {"scale": 0.5}
    yield "causal_mask", M.causal_mask, (3,), {"S": 5, "device": "cpu"}
    yield "mask_scores", M.mask_scores, (torch.randn(2, 3, 5), mask), {"fill_value": -1e4}
    yield "padding_mask", M.padding_mask, ([1, 3],), {"S": 4}
    yield "combine_masks", M.combine_masks, (mask, torch.ones(5, dtype=torch.bool)), {}
    yield "convert_mask", M.convert_mask, (mask,), {"src": "allow", "dst": "additive", "dtype": torch.float32}
    yield (
        "convert_mask_add",
        M.convert_mask,
        (M.convert_mask(mask, "allow", "additive"),),
        {
            "src": "additive",
            "dst": "block",
        },
    )
    yield "split_heads", MH.split_heads, (x,), {"num_heads": 2}
    yield "merge_heads", MH.merge_heads, (x4,), {}
    for cls in (MH.MultiHeadAttentionWrapper, MH.MultiHeadAttentionEinsum, MH.MultiHeadAttention):
        yield cls.__name__, cls, (8, 2), {"bias": True}
        yield cls.__name__ + ".forward", cls(8, 2), (x,), {"mask": M.causal_mask(5), "need_weights": True}
    yield "MultiHeadAttention(dropout)", MH.MultiHeadAttention, (8, 2), {"dropout": 0.1}
    yield (
        "MultiHeadAttention.cross",
        MH.MultiHeadAttention(8, 2),
        (x,),
        {
            "mask": torch.ones(2, 1, 5, 3, dtype=torch.bool),
            "memory": torch.randn(2, 3, 8),
        },
    )
    yield "SingleHeadAttention", MH.SingleHeadAttention, (8, 4), {}
    yield "SingleHeadAttention.forward", MH.SingleHeadAttention(8, 4), (x,), {"mask": M.causal_mask(5)}
    yield "from_packed", MH.MultiHeadAttentionWrapper.from_packed, (MH.MultiHeadAttention(8, 2),), {}
    yield "from_packed_einsum", MH.MultiHeadAttentionEinsum.from_packed, (MH.MultiHeadAttention(8, 2),), {}
    yield "from_torch", MH.MultiHeadAttention.from_torch, (nn.MultiheadAttention(8, 2),), {}
    yield "LearnedPositionalEmbedding", P.LearnedPositionalEmbedding, (6, 8), {}
    yield "LearnedPositionalEmbedding.forward", P.LearnedPositionalEmbedding(6, 8), (x,), {"positions": torch.arange(5)}
    yield "sinusoidal_frequencies", P.sinusoidal_frequencies, (8,), {"base": 100.0}
    yield "sinusoidal_encoding", P.sinusoidal_encoding, (5, 8), {"base": 100.0}
    yield "sinusoidal_shift_matrix", P.sinusoidal_shift_matrix, (2, 8), {"base": 100.0}
    yield "apply_rope", P.apply_rope, (x,), {"positions": torch.arange(5), "base": 100.0, "pairing": "half"}
    yield "RotaryTable", P.RotaryTable, (8,), {"base": 100.0, "length": 4, "pairing": "half"}
    yield "RotaryTable.rotate", P.RotaryTable(8).rotate, (x,), {"start": 1}
    yield "rope_pairing_permutation", P.rope_pairing_permutation, (8,), {}
    yield "alibi_slopes", P.alibi_slopes, (4,), {}
    yield "alibi_bias", P.alibi_bias, (4, 3), {"S": 5}
    yield "ALiBiMultiHeadAttention.forward", P.ALiBiMultiHeadAttention(8, 2), (x,), {"mask": M.causal_mask(5)}
    yield "repeat_kv", VA.repeat_kv, (x4,), {"num_heads": 8}
    yield (
        "GroupedQueryAttention",
        VA.GroupedQueryAttention,
        (8, 4, 2),
        {
            "bias": True,
            "rope": True,
            "rope_base": 100.0,
            "dropout": 0.1,
        },
    )
    yield (
        "GroupedQueryAttention.forward",
        VA.GroupedQueryAttention(8, 4, 2, rope=True),
        (x,),
        {
            "mask": M.causal_mask(5),
            "cache": VA.KVCache(2, 8),
            "layer": 1,
            "need_weights": True,
        },
    )
    yield "from_multihead", VA.GroupedQueryAttention.from_multihead, (MH.MultiHeadAttention(8, 2),), {}
    yield "kv_cache_bytes", VA.kv_cache_bytes, (2, 2, 4), {"num_tokens": 3, "batch_size": 2, "bytes_per_element": 2}
    yield "sliding_window_mask", VA.sliding_window_mask, (3, 2), {"S": 5, "device": "cpu"}
    qq = torch.randn(2, 5, 4)
    yield "sliding_window_attention", VA.sliding_window_attention, (qq, qq, qq, 2), {"chunk_size": 2, "scale": 0.5}
    yield "linformer_attention", VA.linformer_attention, (q, k, v, torch.randn(2, 6), torch.randn(2, 6)), {"scale": 0.5}
    c = torch.randn(2, 5, 4)
    yield "aft_full", VA.aft_full, (torch.randn(2, 3, 4), c, c, torch.randn(3, 5)), {"mask": mask}
    yield "aft_local_bias", VA.aft_local_bias, (torch.randn(3, 5), 2), {}
    yield "aft_simple", VA.aft_simple, (torch.randn(2, 3, 4), c, c), {}
    yield (
        "topk_attention",
        VA.topk_attention,
        (q, k, v, 2),
        {
            "mask": mask,
            "chunk_size": 2,
            "scale": 0.5,
            "causal": True,
        },
    )
    yield "KVCache", VA.KVCache, (2, 8), {}

    def cache_update(layer, k, v):
        cache = VA.KVCache(2, 4)
        cache.update(0, torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4))
        return cache.update(layer, k, v)

    kv = torch.randn(1, 2, 2, 4)
    yield "KVCache.update", cache_update, (1, kv, kv), {}

    def cache_reorder(indices):
        cache = VA.KVCache(1, 4)
        cache.update(0, torch.randn(2, 2, 2, 4), torch.randn(2, 2, 2, 4))
        return cache.reorder(indices)

    yield "KVCache.reorder", cache_reorder, (torch.tensor([1, 0]),), {}
    yield "elu_feature_map", LA.elu_feature_map, (x,), {}
    qq6 = torch.randn(2, 5, 6)
    for fn in (LA.linear_attention, LA.linear_attention_recurrent, LA.linear_attention_quadratic):
        yield fn.__name__, fn, (c, c, qq6), {}
    yield (
        "linear_attention_step",
        LA.linear_attention_step,
        (
            torch.zeros(2, 4, 6),
            torch.zeros(2, 4),
            torch.randn(2, 4),
            torch.randn(2, 4),
            torch.randn(2, 6),
        ),
        {},
    )
    scores = torch.randn(2, 3, 5)
    yield "block_partial", FA.block_partial, (scores, v), {}
    pa, pb = FA.block_partial(scores, v), FA.block_partial(scores + 1, v)
    yield "merge_partials", FA.merge_partials, (pa, pb), {}
    yield "finish", FA.finish, (pa,), {}
    yield "online_softmax", FA.online_softmax, (x, 2), {}
    for fn in (FA.tiled_attention, FA.flash_attention):
        yield fn.__name__, fn, (q, k, v), {"mask": mask, "is_causal": True, "scale": 0.5, "q_tile": 2, "kv_tile": 2}
    o = A.scaled_dot_product_attention(q, k, v, scale=0.5)[0]
    yield "attention_backward", FA.attention_backward, (q, k, v, o, torch.randn_like(o), 0.5), {"mask": mask}
    yield "saved_for_backward", FA.saved_for_backward, (A.softmax, x), {}
    logits = torch.randn(2, 7)
    yield "top_k_filter", G.top_k_filter, (logits, 3), {}
    yield "top_p_keep", G.top_p_keep, (torch.softmax(logits, -1), 0.9), {}
    yield (
        "sample_next_token",
        G.sample_next_token,
        (logits,),
        {
            "temperature": 0.8,
            "top_k": 3,
            "top_p": 0.9,
            "greedy": False,
            "generator": _gen(),
        },
    )
    model = GP.GPT(
        GP.GPTConfig(vocab_size=16, context_length=8, embed_dim=16, num_heads=4, num_layers=1)
    ).for_generation()
    prompt = torch.tensor([[1, 2, 3]])
    settings = {"temperature": 0.8, "top_k": 3, "top_p": 0.9, "greedy": False, "use_cache": True}

    def stream(*args, **kwargs):
        return list(G.generate_stream(*args, **kwargs))

    yield "generate_stream", stream, (model, prompt, 3), {**settings, "generator": _gen()}
    yield "generate_stream_shift", stream, (model, prompt, 3), {"on_full": "shift", "keep_on_shift": 2}
    yield (
        "generate",
        G.generate,
        (model, prompt, 3),
        {
            **settings,
            "generator": _gen(),
            "callback": lambda t: None,
            "return_logits": True,
        },
    )
    yield "beam_search", G.beam_search, (model, prompt, 2, 3), {"use_cache": True}
    yield "MLP", BL.MLP, (8,), {"mlp_ratio": 2, "bias": True, "dropout": 0.1}
    yield "MLP.forward", BL.MLP(8), (x,), {}
    yield (
        "Block",
        BL.Block,
        (8, MH.MultiHeadAttention(8, 2)),
        {
            "mlp_ratio": 2,
            "bias": True,
            "dropout": 0.0,
            "norm_position": "pre",
        },
    )
    yield "Block.forward", BL.Block(8, MH.MultiHeadAttention(8, 2)), (x,), {}
    cfg = dict(vocab_size=11, context_length=8, embed_dim=16, num_heads=4, num_layers=1)
    yield (
        "GPTConfig",
        GP.GPTConfig,
        (),
        {
            **cfg,
            "num_kv_heads": 2,
            "window": 3,
            "mlp_ratio": 2,
            "dropout": 0.1,
            "bias": True,
            "positions": "rope",
            "rope_base": 100.0,
            "attention": "course",
            "norm_position": "pre",
        },
    )
    yield "GPTConfig.preset", GP.GPTConfig.preset, ("tiny",), {"dropout": 0.1}
    yield "GPTConfig.from_dict", GP.GPTConfig.from_dict, (GP.GPTConfig(**cfg).to_dict(),), {}
    yield "GPT", GP.GPT, (GP.GPTConfig(**cfg),), {}
    for name, extra in (
        ("learned", {}),
        ("rope", {"positions": "rope"}),
        ("gqa", {"num_kv_heads": 2}),
        ("window", {"window": 2}),
    ):
        gpt = GP.GPT(GP.GPTConfig(**cfg, **extra))
        ids = torch.tensor([[1, 2, 3]])
        yield f"GPT.forward[{name}]", gpt, (ids,), {"targets": ids}
        yield f"GPT.forward_cache[{name}]", gpt, (ids,), {"cache": gpt.new_cache()}
        yield f"GPT.attention_maps[{name}]", gpt.attention_maps, (ids,), {}
        yield f"GPT.layer[{name}]", gpt.blocks[0].attn, (torch.randn(2, 3, 16),), {"need_weights": True}
    gpt = GP.GPT(GP.GPTConfig(**cfg))
    yield "GPT.num_parameters", gpt.num_parameters, (), {"non_embedding": True}
    yield "GPT.flops_per_token", gpt.flops_per_token, (), {"T": 4}
    yield "GPT.for_generation", gpt.for_generation(), (torch.tensor([[1, 2]]),), {"cache": gpt.new_cache()}


def _where(exc: BaseException) -> str:
    """'course' when the exception was raised in course_utils, else the file (torch's, Python's) it came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    raised_here = (last.line or "").strip().startswith("raise ") or " raise " in (last.line or "")
    return "course" if "course_utils" in last.filename and raised_here else f"{Path(last.filename).name}: {last.line}"


def _outcome(fn, args, kwargs) -> list:
    try:
        torch.manual_seed(0)
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every kind of failure is recorded
        message = re.sub(r"0x[0-9a-f]+", "0x..", str(exc))
        return [type(exc).__name__, message[:400], _where(exc)]
    return ["ok"]


def run() -> dict[str, list]:
    """Every case of the battery and what it raised."""
    results = {}
    for name, fn, args, kwargs in _entries():
        results[f"{name} | good"] = _outcome(fn, args, kwargs)
        slots = [(i, a) for i, a in enumerate(args)] + list(kwargs.items())
        for slot, good in slots:
            pool = dict(SCALARS)
            if isinstance(good, torch.Tensor):
                pool.update(_tensor_mutations(good))
            for label, bad in pool.items():
                if isinstance(slot, int):
                    a = list(args)
                    a[slot] = bad
                    outcome = _outcome(fn, a, kwargs)
                else:
                    outcome = _outcome(fn, args, {**kwargs, slot: bad})
                results[f"{name} | {slot}={label}"] = outcome
    return results


if __name__ == "__main__":
    out = run()
    if "--write" in sys.argv:
        rows = (f"{json.dumps(key)}: {json.dumps(result)}" for key, result in sorted(out.items()))
        RECORD.write_text("{\n" + ",\n".join(rows) + "\n}\n")  # one case a line: a diff shows what changed
    leaks = {key: r for key, r in out.items() if len(r) == 3 and r[2] != "course"}
    print(f"{len(out)} cases, {sum(r[0] == 'ok' for r in out.values())} ok, {len(leaks)} raised outside course_utils")
    if "-v" in sys.argv:
        for key, r in leaks.items():
            print(key, r)
