"""cluster.collectors = 2: two collector processes per learner rank, with real actors, sockets and processes.

What holds with one collector holds with two: training and episode statistics, joins sent to the least
loaded collector, retire and rejoin, rejected messages counted, resume, policy lag, multi-rank jobs; a
collector that dies ends the run with one error; kill -9 of the learner leaves no collector behind."""
from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import zmq

from tests.integration.cluster import (NO_RESTART, ROOT, alive, assert_breakdown, assert_session_gone, curve_keys,
                                       curve_settings, endpoints, fast_and_slow_actors, kill_group, launch,
                                       lose_and_replace_the_actor_of_collector_1, metrics, run_launch, start_actor,
                                       stop, wait_for)

pytestmark = pytest.mark.integration
TWO = ("--set", "cluster.collectors=2")
CARTPOLE = ("--config", "configs/cartpole.toml")


def _collectors(run_dir) -> list[dict]:
    return endpoints(run_dir)["collectors"]


def test_two_collectors_share_the_actors_train_and_count_what_they_see(tmp_path):
    run_dir = tmp_path / "two"
    proc = launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                  "--total-steps", "6000", "--set", "ppo.num_steps=32")
    try:
        wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)
        collectors = _collectors(run_dir)
        assert len(collectors) == 2 and collectors[0]["address"] == endpoints(run_dir)["address"]
        # a stranger's garbage at collector 1 is rejected there and counted in the job's metrics
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(collectors[1]["address"])
        sock.send_multipart([b"not a message"])
        out, _ = proc.communicate(timeout=240)
        sock.close(linger=0)
        ctx.term()
    finally:
        kill_group(proc)
    assert proc.returncode == 0, out[-3000:]
    rows = metrics(run_dir)
    assert rows[-1]["env_steps"] >= 6000 and rows[-1]["actors"] == 2 and rows[-1]["env_slots"] == 8
    assert rows[-1]["episodes"] > 0 and rows[-1]["episode_return_mean"] is not None
    assert [r["weights_version"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["rejected_messages"] >= 1
    assert_breakdown(rows, collectors=2)
    log = (run_dir / "learner.log").read_text()
    assert "[collector 1] rejected message" in log, log[-3000:]
    events = [e for r in rows for e in r["events"]]
    assert any(f"sent to {collectors[1]['address']}" in e for e in events), events
    assert sum("joined with 4 envs" in e for e in events) == 2, events
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == rows[-1]["episodes"]


def test_an_actor_lost_on_collector_1_is_retired_and_a_joiner_takes_its_place(tmp_path):
    run_dir = tmp_path / "rejoin"
    proc = launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "0", "--total-steps", "100000",
                  "--set", "cluster.min_envs=8", "--set", "cluster.actor_timeout_s=3", "--set", "ppo.num_steps=32")
    out = lose_and_replace_the_actor_of_collector_1(proc, run_dir)
    assert proc.returncode == 0, out[-3000:]
    events = [e for r in metrics(run_dir) for e in r["events"]]
    second = _collectors(run_dir)[1]["address"]
    assert any("second (4 envs) sent to " + second in e for e in events), events
    assert any("actor second left: " in e for e in events), events  # silent, or unreachable
    assert any("third (4 envs) sent to " + second in e for e in events), events  # the least loaded again


def test_a_collector_that_dies_ends_the_run_with_one_error_and_no_orphans(tmp_path):
    """Updates take seconds and rollouts a fraction of one, so the collector dies while the training process
    updates, mostly: the next rollout's command then finds its pipe closed (once a traceback, not this error)."""
    run_dir = tmp_path / "dies"
    proc = launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                  "--total-steps", "10000000", NO_RESTART, "0", "--set", "ppo.num_steps=32",
                  "--set", "model.hidden=512",
                  "--set", "ppo.update_epochs=60")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 120, "a first update", proc)
        victim = _collectors(run_dir)[1]["pid"]
        os.kill(victim, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
        assert_session_gone(proc.pid, timeout=30)
    finally:
        kill_group(proc)
    log = (run_dir / "learner.log").read_text()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert any(f"collector 1 (pid {victim}) exited with code -9" in line for line in errors), log[-3000:]
    assert proc.returncode != 0


def test_kill_9_of_the_learner_leaves_no_collector(tmp_path):
    run_dir = tmp_path / "learner-killed"
    proc = launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                  "--total-steps", "10000000", NO_RESTART, "0", "--set", "ppo.num_steps=32")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 120, "a first update", proc)
        pids = [c["pid"] for c in _collectors(run_dir)]
        os.kill(endpoints(run_dir)["pid"], signal.SIGKILL)
        wait_for(lambda: not any(alive(p) for p in pids), 30, f"collectors {pids} to exit")
        out, _ = proc.communicate(timeout=60)
        assert_session_gone(proc.pid, timeout=30)
        assert "Traceback" not in out, out[-3000:]  # a collector whose pipe closed stops in one line
    finally:
        kill_group(proc)


def test_start_up_that_cannot_complete_ends_within_its_deadline_naming_the_collectors(tmp_path):
    result = run_launch(*CARTPOLE, *TWO, "--run-dir", str(tmp_path / "short"), "--actors", "1",
                        "--envs-per-actor", "4", NO_RESTART, "0", "--set", "cluster.min_envs=64",
                        "--set", "cluster.startup_timeout_s=4", timeout=120)
    assert result.returncode != 0
    log = (tmp_path / "short" / "learner.log").read_text()
    assert "start-up did not complete within 4s" in log and "4 env slots ready, 64 needed" in log, log[-3000:]


def test_resume_and_policy_lag_with_two_collectors(tmp_path):
    run_dir = tmp_path / "policy_lag"
    first = run_launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                       "--total-steps", "2048", "--set", "ppo.num_steps=32", "--set", "run.policy_lag=1",
                       timeout=240)
    assert first.returncode == 0, first.stdout[-3000:]
    rows = metrics(run_dir)
    assert rows[-1]["policy_lag"] == 1 and rows[-1]["update"] == 8
    second = run_launch("--resume", str(run_dir), "--total-steps", "4096", timeout=240)
    assert second.returncode == 0, second.stdout[-3000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, 17)) and rows[-1]["env_steps"] == 4096
    assert rows[-1]["episodes"] > rows[7]["episodes"]


def test_with_policy_lag_each_collector_serves_newer_weights_mid_rollout_and_trains_on(tmp_path, monkeypatch):
    """Issue 62: with collector processes the weights of the update that runs while a rollout fills reach
    the collectors as soon as it is done, mid-rollout (some rollouts' steps are partly one version behind, partly
    not: before, a collector switched only between rollouts), and the run trains to its end. The env's steps take
    2 ms (SlowStepCartPole), so that a rollout outlasts the update however loaded the machine is."""
    run_dir = tmp_path / "lag_flow"
    monkeypatch.setenv("SLOW_STEP_S", "0.002")  # the actors inherit it (tests/integration/slow_env.py)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = run_launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                        "--total-steps", "4096", "--set", "ppo.num_steps=32", "--set", "run.policy_lag=1",
                        "--set", "ppo.update_epochs=2",
                        "--set", 'env.env_id="tests.integration.slow_env:SlowStepCartPole-v0"', timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, 17)) and all(r["policy_lag"] == 1 for r in rows)
    shares = [r["collection"]["lagged_share"] for r in rows[1:]]
    assert any(0 < s < 1 for s in shares), f"no rollout switched weights mid-way: {shares}"


def test_two_collectors_keep_one_frame_per_step_and_the_update_rebuilds_what_the_network_saw(tmp_path):
    """Breakout, stacked on the learner: each collector writes one frame per step into the one set of shared
    rows, and the stacks the update rebuilds from them are the ones inference saw: before its first step the
    policy's ratio to the stored log-probabilities is 1 in every update (a stack rebuilt wrong moves it)."""
    run_dir = tmp_path / "frames"
    result = run_launch("--config", "configs/smoke.toml", *TWO, "--run-dir", str(run_dir), "--total-steps", "512",
                        "--set", "ppo.num_steps=32", "--set", "ppo.update_epochs=1", timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert len(rows) == 4 and all(r["env_slots"] == 4 for r in rows)
    assert all(r["first_minibatch_ratio_max_dev"] < 1e-5 for r in rows), [r["first_minibatch_ratio_max_dev"] for r in rows]


@pytest.mark.parametrize("collectors", [1, 2])
def test_segments_opened_mid_episode_keep_one_frame_per_step_and_the_update_rebuilds_what_the_network_saw(
        tmp_path, collectors):
    """run.segments (issue 62), in the training process and in two collector processes: a segment may start in
    the middle of an episode, in any column, and its first step's older frames must be the ones the network saw;
    before its first step the policy's ratio to the stored log-probabilities is 1 in every update."""
    run_dir = tmp_path / f"segments-{collectors}"
    result = run_launch("--config", "configs/smoke.toml", "--set", f"cluster.collectors={collectors}",
                        "--set", "run.segments=true", "--set", "cluster.groups=2", "--run-dir", str(run_dir),
                        "--total-steps", "1024",
                        "--set", "ppo.update_epochs=1", timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert len(rows) >= 14 and all(r["env_slots"] == 4 for r in rows)
    assert all(r["first_minibatch_ratio_max_dev"] < 1e-5 for r in rows), [r["first_minibatch_ratio_max_dev"] for r in rows]
    assert any(r["dropped_samples"] > 0 for r in rows), "no segment was cut at a close"


def test_with_segments_two_collectors_close_at_the_jobs_quota_not_each_at_its_own(tmp_path, monkeypatch):
    """run.segments with a fast actor on collector 0 and a slow one on collector 1 (4 envs each: SlowStepCartPole
    at 2 ms and at 20 ms a step): a rollout is full once the two collectors' steps together make T x 8, so the fast
    collector fills more than its own slots' T steps (a second segment per slot) and the slow one's share is cut
    before its columns are done; closing each at its own quota (T x 4), the slow actor paced every rollout."""
    run_dir, steps = tmp_path / "job-quota", 32
    launch_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = launch(*TWO, "--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--actors", "0",
                  "--total-steps", str(8 * 8 * steps), "--set", "run.segments=true", "--set", "cluster.min_envs=8",
                  "--set", f"ppo.num_steps={steps}", "--set", "ppo.update_epochs=1",
                  "--set", 'env.env_id="tests.integration.slow_env:SlowStepCartPole-v0"', env=launch_env)
    out = fast_and_slow_actors(proc, run_dir, monkeypatch)
    assert proc.returncode == 0, out[-3000:]
    rows = metrics(run_dir)
    events = [e for r in rows for e in r["events"]]
    assert any("slow (4 envs) sent to " + _collectors(run_dir)[1]["address"] in e for e in events), events
    messages = [r["collection"]["messages"] for r in rows]  # per collector: one per step of its 4 envs
    fast, slow = np.median([m[0] for m in messages]), np.median([m[1] for m in messages])
    assert fast > 1.25 * steps and slow < steps, messages  # past its own share; cut before its columns are full
    assert all(r["env_slots"] == 8 for r in rows) and any(r["dropped_samples"] > 0 for r in rows), rows[-1]


def test_two_learner_ranks_each_with_two_collectors(tmp_path):
    run_dir = tmp_path / "ranks"
    result = run_launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--learners", "2", "--actors", "2",
                        "--envs-per-actor", "4", "--total-steps", "2048", "--set", "ppo.num_steps=32", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert rows[-1]["learners"] == 2 and rows[-1]["env_steps"] >= 2048
    assert len(set(rows[-1]["rank_weights_checksums"])) == 1
    for rank in (0, 1):
        info = json.loads((run_dir / ("endpoints.json" if rank == 0 else f"endpoints-rank-{rank}.json")).read_text())
        assert len(info["collectors"]) == 2


def test_curve_keys_guard_every_collector(tmp_path):
    pairs = curve_keys(tmp_path, allowed=("own",), others=("stranger",))
    learner_secret, stranger_secret = pairs["learner"][1], pairs["stranger"][1]
    run_dir = tmp_path / "curve"
    proc = launch(*CARTPOLE, *TWO, "--run-dir", str(run_dir), "--actors", "2", "--envs-per-actor", "4",
                  "--total-steps", "10000000", "--set", "ppo.num_steps=32", *curve_settings(tmp_path, pairs, "own"))
    try:
        wait_for(lambda: [r for r in metrics(run_dir) if r["actors"] == 2], 120, "both keyed actors in", proc)
        for collector in _collectors(run_dir):  # each collector's own socket refuses a key it does not know
            stranger = start_actor(collector["address"], "--envs", "3", "--reconnect-s", "0", "--join-timeout-s", "3",
                                   "--server-key", str(learner_secret), "--key", str(stranger_secret))
            out, _ = stranger.communicate(timeout=30)
            assert stranger.returncode == 1 and "no answer" in out, out
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out[-2000:]
    events = [e for r in metrics(run_dir) for e in r["events"]]
    assert any("sent to " + _collectors(run_dir)[1]["address"] in e for e in events), events


def test_an_address_in_use_is_one_line_and_leaves_no_collector(tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = launch(*CARTPOLE, *TWO, "--run-dir", str(tmp_path / "taken"), "--actors", "1",
                      "--set", f'cluster.address="tcp://127.0.0.1:{port}"')
        try:
            out, _ = proc.communicate(timeout=120)
            assert_session_gone(proc.pid, timeout=30)
        finally:
            kill_group(proc)
    assert proc.returncode == 2, out[-2000:]
    errors = [line for line in out.splitlines() if "ERROR" in line and "launch" not in line]
    assert len(errors) == 1 and "collector 0 could not start: ZMQError: Address already in use" in errors[0], out
    assert "Traceback" not in out
