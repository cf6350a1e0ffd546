"""The rollout scheduler (issue 62) without sockets: the weights' versions, the largest lag, and the handover
of buffer sets between collection and update. A simulated collection acts one step at a time, asks the
scheduler's `newer` between steps as the collector does between messages, and once it answers writes its
next rollout's first steps into the following set at once (groups flowing on); a simulated update reads its
rollout's set for a number of steps of collection and checks, when joined, that nobody wrote into it."""
from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from learner.rollout.scheduler import PolicyVersions, RolloutScheduler, buffer_sets

T = 6  # steps per rollout


class Policy:
    """The served policy: counts how often it was made to follow the training weights."""

    def __init__(self):
        self.follows = 0

    def follow(self, model, value_norm=None):
        self.follows += 1


class Runner:
    """An update that runs for `duration()` steps of collection (max_lag 0: at once, on the caller's thread),
    reading the set its batch names; `result()` joins it, checking the set is as it was when it started."""

    def __init__(self, max_lag: int, duration=lambda: 3):
        self.max_lag, self.duration, self.took_s = max_lag, duration, 0.0
        self.left, self.batch, self.seen, self.joined = 0, None, None, []
        self.done_fd = 99  # (a pipe in UpdateRunner)

    def start(self, batch, progress, version=None):
        self.batch, self.seen = batch, None if batch is None else batch["set"].copy()
        self.left = self.duration() if self.max_lag else 0

    def tick(self):
        self.left = max(0, self.left - 1)

    def running(self) -> bool:
        return self.left > 0

    def result(self) -> dict:
        self.left = 0  # the join waits for it
        if self.batch is not None:
            np.testing.assert_array_equal(self.batch["set"], self.seen, err_msg="a set was written while read")
            self.joined.append(self.batch["rollout"])
            self.batch = None
        return {"loss": 1.0}

    def deadline(self) -> float:
        return 60.0


class Collection:
    """Rollouts of T steps into buffer_sets(max_lag) sets in turn; records (rollout, version) of every step."""

    def __init__(self, versions: PolicyVersions, runner: Runner):
        self.versions, self.runner = versions, runner
        self.sets = [np.zeros(T) for _ in range(buffer_sets(versions.max_lag))]
        self.rollouts, self.acted, self.early = 0, [], 0

    def collect(self, min_envs, should_stop, version):
        r, serving, flowing = self.rollouts, version, False
        current, following = self.sets[r % len(self.sets)], self.sets[(r + 1) % len(self.sets)]
        for t in range(T):
            if not flowing and (newer := self.versions.newer(serving)) is not None:
                serving, flowing = newer, True
            current[t] = 1000 * r + t
            self.acted.append((r, serving))
            if flowing:  # a group that finished goes on into the next rollout: its set is written now
                following[0] = 1000 * (r + 1)
                self.early += 1
            self.runner.tick()
        self.rollouts += 1
        return {"set": current, "rollout": r}


def run(max_lag: int, rollouts: int, duration=lambda: 3):
    runner, policy = Runner(max_lag, duration), Policy()
    versions = PolicyVersions(runner, policy, ("model", None), max_lag)
    collection = Collection(versions, runner)
    scheduler = RolloutScheduler(collection, versions)
    finished = []
    for r in range(rollouts):  # the training loop's shape (learner/main.py: Learner.train)
        batch = scheduler.collect(1, lambda: False)
        finished += scheduler.finished(running=0)
        scheduler.start(batch, SimpleNamespace(update=r + 1, progress=0.0))
        finished += scheduler.finished(running=scheduler.max_lag)
    finished += scheduler.finished(running=0)
    return scheduler, collection, runner, policy, finished


def test_synchronous_updates_finish_where_they_start_and_never_serve_early():
    scheduler, collection, runner, policy, finished = run(max_lag=0, rollouts=4)
    assert [job.update for job, _ in finished] == [1, 2, 3, 4] and all("update_s" in s for _, s in finished)
    assert scheduler.version == 4 and runner.joined == [0, 1, 2, 3]
    assert {(r, v) for r, v in collection.acted} == {(r, r) for r in range(4)}  # rollout r acted by W_r alone
    assert collection.early == 0 and policy.follows == 0  # the policy is the training model itself


def test_with_lag_newer_weights_serve_once_the_update_is_done_and_never_twice():
    runner, policy = Runner(1), Policy()
    versions = PolicyVersions(runner, policy, ("model", None), max_lag=1)
    assert versions.newer(0) is None  # no update yet
    versions.started()
    runner.start(None, 0.0)
    assert versions.newer(0) is None  # running
    for _ in range(3):
        runner.tick()
    assert versions.newer(0) == 1 and versions.newer(1) == 1 and policy.follows == 1
    assert versions.finish() == {"loss": 1.0} and versions.version == 1 and policy.follows == 1
    versions.started()
    runner.start(None, 0.0)
    assert versions.finish() == {"loss": 1.0} and versions.version == 2 and policy.follows == 2  # joined: follows


@pytest.mark.parametrize("seed", range(5))
def test_with_lag_every_step_is_at_most_one_version_behind_and_no_set_is_written_while_read(seed):
    """Updates of random length (0 to 2 rollouts): rollout r (0-based) is trained on by update r + 1, which
    starts from W_r; each of its steps is acted by W_(r-1) or W_r, the versions never go back, and the
    simulated update's join checks its set was not written meanwhile (the runner's assertion)."""
    rng = random.Random(seed)
    scheduler, collection, runner, policy, finished = run(max_lag=1, rollouts=8, duration=lambda: rng.randint(0, 2 * T))
    assert [job.update for job, _ in finished] == list(range(1, 9)) and runner.joined == list(range(8))
    assert all(r - 1 <= v <= r for r, v in collection.acted), collection.acted
    versions = [v for _, v in collection.acted]
    assert versions == sorted(versions)
    assert scheduler.version == 8


def test_with_lag_a_quick_update_lets_groups_flow_on_into_the_set_its_update_has_left():
    scheduler, collection, runner, policy, finished = run(max_lag=1, rollouts=5, duration=lambda: 1)
    assert collection.early > 0 and policy.follows == 5  # 4 mid-rollout, the 5th when joined at the end
    assert sum(v == r for r, v in collection.acted) > sum(v == r - 1 for r, v in collection.acted[T:])


def test_one_update_at_a_time_and_a_lag_of_0_or_1():
    runner = Runner(1)
    versions = PolicyVersions(runner, Policy(), ("model", None), max_lag=1)
    versions.started()
    with pytest.raises(RuntimeError, match="one update at a time"):
        versions.started()
    with pytest.raises(ValueError, match="0 or 1"):
        PolicyVersions(runner, Policy(), ("model", None), max_lag=2)
    assert buffer_sets(0) == 1 and buffer_sets(1) == 2


def test_wake_names_the_updates_done_fd_only_while_newer_waits_for_it():
    """A collector pool waits on its processes and on `wake()`: set only while an update runs whose weights
    have not served yet (policy lag), so the wait wakes when they may; never without lag."""
    runner = Runner(max_lag=1, duration=lambda: 2)
    versions = PolicyVersions(runner, Policy(), (None, None), max_lag=1)
    assert versions.wake() is None  # no update yet
    versions.started()
    runner.start(None, 0.0)
    assert versions.wake() == 99 and versions.newer(0) is None
    runner.tick(), runner.tick()
    assert versions.newer(0) == 1 and versions.wake() is None  # served: nothing more to wait for
    versions.finish()
    synchronous = PolicyVersions(Runner(max_lag=0), Policy(), (None, None), max_lag=0)
    synchronous.started()
    assert synchronous.wake() is None
