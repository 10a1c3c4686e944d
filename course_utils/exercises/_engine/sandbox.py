"""Running the learner's function safely (phase 2 of a check): fresh copies of every argument, a time limit,
printing captured, global settings put back, and what a call changed in its arguments; what a function did on
one case (:class:`Outcome`), and whether two such are the same failure.

Part of the exercise engine (:mod:`course_utils.exercises._engine`). The time limit uses ``signal.setitimer`` and
so works only on POSIX systems and in the main thread (where a notebook runs its cells). On Windows, or when a
check runs in another thread, the function runs without a limit: a function that never returns then hangs the
check until the kernel is interrupted. Even with the limit, one long torch operation (a huge matmul) is stopped
only when it returns, as Python signals wait for it.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from course_utils.exercises._engine.compare import Kind
from course_utils.exercises._engine.exercise import NotAttempted

PRINTED_LINES, PRINTED_WIDTH = 5, 200  # the learner's printing kept and shown with the verdict

# ------------------------------------------------------------------------------------------ copies and states


def clone(x: Any) -> Any:
    """A deep copy of an argument: tensors, modules and generators copied, containers rebuilt."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad) if x.is_leaf else x.detach().clone()
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x)
    if isinstance(x, torch.Generator):
        g = torch.Generator(device=x.device)
        g.set_state(x.get_state())
        return g
    if isinstance(x, (list, tuple)):
        items = [clone(i) for i in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        return {k: clone(v) for k, v in x.items()}
    return x


def state_of(x: Any) -> Any:
    """What an argument holds, as plain tensors and containers (a module as its state_dict)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, torch.nn.Module):
        return _module_state(x)
    if isinstance(x, torch.Generator):
        return "a generator"  # drawing from a generator argument is what it is for: not an in-place change
    if isinstance(x, (list, tuple)):
        return [state_of(i) for i in x]
    if isinstance(x, dict):
        return {k: state_of(v) for k, v in x.items()}
    return x


class Attributes(dict):
    """A module's state, by attribute path: a change is named ``m.out_proj.weight``, not ``m['...']``."""


PLAIN = (bool, int, float, str, type(None))
_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
)


def _module_state(m: torch.nn.Module) -> Attributes:
    """Everything a function could change in a module: each parameter's and buffer's values, dtype, device and
    requires_grad; each submodule's training flag, plain attributes (bool, int, float, str, None, tuples of
    them) and number of hooks."""
    state = Attributes()
    for name, t in [*m.named_parameters(), *m.named_buffers()]:
        state[name] = t.detach()
        state[f"{name}.requires_grad"] = t.requires_grad
    for prefix, sub in m.named_modules():
        at = f"{prefix}." if prefix else ""
        state[f"{at}training"] = sub.training
        for key, value in vars(sub).items():
            if key.startswith("_"):
                continue
            if isinstance(value, PLAIN) or (isinstance(value, tuple) and all(isinstance(v, PLAIN) for v in value)):
                state[f"{at}{key}"] = value
        state[f"{at}hooks"] = sum(len(getattr(sub, h, None) or ()) for h in _HOOKS)
    return state


def first_change(before: Any, after: Any, name: str) -> str | None:
    """The name of the first part of an argument that differs (exactly, NaN = NaN) after the call, or None."""
    if isinstance(before, torch.Tensor):
        if (
            not isinstance(after, torch.Tensor)
            or after.shape != before.shape
            or after.dtype != before.dtype
            or after.device != before.device
        ):
            return name
        a, b = before.cpu(), after.detach().cpu()
        same = a == b
        if a.is_floating_point() or a.is_complex():
            same = same | (a.isnan() & b.isnan())
        return None if bool(same.all()) else name
    if isinstance(before, (list, tuple)):
        if not isinstance(after, (list, tuple)) or len(after) != len(before):
            return name
        return next(
            (c for i, (x, y) in enumerate(zip(before, after)) if (c := first_change(x, y, f"{name}[{i}]"))), None
        )
    if isinstance(before, Attributes):
        if not isinstance(after, dict):
            return name
        for k in before:
            if k not in after:
                return f"{name}.{k}"
            if first_change(before[k], after[k], f"{name}.{k}"):
                plain = isinstance(before[k], PLAIN)
                return f"{name}.{k}" + (f" ({before[k]!r} -> {after[k]!r})" if plain else "")
        extra = sorted(set(after) - set(before))
        return f"{name}.{extra[0]}" if extra else None
    if isinstance(before, dict):
        if not isinstance(after, dict) or set(after) != set(before):
            return name
        return next((c for k in before if (c := first_change(before[k], after[k], f"{name}[{k!r}]"))), None)
    try:
        return None if bool(before == after) else name
    except Exception:  # an object that cannot say whether it equals its copy: nothing to compare
        return None


# ------------------------------------------------------------------------------------------ running


class TimeLimit(BaseException):
    """Raised in the learner's function when its time is up (a BaseException, so `except Exception` lets it by)."""


class TooLarge(BaseException):
    """Raised in the learner's function when it computes a tensor larger than its exercise allows (``largest``):
    a BaseException, so `except Exception` lets it by."""

    def __init__(self, shape: tuple[int, ...], limit: int) -> None:
        super().__init__(f"a tensor of shape {tuple(shape)} ({math.prod(shape):,} elements; at most {limit:,})")
        self.shape, self.limit = tuple(shape), limit


class _SizeLimit(TorchDispatchMode):
    """Every operation's results measured against ``limit`` elements, as the operation returns them. The first
    tensor over the limit is kept in ``tripped``: a function that catches the exception (``except BaseException``)
    has still built that tensor, and :meth:`Session.call` raises it again after the call."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.tripped: TooLarge | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in tree_flatten(result)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.limit:
                too_large = TooLarge(t.shape, self.limit)
                if self.tripped is None:
                    self.tripped = too_large
                raise too_large
        return result


def _refuse_to_save(t: torch.Tensor) -> Any:
    raise RuntimeError(
        "autograd recorded a graph inside your function (torch.inference_mode(False) or torch.enable_grad() with "
        "tensors that require grad)"
    )


@contextlib.contextmanager
def _without_autograd() -> Iterator[None]:
    """``torch.inference_mode()``, and no graph recorded even where the function leaves it (``inference_mode(False)``
    with copies that require grad): the first tensor an operation saves for backward raises."""
    with torch.inference_mode(), torch.autograd.graph.saved_tensors_hooks(_refuse_to_save, lambda t: t):
        yield


class _Printed(io.TextIOBase):
    """A stream that keeps the first few lines written to it (each cut to a width) and counts the rest."""

    def __init__(self, lines: int = PRINTED_LINES, width: int = PRINTED_WIDTH) -> None:
        super().__init__()
        self.lines, self.width = lines, width
        self.kept: list[str] = []
        self.more = 0
        self._current = ""
        self._started = False  # a line is under way (even an empty one)

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        parts = s.split("\n")
        for i, part in enumerate(parts):
            if part or i < len(parts) - 1:
                self._started = True
            if len(self._current) <= self.width:
                self._current += part[: self.width + 1 - len(self._current)]
            if i < len(parts) - 1:
                self._end_line()
        return len(s)

    def _end_line(self) -> None:
        line = self._current if len(self._current) <= self.width else self._current[: self.width] + " ..."
        if len(self.kept) < self.lines:
            self.kept.append(line)
        else:
            self.more += 1
        self._current, self._started = "", False

    def finish(self) -> tuple[tuple[str, ...], int]:
        if self._started:
            self._end_line()
        return tuple(self.kept), self.more


def _can_time() -> bool:
    """Whether a time limit can be set: POSIX, the main thread, and no SIGALRM handler set outside Python."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is not None
    )


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise TimeLimit in the block after ``seconds`` (POSIX main thread only; elsewhere no limit).

    A timer that was already running (pytest-timeout's, say) is put back afterwards with its remaining time.
    """
    if seconds is None or not _can_time():
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeLimit

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    start = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - start), 1e-6), old_interval)


@dataclass
class Run:
    """What one function did on one case: its output and its arguments after the call."""

    output: Any
    args: tuple
    kwargs: dict


def run_case(fn: Callable[..., Any], case: tuple[tuple, dict]) -> Run:
    args, kwargs = clone(case[0]), clone(case[1])
    return Run(fn(*args, **kwargs), args, kwargs)


def text_of(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # an exception whose own __str__ fails
        return ""


def _restore_settings(saved: tuple[torch.dtype, bool]) -> list[str]:
    """Put back the default dtype and grad mode if the learner's function changed them; say which it changed."""
    dtype, grad = saved
    changed = []
    if torch.get_default_dtype() != dtype:
        changed.append(f"torch.set_default_dtype({torch.get_default_dtype()})")
        torch.set_default_dtype(dtype)
    if torch.is_grad_enabled() != grad:
        changed.append(f"torch.set_grad_enabled({torch.is_grad_enabled()})")
        torch.set_grad_enabled(grad)
    return changed


# ------------------------------------------------------------------------------------------ phase 2: running it


class Session:
    """Where the learner's function runs during one check: each call under the time limit, its printing captured,
    and the global settings it changes put back after each call (and named in the verdict)."""

    def __init__(
        self, time_limit: float | None, autograd: bool = True, largest: Callable[..., int] | None = None
    ) -> None:
        self.time_limit = time_limit
        self.autograd = autograd  # False: each call runs under torch.inference_mode(), where backward() cannot help
        self.largest = largest  # the most elements one tensor may hold, from a case's arguments (None: no limit)
        self.printed = _Printed()
        self.settings = torch.get_default_dtype(), torch.is_grad_enabled()
        self.put_back: list[str] = []  # global settings the learner's function changed

    def call(self, fn: Callable[..., Any], case: tuple[tuple, dict]) -> Run:
        out, err = contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed)
        no_grad = contextlib.nullcontext() if self.autograd else _without_autograd()
        limit = None if self.largest is None else _SizeLimit(self.largest(*case[0], **case[1]))
        try:
            with out, err, _time_limit(self.time_limit), no_grad, limit or contextlib.nullcontext():
                run = run_case(fn, case)
        except BaseException as e:
            if limit is not None and limit.tripped is not None and e is not limit.tripped:
                raise limit.tripped from e  # caught inside, then something else went wrong: the limit is the cause
            raise
        finally:
            self.restore()
        if limit is not None and limit.tripped is not None:  # the function caught the limit's exception and went on
            raise limit.tripped
        return run

    def restore(self) -> None:
        self.put_back.extend(c for c in _restore_settings(self.settings) if c not in self.put_back)


def _is_old_import(e: BaseException) -> bool:
    """The new stub in a notebook whose import cell predates NotAttempted."""
    return isinstance(e, NameError) and getattr(e, "name", None) == NotAttempted.__name__


@dataclass
class Attempt:
    """What the learner's function did on the cases, in order: the runs it answered, then what stopped it (on case
    ``len(runs)``): ``TOO_SLOW``, ``NOT_ATTEMPTED``, ``GAVE_UP``, ``OLD_IMPORT`` or ``RAISED``; None if nothing."""

    runs: list[Run]
    stop: Kind | None = None
    error: BaseException | None = None


def run_learner(fn: Any, cases: Sequence[tuple[tuple, dict]], session: Session) -> Attempt:
    """Phase 2: run the learner's function on each case in order, until the end or the first case it does not
    answer."""
    runs: list[Run] = []
    for i, case in enumerate(cases):
        try:
            runs.append(session.call(fn, case))
        except TimeLimit:
            return Attempt(runs, Kind.TOO_SLOW)
        except TooLarge as e:
            return Attempt(runs, Kind.RAISED, e)
        except NotAttempted as e:
            return Attempt(runs, Kind.NOT_ATTEMPTED if i == 0 else Kind.GAVE_UP, e)
        except (Exception, SystemExit) as e:  # the learner's code failing is a verdict, not a crash of the check
            return Attempt(runs, Kind.OLD_IMPORT if i == 0 and _is_old_import(e) else Kind.RAISED, e)
    return Attempt(runs)


# ------------------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class Outcome:
    """What a function did on one case: answered (``run``), raised (``error``), or neither (stopped by the time
    limit before it could say)."""

    run: Run | None = None
    error: BaseException | None = None

    def same_as(self, other: Outcome) -> bool:
        """The same outcome of one function on one case twice: an identical answer, or the same failure."""
        if self.run is not None and other.run is not None:
            return identical(self.run, other.run)
        return self.error is not None and other.error is not None and same_failure(self.error, other.error)


def outcome(fn: Callable[..., Any], case: tuple[tuple, dict]) -> Outcome:
    """What ``fn`` (the solution, or a catalogued mistake) does on ``case``, outside the sandbox."""
    try:
        return Outcome(run=run_case(fn, case))
    except Exception as e:
        return Outcome(error=e)


def learner_outcomes(fn: Any, cases: Sequence[tuple[tuple, dict]], session: Session) -> list[Outcome]:
    """The learner's function's outcome on each of ``cases``, run as in phase 2 (the first case past the time
    limit, and every one after it, count as neither answered nor raised)."""
    outcomes = []
    for case in cases:
        try:
            outcomes.append(Outcome(run=session.call(fn, case)))
        except TimeLimit:
            break
        except (Exception, SystemExit, TooLarge) as e:
            outcomes.append(Outcome(error=e))
    return outcomes + [Outcome()] * (len(cases) - len(outcomes))


def identical(a: Run, b: Run) -> bool:
    """Two runs of one function on one case identical (output and arguments after the call, exactly; NaN = NaN).

    Not merely within the exercise's tolerance: a run kept in place of fresh ones must judge every answer as they
    would, and one near the tolerance's edge is judged otherwise by two runs that differ within it."""
    try:
        pairs = ((a.output, b.output), (a.args, b.args), (a.kwargs, b.kwargs))
        return all(first_change(state_of(x), state_of(y), "") is None for x, y in pairs)
    except Exception:  # outputs that cannot be compared: not known to be alike
        return False


def same_failure(a: BaseException, b: BaseException) -> bool:
    """Whether two exceptions are the same failure: one type and one message, numbers (shapes) included.

    Both ran on the same case, so the same mistake fails with the same sizes. Setting the numbers aside
    would let any broadcasting error stand for any other ("size of tensor a (6) must match ... (3)" for
    "... (6) must match ... (4)"), and name a catalogued mistake the learner did not make. Only memory
    addresses (``0x7f...``), which differ from run to run, are set aside.
    """

    def gist(e: BaseException) -> str:
        return re.sub(r"0x[0-9a-fA-F]+", "0x", text_of(e)).strip()

    return type(a) is type(b) and gist(a) == gist(b)
