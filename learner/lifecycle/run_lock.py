"""A run directory is held by one run at a time: names that cannot collide, and an exclusive lock.

RUN_DIR/lock is locked (fcntl.flock, exclusive) by the process that owns the run, launch.py or a learner
started on its own, from before it writes anything there until it exits; the kernel drops the lock when
that process dies however it dies, so a stale lock never blocks a --resume. The file records the holder's
pid, which a refused second run names. Torch-free: launch.py checks before any heavy import.

A run directory is private (issue 43): mode 0700 whatever the umask, so no other local user may read or
write anything in it; make_private creates it so, or narrows an existing one (made by an older version).
It is this user's (issue 60): one that another user owns, or that sits in a directory another user may write
(and so replace it), is refused (`check_owned`), root included: root must not take over another user's directory.
"""
from __future__ import annotations

import fcntl
import os
import re
import secrets
import time
import stat
from pathlib import Path

from protocol.files import NOFOLLOW

LOCK = "lock"
PRIVATE = 0o700  # this user only
RUN_UMASK = 0o077  # what the processes of a run create: files 0600, directories 0700 (launch.py sets it)


class RunDirHeld(RuntimeError):
    """Another live process holds the run directory: one line naming it."""


class RunDirForeign(RuntimeError):
    """The run directory is not safely this user's (another user owns it, or may replace it): one line."""


def _user(uid: int) -> str:
    try:
        import pwd
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_owned(run_dir: Path) -> None:
    """RunDirForeign unless run_dir (if it exists) belongs to this user, and the directory it is in (the nearest
    that exists) belongs to this user or root and is writable by nobody else: not by others, nor by a group
    other than this user's own, unless it has the sticky bit (as /tmp: only an entry's owner may rename it)."""
    me, path = os.geteuid(), Path(os.path.abspath(run_dir))
    if path.exists():
        owner = os.stat(path).st_uid
        if owner != me:
            raise RunDirForeign(f"run directory {run_dir} belongs to {_user(owner)}, not to {_user(me)} who runs "
                                f"this: refusing to take it over; pick a directory of your own (--run-dir)")
    parent = path.resolve().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    st = os.stat(parent)
    shared = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != os.getegid())
    why = (f"belongs to {_user(st.st_uid)}" if st.st_uid not in (me, 0) else
           f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})" if shared and not st.st_mode & stat.S_ISVTX
           else None)
    if why is not None:
        raise RunDirForeign(f"run directory {run_dir} is in {parent}, which {why}: they could replace it; pick a "
                            f"directory in one of your own (--run-dir)")


def default_name(env_id: str, now: float | None = None) -> str:
    """<env>-<date>-<time>-<pid>-<random>: two runs started in the same second (on one host or sharing
    runs/ over a network filesystem) get different directories."""
    env = re.sub(r"[^A-Za-z0-9]+", "-", env_id.split("/")[-1]).strip("-").lower() or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{env}-{stamp}-{os.getpid()}-{secrets.token_hex(2)}"


def make_private(run_dir: Path) -> bool:
    """Create run_dir (and its missing parents, as mkdir -p but 0700 whatever the umask, so that nobody else may
    replace it) or keep it, then give it mode 0700. True when an existing directory was open to other users
    before. RunDirForeign (nothing changed) when it is not this user's (check_owned), checked again once it
    exists (another user may have made it meanwhile)."""
    run_dir = Path(run_dir)
    check_owned(run_dir)
    for missing in reversed([p for p in (run_dir, *run_dir.parents) if not p.exists()]):
        try:
            missing.mkdir(mode=PRIVATE)  # mkdir's mode passes through the umask: at most 0700, chmod below
        except FileExistsError:
            pass
    check_owned(run_dir)
    was_open = bool(os.stat(run_dir).st_mode & 0o077)
    if was_open:
        os.chmod(run_dir, PRIVATE)
    return was_open


def lock_name(rank: int = 0) -> str:
    """Each local rank of a torchrun/srun job holds its own lock in the shared run directory."""
    return f"{LOCK}-rank-{rank}" if rank else LOCK


def holder(run_dir: Path, rank: int = 0) -> int | None:
    """The pid of the live process holding run_dir, None when nobody does. Writes nothing."""
    try:
        fd = os.open(Path(run_dir) / lock_name(rank), os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None  # no lock file: nobody ever held it (a holder creates it first)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _pid_in(fd)
    finally:
        os.close(fd)


def refuse_if_held(run_dir: Path, rank: int = 0) -> None:
    pid = holder(run_dir, rank)
    if pid is not None:
        raise RunDirHeld(_held_line(run_dir, pid))


class RunLock:
    """The exclusive lock on a run directory, held until release() or the process's exit."""

    def __init__(self, run_dir: Path, rank: int = 0):
        self.path = Path(run_dir) / lock_name(rank)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)  # not inherited by children (O_CLOEXEC)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _pid_in(self.fd)
            os.close(self.fd)
            raise RunDirHeld(_held_line(run_dir, pid)) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor drops the lock
            self.fd = -1


def _pid_in(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None  # the holder is between its lock and writing its pid


def _held_line(run_dir: Path, pid: int | None) -> str:
    who = f"pid {pid}" if pid is not None else "a process that has not yet written its pid"
    return (f"run directory {run_dir} is in use by another run ({who}): stop that run first, or pick another "
            f"--run-dir")
