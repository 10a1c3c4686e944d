"""Small input checks shared by the modules: each raises an error that says what was expected and what arrived."""

from __future__ import annotations

import torch


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
