"""The learner processes' heartbeats: a thread of each learner process writes time.monotonic() into a value
shared with launch.py every 0.5 s from its first lines on (learner/lifecycle/process.py, Heartbeat); launch.py
sets it at the spawn. A learner stopped whole (SIGSTOP) or frozen cannot run its own watchdog either; launch.py
kills it once its beat is run.learner_silent_s old (30 s by default), counted from its spawn (one stopped before
its first beat too, issue 60), and the restart policy then decides (launcher/restarts.py)."""
from __future__ import annotations

import logging
import time

log = logging.getLogger("launch")


def kill_silent(learners: list, heartbeats: list, silent_s: float) -> None:
    """Kill each live learner process whose heartbeat (0: none yet) is older than silent_s, one line each. A
    learner stuck in a call while its process runs is its own watchdog's (run.watchdog_s)."""
    now = time.monotonic()
    for proc, heartbeat in zip(learners, heartbeats):
        beat = heartbeat.value
        if beat and now - beat > silent_s and proc.is_alive():
            log.error("the learner (%s) gave no sign of life for %.0fs: stopped or frozen; killing it",
                      proc.name, now - beat)
            proc.kill()
            proc.join(5.0)
