"""Which device to compute on: the best this machine has, or the one asked for, checked before any work starts.

torch is imported inside each function, so that the setup check (``environment``) still reports a machine without it.
"""

from __future__ import annotations

import sys

__all__ = ["best_device", "pick_device", "parse_device"]


def best_device() -> str:
    """ "cuda" if an NVIDIA GPU is usable, else "mps" on Apple silicon, else "cpu"."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_device(device=None):
    """The ``torch.device`` to train on: ``device`` if this machine and this PyTorch build have it, else a
    ValueError in one line with the fix. ``None`` or ``"auto"`` mean :func:`best_device`."""
    import torch

    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return torch.device(best_device())
    dev = parse_device(device)
    fix = "use --device cpu or auto (auto picks the best device this machine has)"
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        if torch.version.cuda is None and torch.version.hip is None:
            raise ValueError(
                f"device {str(device)!r}: this PyTorch ({torch.__version__}) was built without CUDA; "
                f"{fix}, or install a CUDA build of torch (see README, Running on a GPU)"
            )
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"device {str(device)!r}: PyTorch has CUDA but sees no GPU (no NVIDIA driver, or "
                f"CUDA_VISIBLE_DEVICES hides it); {fix}"
            )
        if dev.index is not None and dev.index >= count:
            raise ValueError(
                f"device {str(device)!r}: this machine has {count} CUDA device(s), cuda:0 to "
                f"cuda:{count - 1}; pick one of those, or {fix}"
            )
        return dev
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            why = (
                "it needs macOS on Apple silicon"
                if sys.platform != "darwin"
                else "this Mac or this PyTorch build has no Metal support"
            )
            raise ValueError(f"device {str(device)!r} (Apple's GPU) is not available here: {why}; {fix}")
        return dev
    raise ValueError(f"device {str(device)!r}: the course trains on cpu, cuda or mps; {fix}")


def parse_device(device: object):
    """``device`` (a str such as 'cpu', 'cuda:0', or a torch.device) as a torch.device; only the name is checked,
    not whether this machine has it (:func:`pick_device` does)."""
    import torch

    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str such as 'cpu' or 'cuda', or a torch.device; got {type(device).__name__}")
    try:
        return torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {str(device)!r} is not a device name: use cpu, cuda, cuda:N, mps or auto") from None
