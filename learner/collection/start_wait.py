"""The wait before a rollout starts, for its env slots: the same in the training process's collector
(learner/collection/collector.py) and in the pool of collector processes (learner/collection/processes/pool.py), which
differ only in how they count the ready slots, listen meanwhile and say where the wait stands."""
from __future__ import annotations

import logging
import time
from typing import Callable

from learner.stalls import Stalled

log = logging.getLogger("learner")


class NoActors(Stalled):
    """No env slot ready for cluster.no_actors_timeout_s after the first rollout: every actor gone. The run ends
    (learner/lifecycle/process.py: EXIT_NO_ACTORS), not restarted: a restart would wait for them again."""


class StartWait:
    def __init__(self, ready: Callable[[], int], listen: Callable[[], None], where: Callable[[int], str],
                 join_command: Callable[[int], str], actor_timeout_s: float, startup_timeout_s: float,
                 no_actors_timeout_s: float = 0.0, clock: Callable[[], float] = time.monotonic):
        """`ready()`: the env slots ready now; `listen()`: one short pass of listening (joiners are admitted,
        liveness checked); `where(need)`: what the wait stands at, for its log lines; `join_command(n)`: how to
        add an actor of n envs. Every actor_timeout_s the wait says so; startup_timeout_s (0: none) ends the
        first rollout's wait, no_actors_timeout_s (0: none) a later one's. `clock`: seconds, monotonic (tests
        pass their own)."""
        self.ready, self.listen, self.where, self.join_command = ready, listen, where, join_command
        self.clock = clock
        self.actor_timeout_s, self.startup_timeout_s = actor_timeout_s, startup_timeout_s
        self.no_actors_timeout_s = no_actors_timeout_s

    def until(self, need: int, should_stop, first: bool) -> bool:
        """Until `need` env slots are ready (True) or should_stop() (False). The `first` rollout's wait ends the
        run (Stalled) past startup_timeout_s, a later one's (NoActors) past no_actors_timeout_s, saying what it
        waited on."""
        start = said = self.clock()
        while self.ready() < need:
            if should_stop():
                return False
            self.listen()
            now = self.clock()
            if first and self.startup_timeout_s and now - start > self.startup_timeout_s:
                raise Stalled(f"start-up did not complete within {self.startup_timeout_s:g}s "
                              f"(cluster.startup_timeout_s): {self.where(need)}")
            if not first and self.no_actors_timeout_s and now - start > self.no_actors_timeout_s:
                raise NoActors(f"no actor for {now - start:.0f}s after the first rollout (cluster.no_actors_timeout_s "
                               f"= {self.no_actors_timeout_s:g}; 0 waits for ever): {self.where(need)}; the run ends")
            if now - said >= self.actor_timeout_s:
                said = now
                log.warning("waiting for actors to start the %s rollout: %s; to add one: %s",
                            "first" if first else "next", self.where(need), self.join_command(need - self.ready()))
        return True
