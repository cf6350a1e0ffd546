"""What a collector process hands the training process after each rollout: the bookkeeping of its columns
(their arrays it wrote straight into the training process's shared rollout, `SharedRows`), and what it saw
meanwhile (finished episodes, joins and leaves, rejected messages). `merge_shards` lays the K shards side by
side as one rollout over those arrays, collector 0's columns first: no array is copied.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import itertools

import numpy as np
import torch

from learner.gateway.registry import MAX_ENV_SLOTS
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout


class SharedRows:
    """The per-step arrays of the rollouts collector processes fill, in shared memory the training process
    owns: one set, or with policy lag two used in turn (the update reads one while the other fills), each
    reallocated only when the rollout's width changes. `take(width)` -> (id, arrays of width columns)."""

    def __init__(self, num_steps: int, layout: Layout, policy_lag: bool):
        self.T, self.layout, self.ids = num_steps, layout, itertools.count(1)
        self.sets, self.turn = [None, None] if policy_lag else [None], 0

    def take(self, width: int) -> tuple[int, dict[str, torch.Tensor]]:
        i, self.turn = self.turn, (self.turn + 1) % len(self.sets)
        if self.sets[i] is None or self.sets[i][1]["rewards"].shape[1] != width:
            self.sets[i] = None  # let the old set go before the new one is allocated
            self.sets[i] = (next(self.ids), {name: torch.zeros(shape, dtype=dtype).share_memory_()
                                            for name, (shape, dtype) in self.layout.rows(self.T, width).items()})
        return self.sets[i]


@dataclass(frozen=True)
class Columns:
    """The bookkeeping of one rollout's columns, copied from its RolloutBuffer (whose arrays are shared)."""
    slots: list[int]
    acted: list[int]
    completed: list[int]
    dead: list[bool]
    fresh: set[int]
    bootstrap_obs: dict           # column -> observation after step T-1
    final_obs: dict               # (t, column) -> last observation before a truncation
    bootstrap_states: dict        # a recurrent core's: the states those two are valued from, kept by the
    final_states: dict            # collector process that acted (empty without one)
    quota: int = 0                # run.segments: its share of the job's quota, T x its env slots (0: none)

    @classmethod
    def of(cls, buf: RolloutBuffer) -> "Columns":
        return cls(list(buf.slots), list(buf.acted), list(buf.completed), list(buf.dead), set(buf.fresh),
                   dict(buf.bootstrap_obs), dict(buf.final_obs), dict(buf.bootstrap_states), dict(buf.final_states),
                   buf.quota)

    def write_into(self, buf: RolloutBuffer, start: int) -> None:
        """Into `buf`'s columns from `start` on."""
        end = start + len(self.slots)
        buf.acted[start:end], buf.completed[start:end], buf.dead[start:end] = self.acted, self.completed, self.dead
        buf.fresh.update(start + c for c in self.fresh)
        buf.bootstrap_obs.update({start + c: np.asarray(o) for c, o in self.bootstrap_obs.items()})
        buf.final_obs.update({(t, start + c): np.asarray(o) for (t, c), o in self.final_obs.items()})
        buf.bootstrap_states.update({start + c: s for c, s in self.bootstrap_states.items()})
        buf.final_states.update({(t, start + c): s for (t, c), s in self.final_states.items()})


@dataclass
class Shard:
    collector: int
    columns: Columns
    episodes: list = field(default_factory=list)  # (return, length) finished since the last shard, in order
    actors: int = 0               # connected now
    live_slots: int = 0           # env slots of the connected actors now
    rejected: int = 0             # messages rejected so far (this collector's total)
    events: list = field(default_factory=list)    # joins, leaves, redirects since the last shard

    @classmethod
    def of(cls, collector: int, buf: RolloutBuffer, **seen) -> "Shard":
        return cls(collector, Columns.of(buf), **seen)


def merged_slot(collector: int, slot: int) -> int:
    """A slot's id in the merged rollout: each collector numbers its own slots from 0 (-1: a column not opened)."""
    return -1 if slot < 0 else collector * MAX_ENV_SLOTS + slot


def merge_shards(shards: list[Shard], num_steps: int, layout: Layout, device, link, rows: dict) -> RolloutBuffer:
    """One rollout over `rows` (which the shards' collectors filled, side by side in shard order)."""
    slots = [merged_slot(s.collector, slot) for s in shards for slot in s.columns.slots]
    buf = RolloutBuffer(slots, num_steps, layout, device, link=link, rows=rows,
                        quota=sum(s.columns.quota for s in shards))
    start = 0
    for shard in shards:
        shard.columns.write_into(buf, start)
        start += len(shard.columns.slots)
    return buf
