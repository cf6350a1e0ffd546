"""The linear schedules' horizons (ppo.lr_anneal_steps, ppo.ent_anneal_steps): a recipe's own, whatever budget the
command gives the run.

A real run (configs/smoke.toml: 2 actors x 2 envs x 16 steps, 64 agent steps per update) of 512 agent steps
with the rate annealed over 256 and the entropy bonus over 128: each falls to 0 at its horizon and stays there for
the rest of the run.
"""
from __future__ import annotations

import pytest

from tests.integration.cluster import metrics, run_launch

pytestmark = pytest.mark.integration
LR, HORIZON, TOTAL = 1e-3, 256, 512
ENT, ENT_HORIZON = 0.01, 128


def test_linear_rate_and_bonus_reach_zero_at_their_own_horizons_not_at_the_end_of_the_run(tmp_path):
    run_dir = tmp_path / "horizon"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", str(TOTAL),
                        "--set", "ppo.lr_schedule=linear", "--set", f"ppo.learning_rate={LR}",
                        "--set", f"ppo.lr_anneal_steps={HORIZON}", "--set", "ppo.ent_schedule=linear",
                        "--set", f"ppo.ent_coef={ENT}", "--set", f"ppo.ent_anneal_steps={ENT_HORIZON}", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert rows[-1]["env_steps"] >= TOTAL
    previous = 0
    for row in rows:  # each update's rate follows the env steps done before its rollout
        assert row["learning_rate"] == pytest.approx(LR * max(1 - previous / HORIZON, 0.0), abs=1e-12), row
        assert row["ent_coef"] == pytest.approx(ENT * max(1 - previous / ENT_HORIZON, 0.0), abs=1e-12), row
        previous = row["env_steps"]
    assert rows[0]["learning_rate"] == pytest.approx(LR)
    assert rows[-1]["learning_rate"] == 0.0, "the rate stays at 0 past the horizon"
    assert 0 < rows[2]["learning_rate"] and rows[2]["ent_coef"] == 0.0, "the bonus reaches 0 first, at its own"
