"""The launcher's run directory: its name, never a run written over without --resume, its lock held while the run
lives (learner/lifecycle/run_lock.py), the config.toml written into it, and nothing left behind when the learner
refuses to start."""
from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from launcher.job import external_job, lock_rank
from learner.config import Config, ConfigError, to_toml
from learner.lifecycle.run_lock import RunDirHeld, RunLock, default_name, make_private
from protocol.files import WriteFailed, atomic_write

log = logging.getLogger("launch")


def default_run_dir(env_id: str) -> Path:
    """runs/<env>-<date>-<time>-<pid>-<random>; under torchrun or srun every worker (and a restarted job) must
    name the same directory: runs/<env>-<job id>."""
    job = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")
    if external_job() and job:
        name = re.sub(r"[^A-Za-z0-9]+", "-", env_id.split("/")[-1]).strip("-").lower()
        return Path("runs") / f"{name}-{re.sub(r'[^A-Za-z0-9]+', '-', job)}"
    return Path("runs") / default_name(env_id)


def check_fresh(run_dir: Path) -> None:
    """A run directory that already holds a run is continued with --resume, never silently written over.
    (CleanRL names every run afresh; Sample Factory resumes by default. Here resuming is asked for.)"""
    metrics = run_dir / "metrics.jsonl"
    held = [what for what, there in (("metrics.jsonl", metrics.is_file() and metrics.stat().st_size > 0),
                                     ("checkpoints", any((run_dir / "checkpoints").glob("ckpt_*.pt")))) if there]
    if held:
        raise ConfigError(f"--run-dir {run_dir} already holds a run ({' and '.join(held)}): continue it with "
                          f"--resume {run_dir}, or pick a fresh name (e.g. --run-dir {fresh_name(run_dir)})")


def fresh_name(run_dir: Path) -> Path:
    n = 2
    while run_dir.with_name(f"{run_dir.name}-{n}").exists():
        n += 1
    return run_dir.with_name(f"{run_dir.name}-{n}")


def take_run_dir(run_dir: Path, cfg: Config) -> tuple[RunLock, bool, bytes | None]:
    """Create (if new) and lock the run directory, then write config.toml. Returns the lock, whether the
    directory was created, and the config.toml it held before (restored if the learner refuses a resume)."""
    created = not run_dir.exists()
    try:
        if make_private(run_dir):
            log.info("run directory %s was open to other users: now 0700 (this user only)", run_dir)
        lock = RunLock(run_dir, lock_rank())
    except OSError as exc:
        raise WriteFailed(f"cannot use {run_dir}: {exc.strerror or exc}") from None
    except RunDirHeld:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    config = run_dir / "config.toml"
    saved = config.read_bytes() if config.is_file() else None
    try:
        atomic_write(config, to_toml(cfg))  # several workers of one job may write it at once
    except WriteFailed:
        lock.release()
        raise
    return lock, created, saved


def undo_refused(run_dir: Path, created: bool, saved: bytes | None) -> None:
    """The learner refused to start (its log line said why): a directory made for it is removed, a resumed
    run's own config.toml put back."""
    if created:  # leave nothing behind
        shutil.rmtree(run_dir, ignore_errors=True)
        log.info("nothing started: removed %s", run_dir)
    elif saved is not None:
        atomic_write(run_dir / "config.toml", saved)
