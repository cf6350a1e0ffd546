"""The README's promise, end to end: real actor processes, a real learner, real sockets."""
from __future__ import annotations

import os
import signal

import pytest
import torch

from tests.integration.cluster import (assert_no_stragglers, kill_group, launch, metrics, run_launch, wait_for)
from learner.metrics import FIELDS

pytestmark = pytest.mark.integration


def test_smoke_run_trains_checkpoints_and_cleans_up(tmp_path):
    run_dir = tmp_path / "smoke"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    records = metrics(run_dir)
    assert len(records) >= 2
    for record in records:
        missing = [f for f in FIELDS if f not in record]
        assert not missing, f"metrics.jsonl lacks {missing}"
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))
    assert records[-1]["env_steps"] >= 256 and records[-1]["actors"] == 2
    assert all(r["weights_version"] == r["update"] for r in records)
    ckpts = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts, "no checkpoint written"
    state = torch.load(ckpts[-1], weights_only=True)
    assert state["update"] == records[-1]["update"] and state["env_steps"] == records[-1]["env_steps"]
    assert {"model", "updater", "config"} <= state.keys()
    assert (run_dir / "config.toml").exists() and (run_dir / "learner.log").read_text().count("update ") >= 2
    assert "update 1 |" in result.stdout
    assert_no_stragglers(run_dir)


def test_sigterm_checkpoints_and_exits_zero(tmp_path):
    run_dir = tmp_path / "term"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", "10000000")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, out[-3000:]
    last = metrics(run_dir)[-1]["update"]
    state = torch.load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert state["update"] == last, "the final checkpoint must hold the last update"
    assert_no_stragglers(run_dir)


@pytest.mark.parametrize("args, needle", [
    (["--set", "ppo.no_such_key=1"], "ppo.no_such_key"),
    (["--set", "ppo.gamma=2.0"], "ppo.gamma"),
    (["--set", "ppo.clip_coef=abc"], "ppo.clip_coef"),
    (["--actors", "-1"], "cluster.actors"),
    (["--config", "configs/nope.toml"], "configs/nope.toml"),
])
def test_bad_config_exits_2_naming_it(tmp_path, args, needle):
    run_dir = tmp_path / "bad"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), *args, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stdout
    assert not run_dir.exists(), "nothing may start on a bad config"


def test_help_lists_every_option_and_config_key():
    result = run_launch("--help", timeout=30)
    assert result.returncode == 0
    for option in ("--config", "--actors", "--envs-per-actor", "--total-steps", "--device", "--seed", "--run-dir",
                   "--set", "--resume", "configs/breakout.toml", "ppo.clip_coef", "env.sticky_actions"):
        assert option in result.stdout, option


@pytest.mark.parametrize("env_id, needle", [("Blackjack-v1", "unsupported space Tuple"),
                                            ("ALE/NoSuchGame-v5", "NoSuchGame")])
def test_unusable_env_is_one_error_line_and_exit_2(tmp_path, env_id, needle):
    run_dir = tmp_path / "env"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--set", f"env.env_id={env_id}",
                        timeout=90)
    assert result.returncode == 2, result.stdout[-2000:]
    errors = [line for line in result.stdout.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and needle in errors[0], result.stdout[-2000:]
    assert "Traceback" not in result.stdout
    assert_no_stragglers(run_dir)
