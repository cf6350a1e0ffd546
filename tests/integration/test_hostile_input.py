"""Whatever bytes reach a running learner, it keeps training and counts what it rejected."""
from __future__ import annotations

import json
import time

import msgpack
import numpy as np
import pytest
import zmq

from protocol import messages as m
from tests.integration.cluster import kill_group, launch, metrics, wait_for

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
        assert "rejected message from peer" in log and "protocol version" in log
    finally:
        for s in socks:
            s.close()
        ctx.term()
        kill_group(proc)
        proc.communicate()
