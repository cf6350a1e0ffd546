"""Where a collector's rollout spent its env slots' time, counted cheaply: a counter per message, two list
appends per inference batch, the rest once per rollout (issue 40: measure first).

Every env slot of a rollout of wall time W is somewhere all along, so its N x W env-slot-seconds split into:

  waiting_actions  its report is in (the poll's timestamp, already taken) and its actions are not sent yet:
                   the learner's queue plus the batch's inference and sends;
  parked_end       it did its T steps and waits for the rollout's end (the end-of-rollout barrier: a group
                   that finished early idles until the slowest one is done; none with run.collect_only,
                   where early groups flow on into the next rollout);
  with_actors      the rest: actions on their way, the env step, the report on its way back (the round trip
                   outside the learner).

Per batch it keeps the batch's env slots and its latency (inference plus the sends), whose percentiles the
rollout's summary gives. With policy lag it also counts the steps acted with weights one version behind
those the rollout's update starts from (`lagged_share`): those acted before the lagging update's weights
were served (learner/collection/collector.py: newer); the rest were acted with the update's start weights.
A collector process sends its `RolloutCounts` with its shard; `summarize` merges those of the K collectors
into the record metrics.jsonl gets per update (`collection`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class RolloutCounts:
    """One collector's counts for one rollout (plain numbers and two arrays: they cross the pipe)."""
    wall_s: float = 0.0          # from the rollout's start to its last report
    env_slots: int = 0
    messages: int = 0            # step reports taken in
    waiting_actions_s: float = 0.0  # env-slot-seconds, see the module doc
    parked_end_s: float = 0.0
    batch_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # per inference batch
    batch_latency_s: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    acted_steps: int = 0         # actions recorded into the rollout
    lagged_steps: int | None = None  # policy lag: of them, acted one weights version behind (None: no lag)

    @property
    def with_actors_s(self) -> float:
        return max(0.0, self.env_slots * self.wall_s - self.waiting_actions_s - self.parked_end_s)


class RolloutCounters:
    """A collector's counting for the rollout under way. `clock`: seconds (time.monotonic; a test's own)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.begin()

    def begin(self) -> None:
        """A rollout starts now (a synchronous one, once its env slots are ready; with groups already gone on
        into it, its window runs from the last rollout's finish)."""
        self.started = self.clock()
        self.messages, self.waited = 0, 0.0
        self.sizes: list[int] = []
        self.latencies: list[float] = []

    def message(self) -> None:
        self.messages += 1

    def served(self, batch, since: float) -> None:
        """The actions of `batch` (groups with `slots` and `arrived`, the time their report came in) are
        sent; the batch's inference began at `since`. A report that came in before the rollout began (policy
        lag: it waited through the last rollout's end) counts from the rollout's start."""
        now = self.clock()
        slots = 0
        for w in batch:
            n = len(w.slots)
            slots += n
            self.waited += n * (now - max(w.arrived, self.started))
        self.sizes.append(slots)
        self.latencies.append(now - since)

    def finish(self, env_slots: int, parked) -> RolloutCounts:
        """The rollout of `env_slots` columns is complete now; `parked`: the groups that did their steps and
        wait (with `slots` and `arrived`, when their last report came in; from the rollout's start if earlier:
        with policy lag a collector process may finish its share of the next rollout before that rollout's
        counting begins, its groups parked since)."""
        now = self.clock()
        parked_s = sum(len(w.slots) * (now - max(w.arrived, self.started)) for w in parked)
        counts = RolloutCounts(now - self.started, env_slots, self.messages, self.waited, parked_s,
                               np.asarray(self.sizes, np.int32), np.asarray(self.latencies, np.float32))
        self.begin()  # the next rollout's window, where groups that go on into it (policy lag) are counted
        return counts


def percentiles(values: np.ndarray, scale: float = 1.0, digits: int = 2) -> dict | None:
    """mean, p50, p90, p99 of `values` x scale (None: no values)."""
    if len(values) == 0:
        return None
    qs = np.percentile(np.asarray(values, np.float64) * scale, PERCENTILES)
    out = {"mean": float(np.mean(values)) * scale, **{f"p{p}": float(q) for p, q in zip(PERCENTILES, qs)}}
    return {k: round(v, digits) for k, v in out.items()}


def summarize(counts: list[RolloutCounts]) -> dict | None:
    """The record of one rollout collected by len(counts) collectors side by side (None: no counts).
    Env-slot-seconds add up over the collectors; messages/s is per collector."""
    if not counts:
        return None
    slot_s = sum(c.env_slots * c.wall_s for c in counts)
    parts = {"waiting_actions": sum(c.waiting_actions_s for c in counts),
             "parked_end": sum(c.parked_end_s for c in counts),
             "with_actors": sum(c.with_actors_s for c in counts)}
    sizes = np.concatenate([c.batch_slots for c in counts])
    latencies = np.concatenate([c.batch_latency_s for c in counts])
    return {"rollout_s": round(max(c.wall_s for c in counts), 4), "env_slots": sum(c.env_slots for c in counts),
            "slot_s": round(slot_s, 3), **{f"{k}_s": round(v, 3) for k, v in parts.items()},
            **{f"{k}_share": round(v / slot_s, 4) if slot_s > 0 else None for k, v in parts.items()},
            "messages": [c.messages for c in counts],
            "messages_per_s": [round(c.messages / c.wall_s, 1) if c.wall_s > 0 else None for c in counts],
            "batches": int(len(sizes)), "batch_slots": percentiles(sizes, digits=1),
            "batch_latency_ms": percentiles(latencies, scale=1000.0, digits=3), **_lagged_share(counts)}


def _lagged_share(counts: list[RolloutCounts]) -> dict:
    """{"lagged_share": share of the rollout's steps acted one weights version behind} with policy lag, else {}."""
    if any(c.lagged_steps is None for c in counts):
        return {}
    acted = sum(c.acted_steps for c in counts)
    return {"lagged_share": round(sum(c.lagged_steps for c in counts) / acted, 4) if acted else None}
