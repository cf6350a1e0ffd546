"""The learner as an OS process: what tells it to stop (SIGTERM, SIGINT, its launcher gone) and the exit codes
launch.py reads (it restarts a learner that exited EXIT_FAILED from its newest checkpoint, never one that exited
EXIT_REFUSED). Torch-free: the launcher imports the codes."""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

from protocol.processes import parent_alive

log = logging.getLogger("learner")
EXIT_DONE = 0  # total_steps reached, or stopped on request
EXIT_FAILED = 1  # a fault stopped it (a rank lost, a stall, the disk): nothing lost beyond the last checkpoint
EXIT_REFUSED = 2  # it refused to start (its log line says why): it would refuse again
EXIT_NO_ACTORS = 4  # no actor for cluster.no_actors_timeout_s after its first rollout: a restart would wait again
PARENT_GRACE_S = 5.0  # after the launcher died: a clean stop within this, else a hard exit


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stop:
    """Set by SIGTERM, SIGINT or SIGHUP (its terminal closed); checked between messages, so shutdown waits for
    no rollout. launch.py starts its learners with SIGHUP blocked: one that came before these handlers were in
    place is taken now."""

    def __init__(self):
        self.requested = False
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._set)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    def _set(self, *_):
        self.requested = True

    def request(self) -> None:
        self.requested = True

    def __call__(self) -> bool:
        return self.requested


class Heartbeat:
    """The launcher's shared double (`shared`), set to time.monotonic() every every_s by a thread of its own from
    the learner process's first lines on (launcher/children.py starts it before the heavy imports), so the
    launcher can tell a learner process that runs from one stopped whole (SIGSTOP) or frozen, which the
    learner's own watchdog, a thread of the same process, cannot see: launcher/heartbeats.py kills it (counted
    from its spawn: one stopped before its first beat too), and the restart policy decides."""

    def __init__(self, shared, every_s: float = 0.5):
        self.shared, self.every_s = shared, every_s
        self.shared.value = time.monotonic()
        threading.Thread(target=self._beat, name="heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while True:
            time.sleep(self.every_s)
            self.shared.value = time.monotonic()


class ParentWatch:
    """No orphaned learner: once the process that started it (launch.py) is gone, killed with -9 or by the
    OOM killer, the learner stops as on SIGTERM (final checkpoint, goodbyes, ports and device freed), and
    exits hard if that takes longer than grace_s (it may be deep in an update or a collective). A thread
    polling the parent pid (protocol.processes.parent_alive)."""

    def __init__(self, parent_pid: int, stop: Stop, grace_s: float = PARENT_GRACE_S, every_s: float = 0.5):
        self.parent_pid, self.stop, self.grace_s, self.every_s = parent_pid, stop, grace_s, every_s
        threading.Thread(target=self._watch, name="parent-watch", daemon=True).start()

    def _watch(self) -> None:
        while parent_alive(self.parent_pid):
            time.sleep(self.every_s)
        log.error("the launcher (pid %d) is gone: stopping (at most %gs)", self.parent_pid, self.grace_s)
        self.stop.request()
        time.sleep(self.grace_s)  # the main thread exits the process before this ends, unless it is stuck
        log.error("still running %gs after the launcher died: exiting now", self.grace_s)
        logging.shutdown()
        os._exit(EXIT_FAILED)
