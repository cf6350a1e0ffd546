"""An actor's groups hide the round trip on its one core: with groups "auto" a real actor times its first
seconds as one group, rejoins with more, and keeps stepping while actions are delayed."""
from __future__ import annotations

import os
import re

import pytest

from tests.integration.cluster import ROOT, launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration

STEP_S, DELAY_S, ENVS = 0.015, 0.030, 4  # each env step, the learner's wait after each inference batch


def _log(path) -> str:
    return path.read_text() if path.exists() else ""


def _rate(rows: list[dict]) -> float:
    return (rows[-1]["env_steps"] - rows[0]["env_steps"]) / (rows[-1]["elapsed_s"] - rows[0]["elapsed_s"])


def test_an_auto_grouped_actor_keeps_stepping_while_its_actions_are_delayed(tmp_path, monkeypatch):
    """4 envs of 15 ms each (SlowStepCartPole: the actor's thread is held) against a learner that waits 30 ms
    after every inference batch (the capacity benchmark's delay): as one group the actor could step at most
    4 / (0.060 + 0.030) = 44 env steps/s. It measures that, rejoins in 2 groups, and then steps one while the
    other's actions are delayed: past one group's bound (67/s if nothing else took time: half the envs step
    while the learner, one batch at a time, infers the other half)."""
    run_dir = tmp_path / "auto"
    monkeypatch.setenv("SLOW_STEP_S", str(STEP_S))
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{ROOT / 'benchmarks' / 'inference_delay'}")
    monkeypatch.setenv("PPO_BENCH_INFERENCE_DELAY_MS", str(DELAY_S * 1000))
    proc = launch("--config", "configs/cartpole.toml", "--actors", "1", "--envs-per-actor", str(ENVS),
                  "--groups", "auto", "--collect-only", "--random-policy", "--total-steps", "100000000",
                  "--run-dir", str(run_dir), "--set", 'env.env_id="tests.integration.slow_env:SlowStepCartPole-v0"',
                  "--set", "ppo.num_steps=16")
    try:
        wait_for(lambda: _log(run_dir / "learner.log").count(f"joined with {ENVS} envs") == 2, 60,
                 "the actor's rejoin in its chosen groups", proc)
        rejoined = len(metrics(run_dir))
        wait_for(lambda: len(metrics(run_dir)) >= rejoined + 5, 60, "four rollouts after the rejoin", proc)
        rate = _rate(metrics(run_dir)[rejoined + 1:])
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out[-3000:]
    actors, learner = _log(run_dir / "actors.log"), _log(run_dir / "learner.log")
    choice = re.search(r"round trip ([\d.]+) ms \(medians of \d+\): (\d) groups, rejoining", actors)
    assert choice and int(choice[2]) == 2 and float(choice[1]) >= DELAY_S * 1000, actors[-3000:]
    assert f"said goodbye: regrouping into {choice[2]} groups (groups auto)" in learner, learner[-3000:]
    one_group_bound = ENVS / (ENVS * STEP_S + DELAY_S)
    assert rate > 1.15 * one_group_bound, (rate, one_group_bound)
