"""The rollout scheduler: the one owner of how collecting and updating overlap (issue 62).

Sample Factory's model, cut down to PPO's one update at a time: rollouts are collected by the served policy,
each is trained on by one update, and `max_lag` (run.policy_lag: 0 or 1) is the largest number of versions
the weights that act may be behind those an update starts from.

- max_lag 0 (synchronous, CleanRL's loop): an update runs on the training thread as soon as its rollout is
  complete, and the actors wait for it.
- max_lag 1: the update runs in its thread (learner/update/runner.py) while the next rollout is collected by
  the previous weights. As soon as it is done its weights serve (`PolicyVersions.newer`, asked by the
  collection between messages, in this process or, through the shared weights, in each collector process;
  on G ranks, each rank's own), and a group that finishes the rollout goes on into the next one at once:
  its steps are acted by weights at most one version behind, never more.

The buffer sets: a rollout's rows are not rewritten while its update may read them. Rollouts are filled
into `buffer_sets(max_lag)` sets in turn (the collector's two rollouts alive, a collector pool's shared
rows); a rollout may start in the set of rollout r - buffer_sets only once update r - buffer_sets is done,
which is what `newer` (mid-rollout) and `finished` (between rollouts) guarantee.

The training loop sees one face whatever the topology:

    rollout = scheduler.collect(min_envs, should_stop)
    ... GAE ...
    for job, stats in scheduler.finished(running=0): ...      # the update that ran meanwhile (lag)
    scheduler.start(batch, job)
    for job, stats in scheduler.finished(running=scheduler.max_lag): ...   # synchronous: this one

Nothing here imports a stage of the learner: its collaborators (the collection, the update's runner, the served
policy) come at construction.
"""
from __future__ import annotations

import logging
from collections import deque
from typing import Any, Protocol

log = logging.getLogger("learner")


class UpdateThread(Protocol):
    """learner/update/runner.py's UpdateRunner: one update at a time, here or in its thread; `done_fd` readable
    once its thread is done, until result()."""
    took_s: float
    done_fd: int

    def start(self, batch: dict | None, progress: float, version: int | None = None) -> None: ...
    def running(self) -> bool: ...
    def result(self) -> dict: ...
    def deadline(self) -> float: ...


class ServedPolicy(Protocol):
    """learner/collection/inference.py's Inference: the policy the actors are served with."""

    def follow(self, model, value_norm=None) -> None: ...


class Collecting(Protocol):
    """learner/collection/collection.py's Collection (in this process or in collector processes)."""

    def collect(self, min_envs: int, should_stop, version: int): ...


def buffer_sets(max_lag: int) -> int:
    """Rollout buffers filled in turn: one more than the updates that may read one while the next fills."""
    return max_lag + 1


class PolicyVersions:
    """The weights' versions: `version` (the newest weights an update finished, published), and whether a
    finished update's weights already serve the actors (`newer`). The served policy is the training model
    itself without lag, a copy that follows it with lag (learner/collection/inference.py, served_modules)."""

    def __init__(self, runner: UpdateThread, policy: ServedPolicy, trained: tuple, max_lag: int, version: int = 0):
        """`trained`: the training model and its value statistics (None without), which the policy follows."""
        if max_lag not in (0, 1):
            raise ValueError(f"the largest policy lag is 0 or 1 (one update at a time), got {max_lag}")
        self.runner, self.policy, self.trained, self.max_lag = runner, policy, trained, max_lag
        self.version = version
        self.pending = 0  # updates started and not yet finished
        self.served_early = False  # the running update's weights serve already (newer said so)

    def newer(self, serving: int) -> int | None:
        """Asked by a collection between messages while a rollout fills, with the version it serves: once the
        running update is done, its weights serve the rest of the rollout (the stored log-probabilities keep
        PPO's ratio exact) and their version is returned: groups that finish may then go on into the next
        rollout, which is one version behind, no more. None while it runs, without lag, without an update."""
        if self.max_lag == 0 or self.pending == 0 or self.runner.running():
            return None
        if not self.served_early:
            self.runner.result()  # the update's error, if any, is raised here
            self.policy.follow(*self.trained)
            self.served_early = True
        return self.version + 1

    def wake(self) -> int | None:
        """While `newer` waits for the running update: a file descriptor readable once it is done, for a
        collection that waits on files (its collector processes) to wake at once rather than poll; else None."""
        if self.max_lag == 0 or self.pending == 0 or self.served_early:
            return None
        return self.runner.done_fd

    def started(self) -> None:
        if self.pending >= 1:
            raise RuntimeError("an update started while another runs: one update at a time")
        self.pending += 1

    def finish(self) -> dict:
        """Join the running update (its error raised here); its weights serve from now on. Its stats."""
        stats = self.runner.result()
        if self.max_lag and not self.served_early:
            self.policy.follow(*self.trained)
        self.served_early = False
        self.pending -= 1
        self.version += 1
        return stats


class RolloutScheduler:
    """Collect, update, and how far the two overlap (see the module doc)."""

    def __init__(self, collection: Collecting, versions: PolicyVersions):
        self.collection, self.versions = collection, versions
        self.runner = versions.runner
        self.max_lag = versions.max_lag
        self.jobs: deque[Any] = deque()  # the updates started and not yet finished, oldest first

    @property
    def version(self) -> int:
        return self.versions.version

    def collect(self, min_envs: int, should_stop):
        """The next rollout (None: asked to stop first), acted by the newest weights published and, with lag,
        by those of the update that runs meanwhile as soon as it is done."""
        return self.collection.collect(min_envs, should_stop, self.version)

    def start(self, batch: dict | None, job: Any) -> None:
        """Start `job`'s update on `batch` (None: nothing to learn): on this thread without lag, else in the
        update's thread, from the newest weights (`version`: with a recurrent core the samples they acted are
        those its exact replay covers). The update before it must be finished (`finished(running=0)`)."""
        self.versions.started()
        self.jobs.append(job)
        self.runner.start(batch, job.progress, self.version)

    def deadline(self) -> float:
        """Seconds an update may take before it is taken for hung (for the watchdog)."""
        return self.runner.deadline()

    def finished(self, running: int) -> list[tuple[Any, dict]]:
        """Join updates until at most `running` are left running: each (job, stats), oldest first, their
        weights now the newest version. running=0 before a new update starts (and at the end);
        running=max_lag right after one started (synchronous: it is done already)."""
        done = []
        while len(self.jobs) > running:
            job = self.jobs.popleft()
            stats = {**self.versions.finish(), "update_s": self.runner.took_s}
            done.append((job, stats))
        return done
