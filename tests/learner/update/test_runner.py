"""The update thread's join (policy lag): a slow update gets a log line, a hung one ends the run with its stack."""
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
        runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=0.05, deadline_s=30)
        runner.start({}, 0)
        assert runner.result() == {"loss": 1.5}
    finally:
        logging.getLogger("learner").removeHandler(handler)
    assert len(handler.messages) == 1 and "still running" in handler.messages[0]


def test_a_hung_update_ends_loud_with_where_it_hangs():
    updater = BlockingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=0.05, deadline_s=0.2)
    runner.start({}, 0)
    try:
        with pytest.raises(Stalled, match=r"(?s)did not finish within 0.2s of the rollout.*in update\n.*release\.wait"):
            runner.result()
    finally:
        updater.release.set()
    assert runner.result() == {"loss": 1.5}  # the thread it gave up on is still joined, not leaked


class CountingUpdater:
    """Stands in for PPOUpdater: counts its updates; `fail` raises in the next one, `takes_s` makes it last."""

    def __init__(self, fail: BaseException | None = None, takes_s: float = 0.0):
        self.calls, self.fail, self.takes_s = 0, fail, takes_s

    def update(self, batch, update, generator):
        self.calls += 1
        threading.Event().wait(self.takes_s)  # an update's own duration, not a wait for anything
        if self.fail is not None:
            raise self.fail
        return {"update": update}


@pytest.mark.parametrize("policy_lag", [True, False])
def test_an_update_that_fails_raises_in_the_learners_thread_once(policy_lag):
    updater = CountingUpdater(fail=FloatingPointError("loss is nan"))
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=policy_lag, say_after_s=30, deadline_s=60)
    runner.start({}, 3)
    with pytest.raises(FloatingPointError, match="loss is nan"):
        runner.result()
    updater.fail = None
    runner.start({}, 4)
    assert runner.result() == {"update": 4}  # the failure was handed over once, not again


def test_collect_only_asks_the_updater_nothing_and_gives_empty_stats():
    updater = CountingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=30, deadline_s=60)
    runner.start(None, 1)
    assert runner.result() == {} and updater.calls == 0


def test_the_deadline_grows_to_ten_times_the_slowest_update():
    runner = UpdateRunner(CountingUpdater(takes_s=0.05), torch.Generator(), 1, policy_lag=False, deadline_s=0.2)
    assert runner.deadline() == 0.2
    runner.start({}, 1)
    runner.result()
    assert runner.slowest == runner.took_s >= 0.05 and runner.deadline() == 10 * runner.slowest > 0.2
