"""Runs a PPO update in the foreground, or in a thread while the next rollout is collected.

Background mode is Cleanba's one update of policy lag: torch releases the GIL in its kernels, so the
update overlaps the collector's message handling. Only the training model is touched here; actors are
served by a separate copy that the learner refreshes between rollouts.
"""
from __future__ import annotations

import threading

import torch

from learner.ppo import PPOUpdater


class UpdateRunner:
    def __init__(self, updater: PPOUpdater, generator: torch.Generator, threads: int, background: bool):
        self.updater, self.generator, self.threads, self.background = updater, generator, threads, background
        self._thread: threading.Thread | None = None
        self._stats: dict = {}
        self._error: BaseException | None = None

    def _run(self, batch: dict | None, update: int) -> None:
        try:
            self._stats = {} if batch is None else self.updater.update(batch, update, self.generator)
        except BaseException as exc:  # re-raised in the learner's thread by result()
            self._error = exc

    def start(self, batch: dict | None, update: int) -> None:
        """batch None: nothing to learn (collect-only); result() then gives empty stats."""
        if self.background:
            torch.set_num_threads(self.threads)  # the collector's ops are tiny; the update wants the cores
            self._thread = threading.Thread(target=self._run, args=(batch, update), name="ppo-update", daemon=True)
            self._thread.start()
            return
        torch.set_num_threads(self.threads)
        self._run(batch, update)
        torch.set_num_threads(1)  # while collecting, one thread: OpenMP workers would spin against the actors

    def result(self) -> dict:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._stats
