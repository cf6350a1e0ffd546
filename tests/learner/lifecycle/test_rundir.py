"""The run directory's lock and default names (issue 32, point 1), in one process: the lock is per open file."""
from __future__ import annotations

import os
import re
import time

import pytest

from learner.lifecycle.rundir import RunDirHeld, RunLock, default_name, holder, refuse_if_held


def test_default_names_of_runs_started_in_the_same_second_differ():
    """Two names of one second and one process differ by their random part (2 bytes: 1 in 65536 alike; the
    50 names this test drew before collided in about 1 run in 50)."""
    first, second = (default_name("ALE/Breakout-v5", now=1_700_000_000.0) for _ in range(2))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(1_700_000_000.0))
    for name in (first, second):
        assert re.fullmatch(rf"breakout-v5-{stamp}-{os.getpid()}-[0-9a-f]{{4}}", name), name
    assert first != second


def test_a_held_directory_is_refused_naming_the_holder_and_freed_on_release(tmp_path):
    lock = RunLock(tmp_path)
    assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n" and holder(tmp_path) == os.getpid()
    with pytest.raises(RunDirHeld, match=f"in use by another run \\(pid {os.getpid()}\\)"):
        RunLock(tmp_path)
    with pytest.raises(RunDirHeld, match=f"pid {os.getpid()}"):
        refuse_if_held(tmp_path)
    lock.release()
    assert holder(tmp_path) is None
    RunLock(tmp_path).release()  # a stale lock file (its holder gone) blocks nothing


def test_looking_at_an_unheld_directory_writes_nothing(tmp_path):
    assert holder(tmp_path) is None and refuse_if_held(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_a_learner_run_on_its_own_takes_the_lock_and_is_refused_on_a_held_directory(tmp_path, capsys):
    from learner.config import Config
    from learner.main import run
    lock = RunLock(tmp_path)
    try:
        assert run(Config(), tmp_path, parent_pid=0) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"in use by another run (pid {os.getpid()})" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]
