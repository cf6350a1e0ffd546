"""When torchrun or srun started this launcher as one rank of a job: which rank, and whether the job restarted."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from learner.config import ConfigError

log = logging.getLogger("launch")


def external_job() -> dict | None:
    """The rank this worker is, when torchrun or srun started it as one rank of a job (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world} but {', '.join(missing)} not set: start the job with torchrun, "
                          "or export them in the srun script (see the SLURM example in docs/scaling.md)")
    return {"rank": int(os.environ["RANK"]), "world": world}


def lock_rank() -> int:
    """This worker's rank in its job (0 without one): each rank holds its own lock in the run directory."""
    job = external_job()
    return job["rank"] if job else 0


def restarted_by_torchrun(run_dir: Path) -> bool:
    """torchrun --max-restarts starts the whole job again: it goes on from the run's newest checkpoint."""
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0 and any((run_dir / "checkpoints").glob("ckpt_*.pt")):
        log.info("restart %s of this torchrun job: resuming from %s", os.environ["TORCHELASTIC_RESTART_COUNT"], run_dir)
        return True
    return False
