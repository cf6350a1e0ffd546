"""What a resume restores (issue 11, item 5): kill -9 the learner, `--resume`, and compare with the checkpoint.

Pendulum with observation and reward normalization on, one actor with two envs, a checkpoint after every
update. Every count is exact: an update is update_epochs x num_minibatches Adam steps, and a rollout
adds num_steps x envs observations to the observation normalizer and to the reward scaler's statistics.
"""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from tests.integration.cluster import NO_RESTART, kill_group, launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration
T, N, EPOCHS, MINIBATCHES, LR, TOTAL = 16, 2, 2, 2, 1e-3, 32_000
EPS = 1e-4  # RunningMeanStd's initial count
ARGS = ("--actors", "1", "--envs-per-actor", str(N), "--total-steps", str(TOTAL),
        "--set", f"ppo.num_steps={T}", "--set", f"ppo.update_epochs={EPOCHS}",
        "--set", f"ppo.num_minibatches={MINIBATCHES}", "--set", f"ppo.learning_rate={LR}",
        "--set", "run.checkpoint_every=1", "--set", "log.keep_checkpoints=1000")


def checkpoints(run_dir) -> dict[int, object]:
    return {int(p.stem.split("_")[1]): p for p in (run_dir / "checkpoints").glob("ckpt_*.pt")}


def load(path) -> dict:
    return torch.load(path, weights_only=True)


def adam_steps(ckpt: dict) -> set[int]:
    return {int(s["step"]) for s in ckpt["updater"]["optimizer"]["state"].values()}


def counts(ckpt: dict) -> tuple[float, float]:
    return float(ckpt["obs_norm"]["rms.count"]), float(ckpt["reward_scaler"]["rms.count"])


def expected_lr(previous_env_steps: int) -> float:
    """The annealing schedule: the rate of an update follows the env steps done before it."""
    return LR * (1 - previous_env_steps / TOTAL)


def test_resume_restores_optimizer_schedule_normalizers_and_clock(tmp_path):
    run_dir = tmp_path / "resume"
    proc = launch("--config", "configs/pendulum.toml", "--run-dir", str(run_dir), *ARGS, NO_RESTART, "0")
    try:
        wait_for(lambda: len(checkpoints(run_dir)) >= 3, 90, "three checkpoints", proc)
        learner = json.loads((run_dir / "processes.json").read_text())["learner"]
        os.kill(learner, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode == 1, "the launcher reports a dead learner"
    finally:
        kill_group(proc)

    c = max(checkpoints(run_dir))
    saved = load(checkpoints(run_dir)[c])
    assert saved["update"] == c and saved["env_steps"] == c * T * N
    assert adam_steps(saved) == {c * EPOCHS * MINIBATCHES}
    assert counts(saved) == pytest.approx((EPS + c * T * N,) * 2, abs=1e-6)
    rows_before = sum(r["update"] <= c for r in metrics(run_dir))  # the resume drops rows past checkpoint c

    proc = launch("--resume", str(run_dir), *ARGS)
    try:
        wait_for(lambda: (c + 2) in checkpoints(run_dir), 90, "two checkpoints after the resume", proc)
    finally:
        stop(proc)
    assert proc.returncode == 0

    resumed = load(checkpoints(run_dir)[c + 1])
    assert resumed["update"] == c + 1 and resumed["env_steps"] == (c + 1) * T * N
    assert adam_steps(resumed) == {(c + 1) * EPOCHS * MINIBATCHES}, "the optimizer's step count continues"
    assert counts(resumed) == pytest.approx((EPS + (c + 1) * T * N,) * 2, abs=1e-6), "normalizer counts continue"

    rows = metrics(run_dir)
    first = next(r for r in rows[rows_before:] if r["update"] == c + 1)
    assert first["learning_rate"] == pytest.approx(expected_lr(saved["env_steps"]), rel=1e-6)
    # elapsed_s continues from the checkpoint's: it adds this update's own collect and update time
    assert first["elapsed_s"] >= saved["elapsed_s"] + first["collect_s"] + first["update_s"] - 1e-6
    assert resumed["elapsed_s"] == pytest.approx(first["elapsed_s"])
    # and the schedule holds on every row, before and after the resume
    previous = 0
    for row in rows:
        if row is first:
            previous = saved["env_steps"]
        assert row["learning_rate"] == pytest.approx(expected_lr(previous), rel=1e-6), row["update"]
        previous = row["env_steps"]


def test_resume_keeps_the_episode_statistics_and_skips_a_truncated_checkpoint(tmp_path):
    """Issue 25, items 3 and 4: the last-100 window and the episode count go on across a resume, and a
    newest checkpoint cut short is skipped (one log line saying why) for the one before it."""
    run_dir = tmp_path / "episodes"
    args = ("--actors", "1", "--envs-per-actor", "4", "--total-steps", "10000000",
            "--set", "run.checkpoint_every=1", "--set", "log.keep_checkpoints=1000")
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), *args)
    try:
        wait_for(lambda: any(r["episodes"] >= 120 for r in metrics(run_dir)), 120, "120 episodes", proc)
    finally:
        stop(proc)
    assert proc.returncode == 0
    c = max(checkpoints(run_dir))
    newest = checkpoints(run_dir)[c]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    before = {r["update"]: r for r in metrics(run_dir)}

    proc = launch("--resume", str(run_dir), *args)
    try:
        wait_for(lambda: any(r["update"] == c + 1 for r in metrics(run_dir)), 90, f"update {c + 1} after the resume",
                 proc)
    finally:
        stop(proc)
    assert proc.returncode == 0
    skips = [line for line in (run_dir / "learner.log").read_text().splitlines() if "skipped" in line]
    assert len(skips) == 1 and f"ckpt_{c:08d}.pt: it does not load" in skips[0], skips
    first = next(r for r in metrics(run_dir) if r["update"] == c)  # again, from checkpoint c - 1
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    new = [e for e in episodes if e["update"] == c]  # often none: fresh envs, and CartPole's games are long by now
    assert before[c - 1]["episodes"] >= 100 and first["episodes"] == before[c - 1]["episodes"] + len(new)
    window = [e["return"] for e in episodes if e["update"] <= c][-100:]
    assert first["episode_return_mean"] is not None
    assert first["episode_return_mean"] == pytest.approx(sum(window) / len(window))
