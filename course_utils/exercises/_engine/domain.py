"""An exercise's domain as data: what inputs its statement allows, in a small vocabulary the engine understands.

A :class:`Domain` says, once, the facets of the inputs a statement allows:

- ``leading``: the arguments that take leading axes (the ``...`` of ``(..., T, D)``), each with its rank without
  them, and ``max_leading`` (3 by default): every count 0 .. max_leading is allowed, on all of them at once;
- ``ints``: the integer dtypes each integer-tensor argument may have (``{"lengths": (int64, int32, uint8)}``);
- ``magnitude``: the largest size a float argument's finite entries may have (``{"x": 1e4}``), stated once the
  stable form is taught (past exp's float32 overflow at 88), or moderate where it is not;
- ``views``: whether tensor arguments may be non-contiguous views (as ``split_heads`` returns);
- ``float64``: the float arguments that may be float64 (all together), the answer then computed and returned in
  float64: a float64 result is compared at float64's precision (``compare.FLOAT64_TOLERANCE``).

Sizes that may be 1 or differ, ties and empty sequences stay the exercise's named ``edges`` (a predicate each).

From a domain come: the facet values (:meth:`Domain.facets`, each a name and a predicate over a case's
arguments), the fixed cases no hand-written case holds (:meth:`Domain.complete`, built from a hand-written one:
more leading axes, another integer dtype, a non-contiguous copy), and the sentence a statement carries
(:meth:`Domain.sentence`), so the text and the check cannot drift. ``tests/test_exercise_domains.py`` proves
every facet value held by a fixed case, and wraps each reference in answers wrong on one facet only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from course_utils.exercises._engine.compare import dtype_name

_NEW_AXES = (2, 2, 2)  # the sizes of leading axes a built case adds (none 1: a squeeze is not what it tests)


def bind(solution: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """A case's arguments by the solution's parameter names, defaults filled in."""
    bound = inspect.signature(solution).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The same values in memory laid out last axis outermost: no two adjacent axes of size > 1 can be merged by
    ``.view``, as with the keys ``split_heads`` returns."""
    order = list(reversed(range(x.dim())))
    return x.permute(order).contiguous().permute(order).requires_grad_(x.requires_grad)


def _spread(a: dict[str, Any]) -> int:
    """How many axes longer than 1 a case's tensors have, in all."""
    return sum(sum(n > 1 for n in v.shape) for v in a.values() if isinstance(v, torch.Tensor))


def _largest(x: torch.Tensor) -> float:
    finite = x[x.isfinite()]
    return float(finite.abs().max()) if finite.numel() else 0.0


@dataclass(frozen=True)
class Domain:
    """The inputs an exercise's statement allows (see the module docstring)."""

    leading: dict[str, int] = field(default_factory=dict)
    max_leading: int = 3
    ints: dict[str, tuple[torch.dtype, ...]] = field(default_factory=dict)
    magnitude: dict[str, float] = field(default_factory=dict)
    views: bool = False
    float64: tuple[str, ...] = ()

    def _leading_count(self, a: dict[str, Any]) -> int | None:
        counts = {a[n].dim() - r for n, r in self.leading.items() if isinstance(a.get(n), torch.Tensor)}
        return counts.pop() if len(counts) == 1 else None

    def facets(self) -> dict[str, Callable[[dict[str, Any]], bool]]:
        """Each facet value the statement allows, named, with a predicate over a case's bound arguments."""
        out: dict[str, Callable[[dict[str, Any]], bool]] = {}
        if self.leading:
            for n in range(self.max_leading + 1):
                out[f"{n} leading axes"] = lambda a, n=n: self._leading_count(a) == n
        for name, dtypes in self.ints.items():
            for d in dtypes:
                out[f"{name} {dtype_name(d)}"] = lambda a, name=name, d=d: getattr(a.get(name), "dtype", None) == d
        for name, m in self.magnitude.items():
            out[f"{name} near its largest size ({m:g})"] = lambda a, name=name, m=m: _largest(a[name]) >= m / 2
        if self.float64:
            names = ", ".join(self.float64)
            out[f"{names} float64"] = lambda a: all(
                getattr(a.get(n), "dtype", None) == torch.float64 for n in self.float64
            )
        if self.views:
            out["a non-contiguous view"] = lambda a: any(
                isinstance(v, torch.Tensor) and not v.clone().is_contiguous() and sum(s > 1 for s in v.shape) >= 2
                for v in a.values()
            )
        return out

    def outside(self, a: dict[str, Any]) -> str | None:
        """What of a case lies outside the domain (a float argument larger than its stated size), or None."""
        for name, m in self.magnitude.items():
            if isinstance(a.get(name), torch.Tensor) and _largest(a[name]) > m:
                return f"{name} has entries of size {_largest(a[name]):g}, above the stated {m:g}"
        if self.leading and (n := self._leading_count(a)) is not None and n > self.max_leading:
            return f"{n} leading axes, above the stated {self.max_leading}"
        return None

    def complete(self, solution: Callable[..., Any], cases: list[tuple[tuple, dict]]) -> list[tuple[tuple, dict]]:
        """The fixed cases, then cases built for each facet value none of them holds: more leading axes or
        non-contiguous copies of the tensors (one case, from the one with the most axes longer than 1), another
        integer dtype (from every case, as their values differ)."""
        written, out = list(cases), list(cases)
        richest = sorted(written, key=lambda c: -_spread(bind(solution, *c)))  # the most axes longer than 1 first
        for name, holds in self.facets().items():
            if any(holds(bind(solution, *c)) for c in out):
                continue
            every = name.split()[0] in self.ints  # another dtype: from every case (their values differ: 0, S, ...)
            for c in written if every else richest:
                built = self._build(name, solution, c)
                if built is not None and holds(bind(solution, *built)):
                    out.append(built)
                    if not every:
                        break
        return out

    def _build(self, facet: str, solution: Callable[..., Any], case: tuple[tuple, dict]) -> tuple[tuple, dict] | None:
        bound = inspect.signature(solution).bind(*case[0], **case[1])  # the case's own split of positional and named
        a = bound.arguments
        if facet.endswith(" leading axes"):
            have = self._leading_count(a)
            want = int(facet.split()[0])
            if have is None or have >= want:
                return None
            new = _NEW_AXES[: want - have]
            for n in self.leading:
                if isinstance(a.get(n), torch.Tensor):
                    x = a[n]
                    a[n] = x.expand(*new, *x.shape).clone().requires_grad_(x.requires_grad)
        elif facet == "a non-contiguous view":
            changed = False
            for n, v in list(a.items()):
                if isinstance(v, torch.Tensor) and v.dim() >= 2 and sum(s > 1 for s in v.shape) >= 2:
                    a[n], changed = non_contiguous(v), True
            if not changed:
                return None
        elif facet.endswith(" float64"):
            for n in self.float64:
                if not (isinstance(a.get(n), torch.Tensor) and a[n].is_floating_point()):
                    return None
                a[n] = a[n].to(torch.float64)
        elif facet.split()[0] in self.ints:
            name, dtype = facet.split()[0], getattr(torch, facet.split()[1])
            x = a.get(name)
            if not isinstance(x, torch.Tensor) or x.is_floating_point():
                return None
            info = torch.iinfo(dtype)
            if x.numel() and (int(x.min()) < info.min or int(x.max()) > info.max):
                return None
            a[name] = x.to(dtype)
        else:  # the top of a magnitude: written by hand, as what it means differs from one input to another
            return None
        return tuple(bound.args), dict(bound.kwargs)

    def sentence(self) -> str:
        """The domain as the statement says it, one clause per facet."""
        parts = []
        if self.leading:
            names = ", ".join(f"`{n}`" for n in self.leading)
            parts.append(f"{names} may have 0 to {self.max_leading} leading axes (the `...`)")
        for name, dtypes in self.ints.items():
            parts.append(f"`{name}` may be {' or '.join(dtype_name(d) for d in dtypes)}")
        for name, m in self.magnitude.items():
            parts.append(f"`{name}` has entries up to {m:g} in size")
        if self.float64:
            names = ", ".join(f"`{n}`" for n in self.float64)
            parts.append(f"{names} may be float64 (the result is then float64, to float64's precision)")
        if self.views:
            parts.append("tensors may be non-contiguous views")
        return "; ".join(parts) + "." if parts else ""
