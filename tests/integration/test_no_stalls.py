"""Failures end loud, never in a silent stall, and the numbers mean what they say: real clusters."""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from tests.integration.cluster import (endpoints, finish_with_one_more_actor, kill_group, launch, metrics, run_launch,
                                      start_actor, stop, wait_for)

pytestmark = pytest.mark.integration
SMOKE = ("--config", "configs/smoke.toml")


def actor_pids(run_dir) -> dict:
    return json.loads((run_dir / "processes.json").read_text())["actors"]


def test_actors_lost_for_good_training_goes_on_and_waits_loudly_for_any_joiner(tmp_path):
    run_dir = tmp_path / "lost"
    proc = launch(*SMOKE, "--total-steps", "10000000", "--run-dir", str(run_dir), "--max-restarts", "0",
                  "--set", "cluster.actor_timeout_s=2")
    joiner = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        wait_for(lambda: len(metrics(run_dir)) >= 2, 90, "two updates", proc)
        os.kill(actor_pids(run_dir)["0"], signal.SIGKILL)
        killed_at = metrics(run_dir)[-1]["update"]
        # min_envs (4, the configured width) gates only the first rollout: later ones go on with 2 envs
        narrow = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > killed_at and r["env_slots"] == 2],
                          60, "updates with the surviving actor only", proc)
        wait_for(lambda: len([r for r in metrics(run_dir) if r["update"] > narrow[0]["update"]]) >= 2, 60,
                 "more updates after the loss", proc)
        assert "rollout width now 2 env slots" in (run_dir / "learner.log").read_text()
        os.kill(actor_pids(run_dir)["1"], signal.SIGKILL)  # no live env slot left
        wait_for(lambda: (run_dir / "learner.log").read_text().count("waiting for actors") >= 2, 30,
                 "the learner saying, every actor_timeout_s, that it waits", proc)
        stalled_at = metrics(run_dir)[-1]["update"]
        joiner = start_actor(address, "--envs", "3", "--name", "joiner")
        wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > stalled_at + 1 and r["env_slots"] == 3], 60,
                 "training resumed with the joiner", proc)
    finally:
        if joiner is not None:
            kill_group(joiner)
        stop(proc)
    assert proc.returncode == 0


def test_learning_rate_reaches_zero_with_more_envs_than_the_config_names(tmp_path):
    """The config names 1 actor x 2 envs; a hand-started actor adds 6. Annealing follows env steps."""
    run_dir = tmp_path / "anneal"
    total = 1536
    proc = launch(*SMOKE, "--total-steps", str(total), "--run-dir", str(run_dir), "--actors", "1",
                  "--set", "cluster.min_envs=8")
    out = finish_with_one_more_actor(proc, run_dir, "--envs", "6", "--name", "extra")
    assert proc.returncode == 0, out[-2000:]
    rows = metrics(run_dir)
    assert all(r["env_slots"] == 8 for r in rows)
    lr0, last = 2.5e-4, rows[-1]
    step = lr0 * 8 * 16 / total  # one update's worth of annealing
    assert last["env_steps"] >= total
    assert 0 <= last["learning_rate"] <= step * 1.001, (last["learning_rate"], step)
    for prev, row in zip(rows, rows[1:]):  # the formula: lr0 * (1 - steps done before the update / total)
        assert row["learning_rate"] == pytest.approx(lr0 * (1 - prev["env_steps"] / total))


def test_policy_lag_checkpoints_hold_their_update_and_a_resume_continues_at_the_next(tmp_path):
    run_dir = tmp_path / "policy_lag"
    args = (*SMOKE, "--run-dir", str(run_dir), "--set", "run.policy_lag=1", "--set", "run.checkpoint_every=1")
    first = run_launch(*args, "--total-steps", str(6 * 64), timeout=180)
    assert first.returncode == 0, first.stdout[-2000:]
    rows = {r["update"]: r for r in metrics(run_dir)}
    ckpts = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts
    for path in ckpts:
        saved = torch.load(path, map_location="cpu", weights_only=False)
        assert saved["update"] == saved["version"] == int(path.stem.split("_")[1]), path.name
        assert saved["env_steps"] == rows[saved["update"]]["env_steps"], path.name
    last = max(rows)
    second = run_launch("--resume", str(run_dir), "--total-steps", str(9 * 64), timeout=180)
    assert second.returncode == 0, second.stdout[-2000:]
    updates = [r["update"] for r in metrics(run_dir)]
    assert updates == list(range(1, len(updates) + 1)) and updates[-1] > last


def test_normalize_obs_on_images_is_refused_with_one_line(tmp_path):
    result = run_launch(*SMOKE, "--run-dir", str(tmp_path / "norm"), "--set", "normalize.obs=true", timeout=90)
    assert result.returncode == 2, result.stdout[-2000:]
    errors = [line for line in result.stdout.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "normalize.obs" in errors[0], result.stdout[-2000:]
