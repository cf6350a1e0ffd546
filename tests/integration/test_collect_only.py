"""--collect-only: actors and inference without updates, rollout after rollout, with groups that run on."""
from __future__ import annotations

import pytest

from tests.integration.cluster import assert_no_stragglers, metrics, run_launch

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("policy", [["--random-policy"], []], ids=["random", "network"])
def test_collect_only_fills_every_rollout_and_never_updates(tmp_path, policy):
    run_dir = tmp_path / "run"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--collect-only", *policy,
                        "--actors", "2", "--envs-per-actor", "4", "--groups", "2", "--total-steps", "4096",
                        timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_no_stragglers(run_dir)
    lines = metrics(run_dir)
    per_rollout = 8 * 16  # 8 env slots x num_steps 16
    assert [r["env_steps"] for r in lines] == [per_rollout * (i + 1) for i in range(len(lines))]
    assert len(lines) == 4096 // per_rollout
    assert all(r["env_slots"] == 8 and r["dropped_samples"] == 0 for r in lines)
    assert not any("policy_loss" in r or "grad_norm" in r for r in lines)  # no gradient step was taken
    assert lines[-1]["episodes"] > 0
