"""Actors come and go, keys keep strangers out: real processes, real sockets, kill -9."""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.integration.cluster import (alive, assert_no_stragglers, curve_keys, curve_settings, endpoints, kill_group,
                                      launch, metrics, start_actor, stop, wait_for, NO_RESTART)

pytestmark = pytest.mark.integration
SMOKE = ("--config", "configs/smoke.toml", "--total-steps", "10000000")


def test_only_allowed_keys_join_and_a_joiner_widens_the_rollout(tmp_path):
    pairs = curve_keys(tmp_path, allowed=("own", "extra"), others=("stranger",))
    learner_secret, extra_secret, stranger_secret = pairs["learner"][1], pairs["extra"][1], pairs["stranger"][1]
    run_dir = tmp_path / "curve"
    proc = launch(*SMOKE, "--run-dir", str(run_dir), "--actors", "1", *curve_settings(tmp_path, pairs, "own"))
    extra = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        wait_for(lambda: len(metrics(run_dir)) >= 2, 90, "two updates with the keyed actor", proc)
        stranger = start_actor(address, "--envs", "3", "--reconnect-s", "0", "--join-timeout-s", "3",
                               "--server-key", str(learner_secret), "--key", str(stranger_secret))
        out, _ = stranger.communicate(timeout=30)
        assert stranger.returncode == 1 and "no answer" in out, out
        plain = start_actor(address, "--envs", "3", "--reconnect-s", "0", "--join-timeout-s", "3")
        out, _ = plain.communicate(timeout=30)
        assert plain.returncode == 1, out
        assert all(r["env_slots"] == 2 for r in metrics(run_dir)), "a stranger's envs entered a rollout"
        extra = start_actor(address, "--envs", "3", "--name", "extra", "--server-key", str(learner_secret),
                            "--key", str(extra_secret))
        wider = wait_for(lambda: [r for r in metrics(run_dir) if r["env_slots"] == 5], 90, "a wider rollout", proc)
        assert wider[0]["actors"] == 2
        assert any("extra joined" in e for r in metrics(run_dir) for e in r["events"])
    finally:
        if extra is not None:
            kill_group(extra)
        out = stop(proc)
    assert proc.returncode == 0, out[-2000:]  # a clean stop on SIGTERM: a final checkpoint, every process gone
    last = metrics(run_dir)[-1]["update"]  # the final checkpoint holds the last update (written then, or just before)
    assert (run_dir / "checkpoints" / f"ckpt_{last:08d}.pt").exists(), out[-2000:]
    assert_no_stragglers(run_dir)


def test_kill_actor_mid_rollout_training_goes_on_and_it_is_restarted(tmp_path):
    run_dir = tmp_path / "killactor"
    proc = launch(*SMOKE, "--run-dir", str(run_dir), "--set", "cluster.actor_timeout_s=2")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 2, 90, "two updates", proc)
        victim = json.loads((run_dir / "processes.json").read_text())["actors"]["0"]
        os.kill(victim, signal.SIGKILL)
        killed_at = metrics(run_dir)[-1]["update"]
        # rollouts whose reports all came in before the kill still end with 2 actors: the one that found it
        # gone says so, and the restarted actor is in a rollout after that one
        left_at = wait_for(lambda: [r["update"] for r in metrics(run_dir) if r["update"] > killed_at
                                    and any("actor-0 left" in e for e in r["events"])], 90, "actor-0 leaving", proc)[0]
        rejoined = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > left_at and r["actors"] == 2
                                     and r["env_slots"] == 4], 90, "the restarted actor back in a rollout", proc)
        after = [r for r in metrics(run_dir) if killed_at < r["update"] <= rejoined[0]["update"]]
        left = [e for r in after for e in r["events"] if "left" in e]
        assert left and "actor-0" in left[0], left
        assert not alive(victim)
        # the rollout the victim died in kept only its completed steps: the rest were dropped, not trained on
        cut = [r for r in after if r["dropped_samples"] > 0]
        assert cut, "no rollout lost the dead actor's missing steps"
        for r in cut:
            assert r["env_steps"] - prev_steps(run_dir, r["update"]) == r["env_slots"] * 16 - r["dropped_samples"]
    finally:
        out = stop(proc)
    assert "restarting actor-0" in out
    assert proc.returncode == 0


def prev_steps(run_dir, update: int) -> int:
    previous = [r["env_steps"] for r in metrics(run_dir) if r["update"] == update - 1]
    return previous[0] if previous else 0


def test_kill_learner_then_resume_continues_and_actors_reconnect(tmp_path):
    run_dir = tmp_path / "resume"
    address = f"ipc://{tmp_path}/learner.sock"
    args = (*SMOKE, "--run-dir", str(run_dir), "--actors", "1", NO_RESTART, "0",
            "--set", f"cluster.address='{address}'",
            "--set", f"cluster.weights_address='ipc://{tmp_path}/weights.sock'", "--set", "run.checkpoint_every=1")
    proc = launch(*args)
    standalone = None
    try:
        wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)
        standalone = start_actor(address, "--envs", "2", "--name", "standalone", "--reconnect-s", "120")
        wait_for(lambda: any(r["actors"] == 2 for r in metrics(run_dir))
                 and list((run_dir / "checkpoints").glob("ckpt_*.pt")), 90,
                 "the standalone actor in a rollout, and a checkpoint", proc)
        learner = json.loads((run_dir / "processes.json").read_text())["learner"]
        os.kill(learner, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert proc.returncode == 1, "the launcher reports a dead learner"
        before = metrics(run_dir)[-1]["update"]
        ckpt = max(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
        assert standalone.poll() is None, "a standalone actor waits for the learner to come back"
        proc = launch("--resume", str(run_dir), "--actors", "1")
        resumed = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > before and r["actors"] == 2], 120,
                           "a resumed update that includes the reconnected standalone actor", proc)
        updates = [r["update"] for r in metrics(run_dir)]
        assert ckpt <= before
        # rows written past the checkpoint were moved aside: one clean, strictly increasing curve
        assert updates == list(range(1, len(updates) + 1)), updates
        assert resumed[0]["update"] > ckpt
        episodes = [json.loads(line)["update"] for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
        assert episodes == sorted(episodes)
        log_text = (run_dir / "learner.log").read_text()
        assert "resumed from" in log_text
        if before > ckpt:
            assert "moved to metrics.jsonl.dropped" in log_text
    finally:
        if standalone is not None:
            kill_group(standalone)
        stop(proc)
