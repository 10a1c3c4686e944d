"""The first lines of the course's training commands (``python -m course_utils.train`` and ``.induction``).

Ctrl+C or SIGTERM while PyTorch loads (a few seconds) prints one line instead of a traceback. Standard library only,
so that it is in place before torch is imported; each command installs its own handler once its loop starts.
"""

from __future__ import annotations

import os
import signal
import sys


def quiet_start_up() -> None:
    """Until the command installs its own handlers: a stop signal prints one line and exits 128 + its number."""

    def stopped(signum: int, frame: object) -> None:
        print("stopped during start-up; nothing was written", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a job started with it ignored (cmd &) keeps it so
            signal.signal(signum, stopped)
