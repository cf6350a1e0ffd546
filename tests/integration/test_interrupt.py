"""Ctrl-C at any moment of start-up or training (issue 25, item 2): "stopping" at once, everything stops in
order, exit 0, no child traceback, no process of the run left; a second Ctrl-C forces (exit 130).

A terminal's Ctrl-C is SIGINT to the whole foreground process group: launch.py's children get it too. The
console goes to a file so that the moments can be waited for while the run goes on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.cluster import (ROOT, assert_session_gone, endpoints, kill_group, metrics, session_pids,
                                      wait_for)

pytestmark = pytest.mark.integration
SMOKE = ("--config", "configs/smoke.toml", "--total-steps", "10000000")


def start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
    run_dir, console = tmp_path / "run", tmp_path / "console.txt"
    with open(console, "w") as sink:
        proc = subprocess.Popen([sys.executable, "launch.py", *SMOKE, "--run-dir", str(run_dir), *extra], cwd=ROOT,
                                stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return proc, run_dir, console


def ctrl_c(proc: subprocess.Popen, group: bool) -> None:
    if group:
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does
    else:
        os.kill(proc.pid, signal.SIGINT)


MOMENTS = {
    "learner starting": lambda run_dir: (run_dir / "processes.json").exists(),
    "actors starting": lambda run_dir: endpoints(run_dir),
    "training": lambda run_dir: len(metrics(run_dir)) >= 1,
}


@pytest.mark.parametrize("moment, group, extra", [
    ("learner starting", True, ()),
    ("actors starting", True, ("--set", "eval.every=1")),  # the evaluator starting too
    ("actors starting", False, ()),
    ("training", True, ()),
])
def test_ctrl_c_stops_everything_and_exits_zero(tmp_path, moment, group, extra):
    proc, run_dir, console = start(tmp_path, *extra)
    try:
        wait_for(lambda: MOMENTS[moment](run_dir), 90, moment, proc)
        ctrl_c(proc, group)
        proc.wait(timeout=60)
    finally:
        kill_group(proc)
    out = console.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert "stopping (Ctrl-C again to force)" in out
    assert "did not come up" not in out and "exited with code" not in out, out[-3000:]
    logs = [out, *(p.read_text() for p in run_dir.glob("*.log"))]
    assert not any("Traceback" in text or "KeyboardInterrupt" in text for text in logs), out[-3000:]
    assert_session_gone(proc.pid, timeout=5)


def test_a_second_ctrl_c_forces(tmp_path):
    """A learner that cannot stop (SIGSTOPped here: a hung one) keeps the first Ctrl-C's orderly stop waiting;
    the second kills every process of the run and exits 130."""
    proc, run_dir, console = start(tmp_path)
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        pids = session_pids(proc.pid)
        learner = endpoints(run_dir)["pid"]
        os.kill(learner, signal.SIGSTOP)
        ctrl_c(proc, group=True)
        wait_for(lambda: "stopping (Ctrl-C again to force)" in console.read_text(), 10, "the stopping line", proc)
        assert proc.poll() is None, "the stop waits for the (stopped) learner"
        ctrl_c(proc, group=True)
        proc.wait(timeout=30)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, console.read_text()[-3000:]
    assert len(pids) >= 4  # launch.py, the learner, two actors
    assert_session_gone(proc.pid, timeout=10)


class Terminal:
    """launch.py with its stdout and stderr on a pty, as a terminal runs it (the progress bar shows), in a session
    of its own; what it writes to the screen is read by a thread until the last writer closes it."""

    def __init__(self, *args: str):
        master, slave = os.openpty()
        self.proc = subprocess.Popen([sys.executable, "launch.py", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self.master, self.chunks = master, []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer has closed the pty
                return
            if not data:
                return
            self.chunks.append(data)

    def screen(self, timeout: float = 10) -> str:
        self.reader.join(timeout)
        return b"".join(self.chunks).decode(errors="replace")

    def close(self) -> None:
        kill_group(self.proc)
        self.proc.wait(timeout=10)
        self.reader.join(5)
        os.close(self.master)


def test_ctrl_c_at_a_terminal_leaves_the_runs_own_lines_only(tmp_path):
    """Issue 43: a terminal's Ctrl-C after a few updates, with the progress bar shown: the final checkpoint is
    written and the screen holds no warning or traceback (a leaked semaphore of the bar's lock was one)."""
    run_dir = tmp_path / "run"
    terminal = Terminal(*SMOKE, "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 2, 90, "two updates", terminal.proc)
        os.killpg(terminal.proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C does: every process of the group
        terminal.proc.wait(timeout=60)
        screen = terminal.screen()
    finally:
        terminal.close()
    assert terminal.proc.returncode == 0, screen[-3000:]
    assert "stopping (Ctrl-C again to force)" in screen
    for word in ("Warning", "Traceback", "leaked", "KeyboardInterrupt"):
        assert word not in screen, screen[-3000:]
    last = metrics(run_dir)[-1]["update"]
    assert (run_dir / "checkpoints" / f"ckpt_{last:08d}.pt").exists(), sorted((run_dir / "checkpoints").iterdir())


@pytest.mark.parametrize("moment, to", [
    ("learner starting", "group"),  # a closed terminal: SIGHUP to every process of its foreground group
    ("training", "group"),
    ("training", "learner"),  # launch.py alone: tests/launcher/test_stops.py
])
def test_a_hang_up_stops_in_order_with_a_final_checkpoint_and_exits_zero(tmp_path, moment, to):
    """Issue 60, point 8: SIGHUP (the terminal closed) is a stop like SIGTERM, whichever processes get it: the
    learner writes its final checkpoint, the actors leave on its goodbye, exit 0, no process left (it killed
    them all at once, exit 129, no checkpoint)."""
    proc, run_dir, console = start(tmp_path)
    try:
        wait_for(lambda: MOMENTS[moment](run_dir), 90, moment, proc)
        if to == "group":
            os.killpg(proc.pid, signal.SIGHUP)
        else:
            os.kill(proc.pid if to == "launch" else endpoints(run_dir)["pid"], signal.SIGHUP)
        proc.wait(timeout=60)
    finally:
        kill_group(proc)
    out = console.read_text()
    assert proc.returncode == 0, out[-3000:]
    logs = [out, *(p.read_text() for p in run_dir.glob("*.log"))]
    assert not any("Traceback" in text for text in logs), out[-3000:]
    assert "exited with code" not in out and "was killed" not in out, out[-3000:]
    assert_session_gone(proc.pid, timeout=5)
    if moment == "training":
        last = metrics(run_dir)[-1]["update"]
        assert (run_dir / "checkpoints" / f"ckpt_{last:08d}.pt").exists(), sorted((run_dir / "checkpoints").iterdir())
        # (its "final checkpoint" line only when the periodic one had not already saved that update)
        assert "learner done:" in (run_dir / "learner.log").read_text()
        assert "interrupted (SIG" in (run_dir / "actors.log").read_text() or to != "group"
