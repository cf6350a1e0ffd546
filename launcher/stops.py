"""Ctrl-C, SIGTERM and SIGHUP to the launcher: a stop in order, a second one forces; its children start deaf to
Ctrl-C, and with SIGHUP held until their own handlers are in place."""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
from multiprocessing import resource_tracker

log = logging.getLogger("launch")
EXIT_FORCED = 130  # a second Ctrl-C: 128 + SIGINT, as a shell reports an interrupted command


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed (issue 60)


class StopRequests:
    """Ctrl-C, SIGTERM and SIGHUP. The first asks every process to stop in order (the learner checkpoints, the
    actors leave on its goodbye) and says so at once; a second one kills every child and exits 130.

    Children are started with SIGINT blocked (`started`), so the Ctrl-C a terminal sends to the whole process
    group reaches only this process: no child prints a KeyboardInterrupt traceback, and the stop goes in
    order (SIGTERM to the learners, whose goodbyes stop the actors)."""

    def __init__(self, early_signals: list[int] = ()):
        """early_signals: those launch.py's first handler took while its imports ran (a Ctrl-C then counts as
        the first)."""
        self.signals = len(early_signals)
        self.requested = self.signals > 0
        self._pids: list[int] = []
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        if self.requested:
            log.warning("stopping (Ctrl-C again to force)")
        start_tracker()  # before anything it tracks (a queue's semaphore) starts it without the block

    def __call__(self) -> bool:
        return self.requested

    def request(self) -> None:
        self.requested = True

    def started(self, proc: mp.Process) -> None:
        """proc.start() with SIGINT and SIGHUP blocked in this thread. The child inherits the block through exec,
        so a Ctrl-C never reaches it from its first instruction on (the launcher stops it in order, with
        SIGTERM), and the SIGHUP of a closed terminal waits until the child's own handler takes it (the learner
        stops as on SIGTERM, an actor leaves; learner/lifecycle/process.py's Stop, actor.stop_signals).
        The handler here stays in place meanwhile: a Ctrl-C that lands during the start is held for this
        thread, or taken at once by another thread of this process (numpy's BLAS threads do not block it),
        and handled either way. (Ignoring SIGINT here instead, as before, lost it: a pending signal is
        discarded when its action becomes SIG_IGN, and another thread drops it while the action is SIG_IGN.)"""
        start_tracker()  # before the block: starting the tracker unblocks SIGINT here
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self._pids.append(proc.pid)

    def _on_signal(self, signum, _frame) -> None:
        self.signals += 1
        if self.signals > 1:
            self._force()
        self.requested = True
        log.warning("stopping (Ctrl-C again to force)")

    def _force(self) -> None:
        log.warning("forced: killing every process of the run (the last checkpoint stays)")
        for pid in self._pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(EXIT_FORCED)


def start_tracker() -> None:
    """multiprocessing's resource tracker, started (once) with SIGHUP blocked: it ignores SIGINT and SIGTERM
    only, so a closed terminal's SIGHUP would kill it and every child would then print its KeyError traceback."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
