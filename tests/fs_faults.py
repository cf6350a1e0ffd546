"""Filesystems that fail writes, for tests: a full disk (a tiny tmpfs) and a read-only directory.

A tmpfs needs root (mount); as another user the full-disk cases are skipped with a reason. Read-only is a
read-only tmpfs as root (root ignores file modes) and chmod 0555 otherwise."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _mount(target: Path, options: str) -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")


@contextlib.contextmanager
def full_disk(target: Path, size_kb: int = 64):
    """`target` as a tmpfs of size_kb KiB (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk is simulated with a tiny tmpfs, which needs root")
    target.mkdir(parents=True, exist_ok=True)
    _mount(target, f"size={size_kb}k")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@contextlib.contextmanager
def read_only(target: Path):
    """`target` (an existing directory, its content kept readable) made unwritable."""
    if os.geteuid() != 0:
        target.chmod(0o555)
        try:
            yield target
        finally:
            target.chmod(0o755)
        return
    keep = target.with_name(target.name + ".content")
    shutil.copytree(target, keep)
    _mount(target, "size=16m")
    try:
        shutil.copytree(keep, target, dirs_exist_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)
        shutil.rmtree(keep, ignore_errors=True)
