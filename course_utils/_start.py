"""How the course's training commands (``python -m course_utils.train`` and ``.induction``) stop: in one line.

Ctrl+C or SIGTERM while PyTorch loads (a few seconds) prints one line instead of a traceback
(:func:`quiet_start_up`); once the command runs, :class:`StopSignals` turns either into a KeyboardInterrupt that
the command reports in one line with what was kept. Standard library only, so that it is in place before torch is
imported.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import Any, NoReturn


def quiet_start_up() -> None:
    """Until the command installs its own handlers: a stop signal prints one line and exits 128 + its number."""

    def stopped(signum: int, frame: object) -> None:
        print("stopped during start-up; nothing was written", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a job started with it ignored (cmd &) keeps it so
            signal.signal(signum, stopped)


def pasteable(module: str, argv: list[str]) -> str:
    """``python -m module argv`` as this user can paste it here: this interpreter (``.venv/bin/python`` from the
    course folder), not a ``python`` that may lack torch or not exist."""
    exe = sys.executable or "python"
    try:
        near = os.path.relpath(exe)
    except ValueError:  # another drive (Windows)
        near = exe
    return shlex.join([exe if near.startswith("..") else near, "-m", module, *argv])


def exit_now(code: int) -> NoReturn:
    """Exit with ``code``; after a stop (128 + the signal) through os._exit, since CPython under ``-m`` turns
    sys.exit's code into death by SIGINT once a KeyboardInterrupt has passed through exec (dataclasses, while torch
    imports), even a caught one."""
    if code >= 128:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


class StopSignals:
    """Inside (in the main thread, for ``python -m course_utils.train`` and ``.induction``): SIGTERM stops the
    command as Ctrl+C does, with a KeyboardInterrupt, and ``signal`` records which came first; later ones are
    ignored, so the one line names the first; with ``deferred`` set, a signal is only recorded (a write that must
    finish). A signal ignored by whoever started us stays ignored. ``restore=False`` (the command itself, which
    exits next): on leaving, the signals are ignored instead of handed back to start-up's handler."""

    def __init__(self, restore: bool = True) -> None:
        self.restore = restore

    def __enter__(self) -> StopSignals:
        self.signal, self.deferred, self.previous = None, False, {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # cmd & ignores Ctrl+C
                self.previous[signum] = signal.signal(signum, self._stop)
        return self

    def _stop(self, signum: int, frame: Any) -> None:
        if self.signal is None:  # a second signal while the first is handled changes nothing
            self.signal = signum
            if not self.deferred:
                raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():  # SIG_IGN, unlike a handler, holds while Python exits
            signal.signal(signum, handler if self.restore else signal.SIG_IGN)

    def report(self, what: str) -> int:
        """Print the stopped command's one line, "stopped[ by SIGTERM] ``what``" (process 0 only under torchrun);
        return its exit code: 130 for Ctrl+C, 143 for SIGTERM."""
        code = 128 + (self.signal or signal.SIGINT)
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"stopped{' by SIGTERM' if code == 128 + signal.SIGTERM else ''} {what}", file=sys.stderr, flush=True)
        return code
