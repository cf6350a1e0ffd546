"""benchmarks/breakdown.py: the steady state of a run from its metrics.jsonl lines, and the breakdown per rollout."""
from __future__ import annotations

import sys

import pytest

from tests.integration.cluster import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from breakdown import breakdown, describe, steady_state  # noqa: E402


def line(update: int, rollout_s: float, parked: float, serial: float | None) -> dict:
    c = {"rollout_s": rollout_s, "env_slots": 4, "slot_s": 4 * rollout_s, "waiting_actions_s": 1.0,
         "parked_end_s": parked, "with_actors_s": 4 * rollout_s - 1.0 - parked, "messages_per_s": [100.0, 50.0],
         "batches": 10, "batch_slots": {"mean": 2.0, "p50": 2.0, "p90": 4.0, "p99": 4.0},
         "batch_latency_ms": {"mean": 1.0, "p50": float(update), "p90": 2.0, "p99": 3.0},
         "serial_s": None if serial is None else {"update": serial, "other": 0.0, "total": serial}}
    return {"update": update, "env_steps": 1000 * update, "elapsed_s": 2.0 * update, "collection": c}


def test_the_first_rollouts_are_skipped_and_the_rest_measured():
    records = [line(1, 10.0, 0.0, None), line(2, 1.0, 1.0, 1.0), line(3, 1.0, 1.0, 1.0), line(4, 1.0, 3.0, 3.0)]
    state = steady_state(records, skip=2)
    assert (state["rollouts"], state["skipped"], state["sps"]) == (2, 2, 500.0)  # records[1] is the base line
    b = state["breakdown"]
    assert b["rollout_s"] == 1.0 and b["env_slots"] == 4
    assert b["shares"] == pytest.approx({"waiting_actions": 0.25, "parked_end": 0.5, "with_actors": 0.25})
    assert b["serial_s"] == {"update": 2.0, "other": 0.0, "total": 2.0}
    assert b["all_parked_share"] == pytest.approx(2.0 / 3.0)
    assert b["batch_latency_ms"]["p50"] == 3.5  # the median of the rollouts' p50s
    assert b["messages_per_s"] == [100.0, 50.0]
    assert steady_state(records[:2], skip=2) is None


def test_the_breakdown_prints_every_part():
    text = "\n".join(describe(breakdown([line(2, 1.0, 1.0, 1.0)])))
    for needle in ("waiting for actions 25%", "parked at the rollout's end 25%", "update 1.000", "p50/p90/p99 2/4/4",
                   "latency ms p50/p90/p99 2.00/2.00/3.00", "messages/s per collector: 100, 50"):
        assert needle in text, text
    assert "no collection breakdown" in describe(breakdown([{"update": 1}]))[0]


def test_the_lagged_share_is_averaged_and_printed_only_with_policy_lag():
    lagged = [line(2, 1.0, 1.0, 1.0), line(3, 1.0, 1.0, 1.0)]
    lagged[0]["collection"]["lagged_share"], lagged[1]["collection"]["lagged_share"] = 0.2, 0.4
    b = breakdown(lagged)
    assert b["lagged_share"] == pytest.approx(0.3)
    assert "policy lag: 30% of the steps acted one weights version behind" in "\n".join(describe(b))
    assert "policy lag:" not in "\n".join(describe(breakdown([line(2, 1.0, 1.0, 1.0)])))
