"""Whether the process that started us (or another, by pid) is still there: every child of a run (actor, learner, collector
process, eval worker) leaves when its parent is gone, even after a kill -9, so no process is orphaned.

It lives in protocol/ because that is the one package both the actors and the learner import (actor/ may
not import learner/); like the rest of protocol/ it is standard-library only.
"""
from __future__ import annotations

import os


def parent_alive(pid: int) -> bool:
    """True while the process `pid` is still our parent. Polled, not PR_SET_PDEATHSIG (that fires when the
    parent *thread* that started us ends). pid <= 0: no parent to watch (started by hand), always True."""
    return pid <= 0 or os.getppid() == pid


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists, ours or another user's (kill 0 says so by refusing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process has that pid
    return True
