"""What the learner does when a wait will never end: one error naming who waits on whom, never a silent hang."""
from __future__ import annotations

import faulthandler
import sys
import threading
import time
import traceback
from pathlib import Path

from protocol.files import open_append


class Stalled(RuntimeError):
    """A wait that nobody will end (a learner bug, or a hung kernel): the run stops with this message."""


def thread_stack(thread: threading.Thread) -> str:
    """Where `thread` is now, as a traceback (for the log line that ends a stalled run)."""
    frame = sys._current_frames().get(thread.ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(thread has ended)"


class Watchdog:
    """The last resort against a call that never returns (a kernel, a socket, anything the other checks
    miss): unless the learner's main thread comes back to pet it within its budget, faulthandler writes
    "Timeout" and every thread's stack to the log and the process exits 1, so launch.py stops the actors.
    faulthandler's own C thread does this, so it works while Python is stuck. pet() is cheap: it re-arms at
    most a few times per timeout, however often it is called. (A stopped process, SIGSTOP, cannot run even
    that thread: launch.py kills a learner whose heartbeat stops, learner/lifecycle/process.py.)"""

    def __init__(self, log_path: Path, timeout_s: float):
        self.file = open_append(log_path)
        self.timeout_s = timeout_s
        self.every_s = min(1.0, timeout_s / 4)
        self.armed_at = float("-inf")
        self.armed_for = timeout_s

    def pet(self, budget_s: float | None = None) -> None:
        """Re-arm for timeout_s, or for budget_s if longer (an update that may run for many minutes). The first
        plain pet after a longer budget re-arms at once: the long step is over."""
        now = time.monotonic()
        if budget_s is None and now - self.armed_at < self.every_s and self.armed_for <= self.timeout_s:
            return
        armed_for = max(budget_s or 0.0, self.timeout_s)
        faulthandler.dump_traceback_later(armed_for, exit=True, file=self.file)
        self.armed_at, self.armed_for = now, armed_for

    def stop(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        self.file.close()
