"""benchmarks/chaos.py runs end to end on a short subset of its faults: the table, and every fault survived."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration


def test_a_subset_of_the_faults_is_survived_and_tabled():
    cmd = [sys.executable, "benchmarks/chaos.py", "--faults", "ghost,greedy,out-of-turn,handshake-flood,big-flood"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["ghost", "greedy", "out-of-turn", "handshake-flood",
                                                          "big-flood"], done.stdout
    assert all("| yes |" in r for r in rows[1:]), done.stdout
    assert done.stdout.rstrip().endswith("5 of 5 faults survived, 0 checkpoints lost"), done.stdout[-500:]
