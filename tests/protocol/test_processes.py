"""protocol.processes.parent_alive, the one check every child of a run (actor, learner, collector process,
eval worker) makes to leave when its parent is gone: with real processes, the parent exiting for real."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.processes import parent_alive, pid_alive

ROOT = Path(__file__).resolve().parents[2]
# the grandchild: says whether its parent (the child) is alive, tells the child it may exit (a line on the pipe
# the child reads), then polls parent_alive until it says gone, or gives up after 20 s
GRANDCHILD = """
import os, sys, time
from protocol.processes import parent_alive
pid, deadline = int(sys.argv[1]), time.monotonic() + 20
print("alive at start" if parent_alive(pid) else "gone at start", flush=True)
sys.stderr.write("checked\\n")
sys.stderr.flush()
os.dup2(1, 2)  # the child's pipe closes when it exits: anything later goes with stdout
while parent_alive(pid) and time.monotonic() < deadline:
    time.sleep(0.02)
print("gone" if not parent_alive(pid) else "still alive after 20 s", flush=True)
"""
# the child: starts the grandchild with its own pid, waits for its first check and exits, orphaning it
CHILD = ("import os, subprocess, sys; g = subprocess.Popen([sys.executable, '-c', sys.argv[1], str(os.getpid())], "
         "stderr=subprocess.PIPE); g.stderr.readline()")


@pytest.mark.integration
def test_a_child_sees_its_parent_until_the_parent_exits():
    child = subprocess.run([sys.executable, "-c", CHILD, GRANDCHILD], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)  # returns once the grandchild, holding the same stdout, has exited too
    assert child.stdout.split("\n")[:2] == ["alive at start", "gone"], child.stdout + child.stderr


def test_our_own_parent_is_alive_and_another_process_is_not_our_parent():
    assert parent_alive(os.getppid())
    assert not parent_alive(os.getpid())


def test_no_parent_pid_means_nothing_to_watch():
    assert parent_alive(0) and parent_alive(-1)


@pytest.mark.integration
def test_pid_alive_until_the_process_is_reaped():
    """Another user's process (pid 1, init, when the tests run unprivileged) counts as alive too."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert pid_alive(os.getpid()) and pid_alive(1)
    assert not pid_alive(child.pid)
