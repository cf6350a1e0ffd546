"""Issue 43 point 3: a killed learner's private socket directory is removed by this user's next one."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from protocol.private_dirs import PID_FILE, PREFIX, private_dir, remove_mine, remove_stale

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no private socket directories on Windows")


def _dead_pid() -> int:
    return 2 ** 22 + 1  # above Linux's largest pid_max (and macOS's 99999): no process has it


def _socket_dir(base, name: str, pid: int | None) -> str:
    path = base / f"{PREFIX}{name}"
    path.mkdir(mode=0o700)
    (path / "learner.sock").write_text("")  # stands for the dead socket file a kill -9 leaves
    if pid is not None:
        (path / PID_FILE).write_text(f"{pid}\n")
    return str(path)


def test_a_directory_whose_process_is_gone_is_removed_and_only_that_one(tmp_path):
    dead = _socket_dir(tmp_path, "dead", _dead_pid())
    live = _socket_dir(tmp_path, "live", os.getpid())
    unknown = _socket_dir(tmp_path, "nopid", None)  # being made just now, or by a version without pid files
    (tmp_path / f"{PREFIX}half").mkdir()
    (tmp_path / f"{PREFIX}half" / PID_FILE).write_text("12")  # a pid file being written: no newline yet
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / PID_FILE).write_text(f"{_dead_pid()}\n")  # not ours by name
    assert remove_stale(str(tmp_path)) == [dead]
    assert not os.path.exists(dead)
    assert all(os.path.exists(p) for p in (live, unknown, tmp_path / f"{PREFIX}half", other))


def test_a_symlink_named_like_a_private_directory_is_neither_followed_nor_removed(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / PID_FILE).write_text(f"{_dead_pid()}\n")
    (tmp_path / f"{PREFIX}link").symlink_to(target)
    assert remove_stale(str(tmp_path)) == []
    assert (target / PID_FILE).exists() and (tmp_path / f"{PREFIX}link").is_symlink()


def test_a_missing_base_directory_is_nothing_to_clean(tmp_path):
    assert remove_stale(str(tmp_path / "absent")) == []


def test_a_private_directory_is_0700_and_names_its_process():
    path = private_dir()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700 and os.stat(path).st_uid == os.getuid()
    with open(os.path.join(path, PID_FILE)) as f:
        assert f.read() == f"{os.getpid()}\n"
    assert stat.S_IMODE(os.stat(os.path.join(path, PID_FILE)).st_mode) == 0o600


def test_a_process_that_ends_with_os_exit_removes_its_own_directories_first():
    """The learner ends with os._exit (report.metrics.exit_process): no finalizer removes its directory there."""
    path = private_dir()
    remove_mine()
    assert not os.path.exists(path)
