"""issue 32, point 7: Ctrl-C at any moment, from launch.py's first instant, exits cleanly with no traceback;
the run ends within 3 s of a fatal collector or learner error, no process left (it took ~12 s: launch.py
waited its 10 s grace for actors that no goodbye would reach)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.cluster import (ROOT, assert_session_gone, endpoints, kill_group, launch, metrics,
                                       session_pids, wait_for, NO_RESTART)

pytestmark = pytest.mark.integration
EXIT_WITHIN_S = 3.0


CTRL_C_DURING_IMPORT = """
import os, signal, sys


class CtrlCOnImport:
    \"\"\"Sends launch.py (the session leader; its spawned children block SIGINT anyway) a Ctrl-C the moment it
    starts importing the module named in CTRL_C_ON_IMPORT: a moment inside its imports, chosen exactly.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("CTRL_C_ON_IMPORT") and os.getpid() == os.getsid(0):
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, CtrlCOnImport())
"""


@pytest.mark.parametrize("module", ["argparse", "multiprocessing", "actor", "learner.config", "learner.lifecycle.run_lock",
                                    "protocol.files"])
def test_ctrl_c_during_launch_imports_exits_zero_without_a_traceback(tmp_path, module):
    """issue 32: Ctrl-C in the first 0.15 s printed a KeyboardInterrupt traceback from one of launch.py's imports.
    The Ctrl-C lands while launch.py imports `module` (a sitecustomize on PYTHONPATH sends it); the interpreter's
    own start-up before launch.py's first line (site, the venv's path hooks) is outside any script's reach."""
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_DURING_IMPORT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CTRL_C_ON_IMPORT": module}
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "launch.py", "--config", "configs/smoke.toml", "--run-dir", str(run_dir),
                             "--total-steps", "10000000"], cwd=ROOT, stdout=subprocess.PIPE, env=env,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert "stopping (Ctrl-C again to force)" in out and not run_dir.exists(), out[-3000:]
    assert_session_gone(proc.pid, timeout=5)


def ended_within(proc: subprocess.Popen, since: float, limit_s: float) -> float:
    try:
        proc.wait(timeout=60)
    finally:
        kill_group(proc)
    took = time.monotonic() - since
    assert took < limit_s, f"the run took {took:.1f}s to end (limit {limit_s}s)"
    return took


def test_the_run_ends_within_3_s_of_a_collector_dying(tmp_path):
    run_dir = tmp_path / "collector"
    proc = launch("--config", "configs/cartpole.toml", "--set", "cluster.collectors=2", "--run-dir", str(run_dir),
                  "--actors", "2", "--envs-per-actor", "4", "--total-steps", "10000000", "--set", "ppo.num_steps=32",
                  NO_RESTART, "0")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 120, "a first update", proc)
        pids = session_pids(proc.pid)
        victim = endpoints(run_dir)["collectors"][1]["pid"]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        ended_within(proc, killed, EXIT_WITHIN_S)
    finally:
        kill_group(proc)
    assert proc.returncode == 1 and len(pids) >= 5  # launch, learner, 2 collectors, 2 actors
    assert_session_gone(proc.pid, timeout=1)
    log = (run_dir / "learner.log").read_text()
    assert f"collector 1 (pid {victim}) exited with code -9" in log, log[-3000:]


def test_the_run_ends_within_3_s_of_a_fatal_learner_error(tmp_path):
    """The learner's own fatal error (here: start-up that cannot complete, cluster.startup_timeout_s): from its
    ERROR line to no process of the run left, under 3 s."""
    run_dir = tmp_path / "learner"
    proc = launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--actors", "1",
                  "--envs-per-actor", "2", "--set", "cluster.min_envs=64", "--set", "cluster.startup_timeout_s=4",
                  NO_RESTART, "0")
    log = run_dir / "learner.log"
    try:
        wait_for(lambda: log.exists() and "start-up did not complete" in log.read_text(), 120, "the error", proc)
        ended_within(proc, time.monotonic(), EXIT_WITHIN_S)
    finally:
        kill_group(proc)
    assert proc.returncode == 1
    assert_session_gone(proc.pid, timeout=1)
