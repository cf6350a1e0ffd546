"""What a collector process hands the training process after each rollout: its columns of the rollout (arrays
in shared memory: only their handles travel), the bookkeeping that goes with them, and what it saw meanwhile
(finished episodes, joins and leaves, rejected messages). `merge_shards` lays the K shards side by side as
one rollout, collector 0's columns first, which is what the advantages step reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from learner.gateway.registry import MAX_ENV_SLOTS
from learner.rollout.buffer import PER_STEP, RolloutBuffer


@dataclass
class Shard:
    collector: int
    slots: list[int]
    arrays: dict                  # PER_STEP name -> (T, n, ...) tensor in shared memory
    acted: list[int]
    completed: list[int]
    dead: list[bool]
    fresh: set[int]
    bootstrap_obs: dict           # column -> observation after step T-1
    final_obs: dict               # (t, column) -> last observation before a truncation
    episodes: list = field(default_factory=list)  # (return, length) finished since the last shard, in order
    actors: int = 0               # connected now
    live_slots: int = 0           # env slots of the connected actors now
    rejected: int = 0             # messages rejected so far (this collector's total)
    events: list = field(default_factory=list)    # joins, leaves, redirects since the last shard

    @classmethod
    def of(cls, collector: int, buf: RolloutBuffer, **seen) -> "Shard":
        return cls(collector, list(buf.slots), {name: getattr(buf, name) for name in PER_STEP},
                   list(buf.acted), list(buf.completed), list(buf.dead), set(buf.fresh), dict(buf.bootstrap_obs),
                   dict(buf.final_obs), **seen)


def merged_slot(collector: int, slot: int) -> int:
    """A slot's id in the merged rollout: each collector numbers its own slots from 0."""
    return collector * MAX_ENV_SLOTS + slot


def merge_shards(shards: list[Shard], num_steps: int, layout: tuple, device, link,
                 reuse: RolloutBuffer | None = None) -> RolloutBuffer:
    """One rollout holding every shard's columns (a copy of each array, once per update)."""
    slots = [merged_slot(s.collector, slot) for s in shards for slot in s.slots]
    buf = RolloutBuffer(slots, num_steps, *layout, device, reuse=reuse, link=link)
    start = 0
    for shard in shards:
        n = len(shard.slots)
        end = start + n
        for name in PER_STEP:
            getattr(buf, name)[:, start:end] = shard.arrays[name]
        buf.acted[start:end], buf.completed[start:end], buf.dead[start:end] = shard.acted, shard.completed, shard.dead
        buf.fresh.update(start + c for c in shard.fresh)
        buf.bootstrap_obs.update({start + c: np.asarray(o) for c, o in shard.bootstrap_obs.items()})
        buf.final_obs.update({(t, start + c): np.asarray(o) for (t, c), o in shard.final_obs.items()})
        start = end
    return buf
