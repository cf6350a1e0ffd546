"""Rank 0's outputs for the whole job, one line per update: metrics.jsonl (and the metrics sinks) and every
finished episode in episodes.jsonl."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from learner.config import Config
from learner.report.episodes import RecentEpisodes
from learner.report.metrics import MetricsWriter, append_line, close_quietly

if TYPE_CHECKING:  # annotations only: report/ is the end of the data path
    from learner.advantages.batch import TrainingBatch
    from learner.update.ppo import PPOUpdater


@dataclass
class Job:
    """One rollout on its way through the update: what its metrics line and checkpoint record."""
    update: int
    env_steps: int      # the job's env steps including this rollout (all ranks)
    progress: float     # env steps before this rollout / total steps: sets the learning rate
    batch: "TrainingBatch | None"  # this rank's (None: a rank without actors this time)
    n_valid: int        # env steps this rollout added, all ranks together
    t0: float           # collection began
    t1: float           # collection ended
    collection: dict | None = None  # where its collection's time went (learner/collection/counters.py)


@dataclass(frozen=True)
class Gathered:
    """What every rank brought to one update's line: per rank (widths, actors, sums), or summed."""
    widths: list[int]          # env slots in the rollout
    actors: list[int]
    sums: list[str] | None     # weights checksums (several ranks only)
    rejected: int              # messages, the job's
    dropped: int               # samples, the job's
    events: list[str]          # joins and leaves


@dataclass(frozen=True)
class Since:
    """Where this process's training started: for the rate behind eta_s."""
    env_steps: int
    elapsed_s: float


class Reporter:
    def __init__(self, run_dir: Path, cfg: Config, episodes: RecentEpisodes, updater: "PPOUpdater", world: int,
                 policy_lag: int):
        """`episodes`: the job's, pooled from every rank; `policy_lag`: the one in effect (0 without)."""
        self.cfg, self.episodes, self.updater, self.world, self.policy_lag = cfg, episodes, updater, world, policy_lag
        self.metrics = MetricsWriter(run_dir, cfg)
        self.episodes_file = open(run_dir / "episodes.jsonl", "a", buffering=1)  # every finished episode, raw

    def write(self, job: Job, stats: dict, gathered: Gathered, interval: float, state: dict, since: Since,
              serial: dict | None = None) -> None:
        """`serial`: the training loop's latest serial period (learner/report/serial.py), with job.collection
        the record's `collection` breakdown."""
        r, ep, g = self.cfg.run, self.episodes, gathered
        rate = (job.env_steps - since.env_steps) / max(state["elapsed_s"] - since.elapsed_s, 1e-9)
        record = {
            "update": job.update, "env_steps": job.env_steps, "sps": job.n_valid / max(interval, 1e-9),
            "episode_return_mean": sum(ep.returns) / len(ep.returns) if ep.returns else None,
            "episode_length_mean": sum(ep.lengths) / len(ep.lengths) if ep.lengths else None,
            "episodes": ep.count, "policy_loss": stats.get("policy_loss"), "value_loss": stats.get("value_loss"),
            "entropy": stats.get("entropy"), "approx_kl": stats.get("approx_kl"),
            "approx_kl_sq": stats.get("approx_kl_sq"), "epoch_kls": stats.get("epoch_kls"),
            "value_norm_mean": stats.get("value_norm_mean"), "value_norm_std": stats.get("value_norm_std"),
            "clip_fraction": stats.get("clip_fraction"), "explained_variance": stats.get("explained_variance"),
            "learning_rate": stats.get("learning_rate", self.updater.learning_rate(job.progress)),
            "actors": sum(g.actors), "env_slots": sum(g.widths), "weights_version": state["version"],
            "elapsed_s": state["elapsed_s"], "collect_s": job.t1 - job.t0, "update_s": stats["update_s"],
            "progress": min(job.env_steps / r.total_steps, 1.0),
            "eta_s": max(r.total_steps - job.env_steps, 0) / max(rate, 1e-9),
            "rejected_messages": g.rejected, "dropped_samples": g.dropped,
            "kl_beta": stats.get("kl_beta"), "update_kl": stats.get("update_kl"),
            "first_minibatch_ratio_max_dev": stats.get("first_minibatch_ratio_max_dev"),
            "policy_lag": self.policy_lag, "events": g.events,
            "collection": None if job.collection is None else {**job.collection, "serial_s": serial},
        }
        if r.batch_checksum:
            record["batch_checksum"] = stats.get("batch_checksum")
        if g.sums is not None:
            record.update(learners=self.world, rank_env_slots=g.widths, rank_actors=g.actors,
                          rank_weights_checksums=g.sums)
        self.metrics.write(record)
        for ret, length in ep.take_new():
            append_line(self.episodes_file, {"update": job.update, "env_steps": job.env_steps, "return": ret,
                                             "length": int(length)})

    def score(self) -> float | None:
        return self.metrics.score()

    def close(self) -> None:
        self.metrics.close()
        close_quietly(self.episodes_file)
