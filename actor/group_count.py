"""How many groups an actor's envs step in (cluster.groups = "auto"), from its first seconds' timings.

An actor is one core: its groups step one after the other. While a group's report is on its way to the learner,
inferred and answered (the round trip, R), the other groups can step, so with n envs of s seconds each in G
groups of k = n / G a group's cycle is k s + R and the core's work in it is n s: the core never idles once
n s >= k s + R. One group (the default) idles R in every n s + R.

A learner infers one batch at a time, so a report that arrives while a batch is inferred waits for it: each
env's step then takes at least two round trips (2 R), whatever the groups, and past k s <= R more groups
only add messages.

`RoundTrips` times the actor with one group (so the round trip it sees is the learner's alone, not the actor's
own queueing); `choose_groups` then takes the fewest groups whose predicted share of the core's time stepping
reaches TARGET_BUSY, as fewer groups mean fewer, larger messages for the learner; when none does, the fewest
that do as well as any can.
"""
from __future__ import annotations

import statistics
import time

from protocol.messages import MAX_GROUPS

TARGET_BUSY = 0.95  # the share of the actor's core spent stepping that a group count must reach
PROBE_ROUND_TRIPS = 16  # round trips timed (medians), at least ...
PROBE_S = 1.0  # ... over at least this long, before choosing


def busy_share(num_envs: int, groups: int, step_s: float, round_trip_s: float) -> float:
    """The predicted share of the core's time spent stepping, for `step_s` per step of all `num_envs` envs: the
    core's work over a group's cycle (its step and the round trip, at least two round trips)."""
    cycle = max(step_s / groups + round_trip_s, 2 * round_trip_s)
    return min(1.0, step_s / max(cycle, 1e-12))


def choose_groups(num_envs: int, step_s: float, round_trip_s: float, max_groups: int = MAX_GROUPS) -> int:
    """The fewest groups (dividing `num_envs`, at most `max_groups`) whose busy share reaches TARGET_BUSY, or,
    if none does, the best share there is."""
    counts = [g for g in range(1, min(num_envs, max_groups) + 1) if num_envs % g == 0]
    shares = [busy_share(num_envs, g, step_s, round_trip_s) for g in counts]
    enough = min(TARGET_BUSY, max(shares)) - 1e-9
    return next(g for g, share in zip(counts, shares) if share >= enough)


class RoundTrips:
    """Times an actor stepping its envs as one group: each step (the envs' steps and the report's encoding and
    send) and each round trip (its report sent to the next actions received). The first round trip, after
    the first report, is left out: it waits for the learner's first rollout to start."""

    def __init__(self, num_envs: int, clock=time.monotonic):
        self.num_envs, self.clock = num_envs, clock
        self.steps: list[float] = []
        self.round_trips: list[float] = []
        self.started: float | None = None  # when the first step began
        self.sent_at: float | None = None  # when the last step report left

    def received(self) -> float:
        """Actions arrived; returns the time, for `sent` after the step."""
        now = self.clock()
        if self.sent_at is not None:
            self.round_trips.append(now - self.sent_at)
        if self.started is None:
            self.started = now
        return now

    def sent(self, since: float) -> None:
        """The step on the actions received at `since` is done and its report sent."""
        self.sent_at = self.clock()
        self.steps.append(self.sent_at - since)

    def ready(self) -> bool:
        return (len(self.round_trips) >= PROBE_ROUND_TRIPS and self.started is not None
                and self.clock() - self.started >= PROBE_S)

    def medians(self) -> tuple[float, float]:
        """(step, round trip) in seconds, each the median: an update's pause or a slow step is one sample."""
        return statistics.median(self.steps), statistics.median(self.round_trips)

    def choice(self) -> int:
        step_s, round_trip_s = self.medians()
        return choose_groups(self.num_envs, step_s, round_trip_s)
