"""The background update's join: a slow update gets a log line, a hung one ends the run with its stack."""
from __future__ import annotations

import logging
import threading

import pytest
import torch

from learner.stalls import Stalled
from learner.update.runner import UpdateRunner


class BlockingUpdater:
    """Stands in for PPOUpdater: its update blocks until released, as a hung kernel would."""

    def __init__(self):
        self.release = threading.Event()

    def update(self, batch, update, generator):
        self.release.wait(60)
        return {"loss": 1.5}


class ReleaseOnWarning(logging.Handler):
    def __init__(self, event: threading.Event):
        super().__init__(logging.WARNING)
        self.event, self.messages = event, []

    def emit(self, record):
        self.messages.append(record.getMessage())
        self.event.set()


def test_a_slow_update_is_said_and_then_waited_for():
    updater = BlockingUpdater()
    handler = ReleaseOnWarning(updater.release)  # the update ends right after the runner says it is slow
    logging.getLogger("learner").addHandler(handler)
    try:
        runner = UpdateRunner(updater, torch.Generator(), 1, background=True, say_after_s=0.05, deadline_s=30)
        runner.start({}, 0)
        assert runner.result() == {"loss": 1.5}
    finally:
        logging.getLogger("learner").removeHandler(handler)
    assert len(handler.messages) == 1 and "still running" in handler.messages[0]


def test_a_hung_update_ends_loud_with_where_it_hangs():
    updater = BlockingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, background=True, say_after_s=0.05, deadline_s=0.2)
    runner.start({}, 0)
    try:
        with pytest.raises(Stalled, match=r"(?s)did not finish within 0.2s of the rollout.*in update\n.*release\.wait"):
            runner.result()
    finally:
        updater.release.set()
    assert runner.result() == {"loss": 1.5}  # the thread it gave up on is still joined, not leaked
