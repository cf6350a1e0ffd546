"""The learner's checkpoints: rank 0 resumes from the newest that loads and saves for the job; every rank then
starts from rank 0's weights, optimizer and counters."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from learner.config import Config
from learner.model.networks import ActorCritic
from learner.model.normalize import ObsNormalizer, RewardScaler, ValueNormalizer
from learner.report.episodes import RecentEpisodes
from learner.report.metrics import drop_rows_after
from learner.lifecycle.startup import StartupError, starting
from learner.update.ppo import PPOUpdater
from learner.update.ranks import Ranks
from learner.weights import checkpoint
from protocol.files import WriteFailed

log = logging.getLogger("learner")
COUNTERS = ("update", "env_steps", "version", "elapsed_s")


@dataclass(frozen=True)
class Learned:
    """What a checkpoint keeps besides the counters."""
    model: ActorCritic
    updater: PPOUpdater  # the optimizer, the KL penalty's beta
    obs_norm: ObsNormalizer | None
    reward_scaler: RewardScaler | None
    value_norm: ValueNormalizer | None
    episodes: RecentEpisodes  # the job's last-100 window and count


class SaveSchedule:
    """When a checkpoint is due: every `every_updates` updates, and also once `every_s` seconds (0: never) have
    passed since the last one (or since the schedule started), so a crash costs minutes however long an update is."""

    def __init__(self, every_updates: int, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.every_updates, self.every_s, self.clock = every_updates, every_s, clock
        self.since = clock()

    def due(self, update: int) -> bool:
        by_time = self.every_s > 0 and self.clock() - self.since >= self.every_s
        return update % self.every_updates == 0 or by_time

    def saved(self) -> None:
        """A checkpoint was written (or tried): the time counts again from now."""
        self.since = self.clock()


class Checkpointing:
    def __init__(self, run_dir: Path, cfg: Config, ranks: Ranks, learned: Learned, state: dict,
                 schedule: SaveSchedule | None = None):
        """`state`: the learner's counters (COUNTERS), updated in place by a resume; `schedule`: when a checkpoint
        is due (by default run.checkpoint_every and run.checkpoint_every_minutes on the monotonic clock)."""
        self.run_dir, self.cfg, self.ranks, self.learned, self.state = run_dir, cfg, ranks, learned, state
        self.schedule = schedule or SaveSchedule(cfg.run.checkpoint_every, 60 * cfg.run.checkpoint_every_minutes)
        self.last_saved: int | None = None  # the update of the last checkpoint written
        self.save_failed = False  # the newest checkpoint due could not be written (disk full, read-only)

    def due(self, update: int) -> bool:
        """Whether the checkpoint of this update is due (see SaveSchedule)."""
        return self.schedule.due(update)

    def sync_from_rank0(self) -> None:
        """Every rank starts from rank 0's weights, optimizer and counters (also after rank 0 resumed)."""
        if not self.ranks.distributed:
            return
        learned, ranks = self.learned, self.ranks
        ranks.broadcast_tensors(list(learned.model.parameters()) + list(learned.model.buffers()))
        ranks.broadcast_optimizer(learned.updater.optimizer)
        if learned.value_norm is not None:
            ranks.broadcast_tensors(list(learned.value_norm.buffers()))
        numbers = torch.tensor([float(self.state[k]) for k in COUNTERS] + [learned.updater.beta, learned.updater.lr],
                               dtype=torch.float64)
        ranks.broadcast_tensors([numbers])
        self.state.update({k: (float(v) if k == "elapsed_s" else int(v)) for k, v in zip(COUNTERS, numbers.tolist())})
        learned.updater.beta, learned.updater.lr = float(numbers[-2]), float(numbers[-1])

    def resume(self, device: torch.device) -> None:
        """Continue from the newest checkpoint that loads (newer ones that do not are skipped, one line each)."""
        path, saved, skipped = checkpoint.load_newest(self.run_dir, device)
        for bad, why in skipped:
            log.warning("skipped %s: %s; trying the one before it", bad.name, why)
        if path is None and skipped:
            raise StartupError(f"no checkpoint in {self.run_dir / 'checkpoints'} is usable "
                               f"({len(skipped)} tried; the newest, {skipped[0][0].name}: {skipped[0][1]})")
        if path is None:
            log.info("no checkpoint in %s: starting from scratch", self.run_dir)
        else:
            with starting(f"cannot resume from {path}"):
                self._restore(saved)
            log.info("resumed from %s at update %d (%d env steps, %d episodes)", path.name, self.state["update"],
                     self.state["env_steps"], self.learned.episodes.count)
        for name in ("metrics.jsonl", "episodes.jsonl"):
            if dropped := drop_rows_after(self.run_dir / name, self.state["update"]):
                log.info("%s: %d rows past update %d moved to %s.dropped", name, dropped, self.state["update"], name)

    def _restore(self, saved: dict) -> None:
        learned = self.learned
        learned.model.load_state_dict(saved["model"])
        learned.updater.load_state_dict(saved["updater"])
        if learned.obs_norm is not None:
            learned.obs_norm.load_state_dict(saved["obs_norm"])
        if learned.reward_scaler is not None:
            learned.reward_scaler.load_state_dict(saved["reward_scaler"])
        if learned.value_norm is not None:
            self._load_value_norm(saved.get("value_norm") or {})
        self.state.update({k: saved[k] for k in self.state})
        if "episodes" in saved:  # the last-100 window and the count (checkpoints before issue 25 lack them)
            learned.episodes.load_state_dict(saved["episodes"])

    def _load_value_norm(self, state: dict) -> None:
        if not state:  # a checkpoint of a run without normalize.value: its critic speaks raw returns
            raise StartupError("normalize.value is on but the checkpoint holds no value statistics "
                               "(it was written with normalize.value = false): resume with the same setting")
        self.learned.value_norm.load_state_dict(state)

    def save(self, update: int, env_steps: int, score) -> Path | None:
        """The update and env steps are those of the weights saved: with policy lag the loop is one rollout
        ahead of them, and a resume must neither skip nor repeat that rollout. Rank 0 saves for the job;
        `score`: what the checkpoint is ranked by when only the best are kept."""
        self.last_saved = update
        self.schedule.saved()
        if not self.ranks.main:
            return None
        learned = self.learned
        payload = {"model": learned.model.state_dict(), "updater": learned.updater.state_dict(),
                   "config": self.cfg.to_dict(), **self.state, "update": update, "env_steps": env_steps,
                   "episodes": learned.episodes.state_dict(),
                   "obs_norm": learned.obs_norm.state_dict() if learned.obs_norm else {},
                   "reward_scaler": learned.reward_scaler.state_dict() if learned.reward_scaler else {},
                   "value_norm": learned.value_norm.state_dict() if learned.value_norm else {}}
        try:
            path = checkpoint.save(self.run_dir, update, payload, keep=self.cfg.log.keep_checkpoints, score=score)
        except WriteFailed as exc:  # disk full, read-only: the previous checkpoint stays, training goes on
            last = checkpoint.latest(self.run_dir)
            log.error("checkpoint of update %d not written (%s); the newest kept is %s", update, exc,
                      last.name if last else "none")
            self.save_failed = True
            return None
        self.save_failed = False
        return path
