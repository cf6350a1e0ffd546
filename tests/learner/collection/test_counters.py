"""The breakdown arithmetic of learner/collection/counters.py, on an injected clock."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from learner.collection.counters import RolloutCounters, RolloutCounts, percentiles, summarize


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Group:
    slots: list[int]
    arrived: float


def test_percentiles_of_known_values():
    got = percentiles(np.arange(1, 101), digits=3)
    assert got == {"mean": 50.5, "p50": 50.5, "p90": 90.1, "p99": 99.01}
    assert percentiles(np.array([0.002, 0.004]), scale=1000.0) == {"mean": 3.0, "p50": 3.0, "p90": 3.8, "p99": 3.98}
    assert percentiles(np.zeros(0)) is None


def test_a_rollouts_env_slot_time_splits_into_waiting_parked_and_with_the_actors():
    clock = Clock()
    counters = RolloutCounters(clock)           # the rollout starts at 100
    a, b = Group([0, 1], 100.0), Group([2, 3], 100.0)
    clock.now = 100.5
    counters.served([a, b], since=100.25)       # 4 slots waited 0.5 s each; the batch took 0.25 s
    for _ in range(3):
        counters.message()
    b.arrived = 101.0
    clock.now = 101.1
    counters.served([b], since=101.0)           # 2 slots waited 0.1 s
    a.arrived = 102.0                           # a did its steps at 102 and waits for the end
    clock.now = 104.0
    counts = counters.finish(4, [a])
    assert counts.wall_s == pytest.approx(4.0)
    assert counts.waiting_actions_s == pytest.approx(4 * 0.5 + 2 * 0.1)
    assert counts.parked_end_s == pytest.approx(2 * 2.0)
    assert counts.with_actors_s == pytest.approx(16.0 - 2.2 - 4.0)
    assert counts.messages == 3
    assert counts.batch_slots.tolist() == [4, 2]
    assert counts.batch_latency_s.tolist() == pytest.approx([0.25, 0.1])


def test_each_rollout_counts_from_its_own_start():
    clock = Clock()
    counters = RolloutCounters(clock)
    counters.message()
    counters.served([Group([0], 100.0)], since=100.0)
    clock.now = 110.0
    counters.begin()
    clock.now = 111.0
    counts = counters.finish(1, [])
    assert (counts.wall_s, counts.messages, counts.waiting_actions_s, len(counts.batch_slots)) == (1.0, 0, 0.0, 0)


def test_reports_that_came_in_before_the_rollout_began_count_from_its_start():
    """Policy lag with collector processes: a collector may hold its share of the next rollout before that
    rollout's counting begins; its groups' time before then belongs to the last rollout (the parts stay within
    the rollout's env-slot time)."""
    clock = Clock()
    counters = RolloutCounters(clock)
    early, parked = Group([0, 1], 99.0), Group([2, 3], 98.0)
    clock.now = 100.5
    counters.served([early], since=100.4)
    clock.now = 101.0
    counts = counters.finish(4, [parked])
    assert counts.waiting_actions_s == pytest.approx(2 * 0.5) and counts.parked_end_s == pytest.approx(2 * 1.0)
    assert counts.waiting_actions_s + counts.parked_end_s <= counts.env_slots * counts.wall_s


def test_steps_between_a_rollouts_finish_and_the_next_ones_start_count_in_the_next():
    """Policy lag in a collector process: between sending its shard and the pool's next Collect its groups go
    on into the next rollout; their reports belong to that rollout's window, which runs from the finish."""
    clock = Clock()
    counters = RolloutCounters(clock)
    clock.now = 101.0
    counters.finish(2, [])
    counters.message()
    counters.served([Group([0, 1], 101.0)], since=101.1)
    clock.now = 102.0
    counts = counters.finish(2, [])
    assert (counts.wall_s, counts.messages, len(counts.batch_slots)) == (1.0, 1, 1)


def test_summary_adds_env_slot_time_over_collectors_and_gives_messages_per_second_each():
    one = RolloutCounts(2.0, 4, 100, 1.0, 2.0, np.array([4, 2], np.int32), np.array([0.001, 0.003], np.float32))
    two = RolloutCounts(4.0, 2, 40, 1.0, 0.0, np.array([2], np.int32), np.array([0.002], np.float32))
    s = summarize([one, two])
    assert s["slot_s"] == 16.0 and s["env_slots"] == 6 and s["rollout_s"] == 4.0
    assert (s["waiting_actions_s"], s["parked_end_s"], s["with_actors_s"]) == (2.0, 2.0, 12.0)
    assert (s["waiting_actions_share"], s["parked_end_share"], s["with_actors_share"]) == (0.125, 0.125, 0.75)
    assert s["messages"] == [100, 40] and s["messages_per_s"] == [50.0, 10.0]
    assert s["batches"] == 3 and s["batch_slots"]["p50"] == 2.0
    assert s["batch_latency_ms"]["p50"] == pytest.approx(2.0)
    assert summarize([]) is None


def test_with_the_actors_is_never_negative():
    assert RolloutCounts(1.0, 1, 0, 0.7, 0.6).with_actors_s == 0.0


def test_the_lagged_share_pools_the_collectors_steps_and_is_absent_without_policy_lag():
    one = RolloutCounts(2.0, 4, 100, 1.0, 2.0, acted_steps=512, lagged_steps=128)
    two = RolloutCounts(2.0, 4, 100, 1.0, 2.0, acted_steps=512, lagged_steps=512)
    assert summarize([one, two])["lagged_share"] == 0.625
    assert "lagged_share" not in summarize([RolloutCounts(2.0, 4, 100, 1.0, 2.0, acted_steps=512)])
    assert summarize([RolloutCounts(2.0, 0, 0, 0.0, 0.0, acted_steps=0, lagged_steps=0)])["lagged_share"] is None
