"""The run directory's lock and default names (issue 32, point 1), in one process: the lock is per open file."""
from __future__ import annotations

import os
import re
import stat
import time

import pytest

from learner.lifecycle.run_lock import RunDirHeld, RunLock, default_name, holder, make_private, refuse_if_held


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
    from learner.main import run_learner
    lock = RunLock(tmp_path)
    try:
        assert run_learner(Config(), tmp_path, parent_pid=0) == 2
    finally:
        lock.release()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"in use by another run (pid {os.getpid()})" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]


def test_a_run_directory_is_made_private_whatever_the_umask(tmp_path):
    """Issue 43: nothing of a run may be readable by another local user."""
    old = os.umask(0)
    try:
        assert make_private(tmp_path / "runs" / "new") is False
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "runs" / "new").stat().st_mode) == 0o700


def test_an_open_run_directory_is_narrowed_and_says_so(tmp_path):
    opened = tmp_path / "old-run"
    opened.mkdir()
    os.chmod(opened, 0o755)  # as versions before issue 43 made it
    assert make_private(opened) is True
    assert stat.S_IMODE(opened.stat().st_mode) == 0o700 and make_private(opened) is False


def test_the_lock_file_is_this_users_only(tmp_path):
    RunLock(tmp_path).release()
    assert stat.S_IMODE((tmp_path / "lock").stat().st_mode) & 0o077 == 0


# ---- issue 60, point 7: a run directory another user owns, or may replace, is refused, root included

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")


@as_root
def test_another_users_directory_is_refused_even_as_root_and_left_as_it_was(tmp_path):
    """Before: as root, make_private said 'now 0700' and the run wrote into nobody's directory."""
    from learner.lifecycle.run_lock import RunDirForeign
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    os.chmod(theirs, 0o777)
    with pytest.raises(RunDirForeign, match=r"belongs to .*uid 65534.*refusing to take it over"):
        make_private(theirs)
    st = theirs.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o777) and list(theirs.iterdir()) == []


@as_root
def test_a_directory_in_another_users_directory_is_refused(tmp_path):
    from learner.lifecycle.run_lock import RunDirForeign, check_owned
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    os.chown(parent, NOBODY, NOBODY)
    with pytest.raises(RunDirForeign, match=r"which belongs to .*uid 65534.*could replace it"):
        check_owned(parent / "run")
    assert not (parent / "run").exists()


def test_a_directory_in_one_others_may_write_is_refused_unless_sticky(tmp_path):
    from learner.lifecycle.run_lock import RunDirForeign
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(RunDirForeign, match=r"which is writable by other users \(mode 777\)"):
        make_private(shared / "runs" / "new")  # the nearest directory that exists is the one checked
    assert list(shared.iterdir()) == []
    os.chmod(shared, 0o1777)  # as /tmp: only an entry's owner may rename it
    assert make_private(shared / "run") is False


def test_the_lock_is_never_taken_through_a_symlink(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "lock").symlink_to(elsewhere)
    with pytest.raises(OSError):
        RunLock(run_dir)
    assert not elsewhere.exists() and holder(run_dir) is None
