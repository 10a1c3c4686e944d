"""Small input checks shared by the modules: each raises an error that says what was expected and what arrived."""

from __future__ import annotations

import math
import numbers

import torch


def _describe(x: object) -> str:
    """``'abc' (str)``: the value and its type, for a message about a wrong argument."""
    text = repr(x)
    return f"{text[:60]}... ({type(x).__name__})" if len(text) > 60 else f"{text} ({type(x).__name__})"


def check_int(
    name: str, n: object, minimum: int | None = 1, maximum: int | None = None, expected: str = "an int"
) -> int:
    """``n`` if it is an int in [``minimum``, ``maximum``] (None: no bound); TypeError for another type (bool
    included) saying ``expected``, ValueError outside the bounds. The one home of the course's integer checks."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be {expected}, got {type(n).__name__}")
    too_low, too_high = minimum is not None and n < minimum, maximum is not None and n > maximum
    if too_low or too_high:
        if minimum is not None and maximum is not None:
            raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {n}")
        raise ValueError(
            f"{name} must be at least {minimum}, got {n}" if too_low else f"{name} must be at most {maximum}, got {n}"
        )
    return int(n)


def check_choice(name: str, value: object, choices: tuple | list, why: str = "") -> None:
    """Raise unless ``value`` is one of ``choices``: TypeError when its type is none of theirs (5 for a name),
    ValueError otherwise; the message lists them as given, then ``why``."""
    kinds = tuple({type(choice) for choice in choices})
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):  # np.str_ is a str
        raise TypeError(f"{name} must be one of {choices}{why}, got {value!r} ({type(value).__name__})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}{why}, got {value!r}")


def check_bool(name: str, flag: object, expected: str = "True or False") -> bool:
    """``flag`` if it is a bool (numpy's bool too); TypeError for anything else, such as the truthy string 'no'."""
    if isinstance(flag, bool) or (type(flag).__module__ == "numpy" and type(flag).__name__ in ("bool_", "bool")):
        return bool(flag)
    raise TypeError(f"{name} must be {expected}, got {_describe(flag)}")


def check_generator(name: str, generator: object) -> None:
    """Raise TypeError unless ``generator`` is a torch.Generator or None."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{name} must be a torch.Generator (torch.Generator().manual_seed(0), say) or None, "
            f"got {type(generator).__name__}"
        )


def check_str(name: str, text: object, expected: str = "a str") -> str:
    """``text`` if it is a str; TypeError naming what arrived otherwise (bytes: decode them first)."""
    if not isinstance(text, str):
        hint = ": decode bytes first, e.g. data.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"{name} must be {expected}, got {type(text).__name__}{hint}")
    return text


def check_path(name: str, path: object) -> None:
    """Raise TypeError unless ``path`` is a str or os.PathLike."""
    import os

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """Raise ValueError unless the given tensors (None skipped) are on one device; the message names each one's."""
    given = {name: t for name, t in tensors.items() if t is not None}
    if len({t.device for t in given.values()}) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in given.items())
        raise ValueError(f"{', '.join(given)} must be on one device, got {where}: move them with .to(device)")


def check_matches_module(name: str, x: torch.Tensor, module: torch.nn.Module) -> None:
    """Raise unless ``x`` has the dtype and device of ``module``'s first parameter (attribute reads only)."""
    weight = next(module.parameters(), None)
    if weight is None:
        return
    if x.dtype != weight.dtype:
        fix = {
            torch.float64: "module.double()",
            torch.float32: "module.float()",
            torch.float16: "module.half()",
            torch.bfloat16: "module.bfloat16()",
        }.get(x.dtype, "module.to(x.dtype)")
        back = {
            torch.float64: "x.double()",
            torch.float32: "x.float()",
            torch.float16: "x.half()",
            torch.bfloat16: "x.bfloat16()",
        }.get(weight.dtype, "x.to(weight dtype)")
        raise TypeError(
            f"{name} is {str(x.dtype).removeprefix('torch.')} but the module's weights are "
            f"{str(weight.dtype).removeprefix('torch.')}: convert one of them ({fix} or {back})"
        )
    if x.device != weight.device:
        raise ValueError(
            f"{name} is on {x.device} but the module's weights are on {weight.device}: "
            f"move one of them (module.to({str(x.device)!r}) or x.to({str(weight.device)!r}))"
        )


def check_number(name: str, x: object, expected: str = "a number") -> float:
    """``x`` as a float if it is a real number (not a bool, str or tensor); TypeError otherwise."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be {expected}, got {_describe(x)}")
    return float(x)


def check_positive_number(name: str, x: object) -> float:
    """``x`` as a float if it is a finite real number > 0 (a scale, a temperature, a learning rate)."""
    value = check_number(name, x, "a positive number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return value


def check_nonnegative_number(name: str, x: object) -> float:
    """``x`` as a float if it is a finite real number >= 0 (a length, a weight decay); TypeError or ValueError."""
    value = check_number(name, x, "a number >= 0")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
    return value


def check_greater_than(name: str, x: object, bound: float) -> float:
    """``x`` as a float if it is a finite real number > ``bound`` (a RoPE base > 1); TypeError or ValueError."""
    value = check_number(name, x, f"a number greater than {bound}")
    if not (bound < value < math.inf):
        raise ValueError(f"{name} must be a number greater than {bound}, got {x!r}")
    return value


def check_fraction(name: str, p: object, *, one_allowed: bool = False, zero_allowed: bool = True) -> float:
    """``p`` as a float in [0, 1) (dropout), or (0, 1] etc. as the flags say; TypeError or ValueError otherwise."""
    interval = f"{'[' if zero_allowed else '('}0, 1{']' if one_allowed else ')'}"
    value = check_number(name, p, f"a number in {interval}")
    low_ok = value >= 0 if zero_allowed else value > 0
    high_ok = value <= 1 if one_allowed else value < 1
    if not (low_ok and high_ok):
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return value


def check_dim(name: str, x: torch.Tensor, dim: object) -> int:
    """``dim`` if it names an axis of ``x`` (negative counts from the end); TypeError or ValueError otherwise."""
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TypeError(f"dim must be an int, got {_describe(dim)}")
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim() - 1}] for {name} of shape {tuple(x.shape)}, got {dim}")
    return int(dim)


def check_token_ids(
    name: str, idx: object, vocab_size: int, ignore_index: int | None = None, values: bool = True
) -> None:
    """Raise unless ``idx`` is a (B, T) integer tensor of ids in [0, vocab_size).

    TypeError for a non-tensor or a non-integer dtype, ValueError for another shape or an id out of range
    (the message names the first such id and its position). ``ignore_index`` is one more allowed value
    (``F.cross_entropy``'s -100 for targets). One min/max over the ids: check once per call, at the entry.
    ``values=False`` checks only type and shape, which never reads the tensor (no wait for a GPU).
    """
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"{name} must be a (B, T) torch.Tensor of token ids, got {type(idx).__name__}")
    if idx.dim() != 2:
        raise ValueError(f"{name} must be a (B, T) tensor of token ids, got shape {tuple(idx.shape)}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {idx.dtype}")
    if idx.numel() == 0 or not values:
        return
    if idx.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device, which holds no values: token ids must be on a real device (cpu, cuda, mps)"
        )
    low, high = torch.stack(torch.aminmax(idx)).tolist()  # one read of the device, not two
    if low >= 0 and high < vocab_size:
        return
    bad = (idx < 0) | (idx >= vocab_size)
    if ignore_index is not None:
        bad &= idx != ignore_index
    if not bool(bad.any()):
        return
    position = tuple(int(i) for i in bad.nonzero()[0])
    extra = f" (or {ignore_index}, ignored)" if ignore_index is not None else ""
    raise ValueError(
        f"{name} must be token ids in [0, vocab_size={vocab_size}){extra}, got {int(idx[position])} "
        f"at position {position} (min {low}, max {high})"
    )


def check_tensor(name: str, x: object, min_dim: int = 1) -> None:
    """Raise TypeError if ``x`` is not a tensor, ValueError if it has fewer than ``min_dim`` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}")


def check_floating(name: str, x: torch.Tensor) -> None:
    """Raise TypeError if ``x`` is not a floating-point tensor."""
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def check_qkv(q: object, k: object, v: object) -> None:
    """Raise unless q (..., T, D), k (..., S, D), v (..., S, Dv) are floating tensors of one dtype and device
    whose shapes fit, with D > 0."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, min_dim=2)
        check_floating(name, x)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    check_same_device(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension D, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if q.shape[-1] == 0:
        raise ValueError(
            f"q and k must have a head dimension D >= 1 (the scale is 1 / sqrt(D)), got q {tuple(q.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions S, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not broadcast"
        ) from None


def check_embedded(name: str, x: object, embed_dim: int, module: torch.nn.Module | None = None) -> None:
    """Raise unless ``x`` is a floating (B, T, C) tensor with C = ``embed_dim``: the input of an attention layer.

    With ``module``, ``x`` must also have the dtype and device of the module's weights.
    """
    check_tensor(name, x, min_dim=3)
    check_floating(name, x)
    if x.dim() != 3 or x.shape[-1] != embed_dim:
        raise ValueError(f"{name} must have shape (B, T, C={embed_dim}), got {tuple(x.shape)}")
    if module is not None:
        check_matches_module(name, x, module)


def check_attention_input(x: object, module: torch.nn.Module, need_weights: object) -> None:
    """Raise unless ``x`` is the (B, T, C) input of the attention ``module`` (its embed_dim, dtype and device)
    and ``need_weights`` a bool: the entry check of every attention module's forward."""
    check_embedded("x", x, module.embed_dim, module)
    check_bool("need_weights", need_weights)


def check_bool_mask(mask: object, target_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise TypeError unless ``mask`` is a boolean tensor, ValueError unless it broadcasts to ``target_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor (True = may attend), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be boolean (True = may attend), got dtype {mask.dtype}; "
            "convert an additive float mask with course_utils.masking.convert_mask"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, target_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape {tuple(target_shape)}"
        )


def check_scores_mask(mask: object, q: torch.Tensor, k: torch.Tensor) -> None:
    """Raise unless ``mask`` is a boolean tensor that broadcasts to the scores of q (..., T, D) and k (..., S, D),
    (..., T, S), on q's device: the mask check of every attention that takes a caller's mask."""
    check_bool_mask(mask, (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]))
    check_same_device(q=q, mask=mask)


def check_heads(embed_dim: object, num_heads: object, num_kv_heads: object = None) -> int:
    """The head dimension ``embed_dim // num_heads``, after checking that the counts are positive ints, that
    ``num_heads`` divides ``embed_dim`` and (when given) ``num_kv_heads`` divides ``num_heads``.

    The one home of the head-count checks.
    """
    check_int("embed_dim", embed_dim)
    check_int("num_heads", num_heads)
    if embed_dim % num_heads != 0:
        raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    if num_kv_heads is not None:
        check_int("num_kv_heads", num_kv_heads, expected="a positive int or None")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})")
    return embed_dim // num_heads


def from_preset(cls: type, presets: dict, name: str, overrides: dict):
    """``presets[name]`` with the fields in ``overrides`` replaced; ValueError for an unknown preset or field.

    The one implementation behind ``GPTConfig.preset`` and ``TrainConfig.preset`` (frozen dataclasses).
    """
    import dataclasses

    if name not in presets:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(presets)}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}")
    return dataclasses.replace(presets[name], **overrides)


# Checks that belong to one module's functions and are too long to read inline live below, one section per module,
# so that the module reads as the idea and calls one of these at its boundary.

# --- attention, masking, multihead, block, positional ---


def check_float_tensor(name: str, x: object, min_dim: int = 1) -> None:
    """Raise unless ``x`` is a floating-point tensor with at least ``min_dim`` dimensions."""
    check_tensor(name, x, min_dim)
    check_floating(name, x)


def check_softmax_input(x: object, dim: object) -> None:
    """Raise unless ``x`` is a floating-point tensor (at least 1-D) and ``dim`` one of its axes."""
    check_float_tensor("x", x)
    check_dim("x", x, dim)


def check_qkv_scale(q: object, k: object, v: object, scale: object) -> float:
    """``scale`` as a float, after checking q, k, v (:func:`check_qkv`) and that ``scale`` is a positive number."""
    check_qkv(q, k, v)
    return check_positive_number("scale", scale)


def check_bias(bias: object, scores_shape: tuple[int, ...]) -> None:
    """Raise unless ``bias`` is a floating-point tensor that broadcasts to the scores' shape (..., T, S)."""
    check_tensor("bias", bias, min_dim=0)
    if not bias.is_floating_point():
        raise TypeError(f"bias must be a floating-point tensor added to the scores, got dtype {bias.dtype}")
    try:
        ok = torch.broadcast_shapes(bias.shape, scores_shape) == torch.Size(scores_shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"bias of shape {tuple(bias.shape)} does not broadcast to the scores' shape {tuple(scores_shape)}"
        )


def check_sdpa_args(
    q: object, k: object, v: object, mask: object, dropout_p: object, scale: object, bias: object
) -> tuple[float, float | None]:
    """``dropout_p`` and ``scale`` (None kept) as floats, after checking the arguments of
    ``attention.scaled_dot_product_attention``: q, k, v fit (:func:`check_qkv`), dropout_p in [0, 1), scale > 0,
    and ``bias`` (float) and ``mask`` (bool), when given, broadcast to the scores (..., T, S) on q's device."""
    check_qkv(q, k, v)
    dropout_p = check_fraction("dropout_p", dropout_p)
    scale = None if scale is None else check_positive_number("scale", scale)
    scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])  # (..., T, S)
    if bias is not None:
        check_bias(bias, scores_shape)
        check_same_device(q=q, bias=bias)
    if mask is not None:
        check_scores_mask(mask, q, k)
    return dropout_p, scale


def check_grad_norms_args(q: object, k: object, v: object, grad_out: object, scale: object) -> float | None:
    """``scale`` (None kept) as a float, after checking q, k, v and that ``grad_out`` is a gradient of the
    attention output: a floating (..., T, Dv) tensor of q's dtype and device."""
    check_qkv(q, k, v)
    scale = None if scale is None else check_positive_number("scale", scale)
    check_float_tensor("grad_out", grad_out, min_dim=2)
    check_same_device(q=q, grad_out=grad_out)
    if grad_out.dtype != q.dtype:
        raise TypeError(f"grad_out must have the dtype of q, k and v ({q.dtype}), got {grad_out.dtype}")
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out_shape = (*batch, q.shape[-2], v.shape[-1])
    if tuple(grad_out.shape) != out_shape:
        raise ValueError(
            f"grad_out must have the shape of the attention output {out_shape}, got {tuple(grad_out.shape)}"
        )
    return scale


def check_causal_mask_args(T: object, S: object, device: object) -> tuple[int, int, torch.device | None]:
    """``T``, ``S`` (T when None) and ``device`` (None kept) of ``masking.causal_mask``, checked: ints with
    1 <= T <= S, a device name, and a mask small enough to allocate."""
    T = check_int("T", T)
    S = T if S is None else check_int("S", S)
    if T > S:
        raise ValueError(f"causal_mask needs T <= S (the queries are the last T of the S positions), got T={T}, S={S}")
    if device is not None:
        from course_utils.devices import parse_device  # the one reading of a device name

        device = parse_device(device)
    if T * S > 2**40:  # a terabyte of bools: torch would overflow or fail to allocate, deep inside
        raise ValueError(
            f"causal_mask({T}, {S}) would need {T * S:,} bytes ({T * S / 2**30:,.0f} GiB) for a "
            "(T, S) bool mask: use a smaller T and S"
        )
    return T, S, device


def check_mask_scores_args(scores: object, mask: object, fill_value: object) -> float:
    """The fill value of ``masking.mask_scores`` (-inf when None), after checking that ``scores`` is a tensor of
    at least 2 dimensions, ``mask`` a boolean mask that broadcasts to it and the fill value -inf or negative."""
    check_tensor("scores", scores, min_dim=2)
    check_bool_mask(mask, scores.shape)
    fill = float("-inf") if fill_value is None else check_number("fill_value", fill_value, "a number or None")
    if not (fill == float("-inf") or (math.isfinite(fill) and fill < 0)):
        raise ValueError(
            f"fill_value must be -inf or a finite negative number (blocked keys need a score far below "
            f"the others so the softmax gives them ~0 weight; NaN or +inf would poison the row), "
            f"got {fill}"
        )
    return fill


def check_padding_mask_args(lengths: object, S: object) -> tuple[torch.Tensor, int]:
    """``lengths`` (a list or tensor) as a 1-D integer tensor and ``S`` as an int >= 0, each length in [0, S]
    (``masking.padding_mask``); TypeError or ValueError otherwise."""
    S = check_int("S", S, minimum=0)
    lengths = torch.as_tensor(lengths)
    if lengths.numel() == 0:
        lengths = lengths.long()  # torch.as_tensor([]) is float32; an empty batch is still a batch
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(
            f"lengths must be a 1-D integer tensor or list, got dtype {lengths.dtype}, shape {tuple(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > S):
        raise ValueError(f"every length must be in [0, S={S}], got {lengths.tolist()}")
    return lengths, S


def check_combinable(masks: list) -> None:
    """Raise unless ``masks`` are boolean tensors that broadcast together (``masking.combine_masks``)."""
    for i, m in enumerate(masks):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
            got = m.dtype if isinstance(m, torch.Tensor) else type(m).__name__
            raise TypeError(f"combine_masks takes boolean masks (True = may attend); mask {i} is {got}")
    try:
        torch.broadcast_shapes(*(m.shape for m in masks))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in masks)
        raise ValueError(f"masks of shapes {shapes} do not broadcast together") from None


def check_convert_mask_args(mask: object, src: object, dst: object, dtype: object, conventions: tuple) -> None:
    """Raise unless ``masking.convert_mask`` can translate ``mask`` from ``src`` to ``dst``, two of ``conventions``:
    a floating ``dtype``, a boolean mask for "allow" and "block", and for "additive" a float mask holding only
    0 and -inf (finite non-zero entries make it a bias, not a mask)."""
    for name, conv in (("src", src), ("dst", dst)):
        check_choice(name, conv, conventions)
    check_tensor("mask", mask, min_dim=0)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype (an additive mask holds -inf), got {dtype!r}")
    if src in ("allow", "block") and mask.dtype != torch.bool:
        raise TypeError(f"a {src!r} mask must be boolean, got dtype {mask.dtype}")
    if src == "additive":
        if not mask.is_floating_point():
            raise TypeError(f"an 'additive' mask must be floating point, got dtype {mask.dtype}")
        finite_nonzero = torch.isfinite(mask) & (mask != 0)
        if bool(finite_nonzero.any()) or bool((mask == float("inf")).any()) or bool(mask.isnan().any()):
            raise ValueError(
                "an 'additive' mask may only hold 0 (may attend) and -inf (blocked); this one holds other "
                "values, so it is a bias, not a mask"
            )


def check_split_heads(x: object, num_heads: object) -> int:
    """The head dimension D = C // num_heads of ``multihead.split_heads``, after checking that ``x`` is (B, T, C)
    and the head counts (:func:`check_heads`)."""
    check_tensor("x", x, min_dim=3)
    if x.dim() != 3:
        raise ValueError(f"split_heads takes x of shape (B, T, C), got {tuple(x.shape)}")
    return check_heads(x.shape[-1], num_heads)


def check_merge_heads(x: object) -> None:
    """Raise unless ``x`` is a (B, H, T, D) tensor (``multihead.merge_heads``)."""
    check_tensor("x", x, min_dim=4)
    if x.dim() != 4:
        raise ValueError(f"merge_heads takes x of shape (B, H, T, D), got {tuple(x.shape)}")


def check_packed(packed: object, packed_class: type) -> None:
    """Raise TypeError unless ``packed`` is a ``packed_class`` (the course's MultiHeadAttention), for from_packed."""
    if not isinstance(packed, packed_class):
        hint = (
            " (convert it first with MultiHeadAttention.from_torch)"
            if isinstance(packed, torch.nn.MultiheadAttention)
            else ""
        )
        raise TypeError(f"from_packed takes a course_utils MultiHeadAttention{hint}, got {type(packed).__name__}")


def check_from_torch(m: object) -> None:
    """Raise unless ``m`` is an ``nn.MultiheadAttention`` with one packed in_proj_weight and no extra keys."""
    if not isinstance(m, torch.nn.MultiheadAttention):
        raise TypeError(f"from_torch takes an nn.MultiheadAttention, got {type(m).__name__}")
    if not m._qkv_same_embed_dim:
        raise ValueError("from_torch needs kdim == vdim == embed_dim (one packed in_proj_weight)")
    if m.bias_k is not None or m.add_zero_attn:
        raise ValueError("from_torch does not support add_bias_kv or add_zero_attn")


def check_memory(memory: object, x: torch.Tensor, module: torch.nn.Module) -> None:
    """Raise unless ``memory`` is a floating (B, S, C) tensor: x's batch size, S >= 1, the module's dtype and device."""
    check_float_tensor("memory", memory, min_dim=3)
    B, C = x.shape[0], module.embed_dim
    if memory.dim() != 3 or memory.shape[0] != B or memory.shape[1] == 0 or memory.shape[2] != C:
        raise ValueError(
            f"memory must have shape (B={B}, S >= 1, C={C}) for x of shape {tuple(x.shape)}, got {tuple(memory.shape)}"
        )
    check_matches_module("memory", memory, module)


def check_attention_call(
    module: torch.nn.Module,
    x: object,
    mask: object,
    need_weights: object,
    memory: object = None,
    *,
    per_head: bool = True,
    takes_memory: bool = False,
) -> None:
    """The entry check of an attention module's forward, after which it may call ``attention.attend`` unchecked.

    ``x`` the module's (B, T, C) input and ``need_weights`` a bool (:func:`check_attention_input`); ``memory``
    None or a (B, S, C) tensor like x; ``mask`` None or a boolean mask on x's device that broadcasts to the scores,
    (B, H, T, S), or (B, T, S) with ``per_head=False``. With ``takes_memory``, a floating (B, S, C) tensor passed
    as the mask gets its own TypeError: ``nn.MultiheadAttention``'s habit, attn(x, memory), by position.
    """
    check_attention_input(x, module, need_weights)
    looks_like_memory = isinstance(mask, torch.Tensor) and mask.is_floating_point() and mask.dim() == 3
    if takes_memory and looks_like_memory and mask.shape[-1] == module.embed_dim:
        raise TypeError(
            f"mask must be boolean, got a floating tensor of shape {tuple(mask.shape)}, which "
            f"looks like a (B, S, C) memory: for cross-attention pass it by keyword, "
            f"attn(x, memory=m)"
        )
    if memory is not None:
        check_memory(memory, x, module)
    if mask is not None:
        B, T, _ = x.shape
        S = T if memory is None else memory.shape[1]
        check_bool_mask(mask, (B, int(module.num_heads), T, S) if per_head else (B, T, S))  # numpy ints too
        check_same_device(q=x, mask=mask)  # the queries are made on x's device


def check_mlp_args(embed_dim: object, mlp_ratio: object, bias: object, dropout: object) -> tuple[int, int, bool, float]:
    """``embed_dim``, ``mlp_ratio``, ``bias`` and ``dropout`` of ``block.MLP``, checked: positive ints, a bool and a
    fraction in [0, 1)."""
    mlp_ratio, embed_dim = check_int("mlp_ratio", mlp_ratio), check_int("embed_dim", embed_dim)
    return embed_dim, mlp_ratio, check_bool("bias", bias), check_fraction("dropout", dropout)


def check_block_args(
    embed_dim: object, attn: object, norm_position: object, norm_positions: tuple, bias: object
) -> bool:
    """``bias`` as a bool, after checking the other arguments of ``block.Block``: a positive int ``embed_dim``,
    an ``nn.Module`` ``attn`` and ``norm_position`` one of ``norm_positions``."""
    check_int("embed_dim", embed_dim)
    if not isinstance(attn, torch.nn.Module):
        raise TypeError(f"attn must be an nn.Module (an attention layer), got {type(attn).__name__}")
    check_choice("norm_position", norm_position, norm_positions)
    return check_bool("bias", bias)


def check_layer_input(x: object, embed_dim: int, module: torch.nn.Module) -> None:
    """:func:`check_embedded` for the input ``x`` of a layer, skipped while ``torch.compile`` traces (a compiled
    model leaves out these attribute reads)."""
    if not torch.compiler.is_compiling():
        check_embedded("x", x, embed_dim, module)


def check_even(name: str, n: int, why: str) -> None:
    """Raise ValueError unless ``n`` is even; ``why`` says what comes in pairs."""
    if n % 2 != 0:
        raise ValueError(f"{name} must be even ({why}), got {n}")


def check_even_int(name: str, n: object, why: str) -> None:
    """Raise unless ``n`` is an even int >= 2 (a number of channels taken in pairs)."""
    check_int(name, n, minimum=2)
    check_even(name, n, why)


def check_positions(positions: object, T: int, device: torch.device, context_length: int | None = None) -> torch.Tensor:
    """``positions`` as a 1-D integer tensor of length T on ``device``, arange(T) when None; each below
    ``context_length`` when given (the rows of a learned position embedding)."""
    if positions is None:
        positions = torch.arange(T, device=device)
    else:
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be a 1-D integer torch.Tensor, got {type(positions).__name__}")
        if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
            raise TypeError(f"positions must be an integer tensor (absolute positions), got dtype {positions.dtype}")
        if positions.dim() != 1 or positions.shape[0] != T:
            raise ValueError(
                f"positions must have shape (T,) = ({T},), one per position of x, got {tuple(positions.shape)}"
            )
        if positions.numel() and int(positions.min()) < 0:
            raise ValueError(f"positions must be >= 0, got a minimum of {int(positions.min())}")
        positions = positions.to(device)
    if context_length is not None and positions.numel() and int(positions.max()) >= context_length:
        raise ValueError(
            f"position {int(positions.max())} is beyond context_length = {context_length}: a learned "
            f"position embedding only has rows for positions 0 .. {context_length - 1}"
        )
    return positions


def check_channels(x: object, n: int, what: str) -> None:
    """Raise unless ``x`` is a floating (..., T, n) tensor; ``what`` names n ("embed_dim", "head_dim")."""
    check_float_tensor("x", x, min_dim=2)
    if x.shape[-1] != n:
        raise ValueError(f"x must end in {what} = {n} channels, got shape {tuple(x.shape)}")


def check_learned_input(x: object, positions: object, embed_dim: int, context_length: int) -> torch.Tensor:
    """The (T,) positions of ``positional.LearnedPositionalEmbedding``'s input, 0 .. T-1 when None, after checking
    that ``x`` is a floating (..., T, embed_dim) tensor and each position below ``context_length``."""
    check_channels(x, embed_dim, "embed_dim")
    return check_positions(positions, x.shape[-2], x.device, context_length)


def check_sinusoidal_args(C: object, base: object) -> float:
    """``base`` as a float above 1, after checking that ``C`` is an even int >= 2 (sin and cos pairs)."""
    check_even_int("C", C, "the channels come in (sin, cos) pairs")
    return check_greater_than("base", base, 1)


def check_rotate_pair(x1: object, x2: object, angle: object) -> None:
    """Raise unless ``x1``, ``x2`` and ``angle`` are floating-point tensors that broadcast together."""
    for name, t in (("x1", x1), ("x2", x2), ("angle", angle)):
        check_float_tensor(name, t, min_dim=0)
    try:
        torch.broadcast_shapes(x1.shape, x2.shape, angle.shape)
    except RuntimeError:
        raise ValueError(
            f"x1 {tuple(x1.shape)}, x2 {tuple(x2.shape)} and angle {tuple(angle.shape)} do not broadcast together"
        ) from None


def check_rope_input(x: object, positions: object, pairing: object, pairings: tuple) -> torch.Tensor:
    """The (T,) positions of ``positional.apply_rope``'s input, 0 .. T-1 when None, after checking that ``x`` is a
    floating (..., T, D) tensor with D even and ``pairing`` one of ``pairings``."""
    check_float_tensor("x", x, min_dim=2)
    check_choice("pairing", pairing, pairings)
    check_even("the last dimension D of x", x.shape[-1], "RoPE rotates pairs of channels")
    return check_positions(positions, x.shape[-2], x.device)


def check_rotary_table_args(head_dim: object, base: object, length: object, pairing: object, pairings: tuple) -> float:
    """``base`` as a float above 1, after checking the other arguments of ``positional.RotaryTable``: an even
    ``head_dim`` >= 2, an int ``length`` >= 0 and ``pairing`` one of ``pairings``."""
    check_even_int("head_dim", head_dim, "RoPE rotates pairs of channels")
    check_int("length", length, minimum=0)
    check_choice("pairing", pairing, pairings)
    return check_greater_than("base", base, 1)


def check_rotate_input(x: object, head_dim: int, start: object) -> None:
    """Raise unless ``x`` is a floating (..., T, head_dim) tensor and ``start`` an int >= 0 (``RotaryTable.rotate``);
    skipped while ``torch.compile`` traces (a compiled model leaves out these attribute reads)."""
    if not torch.compiler.is_compiling():
        check_channels(x, head_dim, "head_dim")
        check_int("start", start, minimum=0)


def check_alibi_args(H: object, T: object, S: object) -> None:
    """Raise unless ``H``, ``T`` and ``S`` of ``positional.alibi_bias`` are positive ints with T <= S."""
    check_int("H", H)
    check_int("T", T)
    check_int("S", S)
    if T > S:
        raise ValueError(f"alibi_bias needs T <= S (the queries are the last T of the S positions), got T={T}, S={S}")


def check_rotary_attention_args(head_dim: int, base: object, pairing: object, pairings: tuple) -> float:
    """``base`` as a float above 1, after checking that ``head_dim`` is even and ``pairing`` one of ``pairings``
    (``positional.RotaryMultiHeadAttention``)."""
    check_even("head_dim (embed_dim / num_heads)", head_dim, "RoPE rotates pairs of channels")
    check_choice("pairing", pairing, pairings)
    return check_greater_than("base", base, 1)


# --- variants, fast_attention ---


def check_repeat_kv(x: object, num_heads: object) -> None:
    """Raise unless ``x`` is (B, Hkv, S, D) and ``num_heads`` an int that Hkv divides
    (:func:`course_utils.variants.repeat_kv`)."""
    check_tensor("x", x, min_dim=4)
    if x.dim() != 4:
        raise ValueError(f"repeat_kv takes x of shape (B, Hkv, S, D), got {tuple(x.shape)}")
    check_int("num_heads", num_heads)
    check_heads(num_heads, num_heads, x.shape[1])  # embed_dim = num_heads: only "Hkv divides H" can fail


def check_gqa_args(embed_dim, num_heads, num_kv_heads, bias, rope, rope_base, dropout) -> int:
    """The head dimension, after checking the arguments of :class:`course_utils.variants.GroupedQueryAttention`
    (RoPE needs it even)."""
    check_bool("bias", bias)
    check_bool("rope", rope)
    check_greater_than("rope_base", rope_base, 1)
    check_fraction("dropout", dropout)
    for name, n in (("embed_dim", embed_dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        check_int(name, n)  # all three before the divisions, and num_kv_heads "an int" (None is no count here)
    head_dim = check_heads(embed_dim, num_heads, num_kv_heads)
    if rope and head_dim % 2:
        raise ValueError(f"rope=True needs an even head_dim, got {head_dim}")
    return head_dim


def check_kv_cache_sizes(num_layers, num_kv_heads, head_dim, num_tokens, batch_size, bytes_per_element) -> None:
    """Raise unless every size :func:`course_utils.variants.kv_cache_bytes` multiplies is an int >= 1."""
    names = ("num_layers", "num_kv_heads", "head_dim", "num_tokens", "batch_size", "bytes_per_element")
    for name, n in zip(names, (num_layers, num_kv_heads, head_dim, num_tokens, batch_size, bytes_per_element)):
        check_int(name, n)


def check_sliding_window_call(q: object, k: object, v: object, window: object, chunk_size: object, scale: object):
    """``scale`` checked (None stays None), after q, k, v (self-attention: one length T), ``window``, ``chunk_size``."""
    check_qkv(q, k, v)
    check_int("window", window)
    check_int("chunk_size", chunk_size)
    if k.shape[-2] != q.shape[-2] or v.shape[-2] != q.shape[-2]:
        raise ValueError(
            f"sliding_window_attention is self-attention: q, k, v need the same length T, "
            f"got {q.shape[-2]}, {k.shape[-2]}, {v.shape[-2]}"
        )
    return None if scale is None else check_positive_number("scale", scale)


def check_linformer_call(q: object, k: object, v: object, proj_k: object, proj_v: object, scale: object):
    """``scale`` checked (None stays None), after q, k, v and the projections (R, S' >= S) of their dtype and device."""
    check_qkv(q, k, v)
    S = k.shape[-2]
    for name, p in (("proj_k", proj_k), ("proj_v", proj_v)):
        check_tensor(name, p, min_dim=2)
        if p.dim() != 2 or p.shape[1] < S:
            raise ValueError(f"{name} must have shape (R, S') with S' >= S = {S}, got {tuple(p.shape)}")
        if p.dtype != k.dtype:
            raise TypeError(
                f"{name} must have the dtype of q, k and v ({k.dtype}), got {p.dtype}: convert it with "
                f"{name}.to(k.dtype)"
            )
    if proj_k.shape[0] != proj_v.shape[0]:
        raise ValueError(
            f"proj_k and proj_v must have the same number of rows R (the projected length), got "
            f"{tuple(proj_k.shape)} and {tuple(proj_v.shape)}"
        )
    check_same_device(k=k, proj_k=proj_k, proj_v=proj_v)
    return None if scale is None else check_positive_number("scale", scale)


def check_sequence_input(
    x: object, embed_dim: int, context_length: int, module: torch.nn.Module, mask: object = None
) -> None:
    """Raise unless ``x`` is the (B, T, C) input of ``module`` with T <= ``context_length``, and ``mask`` (when
    given) a boolean mask broadcastable to (T, T): the entry of the Linformer and AFT layers."""
    check_embedded("x", x, embed_dim, module)
    T = x.shape[1]
    if T > context_length:
        raise ValueError(f"sequence length T ({T}) exceeds context_length ({context_length})")
    if mask is not None:
        check_bool_mask(mask, (T, T))


def check_aft_qkv(q: object, k: object, v: object) -> None:
    """Raise unless q (B, T, C), k and v (B, S, C) fit (:func:`check_qkv`) with as many channels in q as in v."""
    check_qkv(q, k, v)
    if q.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"q and v must have the same number of channels C, got q {tuple(q.shape)} and v {tuple(v.shape)}"
        )


def check_aft_full_call(q: object, k: object, v: object, w: object, mask: object) -> None:
    """Raise unless q, k, v fit (:func:`check_aft_qkv`), ``w`` is (T, S) and ``mask`` (when given) broadcasts to it."""
    check_aft_qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    check_tensor("w", w, min_dim=2)
    if tuple(w.shape) != (T, S):
        raise ValueError(f"w must have shape (T, S) = ({T}, {S}), got {tuple(w.shape)}")
    if mask is not None:
        check_bool_mask(mask, (T, S))


def check_topk_call(
    q: object, k: object, v: object, top_k: object, mask: object, chunk_size: object, scale: object
) -> float | None:
    """``scale`` checked (None stays None), after q, k, v, ``top_k``, ``chunk_size`` and the mask's dtype and shape."""
    check_qkv(q, k, v)
    check_int("top_k", top_k)
    check_int("chunk_size", chunk_size)
    scale = None if scale is None else check_positive_number("scale", scale)
    if mask is not None:
        check_scores_mask(mask, q, k)
    return scale


def check_cache_update(cache, layer: object, k: object, v: object) -> None:
    """Raise unless k, v (B, Hkv, T, D) can be appended to ``layer`` of ``cache``, a
    :class:`course_utils.variants.KVCache`: one shape and one floating dtype, the layer not yet appended this step,
    room left, and the batch, heads and head_dim of what the layer holds."""
    check_int("layer", layer, minimum=0, maximum=cache.num_layers - 1)
    for name, t in (("k", k), ("v", v)):
        check_tensor(name, t, min_dim=4)
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, Hkv, T, D), got {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    check_floating("k", k)
    if v.dtype != k.dtype:
        raise TypeError(f"k and v must have one dtype, got {k.dtype} and {v.dtype}")
    start = cache.filled(layer)
    if start > cache.length:
        raise RuntimeError(
            f"layer {layer} appended twice in one step: it holds {start} positions, another layer only {cache.length}"
        )
    B, Hkv, T, D = k.shape
    if start + T > cache.capacity:
        raise ValueError(
            f"KV cache overflow: capacity (context_length) is {cache.capacity} positions, "
            f"{start} are cached and {T} more were appended; start a new cache or crop "
            "the sequence"
        )
    held = cache.keys[layer]
    if held is not None and (held.shape[:2] != (B, Hkv) or held.shape[3] != D):
        raise ValueError(
            f"layer {layer} caches (B, Hkv, D) = {(held.shape[0], held.shape[1], held.shape[3])}, "
            f"got new keys of shape {tuple(k.shape)}"
        )


def check_batch_rows(indices: object, batch_size: int | None) -> None:
    """Raise unless ``indices`` is a 1-D integer tensor of rows in [0, ``batch_size``) (None: any row)."""
    check_tensor("indices", indices)
    if indices.dim() != 1 or indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(
            f"indices must be a 1-D integer tensor of batch rows, got dtype {indices.dtype}, "
            f"shape {tuple(indices.shape)}"
        )
    B = batch_size
    if B is not None and indices.numel() and not (0 <= int(indices.min()) and int(indices.max()) < B):
        raise ValueError(f"indices must be batch rows in [0, {B}), got {indices.tolist()}")


def check_decoder_config(config) -> None:
    """Raise unless the fields of a :class:`course_utils.variants.DecoderConfig` are valid and its head counts
    divide."""
    for name in ("vocab_size", "context_length", "embed_dim", "num_heads", "num_kv_heads", "num_layers"):
        check_int(name, getattr(config, name))
    check_heads(config.embed_dim, config.num_heads, config.num_kv_heads)
    if config.window is not None:
        check_int("window", config.window)
    check_choice("positions", config.positions, ("learned", "rope"))


def check_decoder_input(idx: object, cache: object, cache_type: type, vocab_size: int, context_length: int) -> None:
    """Raise unless ``idx`` holds (B, T) token ids, ``cache`` is a ``cache_type`` or None, and the cached positions
    plus T fit in ``context_length``: the entry of :class:`course_utils.variants.TinyDecoder`."""
    check_token_ids("idx", idx, vocab_size)
    if cache is not None and not isinstance(cache, cache_type):
        raise TypeError(f"cache must be a KVCache (model.new_cache()) or None, got {type(cache).__name__}")
    start, T = (0 if cache is None else cache.length), idx.shape[1]
    if start + T > context_length:
        raise ValueError(
            f"positions up to {start + T - 1} do not fit in context_length ({context_length}): "
            f"{start} cached + {T} new tokens"
        )


def check_causal_linear(q: object, k: object, v: object) -> None:
    """Raise unless q, k, v fit (:func:`check_qkv`) with q and k of one length T (causal linear attention)."""
    check_qkv(q, k, v)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"causal linear attention is self-attention: q and k need the same length T, "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )


def check_linear_step(state: object, normaliser: object, q_t: object, k_t: object, v_t: object) -> None:
    """Raise unless state (..., D, Dv) with D >= 1, normaliser, q_t, k_t (..., D) and v_t (..., Dv) are floating
    tensors of one dtype and device whose leading axes broadcast
    (:func:`course_utils.variants.linear_attention_step`)."""
    named = (("state", state), ("normaliser", normaliser), ("q_t", q_t), ("k_t", k_t), ("v_t", v_t))
    for name, t in named:
        check_tensor(name, t, min_dim=2 if name == "state" else 1)
        check_floating(name, t)
    if len({t.dtype for _, t in named}) > 1:
        dtypes = ", ".join(str(t.dtype) for _, t in named)
        raise TypeError(f"state, normaliser, q_t, k_t and v_t must share a dtype, got {dtypes}")
    check_same_device(state=state, normaliser=normaliser, q_t=q_t, k_t=k_t, v_t=v_t)
    D, Dv = state.shape[-2:]
    if D == 0:
        raise ValueError(
            f"state must be (..., D, Dv) with D >= 1 (phi(q_t) . z_t is 0 / 0 without), got {tuple(state.shape)}"
        )
    expected = {"normaliser": D, "q_t": D, "k_t": D, "v_t": Dv}
    for name, t in named[1:]:
        if t.shape[-1] != expected[name]:
            raise ValueError(
                f"{name} must end in {expected[name]} (state is (..., D, Dv) = {tuple(state.shape)}), "
                f"got {name} {tuple(t.shape)}"
            )
    try:
        torch.broadcast_shapes(state.shape[:-2], *(t.shape[:-1] for _, t in named[1:]))
    except RuntimeError:
        raise ValueError(
            "the leading axes of " + ", ".join(f"{name} {tuple(t.shape)}" for name, t in named) + " do not broadcast"
        ) from None


def check_block_partial(scores: object, v: object) -> None:
    """Raise unless scores (..., T, Sb) and v (..., Sb, Dv) are floating tensors with one Sb >= 1."""
    check_tensor("scores", scores, min_dim=2)
    check_tensor("v", v, min_dim=2)
    check_floating("scores", scores)
    check_floating("v", v)
    if scores.shape[-1] == 0 or scores.shape[-1] != v.shape[-2]:
        raise ValueError(
            f"scores (..., T, Sb) and v (..., Sb, Dv) need the same number Sb >= 1 of keys, got "
            f"scores {tuple(scores.shape)} and v {tuple(v.shape)}"
        )


def check_partial(name: str, p: object) -> None:
    """Raise unless ``p`` is a :class:`course_utils.fast_attention.Partial` (m, l, o): m, l (..., T, 1),
    o (..., T, Dv), floating."""
    if not (isinstance(p, tuple) and len(p) == 3):
        raise TypeError(f"{name} must be a Partial (m, l, o) of three tensors, got {type(p).__name__}")
    m, l, o = p  # noqa: E741
    for part, t in (("m", m), ("l", l), ("o", o)):
        check_tensor(f"{name}.{part}", t, min_dim=2)
        check_floating(f"{name}.{part}", t)
    if m.shape != l.shape or m.shape[-1] != 1 or o.shape[:-1] != m.shape[:-1]:
        raise ValueError(
            f"{name} must hold m and l of shape (..., T, 1) and o of shape (..., T, Dv), got m "
            f"{tuple(m.shape)}, l {tuple(l.shape)}, o {tuple(o.shape)}"
        )


def check_mergeable(a: object, b: object) -> None:
    """Raise unless ``a`` and ``b`` are partials (:func:`check_partial`) of the same queries, shapes and dtype."""
    check_partial("a", a)
    check_partial("b", b)
    if a[0].shape != b[0].shape or a[2].shape != b[2].shape:
        raise ValueError(
            f"a and b must be partials of the same queries, got o {tuple(a[2].shape)} and {tuple(b[2].shape)}"
        )
    dtypes = {t.dtype for t in (*a, *b)}
    if len(dtypes) > 1:
        raise TypeError(
            f"a and b must hold tensors of one dtype, got {sorted(str(d) for d in dtypes)} "
            "(torch would silently promote the merged partial)"
        )


def check_tiled_call(q, k, v, mask, is_causal, scale, q_tile, kv_tile) -> tuple[float | None, int, int]:
    """``scale`` (None stays None), q_tile and kv_tile, checked, after every other argument of
    :func:`course_utils.fast_attention.tiled_attention` and :func:`course_utils.fast_attention.flash_attention`."""
    check_qkv(q, k, v)
    check_bool("is_causal", is_causal)
    q_tile, kv_tile = check_int("q_tile", q_tile), check_int("kv_tile", kv_tile)
    T, S = q.shape[-2], k.shape[-2]
    scale = None if scale is None else check_positive_number("scale", scale)
    if mask is not None:
        check_bool_mask(mask, (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]), T, S))
        check_same_device(q=q, mask=mask)
    if is_causal and T > S:
        raise ValueError(
            f"is_causal needs T <= S (the queries are the last T of the S positions, as in "
            f"causal_mask(T, S)), got T={T}, S={S}"
        )
    return scale, q_tile, kv_tile


def check_backward_call(q: object, k: object, v: object, o: object, do: object, scale: object, mask: object) -> float:
    """``scale`` as a float, after checking the arguments of
    :func:`course_utils.fast_attention.attention_backward`: q, k, v, then o and do of the output's shape, dtype and
    device, then the mask."""
    check_qkv(q, k, v)
    scale = check_positive_number("scale", scale)
    T, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    for name, x in (("o", o), ("do", do)):
        check_tensor(name, x, min_dim=2)
        if x.dtype != q.dtype or x.shape != (*batch, T, Dv):
            raise ValueError(
                f"{name} must be the attention output's shape {(*batch, T, Dv)} and dtype {q.dtype}, got "
                f"{tuple(x.shape)} {x.dtype}"
            )
        check_same_device(q=q, **{name: x})
    if mask is not None:
        check_bool_mask(mask, (*batch, T, S))
        check_same_device(q=q, mask=mask)
    return scale


def check_backward_once() -> None:
    """Raise RuntimeError inside flash_attention's backward pass when a second derivative was asked for."""
    if torch.is_grad_enabled():  # create_graph=True
        raise RuntimeError(
            "flash_attention is differentiable once: its backward pass is not itself differentiable, got a "
            "backward pass with create_graph=True; use course_utils.attention.scaled_dot_product_attention "
            "for second derivatives"
        )


# --- gpt, generation ---


def check_gpt_config(config, positions: tuple, attention: tuple, norm_positions: tuple) -> None:
    """Raise unless the fields of a ``GPTConfig`` are valid and fit together; ``positions``, ``attention`` and
    ``norm_positions`` are the choices the model offers. ``GPTConfig.__post_init__``'s one call."""
    for name in ("vocab_size", "context_length", "embed_dim", "num_heads", "num_layers", "mlp_ratio"):
        check_int(name, getattr(config, name))
    head_dim = check_heads(config.embed_dim, config.num_heads, config.num_kv_heads)
    check_fraction("dropout", config.dropout)
    check_bool("bias", config.bias)
    check_choice("positions", config.positions, positions)
    check_choice("attention", config.attention, attention)
    if config.attention == "flash" and config.dropout > 0:
        raise ValueError(
            f"attention='flash' has no dropout on the attention weights, got dropout={config.dropout}: "
            "use dropout=0.0, or attention='torch' or 'course'"
        )
    check_choice(
        "norm_position",
        config.norm_position,
        norm_positions,
        " (LayerNorm before each sublayer, GPT-2; or after each residual add, the original Transformer)",
    )
    check_greater_than("rope_base", config.rope_base, 1)  # checked for every model: checkpoints store it
    if config.positions == "rope" and head_dim % 2 != 0:
        raise ValueError(
            f"rotary positions need an even head_dim, got {head_dim} "
            f"(embed_dim {config.embed_dim} / num_heads {config.num_heads})"
        )


def check_config_dict(cls: type, d: object) -> None:
    """Raise unless ``d`` is a dict of the dataclass ``cls``'s fields, as its ``to_dict`` returns."""
    import dataclasses

    if not isinstance(d, dict):
        raise TypeError(
            f"from_dict takes a dict of {cls.__name__} fields (what to_dict returned), got {type(d).__name__}"
        )
    unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}")


def _reads_ids(model: torch.nn.Module, idx: object) -> bool:
    """Whether a GPT's forward reads the ids to check their range: not in a training step off the CPU, where
    the read would make every step wait for the device."""
    return not isinstance(idx, torch.Tensor) or idx.device.type == "cpu" or not model.training


def check_gpt_ids(model: torch.nn.Module, idx: object, start: int = 0) -> None:
    """Raise unless ``idx`` (B, T) holds token ids of the GPT ``model`` that fit at positions ``start ..``.

    While torch.compile traces, only the fit is checked (reading a tensor in Python would split the graph).
    """
    if not torch.compiler.is_compiling():
        check_token_ids("idx", idx, model.config.vocab_size, values=_reads_ids(model, idx))
    T = idx.shape[1]
    if start + T > model.config.context_length:
        raise ValueError(
            f"positions {start}..{start + T - 1} do not fit in context_length = {model.config.context_length}; "
            "crop the input (generation keeps the last context_length tokens)"
        )


def check_gpt_inputs(model: torch.nn.Module, idx: object, targets: object, cache: object, cache_type: type) -> None:
    """Raise unless a GPT's ``forward(idx, targets, cache)`` can run: ``cache`` None or a ``cache_type``, idx's
    positions (from what the cache holds) within the context, targets of idx's shape."""
    if isinstance(targets, cache_type):
        raise TypeError(
            "got a KVCache as targets (the second argument): pass it as cache=..., or give "
            "course_utils.generation model.for_generation(), whose forward is (idx, cache)"
        )
    if cache is not None and not isinstance(cache, cache_type):
        raise TypeError(f"cache must be a KVCache (model.new_cache()) or None, got {type(cache).__name__}")
    start = 0 if cache is None else cache.length
    check_gpt_ids(model, idx, start)
    if targets is not None and not torch.compiler.is_compiling():
        check_token_ids("targets", targets, model.config.vocab_size, ignore_index=-100, values=_reads_ids(model, idx))
        if targets.shape != idx.shape:
            raise ValueError(
                f"targets must have the shape of idx {tuple(idx.shape)} (the next token at every "
                f"position), got {tuple(targets.shape)}"
            )


def check_temperature(temperature: object) -> float:
    """``temperature`` as a float if it is a finite number > 0; TypeError or ValueError otherwise."""
    value = check_number("temperature", temperature, "a number > 0 (use greedy=True for the argmax)")
    if not value > 0:
        raise ValueError(f"temperature must be > 0 (use greedy=True for the argmax), got {temperature}")
    if value == float("inf"):
        raise ValueError(
            "temperature must be finite: an infinite one makes every token equally likely "
            "(sample uniformly instead), got inf"
        )
    return value


def check_sampling(temperature: object, top_k: object, top_p: object, greedy: object, generator: object) -> None:
    """The settings of ``generation.sample_next_token``, checked once: by it, or before a generation loop."""
    if top_k is not None:
        check_int("top_k", top_k, expected="an int or None")
    if top_p is not None:
        check_fraction("top_p", top_p, one_allowed=True, zero_allowed=False)
    if not check_bool("greedy", greedy):
        check_temperature(temperature)
    check_generator("generator", generator)


def check_next_token_logits(logits: object) -> None:
    """Raise unless ``logits`` is a floating (B, V) tensor: one row of scores over the vocabulary per sequence."""
    check_tensor("logits", logits, min_dim=2)
    check_floating("logits", logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be (B, V), got {tuple(logits.shape)}")


def check_probabilities(probs: object, top_p: object) -> None:
    """Raise unless ``probs`` (..., V) are rows of probabilities and ``top_p`` is in (0, 1]: ``top_p_keep``'s
    arguments. Reads the device once (a min and a row-sum error), which a loop should not pay at every step."""
    check_tensor("probs", probs)
    check_floating("probs", probs)
    check_fraction("top_p", top_p, one_allowed=True, zero_allowed=False)
    if probs.numel() and probs.device.type != "meta":
        total = probs.sum(dim=-1, dtype=torch.float64)
        low, total_error = torch.stack([probs.min().double(), (total - 1).abs().max()]).tolist()
        if not (low >= 0 and total_error <= (1e-3 if probs.element_size() >= 4 else 2e-2)):  # NaN fails both
            raise ValueError(
                f"probs must be rows of probabilities (each >= 0, each row summing to 1; pass "
                f"torch.softmax(logits, dim=-1), or use top_p_filter on logits), got min {low:.4g} "
                f"and a row sum off from 1 by {total_error:.4g}"
            )


def check_sampleable(logits: torch.Tensor) -> None:
    """Raise a ValueError naming the first row of ``logits`` (B, V) that no distribution can come from: asked
    only after sampling failed, so that valid logits pay nothing."""
    nan_rows = logits.isnan().any(dim=-1).nonzero().flatten().tolist()
    if nan_rows:
        raise ValueError(
            f"logits must be numbers, got NaN in row(s) {nan_rows[:10]}: the model's output is "
            "broken (a diverged training run, or a fully masked row upstream)"
        ) from None
    dead_rows = (logits == float("-inf")).all(dim=-1).nonzero().flatten().tolist()
    if dead_rows:
        raise ValueError(
            f"every logit of row(s) {dead_rows[:10]} is -inf, so no token can be sampled: the "
            "logits (or a mask applied to them) rule out the whole vocabulary"
        ) from None
    if (logits == float("inf")).any():
        raise ValueError("logits must be finite or -inf, got +inf: softmax of +inf is NaN") from None


def check_prompt(idx: object) -> None:
    """Raise unless ``idx`` is a generation's prompt: a (B, T) integer tensor with T >= 1 (the ids' range is the
    model's to check: it knows its vocabulary). The dtype is named before a shape of more than two dimensions."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a (B, T) torch.Tensor of token ids, got {type(idx).__name__}")
    if idx.dim() < 2:
        raise ValueError(f"idx must have at least 2 dimensions, got shape {tuple(idx.shape)}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"idx must hold integer token ids (torch.long), got dtype {idx.dtype}")
    if idx.dim() != 2:
        raise ValueError(f"idx must be (B, T) integer token ids, got shape {tuple(idx.shape)}")
    if idx.shape[1] < 1:
        raise ValueError("idx must hold at least one token (the prompt)")


def check_generation(model: torch.nn.Module, idx: object, max_new_tokens: object, use_cache: object) -> int:
    """Raise unless ``idx`` is a prompt (B, T >= 1) of ids, ``max_new_tokens`` an int >= 0 and ``model`` follows
    the generation protocol (``use_cache``: with ``new_cache()``); return the model's ``context_length``.
    The ids' range is the model's to check: it knows its vocabulary."""
    check_prompt(idx)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    context_length = check_int(
        "context_length", getattr(model, "context_length", None), expected="an int attribute of the model"
    )
    if check_bool("use_cache", use_cache) and not callable(getattr(model, "new_cache", None)):
        raise TypeError(f"{type(model).__name__} has no new_cache() method: pass use_cache=False")
    return context_length


def check_cache_room(idx: torch.Tensor, max_new_tokens: int, context_length: int, fix: str | None = None) -> None:
    """Raise unless one KV cache holds the prompt and every new token but the last (never fed back); ``fix``
    ends the message with what to do instead (by default generate's words, which notebook 09's output shows:
    change the two together)."""
    if idx.shape[1] + max(max_new_tokens - 1, 0) > context_length:
        fix = fix or (
            ": the KV cache cannot hold them (the last token is never fed back); shorten them or pass "
            "use_cache=False, which crops to the last context_length tokens"
        )
        raise ValueError(
            f"prompt ({idx.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) - 1 exceeds the "
            f"model's context_length ({context_length}){fix}"
        )


def check_on_full(on_full: object, choices: tuple, keep_on_shift: object, context_length: int) -> None:
    """Raise unless ``on_full`` is one of ``choices`` and ``keep_on_shift`` None or, with on_full="shift", an int
    in [1, context_length]."""
    check_choice("on_full", on_full, choices)
    if keep_on_shift is None:
        return
    if on_full != "shift":
        raise ValueError(f"keep_on_shift applies only with on_full='shift', got on_full={on_full!r}")
    check_int("keep_on_shift", keep_on_shift, minimum=1, maximum=context_length, expected="an int or None")


def check_beam_search(
    model: torch.nn.Module, idx: object, beam_width: object, max_new_tokens: object, use_cache: object
) -> int:
    """Raise unless ``beam_search``'s arguments fit (one prompt (1, T), ``beam_width`` >= 1, room in the cache
    with ``use_cache``); return the model's ``context_length``."""
    check_prompt(idx)
    if idx.shape[0] != 1:
        raise ValueError(f"beam_search takes one prompt, idx of shape (1, T), got {tuple(idx.shape)}")
    check_int("beam_width", beam_width)
    context_length = check_generation(model, idx, max_new_tokens, use_cache)
    if use_cache:
        check_cache_room(idx, max_new_tokens, context_length, "; pass use_cache=False to crop instead")
    return context_length
