"""Atomic checkpoints: written to a temp file, fsynced, then renamed, so a crash never leaves a torn one.

The content is tensors and plain types only, loadable with torch.load(weights_only=True).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

PATTERN = re.compile(r"^ckpt_(\d{8})\.pt$")


def save(run_dir: Path, update: int, state: dict, keep: int = 3) -> Path:
    ckpt_dir = Path(run_dir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"ckpt_{update:08d}.pt"
    tmp = ckpt_dir / f".tmp_{final.name}.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(ckpt_dir)
    prune(ckpt_dir, keep)
    return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(ckpt_dir: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints; temp files of dead writers go too."""
    for stale in ckpt_dir.glob(".tmp_*"):
        if not stale.name.endswith(f".{os.getpid()}"):
            stale.unlink(missing_ok=True)
    if keep > 0:
        for old in list_checkpoints(ckpt_dir)[:-keep]:
            old.unlink(missing_ok=True)


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    return sorted(p for p in Path(ckpt_dir).glob("ckpt_*.pt") if PATTERN.match(p.name))


def latest(run_dir: Path) -> Path | None:
    found = list_checkpoints(Path(run_dir) / "checkpoints")
    return found[-1] if found else None


def load(path: Path, device: str | torch.device = "cpu") -> dict:
    return torch.load(path, map_location=device, weights_only=True)
