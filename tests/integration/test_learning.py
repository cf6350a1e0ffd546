"""It learns: real multi-process clusters on CPU reach the bar, then are stopped with SIGTERM.

Each run is stopped as soon as the bar is met (that is also a clean-shutdown check), so a healthy
run costs well under its step budget. Margins measured on 2 cores are in docs/performance.md.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.integration.cluster import assert_no_stragglers, kill_group, launch, wait_for

pytestmark = pytest.mark.integration


def _episodes(run_dir: Path) -> list[dict]:
    path = run_dir / "episodes.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _train_until(run_dir: Path, config: str, budget: int, window: int, bar: float, timeout: float, *extra) -> dict:
    """Train with `budget` env steps; return the first point where the mean of the last `window`
    episodes reaches `bar`, or fail with the best mean seen."""
    proc = launch("--config", config, "--run-dir", str(run_dir), "--total-steps", str(budget), *extra)
    best = {"mean": float("-inf")}

    def reached():
        eps = _episodes(run_dir)
        for i in range(window, len(eps) + 1):
            mean = sum(e["return"] for e in eps[i - window:i]) / window
            if mean > best["mean"]:
                best.update(mean=mean, env_steps=eps[i - 1]["env_steps"])
            if mean >= bar:
                return {"mean": mean, "env_steps": eps[i - 1]["env_steps"]}
        return None

    try:
        hit = None
        try:
            hit = wait_for(reached, timeout, f"mean return >= {bar}", proc, interval=0.5)
        except AssertionError:
            hit = reached()  # the run may have ended on its budget between two polls
        assert hit is not None, f"best mean of {window} episodes was {best['mean']:.1f}, bar {bar}"
        assert hit["env_steps"] <= budget
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out[-2000:]
    finally:
        kill_group(proc)
    assert_no_stragglers(run_dir)
    return hit


LAG = pytest.mark.parametrize("lag", [0, 1], ids=["sync", "policy_lag"])


@LAG
def test_cartpole_reaches_475_within_150k_steps(tmp_path, lag):
    """policy_lag: Cleanba's one-step policy lag (the next rollout collected with the previous weights) learns too.
    It runs deterministic (lock-step): once in CI a policy-lag run with free-running collection stopped making
    updates after update 337 with no log line (a stall not reproduced since; see the closing note)."""
    deterministic = ("--deterministic",) if lag else ()
    hit = _train_until(tmp_path / "cartpole", "configs/cartpole.toml", 150_000, 20, 475, 240,
                       "--set", f"run.policy_lag={lag}", *deterministic)
    _assert_lag(tmp_path / "cartpole", lag)
    print(f"CartPole, policy_lag={lag}: mean of 20 episodes {hit['mean']:.1f} at {hit['env_steps']} env steps")


def test_cartpole_with_segments_and_policy_lag_reaches_475_within_150k_steps(tmp_path):
    """run.segments (issue 62): rollouts full at T steps per env slot from whichever slots produce them, their
    unfinished segments cut at the close (free-running: segments are not for deterministic runs). The steps in
    flight at each close are dropped and counted; the recipe still learns (43k steps to 475 on 2 busy cores)."""
    run_dir = tmp_path / "cartpole-segments"
    hit = _train_until(run_dir, "configs/cartpole.toml", 150_000, 20, 475, 240,
                       "--set", "run.policy_lag=1", "--set", "run.segments=true")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(r["dropped_samples"] > 0 for r in rows), "no segment was ever cut at a close"
    print(f"CartPole, segments + policy lag: mean of 20 episodes {hit['mean']:.1f} at {hit['env_steps']} env steps")


def test_cartpole_with_rl_games_update_rules_reaches_475_within_150k_steps(tmp_path):
    """The KL-adaptive learning rate and value normalization on (deterministic, like the policy-lag runs). The
    final checkpoint carries both: the adaptive rate and the value statistics a resume continues from."""
    run_dir = tmp_path / "cartpole-rl-games-rules"
    hit = _train_until(run_dir, "configs/cartpole.toml", 150_000, 20, 475, 240, "--deterministic",
                       "--set", "ppo.lr_schedule=\"adaptive\"", "--set", "normalize.value=true")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len({r["learning_rate"] for r in rows}) > 1, "the adaptive rate never moved"
    import torch
    saved = torch.load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert saved["updater"]["learning_rate"] == rows[saved["update"] - 1]["learning_rate"]
    assert float(saved["value_norm"]["rms.count"]) > 1000
    print(f"CartPole, adaptive lr + value normalization: mean of 20 episodes {hit['mean']:.1f} "
          f"at {hit['env_steps']} env steps")


def _assert_lag(run_dir: Path, lag: int) -> None:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(r["policy_lag"] == lag for r in rows)


def _best_mean(run_dir: Path, window: int) -> float:
    returns = [e["return"] for e in _episodes(run_dir)]
    return max((sum(returns[i - window:i]) / window for i in range(window, len(returns) + 1)), default=float("-inf"))


def test_an_lstm_learns_cartpole_without_velocities_where_feed_forward_cannot(tmp_path):
    """Issue 63: CartPole with only the cart's position and the pole's angle observed (env.observe =
    "positions"). The LSTM core (configs/cartpole-positions.toml) reaches a mean of 100 over 20 episodes within
    24k agent steps; the same recipe feed-forward (model.core = "none"), run beside it with the same budget,
    never does (its best is ~50-60: it cannot tell which way the pole swings). Deterministic, so a run repeats
    itself: seeds 1-3 reached 100 at 12-18k steps on 2 busy cores, where the feed-forward best was 59 in 30k."""
    ff_dir = tmp_path / "feed-forward"
    ff = launch("--config", "configs/cartpole-positions.toml", "--run-dir", str(ff_dir), "--total-steps", "24000",
                "--deterministic", "--set", "model.core=\"none\"")
    try:
        hit = _train_until(tmp_path / "lstm", "configs/cartpole-positions.toml", 24_000, 20, 100, 120,
                           "--deterministic")
        out, _ = ff.communicate(timeout=120)
        assert ff.returncode == 0, out[-2000:]
    finally:
        kill_group(ff)
    assert_no_stragglers(ff_dir)
    rows = [json.loads(x) for x in (tmp_path / "lstm" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["replay_logprob_max_diff"] for r in rows) < 1e-4, "the update did not replay what acted"
    ff_best = _best_mean(ff_dir, 20)
    assert ff_best < 100, f"the feed-forward policy reached {ff_best:.1f}: the task is not partially observed"
    print(f"CartPole without velocities: LSTM mean of 20 episodes {hit['mean']:.1f} at {hit['env_steps']} env "
          f"steps; feed-forward best {ff_best:.1f} in 24k")


def test_two_learner_ranks_reach_475_on_cartpole_within_150k_job_steps(tmp_path):
    """2 ranks x 1 actor x 4 envs: the same 8 x 32 rollout per update as one rank, gradients all-reduced."""
    run_dir = tmp_path / "cartpole-2ranks"
    hit = _train_until(run_dir, "configs/cartpole.toml", 150_000, 20, 475, 300, "--learners", "2")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(r["learners"] == 2 and r["rank_env_slots"] == [4, 4] for r in rows)
    assert all(len(set(r["rank_weights_checksums"])) == 1 for r in rows), "the ranks' weights diverged"
    assert (run_dir / "learner-rank-1.log").exists()
    print(f"CartPole, 2 learner ranks: mean of 20 episodes {hit['mean']:.1f} at {hit['env_steps']} env steps")


def test_pendulum_reaches_minus_400_within_300k_steps(tmp_path):
    """Deterministic (lock-step collection, same result every run on this CPU): without it, this config now
    and then settles near -500 to -600 for the whole budget (PPO with a state-independent std on Pendulum
    can lock into not swinging up), which would make the test fail by chance, not by a bug.

    Synchronous only, for CI's 30 minutes: with run.policy_lag = 1 it reaches -400 too, at 106-141k steps in
    ~130 s (docs/results/2026-11-26-lag-pendulum-variants-2core-cpu.md). Lag on continuous actions is checked
    exactly by tests/integration/test_policy_lag.py (the update replayed from the served weights) and learning
    with lag by the CartPole test above."""
    hit = _train_until(tmp_path / "pendulum", "configs/pendulum.toml", 300_000, 100, -400, 280, "--deterministic")
    _assert_lag(tmp_path / "pendulum", 0)
    print(f"Pendulum: mean of 100 episodes {hit['mean']:.1f} at {hit['env_steps']} env steps")


def test_cartpole_with_two_collector_processes_reaches_475_within_150k_steps(tmp_path):
    """cluster.collectors = 2: two processes infer with the weights the training process shares after each
    update (a collector serving stale weights would not learn) and write into its rollout."""
    hit = _train_until(tmp_path / "cartpole", "configs/cartpole.toml", 150_000, 20, 475, 240,
                       "--set", "cluster.collectors=2")
    info = json.loads((tmp_path / "cartpole" / "endpoints.json").read_text())
    pids = {c["pid"] for c in info["collectors"]}  # two processes of their own, not the learner's
    assert len(info["collectors"]) == 2 and len(pids) == 2 and info["pid"] not in pids, info
    print(f"CartPole, 2 collectors: mean of 20 episodes {hit['mean']:.1f} at {hit['env_steps']} env steps")
