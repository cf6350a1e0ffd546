"""benchmarks/throughput.py ends a row that makes no progress, loud and in bounded time, and goes on."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration


def test_a_row_that_cannot_start_fails_naming_itself_and_the_next_rows_still_run(tmp_path):
    out = tmp_path / "throughput.json"
    cmd = [sys.executable, "benchmarks/throughput.py", "--rows", "ceiling,collect-random", "--repeat", "2",
           "--actors", "1", "--envs-per-actor", "2", "--groups", "1", "--seconds", "1", "--warmup", "0.2",
           "--no-sweep", "--row-timeout", "8", "--launch-set", "cluster.min_envs=64", "--out", str(out)]
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert time.monotonic() - t0 < 150
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("  error: row collect-random failed")]
    assert len(errors) == 2 and "no rollout within --row-timeout 8s" in errors[0], done.stderr[-3000:]
    # the learner's own lines follow (how far its start-up got within the 8 s depends on the machine's load)
    tail = done.stderr.split("the learner's last log lines:\n", 1)
    assert len(tail) == 2 and " INFO " in tail[1].splitlines()[0], done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["runs"]["ceiling"]) == 2, "the ceiling row ran in both rounds, after the failed row too"
