"""The random draws of the exercises' checks, in one place.

Every check draws its extra cases from a ``torch.Generator`` seeded afresh for each run (see
:class:`course_utils.exercises._engine.Exercise`), so the same seed gives the same cases. Every topic module draws its
integers with :func:`randint`; :func:`randn` is the short form of ``torch.randn(*shape, generator=g)`` that some
use. Changing either changes every fixed case and seed, so keep them as they are.
"""

from __future__ import annotations

import torch

__all__ = ["randint", "randn"]


def randint(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in low .. high - 1."""
    return int(torch.randint(low, high, (), generator=g))


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    """A tensor of the given shape, drawn from the standard normal."""
    return torch.randn(*shape, generator=g)
