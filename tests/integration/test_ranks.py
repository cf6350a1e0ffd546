"""A learner of several ranks (launch.py --learners 2, real gloo process groups): one address for the job,
ranks without actors take part, and a lost rank ends the job loud and resumable."""
from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import zmq

from protocol.security import generate_keypair
from tests.integration.cluster import (ROOT, assert_no_stragglers, endpoints, fast_and_slow_actors, kill_group, launch,
                                       metrics, run_launch, start_actor, stop, wait_for, NO_RESTART)

pytestmark = pytest.mark.integration
CARTPOLE = ("--config", "configs/cartpole.toml", "--learners", "2", "--total-steps", "10000000")


def test_a_remote_actor_lands_on_the_least_loaded_rank_and_an_empty_rank_blocks_nobody(tmp_path):
    run_dir = tmp_path / "redirect"
    proc = launch(*CARTPOLE, "--actors", "1", "--run-dir", str(run_dir))
    remote = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        # rank 1 has no actor: it takes part in every update with no samples, and nobody waits on it
        wait_for(lambda: len([r for r in metrics(run_dir) if r["rank_env_slots"] == [4, 0]]) >= 3, 90,
                 "updates while rank 1 has no actors", proc)
        remote = start_actor(address, "--envs", "2", "--name", "remote")  # names rank 0's address
        wait_for(lambda: [r for r in metrics(run_dir) if r["rank_env_slots"] == [4, 2]], 90,
                 "the remote actor's envs on rank 1", proc)
        events = [e for r in metrics(run_dir) for e in r["events"]]
        assert any("remote" in e and "sent to" in e for e in events), events
        # garbage sent to rank 1 counts in the job's rejected_messages, which rank 0 writes
        rank1 = json.loads((run_dir / "endpoints-rank-1.json").read_text())["address"]
        _send_garbage(rank1)
        wait_for(lambda: [r for r in metrics(run_dir) if r["rejected_messages"] >= 1], 90,
                 "rank 1's rejected message in the job's metrics", proc)
        assert all(len(set(r["rank_weights_checksums"])) == 1 for r in metrics(run_dir))
    finally:
        if remote is not None:
            kill_group(remote)
        out = stop(proc)
    assert proc.returncode == 0, out[-2000:]
    assert "final checkpoint" in (run_dir / "learner.log").read_text()
    assert_no_stragglers(run_dir)


def test_remote_actors_only_with_min_envs_start_every_rank_bound_to_every_interface(tmp_path):
    """--actors 0 and cluster.min_envs = 8 over 2 ranks: rank 0 sends the second 4-env joiner to rank 1 before
    any update (each rank's share is 4), at the address rank 1 advertises (never 0.0.0.0), and the job trains."""
    from tests.integration.test_orphans import free_ports
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    allowed.mkdir()
    learner_public, learner_secret = generate_keypair(keys, "learner")
    actor_public, actor_secret = generate_keypair(keys, "actor")
    (allowed / actor_public.name).write_text(actor_public.read_text())
    run_dir, base = tmp_path / "wildcard", free_ports(4)
    proc = launch(*CARTPOLE, "--actors", "0", "--run-dir", str(run_dir), "--set", "cluster.min_envs=8",
                  "--set", f"cluster.address='tcp://*:{base}'", "--set", f"cluster.weights_address='tcp://*:{base + 1}'",
                  "--set", "cluster.advertise_host='127.0.0.1'", "--set", f"cluster.server_key='{learner_secret}'",
                  "--set", f"cluster.allowed_keys='{allowed}'")
    actors = []
    try:
        info = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)
        rank1 = f"tcp://127.0.0.1:{base + 2}"
        assert info["ranks"] == [f"tcp://127.0.0.1:{base}", rank1] and info["address"] == f"tcp://0.0.0.0:{base}"
        for name in ("first", "second"):
            actors.append(start_actor(f"tcp://127.0.0.1:{base}", "--envs", "4", "--name", name,
                                      "--server-key", str(learner_public), "--key", str(actor_secret)))
        first = wait_for(lambda: metrics(run_dir), 120, "the first update", proc)[0]
        assert first["rank_env_slots"] == [4, 4] and first["env_slots"] == 8, first
        events = [e for r in metrics(run_dir) for e in r["events"]]
        assert any(f"sent to {rank1}" in e for e in events), events
        wait_for(lambda: len(metrics(run_dir)) >= 3, 90, "training on both ranks", proc)
        assert all(r["rank_env_slots"] == [4, 4] for r in metrics(run_dir))
    finally:
        for actor in actors:
            kill_group(actor)
        out = stop(proc)
    assert proc.returncode == 0, out[-2000:]
    assert_no_stragglers(run_dir)


def _send_garbage(address: str) -> None:
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)  # until it has left: close() must not drop it
        sock.connect(address)
        sock.send(b"not a message")
        sock.close()
    finally:
        ctx.term()


def test_a_killed_rank_ends_the_job_with_an_error_and_resume_continues(tmp_path):
    run_dir = tmp_path / "killrank"
    proc = launch(*CARTPOLE, "--actors", "2", "--run-dir", str(run_dir), "--set", "run.checkpoint_every=2",
                  "--set", "cluster.collective_timeout_s=60", NO_RESTART, "0")
    try:
        wait_for(lambda: list((run_dir / "checkpoints").glob("ckpt_*.pt")) and len(metrics(run_dir)) >= 3, 120,
                 "a checkpoint and three updates", proc)
        rank1 = json.loads((run_dir / "processes.json").read_text())["learners"][1]
        os.kill(rank1, signal.SIGKILL)
        out, _ = proc.communicate(timeout=90)  # bounded: the other rank's collective fails, launch stops it
    finally:
        kill_group(proc)
    assert proc.returncode not in (0, None), out[-2000:]
    assert "learner-1 exited with code -9" in out, out[-2000:]
    assert_no_stragglers(run_dir)
    before = [r["update"] for r in metrics(run_dir)]
    ckpt = max(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))
    resumed = launch("--resume", str(run_dir))
    try:
        wait_for(lambda: len(metrics(run_dir)) >= ckpt + 2 and metrics(run_dir)[-1]["update"] > max(before), 120,
                 "updates after the resume", resumed)
    finally:
        out = stop(resumed)
    assert resumed.returncode == 0, out[-2000:]
    updates = [r["update"] for r in metrics(run_dir)]
    assert updates == list(range(1, len(updates) + 1)), "the curve continues from the checkpoint, no repeats"
    assert all(r["learners"] == 2 and len(set(r["rank_weights_checksums"])) == 1 for r in metrics(run_dir))


def test_a_one_rank_checkpoint_resumes_into_two_ranks(tmp_path):
    run_dir = tmp_path / "grow"
    first = run_launch("--config", "configs/cartpole.toml", "--total-steps", "2048", "--run-dir", str(run_dir),
                       timeout=120)
    assert first.returncode == 0, first.stdout[-2000:]
    assert "learners" not in metrics(run_dir)[-1]
    second = run_launch("--resume", str(run_dir), "--learners", "2", "--total-steps", "4096", timeout=120)
    assert second.returncode == 0, second.stdout[-2000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, len(rows) + 1)) and rows[-1]["env_steps"] >= 4096
    grown = [r for r in rows if r.get("learners") == 2]
    assert grown and grown[0]["update"] == 9, "rank 0 resumed from the 1-rank checkpoint at update 8"
    # rank 1 took rank 0's weights and Adam state: any difference would show as diverged weights
    assert all(len(set(r["rank_weights_checksums"])) == 1 for r in grown)


@pytest.mark.parametrize("segments", [False, True], ids=["slots", "segments"])
def test_two_ranks_with_policy_lag_overlap_their_collection_and_stay_identical(tmp_path, segments):
    """Issue 62: each rank collects its next rollout while its update runs (in a thread whose collectives
    have a process group of their own); the gradients are still averaged before every step, so the weights
    stay bit-identical on both ranks after every update. With run.segments each rank cuts its own segments
    (its batch a few steps more or less than the other's)."""
    run_dir = tmp_path / "lag"
    result = run_launch("--config", "configs/cartpole.toml", "--learners", "2", "--run-dir", str(run_dir),
                        "--total-steps", "2048", "--set", "run.policy_lag=1", "--set", "ppo.update_epochs=4",
                        "--set", f"run.segments={str(segments).lower()}", "--set", "cluster.groups=2", timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, 9)) and all(r["policy_lag"] == 1 for r in rows)
    assert all(r["learners"] == 2 and len(set(r["rank_weights_checksums"])) == 1 for r in rows)
    assert all(r["collection"]["lagged_share"] > 0 for r in rows[1:])  # acted while an update ran
    assert any(r["dropped_samples"] > 0 for r in rows) == segments  # segments cut at a close


@pytest.mark.parametrize("collectors", [1, 2])
def test_with_segments_two_ranks_close_at_the_jobs_quota_so_the_slow_ranks_actors_do_not_pace_the_job(
        tmp_path, monkeypatch, collectors):
    """run.segments on 2 ranks, a fast actor on one and a slow one on the other (4 envs each: SlowStepCartPole at
    2 ms and at 20 ms a step): a rollout is full once the two ranks' steps together make T x 8, so the fast actor's
    rank trains on more than its own slots' T steps (second segments) and the slow one's rollout is cut before its
    columns are done. Closing each rank at its own quota (T x 4), every update waited for the slow actor's T steps:
    [128, 128]. With 2 collector processes on each rank the quota is every collector's of every rank."""
    run_dir, steps = tmp_path / "ranks-quota", 32
    proc = launch("--config", "configs/cartpole.toml", "--learners", "2", "--actors", "0", "--run-dir", str(run_dir), "--total-steps", str(8 * 8 * steps),
                  "--set", "run.segments=true", "--set", "cluster.min_envs=8", "--set", f"ppo.num_steps={steps}",
                  "--set", "ppo.update_epochs=1", "--set", f"cluster.collectors={collectors}",
                  "--set", 'env.env_id="tests.integration.slow_env:SlowStepCartPole-v0"',
                  env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = fast_and_slow_actors(proc, run_dir, monkeypatch)
    assert proc.returncode == 0, out[-3000:]
    rows = metrics(run_dir)
    assert all(r["rank_env_slots"] == [4, 4] and len(set(r["rank_weights_checksums"])) == 1 for r in rows), rows[-1]
    slow, fast = sorted(np.median([r["rank_samples"][rank] for r in rows]) for rank in (0, 1))
    assert fast > 1.25 * 4 * steps and slow < 4 * steps, [r["rank_samples"] for r in rows]
    assert all(sum(r["rank_samples"]) >= 8 * steps for r in rows)  # the job's quota, on every update
