"""benchmarks/synthetic.py: the sleeping actors' steps, spread over the actors (stragglers)."""
from __future__ import annotations

import sys

import pytest

from tests.integration.cluster import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from synthetic import spread_step_ms  # noqa: E402


def test_steps_spread_evenly_around_the_mean_from_the_fastest_to_the_slowest_actor():
    assert spread_step_ms(10.0, 0.5, 5) == pytest.approx([5.0, 7.5, 10.0, 12.5, 15.0])
    assert spread_step_ms(10.0, 0.0, 3) == [10.0, 10.0, 10.0]
    assert spread_step_ms(10.0, 0.5, 1) == [10.0]
