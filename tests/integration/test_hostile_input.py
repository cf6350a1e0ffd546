"""Whatever bytes reach a running learner, it keeps training and counts what it rejected."""
from __future__ import annotations

import json
import time

import msgpack
import numpy as np
import pytest
import zmq

from protocol import messages as m
from tests.integration.cluster import kill_group, launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration


def _garbage(rng: np.random.Generator, valid: list[list[bytes]]) -> list[bytes]:
    kind = rng.integers(0, 7)
    if kind == 0:  # random bytes
        return [rng.bytes(int(rng.integers(0, 200)))]
    if kind == 1:  # valid message, truncated frame
        frames = list(valid[rng.integers(len(valid))])
        i = int(rng.integers(len(frames)))
        frames[i] = frames[i][: max(0, len(frames[i]) - int(rng.integers(1, 50)))]
        return frames
    if kind == 2:  # wrong protocol version
        header = msgpack.unpackb(valid[0][0])
        header["v"] = int(rng.integers(2, 1000))
        return [msgpack.packb(header), *valid[0][1:]]
    if kind == 3:  # a step report before any handshake, with a wrong shape
        return m.encode(m.StepReport(0, np.zeros((1, 3), np.uint8), np.zeros(1, np.float32),
                                     np.zeros(1, bool), np.zeros(1, bool)))
    if kind == 4:  # unknown type
        return [msgpack.packb({"v": 1, "t": "launch_missiles", "b": {}, "a": []})]
    if kind == 5:  # bit flips in a valid message
        frames = [bytearray(f) for f in valid[rng.integers(len(valid))]]
        for _ in range(3):
            f = frames[rng.integers(len(frames))]
            if f:
                f[rng.integers(len(f))] ^= 1 << int(rng.integers(8))
        return [bytes(f) for f in frames]
    return [msgpack.packb({"v": 1, "t": "handshake", "b": {"num_envs": "lots"}, "a": []})]


def test_fuzzing_a_running_learner(tmp_path):
    run_dir = tmp_path / "fuzz"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", "10000000")
    ctx = zmq.Context()
    socks = []
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        address = json.loads((run_dir / "endpoints.json").read_text())["address"]
        valid = [[bytes(f) for f in m.encode(m.Goodbye("x"))], [bytes(f) for f in m.encode(m.Handshake(2, "f"))],
                 [bytes(f) for f in m.encode(m.StepReport(0, np.zeros((2, 4, 84, 84), np.uint8),
                                                          np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool)))]]
        rng = np.random.default_rng(0)
        lines_before = (run_dir / "learner.log").read_text().count("\n")
        sent, deadline = 0, time.monotonic() + 8
        while sent < 5000 and time.monotonic() < deadline:
            if sent % 500 == 0:  # fresh peers: a misbehaving one gets dropped after a while
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, 100000)
                sock.connect(address)
                socks.append(sock)
            try:
                socks[-1].send_multipart(_garbage(rng, valid), flags=zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.001)  # back-pressure from our own queue, not synchronization
        assert sent >= 1000
        before = metrics(run_dir)[-1]["update"]
        later = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] >= before + 3 and r["rejected_messages"] >= 1000],
                         120, "three more updates with the rejections counted", proc)
        assert later[-1]["actors"] == 2 and proc.poll() is None
        log = (run_dir / "learner.log").read_text()
        assert "rejected message from peer" in log
        warned = [line for line in log.splitlines()[lines_before:] if " WARNING " in line]
        assert len(warned) <= 40, f"{sent} malformed messages logged {len(warned)} lines:\n" + "\n".join(warned)
    finally:
        for s in socks:
            s.close()
        ctx.term()
        kill_group(proc)
        proc.communicate()


# --- a registered actor sending well-formed messages out of turn ------------------------------------------

OFFENCES = {  # what the rogue sends, and what the learner's answer must name
    "first-again": "a second first report for group 0",
    "other-group": "a step report for group 1 before its first report",
    "nan-obs": "obs must be finite",
    "inf-final": "final_obs must be finite",
    "missing-final": "must list each env truncated and not terminated once",
    "replayed-outcome": "that was not sent actions",
    "actions": "unexpected Actions: only the actor takes it",
    "starting-late": "Starting while running (in turn while building)",
}


def _report(group: int, first: bool = False, obs_value: float = 0.0, truncated=(False, False), finals=None):
    final_index = np.flatnonzero(finals is not None and np.asarray(truncated))
    return m.encode(m.StepReport(group, np.full((1, 4), obs_value, np.float32), np.zeros(1, np.float32),
                                 np.zeros(1, bool), np.asarray(truncated[:1]), final_index=final_index.astype(np.int64),
                                 final_obs=finals, first=first))


def _next(sock, timeout_ms: int = 15000):
    assert sock.poll(timeout_ms), "the learner did not answer"
    return m.decode(sock.recv_multipart())


def _offend(sock, offence: str) -> m.Error | None:
    """One round: join (2 groups of 1 env), play along as far as the offence needs, offend; the learner's
    answer (None when it sent new actions first, so a replay was a fair answer)."""
    sock.send_multipart(m.encode(m.Handshake(2, "rogue", groups=2)))
    while not isinstance(welcome := _next(sock), m.Welcome):  # skip what the last round left in flight
        assert isinstance(welcome, (m.Actions, m.Error)), welcome
    if offence == "other-group":
        sock.send_multipart(_report(0, first=True))
        sock.send_multipart(_report(1))
        return _next(sock)
    sock.send_multipart(_report(0, first=True))
    sock.send_multipart(_report(1, first=True))
    if offence in ("first-again", "starting-late", "actions"):
        sock.send_multipart({"first-again": _report(0, first=True), "starting-late": m.encode(m.Starting(2, 2)),
                             "actions": m.encode(m.Actions(0, np.zeros(1, np.int64)))}[offence])
    else:
        asked = _next(sock)
        assert isinstance(asked, m.Actions), asked
        g = asked.group
        sock.send_multipart({
            "nan-obs": _report(g, obs_value=np.nan),
            "inf-final": _report(g, truncated=(True,), finals=np.full((1, 4), np.inf, np.float32)),
            "missing-final": _report(g, truncated=(True,)),
            "replayed-outcome": _report(g),
        }[offence])
        if offence == "replayed-outcome":
            sock.send_multipart(_report(g))
        if offence == "replayed-outcome":
            while isinstance(answer := _next(sock), m.Actions):
                if answer.group == g:
                    return None  # new actions for g came first: the replay answered them fairly
            return answer
    while isinstance(answer := _next(sock), m.Actions):
        pass  # actions sent before the offence arrived
    return answer


def test_a_registered_actor_out_of_turn_costs_only_its_own_slots(tmp_path):
    run_dir = tmp_path / "rogue"
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "normalize.obs=true", "--set", "run.checkpoint_every=5")
    ctx = zmq.Context()
    socks = []
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        address = json.loads((run_dir / "endpoints.json").read_text())["address"]
        answered: dict[str, str] = {}
        for i, offence in enumerate([*OFFENCES] * 3):
            if i % 8 == 0:  # a fresh identity before strikes add up to a ban
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.connect(address)
                socks.append(sock)
            answer = _offend(socks[-1], offence)
            if answer is not None:
                assert isinstance(answer, m.Error) and answer.rejoin, answer
                assert OFFENCES[offence] in answer.reason, (offence, answer.reason)
                answered[offence] = answer.reason
        assert set(answered) == set(OFFENCES), sorted(set(OFFENCES) - set(answered))
        before = metrics(run_dir)[-1]["update"]
        later = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] >= before + 10], 120,
                         "ten more updates", proc)
        assert later[-1]["actors"] == 2 and later[-1]["env_slots"] == 8, later[-1]
        assert later[-1]["rejected_messages"] >= len(OFFENCES) * 2
        log = (run_dir / "learner.log").read_text()
        assert "actor-0 left" not in log and "actor-1 left" not in log, "only the offender is dropped"
        for text in OFFENCES.values():
            assert "rejected message from rogue" in log and text in log, text
    finally:
        for s in socks:
            s.close()
        ctx.term()
        out = stop(proc)
    assert proc.returncode == 0, out[-3000:]
    import torch
    saved = torch.load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert all(torch.isfinite(v).all() for v in saved["obs_norm"].values() if isinstance(v, torch.Tensor)), \
        "the observation normalizer's statistics stayed finite"


# --- a rule-abiding client whose numbers do not fit (issue 60, point 1) -----------------------------------

def _play_huge_rewards(address: str, ctx: zmq.Context, deadline_s: float) -> m.Error:
    """Join with one env, answer every Actions with a well-formed report whose reward is 3.3e38 (finite in
    float32), until the learner refuses it: its Error."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(m.encode(m.Handshake(1, "huge")))
        assert isinstance(_next(sock), m.Welcome)
        sock.send_multipart(_report(0, first=True))
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            answer = _next(sock)
            if isinstance(answer, m.Error):
                return answer
            assert isinstance(answer, m.Actions), answer
            sock.send_multipart(m.encode(m.StepReport(0, np.zeros((1, 4), np.float32), np.full(1, 3.3e38, np.float32),
                                                      np.zeros(1, bool), np.zeros(1, bool))))
        raise AssertionError(f"the learner took rewards of 3.3e38 for {deadline_s}s")
    finally:
        sock.close()


@pytest.mark.parametrize("bound", ["default", "float32-max"])
def test_a_client_reporting_huge_finite_rewards_costs_only_its_own_slots(tmp_path, bound):
    """A same-user client plays by the rules with rewards of 3.3e38: it gave update 11 a NaN loss and ended the
    run after three learner restarts. Now it is refused on the wire naming cluster.max_abs_reward (default
    1e6); with the bound raised to float32's largest, its rollout's GAE overflows, that rollout is dropped
    (counted in metrics.jsonl) and its actor struck. Either way the run trains on, finite, and ends cleanly."""
    run_dir = tmp_path / bound
    extra = ["--set", "cluster.max_abs_reward=3.4e38"] if bound == "float32-max" else []
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "run.checkpoint_every=5", *extra)
    ctx = zmq.Context()
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        address = json.loads((run_dir / "endpoints.json").read_text())["address"]
        answer = _play_huge_rewards(address, ctx, 60)
        assert answer.rejoin, answer
        if bound == "default":
            assert "rewards must be finite and within +-1e+06 (the learner's cluster.max_abs_reward), got 3.3e+38" \
                in answer.reason, answer.reason
        else:
            assert "made non-finite advantages or returns" in answer.reason, answer.reason
        before = metrics(run_dir)[-1]["update"]
        later = wait_for(lambda: [r for r in metrics(run_dir) if r["update"] >= before + 5], 120,
                         "five more updates", proc)
        assert later[-1]["actors"] == 2 and later[-1]["env_slots"] == 8, later[-1]
        assert later[-1]["nonfinite_batches"] == (1 if bound == "float32-max" else 0), later[-1]
        assert all(r["policy_loss"] is not None and r["value_loss"] is not None for r in later), later[-1]
    finally:
        ctx.term()
        out = stop(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "restart 1 of" not in out, out[-3000:]
    import torch
    saved = torch.load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert all(torch.isfinite(v).all() for v in saved["model"].values()), "the weights stayed finite"


def _peak_rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_big_junk_from_many_peers_costs_the_learner_no_memory(tmp_path):
    """Issue 60, point 6: 8 DEALERs sending 60 MB junk (under cluster.max_message_mb) took a CartPole learner from
    0.35 to 1.16 GB, up to 4 GB while updates were slow: each peer's queue held 1,000 messages of up to 64 MB.
    Scaled here: 4 peers x 8 messages of 8 MB during slow updates. Now a CartPole peer may send some 20 KB (zmq
    drops the connection of a larger one before allocating it) and 4 messages wait per peer; the start-up line
    counts the queues in the memory budget."""
    run_dir = tmp_path / "big"
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "100000000",
                  "--set", "ppo.update_epochs=50", "--set", "run.checkpoint_every=1000")
    ctx = zmq.Context()
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        info = json.loads((run_dir / "endpoints.json").read_text())
        before, junk = _peak_rss_mb(info["pid"]), np.random.default_rng(0).bytes(8 << 20)
        peers = []
        for _ in range(4):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(info["address"])
            peers.append(sock)
        for _ in range(8):
            for sock in peers:
                sock.send(junk, copy=False)
        n = len(metrics(run_dir))
        wait_for(lambda: len(metrics(run_dir)) >= n + 1, 120, "one more update", proc)
        grown = _peak_rss_mb(info["pid"]) - before
    finally:
        ctx.destroy(linger=0)
        out = stop(proc)
    assert grown < 40, f"the learner's peak memory grew {grown:.0f} MB"
    assert "and receive queues (" in out and "4 messages of up to" in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
