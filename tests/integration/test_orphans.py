"""No orphans: kill -9 of launch.py (or the OOM killer) leaves no process of the run behind, learner ranks
and evaluator included, and the next run can bind the same addresses (issue 20, point 5)."""
from __future__ import annotations

import json
import os
import signal
import socket

import pytest
import zmq

from tests.integration.cluster import alive, kill_group, launch, metrics, run_pids, wait_for

pytestmark = pytest.mark.integration


def free_ports(n: int) -> int:
    """A base port p with p .. p+n-1 free now (rank r binds cluster.address's port + 2r)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + n < 65536 and all(_bindable(base + i) for i in range(n)):
            return base
    raise AssertionError(f"no {n} consecutive free ports")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _binds_again(address: str) -> bool:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        sock.bind(address)  # what the next learner on this address does
        return True
    except zmq.ZMQError:
        return False
    finally:
        sock.close(linger=0)
        ctx.term()


def test_kill_9_of_the_launcher_leaves_no_process_of_the_run_and_frees_the_addresses(tmp_path):
    run_dir, base = tmp_path / "orphans", free_ports(4)
    addresses = [f"tcp://127.0.0.1:{base + i}" for i in range(4)]  # rank 0: base, base+1; rank 1: base+2, base+3
    proc = launch("--config", "configs/cartpole.toml", "--learners", "2", "--actors", "2", "--total-steps", "10000000",
                  "--run-dir", str(run_dir), "--set", f"cluster.address='{addresses[0]}'",
                  "--set", f"cluster.weights_address='{addresses[1]}'", "--set", "eval.every=1",
                  "--set", "eval.episodes=1")
    try:
        wait_for(lambda: metrics(run_dir), 120, "the first update", proc)
        wait_for(lambda: "evaluator" in json.loads((run_dir / "processes.json").read_text()), 60, "the evaluator", proc)
        pids = run_pids(run_dir)
        assert len(set(pids)) == 6, pids  # launch, 2 learner ranks, 2 actors, the evaluator
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_for(lambda: not any(alive(p) for p in pids), 10, f"every process of the run ({pids}) to exit")
    finally:
        kill_group(proc)  # whatever is left, so that a failure leaves nothing behind either
    for address in addresses:
        assert _binds_again(address), f"{address} is still held"
    assert "the launcher (pid" in (run_dir / "learner.log").read_text()
