"""A subscriber that joins a running learner gets every later weight version, in order, intact."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import zmq

from protocol import messages as m
from protocol.transport import connect_sub
from tests.integration.cluster import kill_group, launch, wait_for

pytestmark = pytest.mark.integration


def test_late_subscriber_gets_every_later_version_in_order(tmp_path):
    run_dir = tmp_path / "w"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", "100000",
                  "--set", "run.checkpoint_every=1", "--set", "log.keep_checkpoints=1000")
    ctx = zmq.Context()
    sub = None
    try:
        endpoints = wait_for(lambda: (run_dir / "endpoints.json").exists() and
                             json.loads((run_dir / "endpoints.json").read_text()), 90, "the learner's endpoints", proc)
        sub = connect_sub(ctx, endpoints["weights_address"], 64 << 20)
        received = []
        deadline_polls = 600  # x 100 ms
        while len(received) < 4 and deadline_polls:
            deadline_polls -= 1
            if sub.poll(100):
                msg = m.decode(sub.recv_multipart())
                received.append((msg.version, {k: np.array(v) for k, v in msg.tensors.items()}))
        assert len(received) >= 4, f"only {len(received)} weight messages arrived"
        versions = [v for v, _ in received]
        assert versions == list(range(versions[0], versions[0] + len(versions))), versions
        for version, tensors in received:
            if version == 0:
                continue  # the initial broadcast may predate the subscription
            ckpt = run_dir / "checkpoints" / f"ckpt_{version:08d}.pt"
            wait_for(ckpt.exists, 30, f"checkpoint {version}", proc)
            state = torch.load(ckpt, weights_only=True)["model"]
            assert set(tensors) == {k for k, t in state.items() if t.is_floating_point()}
            for name, arr in tensors.items():
                np.testing.assert_array_equal(arr, state[name].numpy(), err_msg=f"{name} at version {version}")
    finally:
        if sub is not None:
            sub.close()
        ctx.term()
        kill_group(proc)
        proc.communicate()
