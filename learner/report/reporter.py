"""Rank 0's outputs for the whole job, one line per update: metrics.jsonl (and the metrics sinks) and every
finished episode in episodes.jsonl."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from learner.config import Config
from learner.gateway.events import cap_events
from learner.report.episodes import RecentEpisodes
from learner.report.metrics import MetricsWriter, append_line, close_quietly
from protocol.files import open_append

if TYPE_CHECKING:  # annotations only: report/ is the end of the data path
    from learner.advantages.batch import TrainingBatch
    from learner.update.ppo import PPOUpdater


@dataclass
class Job:
    """One rollout on its way through the update: what its metrics line and checkpoint record."""
    update: int
    env_steps: int      # the job's env steps including this rollout (all ranks)
    progress: float     # env steps before this rollout / the linear schedule's horizon: sets the learning rate
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
    samples: list[int] | None = None  # each rank's samples in the update (several ranks only: with run.segments
                                      # a rank whose actors are fast trains on more of the job's batch)

    def fields(self, world: int) -> dict:
        """The metrics line's part: the job's totals, and each rank's with several ranks."""
        out = {"actors": sum(self.actors), "env_slots": sum(self.widths), "rejected_messages": self.rejected,
               "dropped_samples": self.dropped, "events": cap_events(self.events)}
        if self.sums is not None:
            out.update(learners=world, rank_env_slots=self.widths, rank_actors=self.actors,
                       rank_weights_checksums=self.sums, rank_samples=self.samples)
        return out


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
        self.episodes_file = open_append(run_dir / "episodes.jsonl", buffering=1)  # every finished episode, raw

    def write(self, job: Job, stats: dict, gathered: Gathered, interval: float, state: dict, since: Since,
              serial: dict | None = None) -> None:
        """One update's line: the job's progress and timing, the episodes, every statistic the update returned
        (`stats`, whatever its keys: a new one reaches metrics.jsonl and the sinks unlisted), the collection's
        part (`gathered`) and its breakdown (job.collection, with `serial`: the training loop's latest serial
        period, learner/report/serial.py)."""
        ep = self.episodes
        record = {
            **self._progress(job, interval, state, since),
            "episode_return_mean": sum(ep.returns) / len(ep.returns) if ep.returns else None,
            "episode_length_mean": sum(ep.lengths) / len(ep.lengths) if ep.lengths else None,
            "episodes": ep.count,
            # the schedule's rate, for a collect-only update (no statistics); an update's own replaces it
            "learning_rate": self.updater.learning_rate(job.progress),
            **stats,
            **gathered.fields(self.world),
            "weights_version": state["version"], "policy_lag": self.policy_lag,
        }
        if job.collection is not None:
            record["collection"] = {**job.collection, "serial_s": serial}
        self.metrics.write(record)
        for ret, length in ep.take_new():
            append_line(self.episodes_file, {"update": job.update, "env_steps": job.env_steps, "return": ret,
                                             "length": int(length)})

    def _progress(self, job: Job, interval: float, state: dict, since: Since) -> dict:
        """Where the run stands: steps, their rate, the wall time and the time left."""
        total = self.cfg.run.total_steps
        rate = (job.env_steps - since.env_steps) / max(state["elapsed_s"] - since.elapsed_s, 1e-9)
        return {"update": job.update, "env_steps": job.env_steps, "sps": job.n_valid / max(interval, 1e-9),
                "progress": min(job.env_steps / total, 1.0), "elapsed_s": state["elapsed_s"],
                "collect_s": job.t1 - job.t0, "eta_s": max(total - job.env_steps, 0) / max(rate, 1e-9)}

    def score(self) -> float | None:
        return self.metrics.score()

    def close(self) -> None:
        self.metrics.close()
        close_quietly(self.episodes_file)
