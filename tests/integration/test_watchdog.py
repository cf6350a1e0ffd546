"""The learner's loops pet its watchdog (learner/stalls.py): a real run with a watchdog far shorter than a
wait for actors and than an update goes on, and fails (Timeout, exit 1) if either loop stops petting."""
from __future__ import annotations

import pytest

from tests.integration.cluster import finish_with_one_more_actor, launch, wait_for

pytestmark = pytest.mark.integration
WATCHDOG_S = 1.5


@pytest.mark.parametrize("collectors", [1, 2])
def test_the_collector_and_the_update_keep_the_watchdog_quiet(tmp_path, collectors):
    run_dir = tmp_path / "pets"
    # one launched actor of 4 envs, 8 needed: the first rollout waits (the collector's loop) until a second
    # actor joins; each update (512-wide MLPs, 120 epochs) takes several watchdog timeouts on 2 busy cores
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--actors", "1",
                  "--total-steps", "512", "--set", "cluster.min_envs=8", "--set", "cluster.actor_timeout_s=3",
                  "--set", f"run.watchdog_s={WATCHDOG_S}", "--set", f"cluster.collective_timeout_s={WATCHDOG_S / 2}",
                  "--set", "model.hidden=512", "--set", "ppo.update_epochs=120",
                  "--set", f"cluster.collectors={collectors}")
    log = run_dir / "learner.log"
    # logged after actor_timeout_s (3 s, twice the watchdog's) of waiting in the collector's loop
    out = finish_with_one_more_actor(proc, run_dir, "--envs", "4", "--name", "late", before=lambda: wait_for(
        lambda: "waiting for actors" in log.read_text(), 60, "the learner waiting for actors", proc))
    text = (run_dir / "learner.log").read_text()
    assert "Timeout" not in text, text[-3000:]
    assert proc.returncode == 0, out[-2000:]
    assert "learner done: 2 updates" in text
