"""benchmarks/network.py: without root, one line and exit 0; with root, actors behind a veth pair, a rate limit
and the delay proxy give a table of bytes per step and ratios, the goals, and leave no namespace, link or
process behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration
SCRIPT = "benchmarks/network.py"


def test_without_root_it_says_so_in_one_line_and_exits_0():
    cmd = [sys.executable, SCRIPT]
    if os.geteuid() == 0:  # root runs it in a user namespace of its own, where it is nobody
        if shutil.which("unshare") is None:
            pytest.skip("root, and no unshare to run the script as another user")
        cmd = ["unshare", "--user", *cmd]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines() == ["benchmarks/network.py needs root and the ip and tc tools "
                                                "(network namespaces, tbf): skipped"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and tc")
def test_a_short_run_measures_a_limited_and_a_delayed_link_and_cleans_up(tmp_path):
    out = tmp_path / "network.json"
    cmd = [sys.executable, SCRIPT, "--games", "Pong", "--rounds", "1", "--window", "2", "--links", "unlimited,100mbit",
           "--delays", "5", "--actors", "1", "--envs", "8", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for row in ("| Pong | unlimited |", "| Pong | 100mbit |", "| Pong | 5 ms |", "goal Pong: actor -> learner"):
        assert row in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [x for x in spaces.splitlines() + links.splitlines() if "ppo-net-" in x or "ppoh" in x], (spaces, links)
    assert out.exists() and '"up_bytes_per_step"' in out.read_text()
