"""Small input checks shared by the modules: each raises an error that says what was expected and what arrived."""

from __future__ import annotations

import math
import numbers

import torch


def broadcast_shapes(*shapes: tuple[int, ...] | torch.Size) -> torch.Size:
    """What ``torch.broadcast_shapes`` returns, and RuntimeError where it raises, without the sympy import (about
    1.3 s) that torch's makes on its first call: every checked call goes through here."""
    out: list[int] = []
    for shape in shapes:
        shape = tuple(shape)
        out = [1] * (len(shape) - len(out)) + out  # align the trailing axes
        for i, n in enumerate(shape, start=len(out) - len(shape)):
            if out[i] == 1:
                out[i] = n
            elif n not in (1, out[i]):
                raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    return torch.Size(out)


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
    if (minimum is None or n >= minimum) and (maximum is None or n <= maximum):
        return int(n)
    if minimum is not None and maximum is not None:
        raise ValueError(f"{name} must be in [{minimum}, {maximum}], got {n}")
    bound = f"at least {minimum}" if maximum is None else f"at most {maximum}"
    raise ValueError(f"{name} must be {bound}, got {n}")


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
    if weight is None or (x.dtype == weight.dtype and x.device == weight.device):
        return
    if x.dtype != weight.dtype:
        x_type, w_type = (str(t).removeprefix("torch.") for t in (x.dtype, weight.dtype))
        raise TypeError(
            f"{name} is {x_type} but the module's weights are {w_type}: convert one of them "
            f"(module.to(torch.{x_type}) or x.to(torch.{w_type}))"
        )
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
    if isinstance(p, numbers.Real) and not isinstance(p, bool):
        if (p >= 0 if zero_allowed else p > 0) and (p <= 1 if one_allowed else p < 1):
            return float(p)
    interval = f"{'[' if zero_allowed else '('}0, 1{']' if one_allowed else ')'}"
    raise ValueError(f"{name} must be in {interval}, got {check_number(name, p, f'a number in {interval}')}")


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
    if not is_integer_tensor(idx):
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {idx.dtype}")
    if idx.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold int64 or int32 token ids (what nn.Embedding takes), got dtype {idx.dtype}")
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


def check_qkv(q: object, k: object, v: object, scale: object = None) -> None:
    """Raise unless q (..., T, D), k (..., S, D), v (..., S, Dv) are floating tensors of one dtype and device
    whose shapes fit, with D > 0, and ``scale`` is None (1 / sqrt(D)) or a positive number."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(name, x, min_dim=2)
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
        broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not broadcast"
        ) from None
    if scale is not None:
        check_positive_number("scale", scale)


def check_embedded(name: str, x: object, embed_dim: int, module: torch.nn.Module | None = None) -> None:
    """Raise unless ``x`` is a floating (B, T, C) tensor with C = ``embed_dim``: the input of an attention layer.

    With ``module``, ``x`` must also have the dtype and device of the module's weights.
    """
    check_float_tensor(name, x, min_dim=3)
    if x.dim() != 3 or x.shape[-1] != embed_dim:
        raise ValueError(f"{name} must have shape (B, T, C={embed_dim}), got {tuple(x.shape)}")
    if module is not None:
        check_matches_module(name, x, module)


def check_broadcasts(name: str, x: torch.Tensor, target_shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``x`` (a mask, a bias) broadcasts to the scores' shape ``target_shape``."""
    try:
        shape = broadcast_shapes(x.shape, target_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target_shape):
        raise ValueError(
            f"{name} of shape {tuple(x.shape)} does not broadcast to the scores' shape {tuple(target_shape)}"
        )


def check_bool_mask(mask: object, target_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise TypeError unless ``mask`` is a boolean tensor, ValueError unless it broadcasts to ``target_shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor (True = may attend), got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be boolean (True = may attend), got dtype {mask.dtype}; "
            "convert an additive float mask with course_utils.masking.convert_mask"
        )
    if mask.dim() == 3 and len(target_shape) == 4 and mask.shape[0] == target_shape[0] == target_shape[1] > 1:
        raise ValueError(  # (B, T, S) or (H, T, S)? With B == H the shape cannot say
            f"{name} of shape {tuple(mask.shape)} is ambiguous against scores (B, H, T, S) = {tuple(target_shape)}: "
            f"with B == H broadcasting reads a 3-D mask as (H, T, S), so a (B, T, S) mask would land on the heads. "
            f"Give it 4 axes: {name}[:, None] for one mask per sequence (B, 1, T, S), {name}[None] for one per head "
            "(1, H, T, S)"
        )
    check_broadcasts(name, mask, target_shape)


def check_scores_mask(mask: object, q: torch.Tensor, k: torch.Tensor) -> None:
    """Raise unless ``mask`` is a boolean tensor that broadcasts to the scores of q (..., T, D) and k (..., S, D),
    (..., T, S), on q's device: the mask check of every attention that takes a caller's mask."""
    check_bool_mask(mask, (*broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2]))
    check_same_device(q=q, mask=mask)


def check_heads(embed_dim: object, num_heads: object, num_kv_heads: object = None) -> None:
    """Raise unless the counts are positive ints, ``num_heads`` divides ``embed_dim`` and (when given)
    ``num_kv_heads`` divides ``num_heads``.

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


def from_preset(cls: type, presets: dict, name: str, overrides: dict):
    """``presets[name]`` with the fields in ``overrides`` replaced; ValueError for an unknown preset or field.

    The one implementation behind ``GPTConfig.preset`` and ``TrainConfig.preset`` (frozen dataclasses).
    """
    import dataclasses

    if not isinstance(name, str) or name not in presets:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(presets)}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {sorted(unknown)}")
    return dataclasses.replace(presets[name], **overrides)


def check_float_tensor(name: str, x: object, min_dim: int = 1) -> None:
    """Raise unless ``x`` is a floating-point tensor with at least ``min_dim`` dimensions."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= min_dim):
        check_tensor(name, x, min_dim)  # a tensor of enough dimensions: its dtype is what is wrong
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def is_integer_tensor(x: torch.Tensor) -> bool:
    """Whether ``x`` holds integers (not floats, complex numbers or bools): token ids, positions, lengths."""
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def check_last_positions(T: int, S: int, who: str) -> None:
    """Raise ValueError unless T <= S: T queries that are the last T of S positions (bottom-right causal)."""
    if T > S:
        raise ValueError(f"{who} needs T <= S (the queries are the last T of the S positions), got T={T}, S={S}")


MAX_POSITIONS = 2**24  # the most positions a table or mask is built for: beyond it the allocation fails, not the idea


def check_holds_values(name: str, t: torch.Tensor) -> None:
    """Raise unless ``t`` is on a device that holds values (not meta): for a check that has to read it."""
    if t.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device, which holds no values to check: put it on a real device (cpu, cuda, mps)"
        )


def check_positions(positions: object, T: int) -> None:
    """Raise unless ``positions`` is a (T,) integer tensor of positions >= 0."""
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a 1-D integer torch.Tensor, got {type(positions).__name__}")
    if not is_integer_tensor(positions):
        raise TypeError(f"positions must be an integer tensor (absolute positions), got dtype {positions.dtype}")
    if positions.dim() != 1 or positions.shape[0] != T:
        raise ValueError(
            f"positions must have shape (T,) = ({T},), one per position of x, got {tuple(positions.shape)}"
        )
    check_holds_values("positions", positions)
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got a minimum of {int(positions.min())}")
