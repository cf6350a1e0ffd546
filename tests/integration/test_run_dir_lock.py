"""A run directory is held by one run (issue 32, point 1): two runs started in the same second get their own
directories, and a second run on a live run's directory, new or --resume, is refused in one line naming the
holder's pid, exit 2, nothing written, the first run untouched."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT, endpoints, kill_group, launch, metrics, run_launch, stop, wait_for

pytestmark = pytest.mark.integration
SMOKE = ("--config", "configs/smoke.toml")


def digests(run_dir) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_second_run_on_a_live_run_directory_is_refused_naming_its_pid(tmp_path):
    run_dir = tmp_path / "held"
    first = launch(*SMOKE, "--run-dir", str(run_dir), "--total-steps", "10000000")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 120, "the first run's first update", first)
        before = endpoints(run_dir)
        config = (run_dir / "config.toml").read_bytes()
        for args in (("--run-dir", str(run_dir), *SMOKE), ("--resume", str(run_dir))):
            again = run_launch(*args, "--set", "ppo.learning_rate=0.001", timeout=60)
            lines = [line for line in again.stdout.splitlines() if line.strip()]
            assert again.returncode == 2, again.stdout[-2000:]
            assert len(lines) == 1 and lines[0].startswith("error: ") and f"(pid {first.pid})" in lines[0], lines
            assert endpoints(run_dir) == before and (run_dir / "config.toml").read_bytes() == config
        n = len(metrics(run_dir))
        wait_for(lambda: len(metrics(run_dir)) > n, 60, "the first run to go on training", first)
    finally:
        stop(first)
    assert first.returncode == 0


def test_two_runs_started_in_the_same_second_get_their_own_directories(tmp_path):
    """issue 32: the default name was a timestamp; the second run overwrote endpoints.json and took over the
    first run's actors."""
    args = [sys.executable, str(ROOT / "launch.py"), "--config", str(ROOT / "configs/smoke.toml")]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    assert [p.returncode for p in procs] == [0, 0], outs
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2, dirs
    for run_dir in dirs:
        info = json.loads((run_dir / "endpoints.json").read_text())
        assert info["pid"] in {json.loads((d / "processes.json").read_text())["learner"] for d in dirs}
        assert len(metrics(run_dir)) >= 2 and metrics(run_dir)[-1]["actors"] == 2
    assert len({json.loads((d / "endpoints.json").read_text())["address"] for d in dirs}) == 2


def test_a_refused_resume_leaves_the_run_directory_byte_identical(tmp_path):
    """issue 32: `--resume RUN --set env.env_id=...` was refused, but rewrote RUN/config.toml first."""
    run_dir = tmp_path / "done"
    first = run_launch(*SMOKE, "--run-dir", str(run_dir), timeout=120)
    assert first.returncode == 0, first.stdout[-2000:]
    before = digests(run_dir)
    for bad in ("env.env_id=ALE/Pong-v5", "model.hidden=32", "ppo.learning_rate=inf", "ppo.nope=1", "oops"):
        again = run_launch("--resume", str(run_dir), "--set", bad, timeout=60)
        lines = [line for line in again.stdout.splitlines() if line.strip()]
        assert again.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (bad, again.stdout)
        assert digests(run_dir) == before, bad
