"""Atomic checkpoints: written to a temp file, fsynced, then renamed, so a crash never leaves a torn one.

RUN_DIR/checkpoints holds the newest `keep` ckpt_XXXXXXXX.pt files plus best.pt, the checkpoint with the
best score seen so far (the smoothed return; best.json records its score and update). best.pt is only
replaced when the score improves, also atomically; latest() never returns it, so --resume always
continues from the newest checkpoint.

The content is tensors and plain types only, loadable with torch.load(weights_only=True).
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import warnings
from pathlib import Path

import torch

from protocol.files import WriteFailed, atomic_write, is_temp

PATTERN = re.compile(r"^ckpt_(\d{8})\.pt$")
BEST = "best.pt"
BEST_INFO = "best.json"
TMP_PREFIX = ".tmp_"
FORMAT = "ppo-cluster-checkpoint/1"  # the marker every checkpoint since issue 32 carries
REQUIRED = {"model": dict, "updater": dict, "config": dict, "update": int, "env_steps": int}  # and older ones too


class NotACheckpoint(ValueError):
    """A file that is not a checkpoint of this project (or one whose numbers are not finite): one line."""


def save(run_dir: Path, update: int, state: dict, keep: int = 3, score: float | None = None) -> Path:
    """Write ckpt_<update>.pt, keep the newest `keep` of them, and make it best.pt if `score` beats the best.

    score None (or NaN) means "no score yet": best.pt is left alone. A write that fails (disk full, read-only)
    raises WriteFailed with the previous checkpoints intact and no temp file left.
    """
    ckpt_dir = Path(run_dir) / "checkpoints"
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteFailed(f"cannot write {ckpt_dir}: {exc.strerror or exc}") from None
    final = ckpt_dir / f"ckpt_{update:08d}.pt"
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    atomic_write(final, buffer.getbuffer())
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
    try:
        tmp.unlink(missing_ok=True)
        try:
            os.link(source, tmp)  # same inode: no second write, and pruning `source` later leaves it intact
        except OSError:
            shutil.copyfile(source, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, best)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteFailed(f"cannot write {best}: {exc.strerror or exc}") from None
    atomic_write(ckpt_dir / BEST_INFO, json.dumps({"score": score, "update": update, "source": source.name}))


def prune(ckpt_dir: Path, keep: int) -> None:
    """Keep the newest `keep` checkpoints (best.pt is not one of them); temp files of dead writers go too."""
    for stale in ckpt_dir.iterdir():
        if (stale.name.startswith(TMP_PREFIX) and not stale.name.endswith(f".{os.getpid()}")) or is_temp(stale.name):
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


def load(path: Path, device: str | torch.device = "cpu"):
    """A file's content, never unpickling anything but tensors and plain types (weights_only); one that does
    not load raises NotACheckpoint with one line."""
    try:
        return _read(path, device)
    except Exception as exc:  # torch raises RuntimeError, OSError, EOFError, UnpicklingError ... for one cause
        raise NotACheckpoint(f"{path}: not a checkpoint of this project ({first_line(exc, 120)})") from None


def _read(path: Path, device: str | torch.device):
    with warnings.catch_warnings():  # torch's advice about pickle protocols is not the user's business
        warnings.simplefilter("ignore")
        return torch.load(path, map_location=device, weights_only=True)


def load_checkpoint(path: Path, device: str | torch.device = "cpu") -> dict:
    """load(), and the structure of a checkpoint of this project checked (else NotACheckpoint, one line)."""
    saved = load(path, device)
    check_structure(saved, path)
    return saved


def check_structure(saved, path: Path | str = "checkpoint") -> None:
    """The keys and types every checkpoint of this project has (a format marker, when present, must match)."""
    if not isinstance(saved, dict):
        raise NotACheckpoint(f"{path}: not a checkpoint of this project (it holds a {type(saved).__name__}, "
                             "not a checkpoint's table)")
    if "format" in saved and saved["format"] != FORMAT:
        raise NotACheckpoint(f"{path}: not a checkpoint of this project (format {saved['format']!r})")
    wrong = [key for key, kind in REQUIRED.items() if not isinstance(saved.get(key), kind)]
    if wrong:
        raise NotACheckpoint(f"{path}: not a checkpoint of this project (missing or wrong: {', '.join(wrong)})")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in saved["model"].items()):
        raise NotACheckpoint(f"{path}: not a checkpoint of this project (its model is not a table of tensors)")


NUMERIC_PARTS = ("model", "updater", "obs_norm", "reward_scaler", "value_norm")


def non_finite(saved: dict) -> str | None:
    """Where the first NaN or infinity of the weights, optimizer state or statistics is; None if none."""
    def walk(value, where: str) -> str | None:
        if isinstance(value, torch.Tensor):
            ok = not value.is_floating_point() or bool(torch.isfinite(value).all())
            return None if ok else where
        if isinstance(value, float):
            return None if math.isfinite(value) else where
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, (list, tuple)):
            items = enumerate(value)
        else:
            return None
        return next((found for k, v in items if (found := walk(v, f"{where}.{k}"))), None)
    return next((found for part in NUMERIC_PARTS if (found := walk(saved.get(part), part))), None)


def load_newest(run_dir: Path, device: str | torch.device = "cpu") -> tuple[Path | None, dict | None, list]:
    """The newest checkpoint that loads and holds only finite numbers, its content, and the newer ones that
    did not as [(path, reason in one line)], newest first. (None, None, skipped) when none does.

    A file cut short (a full disk, a copy interrupted), otherwise damaged, or saved from a run whose weights
    had diverged to NaN must not end a resume: the one before it is at most run.checkpoint_every updates older."""
    skipped = []
    for path in reversed(list_checkpoints(Path(run_dir) / "checkpoints")):
        try:
            saved = _read(path, device)
            check_structure(saved, path)
        except NotACheckpoint as exc:
            skipped.append((path, str(exc).split(": ", 1)[-1]))
            continue
        except Exception as exc:  # cut short (a full disk, a copy interrupted) or otherwise damaged
            skipped.append((path, f"it does not load ({first_line(exc, 150)})"))
            continue
        if where := non_finite(saved):
            skipped.append((path, f"non-finite values in {where}"))
            continue
        return path, saved, skipped
    return None, None, skipped


def first_line(exc: BaseException, limit: int = 200) -> str:
    """torch's load errors run to many lines of advice: the first line says what is wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
