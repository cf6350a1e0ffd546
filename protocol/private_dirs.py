"""Private socket directories: one 0700 directory per process that binds a 'local' address, and the removal
of those a killed process left behind.

Each directory holds a `pid` file naming the process that made it. A process removes its own directory when it
exits; after a kill -9 nobody does, so every new one first removes this user's `ppo-cluster-*` directories whose
pid file names a process that is gone. A directory without a readable pid file (being made just now, or made
before the pid file existed) is left alone; so is one whose process is alive or belongs to another user.
"""
from __future__ import annotations

import multiprocessing.util
import os
import shutil
import stat
import tempfile

from protocol.processes import pid_alive

PREFIX = "ppo-cluster-"
PID_FILE = "pid"
UNIX_PATH_MAX = 100  # bytes a Unix socket path may have (108 on Linux, 104 on macOS, with room for suffixes)
_made: list[tuple[int, str]] = []  # (pid, directory) of this process's (a forked child inherits its parent's)


def private_dir() -> str:
    """A new directory only this user may enter (mkdtemp makes it 0700), removed when this process exits (not
    after a kill -9: the next private_dir of this user removes it then)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or None
    if base is not None and (not os.path.isdir(base) or len(base) > UNIX_PATH_MAX - 60):
        base = None
    for folder in {base or tempfile.gettempdir(), "/tmp"}:
        remove_stale(folder)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=base)
    if len(path) > UNIX_PATH_MAX - 40:  # a long $TMPDIR: the socket path would not fit
        os.rmdir(path)
        path = tempfile.mkdtemp(prefix=PREFIX, dir="/tmp")
    os.chmod(path, stat.S_IRWXU)  # mkdtemp's mode already; said again so a umask or a port cannot widen it
    _write_pid(path)
    _made.append((os.getpid(), path))
    # removed at exit, also from a fork-started multiprocessing child, which ends with os._exit: atexit handlers
    # do not run there, multiprocessing's finalizers do (and run from atexit in any other process)
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=0)
    return path


def remove_mine() -> None:
    """Remove the private directories this process made, now: for a process that ends with os._exit outside
    multiprocessing (the learner's exit_process), where no finalizer runs."""
    for pid, path in _made:
        if pid == os.getpid():
            shutil.rmtree(path, ignore_errors=True)


def remove_stale(base: str) -> list[str]:
    """Remove this user's private directories under `base` whose owner process is gone; returns them."""
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(base, name)
        if _is_stale(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _is_stale(path: str) -> bool:
    try:
        st = os.lstat(path)  # lstat: a symlink named like ours is not followed, nor removed
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    pid = _read_pid(path)
    return pid is not None and not pid_alive(pid)


def _write_pid(path: str) -> None:
    fd = os.open(os.path.join(path, PID_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")


def _read_pid(path: str) -> int | None:
    try:
        with open(os.path.join(path, PID_FILE)) as f:
            text = f.read()
    except OSError:
        return None
    return int(text) if text.endswith("\n") and text.strip().isdigit() else None  # a half-written one: alive

