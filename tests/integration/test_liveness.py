"""Issue 32: a silent peer is retired for its own silence whatever the updates do, and its slots let others in;
a greedy claim is refused and costs the learner nothing; a stopped collector process ends the run loudly
within a deadline instead of stalling it for ever."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import zmq

from learner.config import load
from learner.lifecycle.preflight import admission_of, learner_spaces
from protocol import messages as m
from protocol.transport import connect_dealer
from tests.integration.cluster import NO_RESTART, launch, metrics, start_actor, stop, kill_group, wait_for

pytestmark = pytest.mark.integration


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def handshake(ctx, address: str, num_envs: int, name: str):
    sock = connect_dealer(ctx, address, 64 << 20)
    sock.send_multipart(m.encode(m.Handshake(num_envs, name)))
    assert sock.poll(30_000), f"no answer to {name}'s handshake"
    return sock, m.decode(sock.recv_multipart())


def events(run_dir, text: str) -> list[dict]:
    return [r for r in metrics(run_dir) if any(text in e for e in r["events"])]


def test_a_ghost_is_retired_for_its_own_silence_and_its_slots_let_a_waiting_actor_in(tmp_path):
    """A client that handshakes and says nothing used to hold its slots for ever: the forgiveness after each
    update refreshed everyone's silence. Here it fills the learner's budget, so an extra actor is told the
    learner is full; the ghost is retired within its timeout of silence and the extra actor gets in. A greedy
    client claiming 4,092 envs meanwhile is refused with the reason and the learner's memory does not move."""
    run_dir = tmp_path / "ghost"
    limits = ["cluster.memory_budget_mb=1", "cluster.max_envs_per_actor=200"]  # CartPole's rollouts in 1 MB
    cfg = load("configs/cartpole.toml", limits)
    budget = admission_of(cfg, learner_spaces(cfg))  # as the learner counts it: its rollouts, each actor's queue
    ghost_envs = (budget.budget_bytes - budget.bytes_for(8, 3)) // budget.slot_bytes  # with the run's own 2 actors:
    assert 100 < ghost_envs <= 200                                                     # every byte of the budget
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "cluster.actor_timeout_s=2", *(a for kv in limits for a in ("--set", kv)),
                  "--set", "run.checkpoint_every=1000")
    ctx, extra = zmq.Context(), None
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        info = json.loads((run_dir / "endpoints.json").read_text())
        before = rss_mb(info["pid"])
        greedy, answer = handshake(ctx, info["address"], 4092, "greedy")
        assert isinstance(answer, m.Error) and not answer.rejoin, answer
        assert "claims 4092 envs, more than the" in answer.reason and "max_envs_per_actor" in answer.reason
        ghost, welcome = handshake(ctx, info["address"], ghost_envs, "ghost")
        assert isinstance(welcome, m.Welcome), welcome
        joined = metrics(run_dir)[-1]["update"]
        extra = start_actor(info["address"], "--envs", "4", "--name", "extra")
        wait_for(lambda: events(run_dir, "actor ghost left: silent for more than 2s"), 60, "the ghost retired", proc)
        wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > joined and r["env_slots"] == 12], 60,
                 "updates with the extra actor's envs", proc)
        assert rss_mb(info["pid"]) < before + 100, "the refused claim grew the learner"
    finally:
        ctx.destroy(linger=0)
        if extra is not None:
            kill_group(extra)
        out = stop(proc)
    extra_log = extra.communicate()[0] if extra is not None else ""
    assert "the learner is full" in extra_log, extra_log[-2000:]
    assert "memory budget 1 MB for rollouts" in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]


def test_a_stopped_collector_process_ends_the_run_loudly_within_its_deadline(tmp_path):
    """SIGSTOP of a collector process used to stall the run silently for ever (no deadline on the wait for its
    shard, and the watchdog kept being fed). Now the run ends within the limit, naming it; checkpoints kept."""
    run_dir = tmp_path / "stopped"
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "cluster.collectors=2", "--set", "cluster.actor_timeout_s=2",
                  "--set", "run.checkpoint_every=1", NO_RESTART, "0")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 2, 120, "two updates", proc)
        collectors = json.loads((run_dir / "endpoints.json").read_text())["collectors"]
        victim = collectors[1]["pid"]
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            try:
                os.kill(victim, signal.SIGCONT)
            except ProcessLookupError:
                pass
        took = time.monotonic() - stopped_at
    finally:
        kill_group(proc)
    assert proc.returncode not in (0, None), out[-3000:]
    assert f"collector 1 (pid {victim}) showed no sign of life" in out, out[-3000:]
    assert took < 45, f"took {took:.0f}s"
    assert list((run_dir / "checkpoints").glob("*.pt")), "the checkpoints are gone"


def test_an_absurd_update_is_refused_before_anything_starts(tmp_path):
    from tests.integration.cluster import run_launch
    result = run_launch("--config", "configs/cartpole.toml", "--run-dir", str(tmp_path / "absurd"),
                        "--set", "ppo.num_minibatches=100000", timeout=60)
    assert result.returncode == 2, result.stdout[-2000:]
    assert "a minibatch would hold less than one sample" in result.stdout
    assert "Traceback" not in result.stdout


def silent_rejoiner(address: str, seconds: float, retry_s: float = 2.5) -> int:
    """A client that joins, sends its first report, never answers, and rejoins as soon as it is retired (issue 60,
    point 5); told to ask again later, it does after retry_s. Returns how many times it was welcomed."""
    import numpy as np
    ctx = zmq.Context()
    sock, welcomes, deadline = connect_dealer(ctx, address, 64 << 20), 0, time.monotonic() + seconds
    try:
        sock.send_multipart(m.encode(m.Handshake(1, "silent")))
        while time.monotonic() < deadline:
            if not sock.poll(100):
                continue
            msg = m.decode(sock.recv_multipart())
            if isinstance(msg, m.Welcome):
                welcomes += 1
                sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.zeros(1, np.float32),
                                                          np.zeros(1, bool), np.zeros(1, bool), first=True)))
            elif isinstance(msg, m.Error) and msg.rejoin:
                if "probation" in msg.reason:
                    time.sleep(retry_s)  # the client's own backoff, not synchronization
                sock.send_multipart(m.encode(m.Handshake(1, "silent")))
    finally:
        ctx.destroy(linger=0)
    return welcomes


def test_a_silent_client_that_rejoins_at_once_costs_its_own_slots_not_every_rollout(tmp_path):
    """Before: it was welcomed again as soon as it was retired, and every rollout waited the whole
    cluster.actor_timeout_s for it (683 updates a minute without it, 15 with it). Now each retirement for silence
    puts it on probation, twice as long each time: over 12 s with a 1 s timeout it gets in at most 4 times
    (before: about 8), and the run trains meanwhile."""
    run_dir = tmp_path / "silent"
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "cluster.actor_timeout_s=1", "--set", "run.checkpoint_every=1000")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        address, before = json.loads((run_dir / "endpoints.json").read_text())["address"], metrics(run_dir)[-1]["update"]
        welcomes = silent_rejoiner(address, seconds=12.0)
        after = metrics(run_dir)[-1]["update"]
        retired = sum(e.startswith("actor silent left: silent") for r in metrics(run_dir) for e in r["events"])
    finally:
        out = stop(proc)
    assert 1 <= welcomes <= 4 and retired >= 1, (welcomes, retired)
    assert after > before + 5, (before, after)
    assert "on probation for" in (run_dir / "learner.log").read_text()
    assert proc.returncode == 0, out[-3000:]
