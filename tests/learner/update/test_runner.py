"""The update thread's join (policy lag): a slow update gets a log line, a hung one ends the run with its stack."""
from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import threading

import pytest
import torch

from learner.stalls import Stalled
from learner.update.runner import UpdateRunner


class BlockingUpdater:
    """Stands in for PPOUpdater: its update blocks until released, as a hung kernel would."""

    def __init__(self):
        self.release = threading.Event()

    def update(self, batch, update, generator, version=None):
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


def test_running_says_whether_result_would_wait_and_result_may_be_read_twice():
    """The training loop asks running() between messages and reads result() as soon as it says no (the weights
    then serve the rest of the rollout), and once more at the rollout's end for the metrics line."""
    updater = BlockingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=30, deadline_s=30)
    assert not runner.running()
    runner.start({}, 0)
    assert runner.running()
    updater.release.set()
    assert select.select([runner.done_fd], [], [], 30)[0] == [runner.done_fd]
    assert not runner.running()
    assert runner.result() == {"loss": 1.5} and runner.result() == {"loss": 1.5}


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
    """Stands in for PPOUpdater: counts its updates; `fail` raises in the next one."""

    def __init__(self, fail: BaseException | None = None):
        self.calls, self.fail = 0, fail

    def update(self, batch, progress, generator, version=None):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return {"progress": progress}


@pytest.mark.parametrize("policy_lag", [True, False])
def test_an_update_that_fails_raises_in_the_learners_thread_once(policy_lag):
    updater = CountingUpdater(fail=FloatingPointError("loss is nan"))
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=policy_lag, say_after_s=30, deadline_s=60)
    runner.start({}, progress=0.25)
    with pytest.raises(FloatingPointError, match="loss is nan"):
        runner.result()
    updater.fail = None
    runner.start({}, progress=0.5)  # what PPOUpdater.update's learning rate follows
    assert runner.result() == {"progress": 0.5}  # the failure was handed over once, not again


def test_collect_only_asks_the_updater_nothing_and_gives_empty_stats():
    updater = CountingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=30, deadline_s=60)
    runner.start(None, 1)
    assert runner.result() == {} and updater.calls == 0


def test_the_deadline_grows_to_ten_times_the_slowest_update():
    clock = FakeClock()
    runner = UpdateRunner(ClockedUpdater(clock, [30.0, 75.0, 40.0]), torch.Generator(), 1, policy_lag=False,
                          deadline_s=600.0, clock=clock)
    assert runner.deadline() == 600.0
    runner.start({}, 1)
    runner.result()
    assert runner.took_s == runner.slowest == 30.0 and runner.deadline() == 600.0  # 10 x 30 s < 600 s
    for _ in range(2):
        runner.start({}, 2)
        runner.result()
    assert runner.took_s == 40.0 and runner.slowest == 75.0 and runner.deadline() == 750.0


class FakeClock:
    def __init__(self):
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class ClockedUpdater:
    """Stands in for PPOUpdater: each update takes the next of `durations` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, durations: list[float]):
        self.clock, self.durations = clock, list(durations)

    def update(self, batch, update, generator, version=None):
        self.clock.now += self.durations.pop(0)
        return {"update": update}


class CountingHeap:
    def __init__(self):
        self.releases = 0

    def release(self) -> None:
        self.releases += 1


@pytest.mark.parametrize("policy_lag", [True, False])
def test_the_heap_is_released_after_every_update_failed_or_not(policy_lag):
    heap = CountingHeap()
    updater = CountingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=policy_lag, say_after_s=30, deadline_s=60,
                          heap=heap)
    runner.start({}, 1)
    runner.result()
    updater.fail = MemoryError("out of memory")
    runner.start({}, 2)
    with pytest.raises(MemoryError):
        runner.result()
    assert heap.releases == 2


@pytest.mark.integration  # a child process
def test_the_update_heap_is_tuned_for_a_cpu_update_only():
    """In a child process: the tuning is for the whole process, and pytest's should keep glibc's defaults."""
    code = ("import torch; from learner.update.heap import UpdateHeap\n"
            "assert UpdateHeap.for_update_on(torch.device('cuda')).libc is None\n"
            "heap = UpdateHeap.for_update_on(torch.device('cpu')); heap.release()\n"
            "print(heap.libc is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    glibc = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None
    assert out.stdout.strip() == str(glibc)


def test_a_threaded_updates_done_fd_is_readable_once_it_is_done_until_its_result_is_read():
    """A collector pool waits on its processes' pipes and on done_fd: it wakes the moment the update is done
    (its weights may then serve the rest of the rollout) instead of polling running()."""
    updater = BlockingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=30, deadline_s=30)
    runner.start({}, 0)
    assert select.select([runner.done_fd], [], [], 0.05)[0] == []  # running
    updater.release.set()
    assert select.select([runner.done_fd], [], [], 30)[0] == [runner.done_fd]
    assert runner.result() == {"loss": 1.5}
    assert select.select([runner.done_fd], [], [], 0)[0] == []  # read: quiet until the next update is done
    updater.release.clear()
    runner.start({}, 1)
    assert select.select([runner.done_fd], [], [], 0.05)[0] == []
    updater.release.set()
    assert select.select([runner.done_fd], [], [], 30)[0] == [runner.done_fd]
    runner.result()


def test_every_threaded_update_runs_on_one_thread_started_once():
    """Starting a thread per update held the training loop 2-5 ms each time (serial time, the actors waiting)."""
    names = []

    class ThreadNaming(CountingUpdater):
        def update(self, batch, progress, generator, version=None):
            names.append(threading.get_ident())
            return super().update(batch, progress, generator, version)

    runner = UpdateRunner(ThreadNaming(), torch.Generator(), 1, policy_lag=True, say_after_s=30, deadline_s=60)
    before = threading.active_count()
    for progress in (0.1, 0.2, 0.3):
        runner.start({}, progress)
        assert runner.result() == {"progress": progress}
    assert len(set(names)) == 1 and names[0] != threading.get_ident()
    assert threading.active_count() == before + 1


class FailingHeap:
    """A heap whose first release raises (outside the update's own error handling)."""

    def __init__(self):
        self.releases = 0

    def release(self) -> None:
        self.releases += 1
        if self.releases == 1:
            raise OSError("malloc_trim failed")


def test_a_failure_around_the_update_is_raised_once_and_the_thread_serves_the_next_update():
    updater = CountingUpdater()
    runner = UpdateRunner(updater, torch.Generator(), 1, policy_lag=True, say_after_s=1, deadline_s=5,
                          heap=FailingHeap())
    runner.start({}, 0.1)
    with pytest.raises(OSError, match="malloc_trim failed"):  # not a wait until the deadline
        runner.result()
    runner.start({}, 0.2)
    assert runner.result() == {"progress": 0.2} and updater.calls == 2
