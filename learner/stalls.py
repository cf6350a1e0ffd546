"""What the learner does when a wait will never end: one error naming who waits on whom, never a silent hang."""
from __future__ import annotations

import sys
import threading
import traceback


class Stalled(RuntimeError):
    """A wait that nobody will end (a learner bug, or a hung kernel): the run stops with this message."""


def thread_stack(thread: threading.Thread) -> str:
    """Where `thread` is now, as a traceback (for the log line that ends a stalled run)."""
    frame = sys._current_frames().get(thread.ident)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(thread has ended)"
