"""Runs a PPO update in the foreground, or in a thread while the next rollout is collected.

With `policy_lag` (Cleanba's one update of policy lag) it runs in a thread: torch releases the GIL in its kernels, so the
update overlaps the collector's message handling. Only the training model is touched here; actors are
served by a separate copy that the learner refreshes between rollouts.

The thread is started once and handed each update through a queue: starting a thread per update held the
training loop 2-5 ms each time (Thread.start waits until the new thread runs, and the new thread keeps the
interpreter lock through the update's first Python, up to the 5 ms switch interval), all of it serial time with
the actors waiting.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Callable

import torch

from learner.update.heap import UpdateHeap
from learner.update.ppo import PPOUpdater
from learner.stalls import Stalled, thread_stack

log = logging.getLogger("learner")

SAY_AFTER_S = 60.0  # an update still running this long after the collector finished gets a log line
DEADLINE_S = 600.0  # ... and past this (or 10x the slowest update so far, if longer) it is taken for hung


class UpdateRunner:
    def __init__(self, updater: PPOUpdater, generator: torch.Generator, threads: int, policy_lag: bool,
                 say_after_s: float = SAY_AFTER_S, deadline_s: float = DEADLINE_S,
                 clock: Callable[[], float] = time.monotonic, heap: UpdateHeap | None = None):
        """clock: seconds, monotonic, for how long each update took (tests pass their own); heap: released
        after each update (learner/update/heap.py)."""
        self.updater, self.generator, self.threads, self.policy_lag = updater, generator, threads, policy_lag
        self.heap = heap or UpdateHeap()
        self.clock = clock
        self.say_after_s, self.deadline_s = say_after_s, deadline_s
        self.slowest = 0.0  # seconds, the longest update so far
        self.took_s = 0.0  # seconds, the last update's own run (read after result())
        self._thread: threading.Thread | None = None  # policy lag: the update's thread, started with the first
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # its updates to run
        self._done = threading.Event()  # set once the update handed to the thread is done
        self._pending = False  # an update was handed to the thread and its result() not read yet
        self._stats: dict = {}
        self._error: BaseException | None = None
        # readable from the moment a threaded update is done until result(): a wait on other files (a collector
        # pool's on its processes) includes it and wakes at once, rather than polling running()
        self.done_fd, self._done_w = os.pipe()
        os.set_blocking(self.done_fd, False)

    def _run(self, batch: dict | None, progress: float, version: int | None) -> None:
        t0 = self.clock()
        try:
            self._stats = {} if batch is None else self.updater.update(batch, progress, self.generator, version)
        except BaseException as exc:  # re-raised in the learner's thread by result()
            self._error = exc
        self.heap.release()
        self.took_s = self.clock() - t0
        self.slowest = max(self.slowest, self.took_s)

    def start(self, batch: dict | None, progress: float, version: int | None = None) -> None:
        """Run PPOUpdater.update(batch, progress, version): `progress` (env steps before this rollout / the
        schedule's horizon) sets its learning rate, `version` is the weights' it starts from. batch None:
        nothing to learn (collect-only); result() then gives empty stats."""
        if self.policy_lag:
            torch.set_num_threads(self.threads)  # the collector's ops are tiny; the update wants the cores
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="ppo-update", daemon=True)
                self._thread.start()
            self._done.clear()
            self._pending = True
            self._jobs.put((batch, progress, version))
            return
        torch.set_num_threads(self.threads)
        self._run(batch, progress, version)
        torch.set_num_threads(1)  # while collecting, one thread: OpenMP workers would spin against the actors

    def running(self) -> bool:
        """An update is running in its thread (policy lag): result() would wait for it."""
        return self._pending and not self._done.is_set()

    def _serve(self) -> None:
        """The update's thread: runs each update handed to it, for the process's life (a daemon). Its own
        OpenMP thread count is set here: a thread takes torch's count once, at its first parallel op."""
        torch.set_num_threads(self.threads)
        while True:
            batch, progress, version = self._jobs.get()
            try:
                self._run(batch, progress, version)
            except BaseException as exc:  # outside the update's own handling (the heap's release): result() raises it
                self._error = exc
            self._done.set()
            os.write(self._done_w, b"!")  # done_fd readable

    def result(self) -> dict:
        if self._pending:
            self._join()
            self._pending = False
            while _read_some(self.done_fd):
                pass
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._stats

    def deadline(self) -> float:
        """Seconds an update may take before it is taken for hung."""
        return max(self.deadline_s, 10 * self.slowest)

    def _join(self) -> None:
        """Wait for the update in its thread (policy lag): a log line if it is slow, Stalled with its stack if it never ends."""
        if self._done.wait(self.say_after_s):
            return
        deadline = self.deadline()
        log.warning("the update is still running %.0fs after the rollout finished (slowest so far %.1fs); "
                    "waiting up to %.0fs", self.say_after_s, self.slowest, deadline)
        if not self._done.wait(max(deadline - self.say_after_s, 0.0)):
            raise Stalled(f"the update did not finish within {deadline:g}s of the rollout; it is at:\n"
                          f"{thread_stack(self._thread)}")


def _read_some(fd: int) -> bool:
    try:
        return bool(os.read(fd, 64))
    except BlockingIOError:
        return False
