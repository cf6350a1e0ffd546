"""Whole-file writes that a crash, a full disk or a read-only directory never leave torn or half-done.

`atomic_write` writes a temp file in the target's own directory (same filesystem, so the rename is atomic),
fsyncs it, renames it over the target and fsyncs the directory. On any failure the temp file is removed and
the target is left as it was; an OSError comes back as one `WriteFailed` naming the file and the cause.
Torch-free and numpy-free: launch.py, the learner, the actors' key tool and the benchmarks share it.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable, IO


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # run files are opened without following a symlink planted in their place


class WriteFailed(OSError):
    """A file could not be written (disk full, read-only, no permission): the old one, if any, is intact."""


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int | None = None) -> Path:
    """Write `data` (str: UTF-8) to `path` atomically; `mode`: exact permission bits (else 0666 less the umask
    at the time of the call, as open() makes them: 0600 in a run, whose launcher sets the umask 077)."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return atomic_write_with(path, lambda f: f.write(payload), mode)


def atomic_write_with(path: str | os.PathLike, write: Callable[[IO[bytes]], object], mode: int | None = None) -> Path:
    """As atomic_write, the content written by `write(binary_file)` (e.g. torch.save into it)."""
    path = Path(path)
    tmp = None
    try:
        fd, tmp = _create_temp(path, 0o600 if mode is not None else 0o666)
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        fsync_dir(path.parent)
    except OSError as exc:
        failed = WriteFailed(f"cannot write {path}: {exc.strerror or exc}")
        failed.errno = exc.errno
        raise failed from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def _create_temp(path: Path, mode: int) -> tuple[int, str]:
    """A new file beside `path` (as tempfile.mkstemp names it), made with `mode` less the current umask (the
    kernel applies it; mkstemp's fixed 0600 would need the umask read, which os.umask can only do by setting it)."""
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode), tmp
        except FileExistsError:
            continue


def open_append(path: str | os.PathLike, binary: bool = False, buffering: int = -1) -> IO:
    """`path` opened for appending (created, 0666 less the umask), never through a symlink: one in its place is
    WriteFailed, so nobody who planted it can make a run write where it points."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        why = "it is a symbolic link" if os.path.islink(path) else exc.strerror or str(exc)
        failed = WriteFailed(f"cannot write {path}: {why}")
        failed.errno = exc.errno
        raise failed from None
    return os.fdopen(fd, "ab" if binary else "a", buffering=buffering)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_temp(name: str) -> bool:
    """A temp file atomic_write leaves only if its process was killed mid-write (safe to delete then)."""
    return name.startswith(".") and name.endswith(".tmp")
