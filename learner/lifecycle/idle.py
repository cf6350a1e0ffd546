"""Rollouts without a sample on any rank (every actor gone): said every cluster.actor_timeout_s with how to add
an actor, and past cluster.no_actors_timeout_s after the first rollout the run's end (issue 60), decided by
every rank together. (A single rank waits for its actors before the rollout instead: collection's StartWait.)"""
from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("learner")


class IdleRollouts:
    def __init__(self, cluster, ranks, join_command: Callable[[], str]):
        """`cluster`: the config's section (its actor_timeout_s, no_actors_timeout_s); `ranks`: the job's
        (learner/update/ranks.py), which decides together; `join_command()`: how to add an actor now."""
        self.actor_timeout_s, self.limit_s, self.ranks = cluster.actor_timeout_s, cluster.no_actors_timeout_s, ranks
        self.join_command = join_command
        self.said, self.since = time.monotonic(), None

    def empty(self, first_done: bool) -> str | None:
        """One more rollout without a sample (`first_done`: the run's first rollout is behind it): None to go
        on, else why the run ends (every rank gets the same answer: a collective)."""
        now = time.monotonic()
        self.since = self.since or now
        if self.ranks.any(bool(self.limit_s) and first_done and now - self.since > self.limit_s):
            return (f"no actor for {now - self.since:.0f}s after the first rollout (cluster.no_actors_timeout_s = "
                    f"{self.limit_s:g}; 0 waits for ever); the run ends")
        if now - self.said >= self.actor_timeout_s:
            self.said = now
            if self.ranks.distributed:
                log.warning("waiting for actors: no learner rank has a live env slot")
            else:
                log.warning("waiting for actors: every actor has left; to add one: %s", self.join_command())
        return None

    def sampled(self) -> None:
        """A rollout with samples: the idle time starts again from the next empty one."""
        self.since = None
