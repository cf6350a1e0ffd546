"""Atomic checkpoints: written to a temp file, fsynced, then renamed, so a crash never leaves a torn one.

RUN_DIR/checkpoints holds the newest `keep` ckpt_XXXXXXXX.pt files plus best.pt, the checkpoint with the
best score seen so far (the smoothed return; best.json records its score and update). best.pt is only
replaced when the score improves, also atomically; latest() never returns it, so --resume always
continues from the newest checkpoint.

The content is tensors and plain types only, loadable with torch.load(weights_only=True).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import torch

PATTERN = re.compile(r"^ckpt_(\d{8})\.pt$")
BEST = "best.pt"
BEST_INFO = "best.json"
TMP_PREFIX = ".tmp_"


def save(run_dir: Path, update: int, state: dict, keep: int = 3, score: float | None = None) -> Path:
    """Write ckpt_<update>.pt, keep the newest `keep` of them, and make it best.pt if `score` beats the best.

    score None (or NaN) means "no score yet": best.pt is left alone.
    """
    ckpt_dir = Path(run_dir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"ckpt_{update:08d}.pt"
    tmp = _tmp_path(final)
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(ckpt_dir)
    if score is not None and math.isfinite(score) and score > (best_score(run_dir) or -math.inf):
        _install_best(ckpt_dir, final, float(score), update)
    prune(ckpt_dir, keep)
    return final


def _tmp_path(final: Path) -> Path:
    return final.with_name(f"{TMP_PREFIX}{final.name}.{os.getpid()}")


def _install_best(ckpt_dir: Path, source: Path, score: float, update: int) -> None:
    """best.pt becomes a hard link to (or, where links are unsupported, a copy of) `source`, atomically."""
    best = ckpt_dir / BEST
    tmp = _tmp_path(best)
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)  # same inode: no second write, and pruning `source` later leaves it intact
    except OSError:
        shutil.copyfile(source, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, best)
    info_tmp = _tmp_path(ckpt_dir / BEST_INFO)
    with open(info_tmp, "w") as f:
        json.dump({"score": score, "update": update, "source": source.name}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(info_tmp, ckpt_dir / BEST_INFO)
    _fsync_dir(ckpt_dir)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(ckpt_dir: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints (best.pt is not one of them); temp files of dead writers go too."""
    for stale in ckpt_dir.glob(f"{TMP_PREFIX}*"):
        if not stale.name.endswith(f".{os.getpid()}"):
            stale.unlink(missing_ok=True)
    if keep > 0:
        for old in list_checkpoints(ckpt_dir)[:-keep]:
            old.unlink(missing_ok=True)


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """ckpt_XXXXXXXX.pt files, oldest first (never best.pt, never a temp file)."""
    return sorted(p for p in Path(ckpt_dir).glob("ckpt_*.pt") if PATTERN.match(p.name))


def latest(run_dir: Path) -> Path | None:
    found = list_checkpoints(Path(run_dir) / "checkpoints")
    return found[-1] if found else None


def best(run_dir: Path) -> Path | None:
    path = Path(run_dir) / "checkpoints" / BEST
    return path if path.is_file() else None


def best_info(run_dir: Path) -> dict | None:
    """{"score", "update", "source"} of best.pt, or None when there is none (or its record is unreadable)."""
    path = Path(run_dir) / "checkpoints" / BEST_INFO
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("score"), (int, float)) else None


def best_score(run_dir: Path) -> float | None:
    if best(run_dir) is None:
        return None
    info = best_info(run_dir)
    return float(info["score"]) if info else None


def load(path: Path, device: str | torch.device = "cpu") -> dict:
    return torch.load(path, map_location=device, weights_only=True)


def load_newest(run_dir: Path, device: str | torch.device = "cpu") -> tuple[Path | None, dict | None, list]:
    """The newest checkpoint that loads, its content, and the newer ones that did not load as
    [(path, reason in one line)], newest first. (None, None, skipped) when none loads (or there is none).

    A file cut short (a full disk, a copy interrupted) or otherwise damaged must not end a resume: the one
    before it is at most run.checkpoint_every updates older."""
    skipped = []
    for path in reversed(list_checkpoints(Path(run_dir) / "checkpoints")):
        try:
            return path, load(path, device), skipped
        except Exception as exc:  # torch raises RuntimeError, OSError, EOFError, UnpicklingError ... for one cause
            skipped.append((path, first_line(exc)))
    return None, None, skipped


def first_line(exc: BaseException, limit: int = 200) -> str:
    """torch's load errors run to many lines of advice: the first line says what is wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
