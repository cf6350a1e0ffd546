"""benchmarks/synthetic.py: the sleeping actors' steps, spread over the actors (stragglers)."""
from __future__ import annotations

import sys
import time

import pytest

from tests.integration.cluster import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from synthetic import spread_step_ms  # noqa: E402


def test_steps_spread_evenly_around_the_mean_from_the_fastest_to_the_slowest_actor():
    assert spread_step_ms(10.0, 0.5, 5) == pytest.approx([5.0, 7.5, 10.0, 12.5, 15.0])
    assert spread_step_ms(10.0, 0.0, 3) == [10.0, 10.0, 10.0]
    assert spread_step_ms(10.0, 0.5, 1) == [10.0]


def test_a_one_core_actors_groups_sleep_one_after_the_other_and_side_by_side_otherwise():
    """--one-core: a group of k envs sleeps k x step after the actor's step before it (one core, as a real actor's
    groups share); otherwise every group's report is due one step after its actions, whatever its size."""
    from synthetic import SleepingActor
    one_core = SleepingActor(None, "", num_envs=4, groups=2, step_s=0.5, one_core=True, name="a", parent=0)
    t0 = time.monotonic()
    first, second = one_core.actions(0), one_core.actions(1)
    assert 1.0 <= first - t0 < 1.5 and second == pytest.approx(first + 1.0)  # 2 envs x 0.5 s each, in turn
    side_by_side = SleepingActor(None, "", num_envs=4, groups=2, step_s=0.5, one_core=False, name="b", parent=0)
    t0 = time.monotonic()
    first, second = side_by_side.actions(0), side_by_side.actions(1)
    assert 0.5 <= first - t0 < 1.0 and second == pytest.approx(first, abs=0.1)
