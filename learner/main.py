"""The learner process: collect a rollout from the actors, compute GAE, update PPO, broadcast weights.

`Learner.train` reads top to bottom like CleanRL's loop: collect, advantages, update, publish, log,
checkpoint. Setting up (sockets, model, resume) is `Learner.__init__`; the pieces (gateway, collector,
batch, updater, publisher) live in their own modules.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import signal
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import torch
import zmq

from learner.config import Config, ConfigError, check_multi_rank
from learner.stalls import Stalled, Watchdog
from learner.gateway.admission import Admission, check_run_fits
from learner.collection.build import Door, RankContext, Serving, Spaces, env_seed
from learner.collection.collection import Collection
from learner.collection.forms import open_collection
from learner.collection.inference import Inference
from learner.collection.pool import default_collectors
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.advantages.batch import TrainingBatch, empty_batch, rollout_to_batch
from learner.update.ppo import PPOUpdater
from learner.update.runner import UpdateRunner
from learner.update.ranks import (Ranks, RanksLost, advertised_address, checksum, env_rank, local_slots_of_rank,
                                 min_envs_of_rank, rank_address)
from learner.weights import checkpoint
from learner.weights.message import broadcast_state
from learner.weights.publisher import WeightPublisher
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer, RewardScaler, ValueNormalizer
from learner.report.episodes import EpisodeStats
from learner.report.metrics import MetricsWriter, drop_rows_after, log_name, setup_logging
from protocol.settings import EnvSettings
from protocol.transport import local_address

log = logging.getLogger("learner")
PARENT_GRACE_S = 5.0  # after the launcher died: a clean stop within this, else a hard exit


class StartupError(Exception):
    """A run that cannot start (bad env id, unsupported space, address in use, bad keys): one line, exit 2."""


@contextmanager
def starting(what: str):
    try:
        yield
    except StartupError:
        raise
    except Exception as exc:  # whatever gymnasium, torch or zmq raise here, the user gets one line
        raise StartupError(f"{what}: {exc}") from None


def pick_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise StartupError("run.device=cuda but no CUDA device is available")
    if not (name == "cuda" or (name == "auto" and torch.cuda.is_available())):
        return torch.device("cpu")
    # one GPU per learner rank on a host (NCCL needs it): LOCAL_RANK, set by launch.py --learners and torchrun
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def join_ranks(cfg: Config, device: torch.device) -> Ranks:
    """This learner's place in a multi-rank job (1 rank of 1 without one), refusing what G > 1 lacks."""
    with starting("cannot join the other learner ranks"):
        ranks = Ranks.from_env(device, cfg.cluster.collective_timeout_s)
    if ranks.distributed:
        try:
            check_multi_rank(cfg, f"{ranks.world} learner ranks")
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
    return ranks


def probe_spaces(settings: EnvSettings, seed: int):
    """Build one env locally to learn its spaces."""
    from actor.envs import describe_spaces, make_env
    env = make_env(settings, seed)
    try:
        return describe_spaces(env)
    finally:
        env.close()


def write_endpoints(run_dir: Path, info: dict, rank: int = 0) -> None:
    """RUN_DIR/endpoints.json (rank 0: the address actors name), endpoints-rank-N.json for the others."""
    name = f"endpoints-rank-{rank}.json" if rank else "endpoints.json"
    tmp = run_dir / f".{name}.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, run_dir / name)


class Stop:
    """Set by SIGTERM/SIGINT; checked between messages, so shutdown waits for no rollout."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, *_):
        self.requested = True

    def request(self) -> None:
        self.requested = True

    def __call__(self) -> bool:
        return self.requested


class ParentWatch:
    """No orphaned learner: once the process that started it (launch.py) is gone, killed with -9 or by the
    OOM killer, the learner stops as on SIGTERM (final checkpoint, goodbyes, ports and device freed), and
    exits hard if that takes longer than grace_s (it may be deep in an update or a collective). A thread
    polling the parent pid, not PR_SET_PDEATHSIG: that fires when the parent *thread* that started us ends."""

    def __init__(self, parent_pid: int, stop: Stop, grace_s: float = PARENT_GRACE_S, every_s: float = 0.5):
        self.parent_pid, self.stop, self.grace_s, self.every_s = parent_pid, stop, grace_s, every_s
        threading.Thread(target=self._watch, name="parent-watch", daemon=True).start()

    def _watch(self) -> None:
        while os.getppid() == self.parent_pid:
            time.sleep(self.every_s)
        log.error("the launcher (pid %d) is gone: stopping (at most %gs)", self.parent_pid, self.grace_s)
        self.stop.request()
        time.sleep(self.grace_s)  # the main thread exits the process before this ends, unless it is stuck
        log.error("still running %gs after the launcher died: exiting now", self.grace_s)
        logging.shutdown()
        os._exit(1)


def run(cfg: Config, run_dir: str | Path, resume: bool = False, parent_pid: int = 0) -> int:
    """parent_pid: the launcher's; the learner stops when it is gone (0: nobody to watch)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(run_dir, env_rank())
    stop = Stop()
    if parent_pid:
        ParentWatch(parent_pid, stop)
    try:
        learner = Learner(cfg, run_dir, resume, stop)
    except StartupError as exc:
        log.error("%s", exc)  # the level already says ERROR
        return 2
    except RanksLost as exc:
        log.error("%s", exc)  # the level already says ERROR
        return 1
    try:
        learner.train()
    except (RanksLost, Stalled) as exc:  # loud, and nothing lost beyond the last checkpoint
        log.error("%s", exc)  # the level already says ERROR
        return 1
    finally:
        learner.close()
    return 0


@dataclasses.dataclass
class Job:
    """One rollout on its way through the update: what its metrics line and checkpoint record."""
    update: int
    env_steps: int      # the job's env steps including this rollout (all ranks)
    progress: float     # env steps before this rollout / total steps: sets the learning rate
    batch: TrainingBatch | None  # this rank's (None: a rank without actors this time)
    n_valid: int        # env steps this rollout added, all ranks together
    t0: float           # collection began
    t1: float           # collection ended


class Learner:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool, stop: Stop | None = None):
        self.cfg, self.run_dir, self.stop = cfg, run_dir, stop or Stop()
        r, p = cfg.run, cfg.ppo
        # While collecting, the actors need the cores and the learner's ops are small: one thread avoids
        # OpenMP threads spinning against the actors. The update gets them all (actors wait then anyway).
        update_threads = r.torch_threads or torch.get_num_threads()
        torch.set_num_threads(1)
        if r.deterministic:
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(r.seed)
        self.device = device = pick_device(r.device)
        self.ranks = ranks = join_ranks(cfg, device)
        with starting(f"cannot make env {cfg.env.env_id!r}"):
            obs_space, action_space = probe_spaces(cfg.env, r.seed)
            # the actors' env: without its FrameStack when the learner stacks their newest frames
            stack = cfg.env.frame_stack if cfg.cluster.stack_on_learner and cfg.env.is_atari else 1
            actor_env = dataclasses.replace(cfg.env, frame_stack=1) if stack > 1 else cfg.env
            actor_obs_space = probe_spaces(actor_env, r.seed)[0] if stack > 1 else obs_space
        if cfg.normalize.obs and obs_space.dtype == "uint8":
            raise StartupError(f"normalize.obs is for vector observations; {cfg.env.env_id} gives uint8 images, "
                               "which the CNN already scales to [0, 1]: set normalize.obs = false "
                               "(model.normalize_input standardizes the pixels inside the CNN)")
        with starting("cannot build the model"):
            self.model = model = build_model(obs_space, action_space, cfg.model).to(device)
        self.obs_norm = ObsNormalizer(obs_space.shape, cfg.normalize.clip).to(device) if cfg.normalize.obs else None
        self.reward_scaler = RewardScaler(0, p.gamma, cfg.normalize.clip) if cfg.normalize.reward else None
        self.value_norm = ValueNormalizer().to(device) if cfg.normalize.value else None
        self.updater = PPOUpdater(model, p, device, ranks, self.value_norm, batch_checksum=r.batch_checksum)
        self.state = {"update": 0, "env_steps": 0, "version": 0, "elapsed_s": 0.0}
        self.episodes = EpisodeStats()  # the job's: every rank's finished episodes, pooled
        if resume and ranks.main:
            self._resume()
        self._sync_from_rank0()
        c = cfg.cluster
        self.lagged = r.policy_lag > 0 and not r.collect_only
        # Cleanba: with policy lag the actors are served by a copy holding the previous weights while the update runs
        self.link = DeviceLink(device)  # every host <-> device copy of collection and rollouts, counted
        # the actors' policy when collecting here (cluster.collectors = 1); with collector processes, the
        # bootstrap values of their rollouts only
        self.policy = Inference(copy.deepcopy(model) if self.lagged else model, action_space, device, self.obs_norm,
                                seed=r.seed + self.state["update"] + 1_000_003 * ranks.rank,
                                random_actions=r.random_policy, value_norm=self.value_norm, link=self.link)
        # past every deadline of its own (collectives, actors, the update's join): only a call that never returns
        self.watchdog = Watchdog(run_dir / log_name(ranks.rank), max(r.watchdog_s, 2 * c.collective_timeout_s))
        self.layout = Layout.of(obs_space, action_space)
        self.spaces = Spaces(actor_env, actor_obs_space, obs_space, action_space, stack)
        self.admission = self._admission(obs_space)
        self._open_sockets()
        if stack > 1:
            log.info("actors send each env's newest frame; the learner stacks the last %d", stack)
        generator = torch.Generator(device=device)
        generator.manual_seed(r.seed + 1 + self.state["update"] + 1_000_003 * ranks.rank)
        self.metrics = self.episodes_file = None  # rank 0 writes the job's outputs
        if ranks.main:
            self.metrics = MetricsWriter(run_dir, cfg)
            self.episodes_file = open(run_dir / "episodes.jsonl", "a", buffering=1)  # every finished episode, raw
        self.min_envs = min_envs_of_rank(c.min_envs, cfg.num_envs, c.actors, c.envs_per_actor, c.learners, ranks.rank)
        self.empty = empty_batch(self.collection, device)
        self.weights = broadcast_state(model, self.obs_norm)  # the model, plus obs-normalizer stats for eval
        self.publisher.publish(self.weights, self.state["version"])
        self.runner = UpdateRunner(self.updater, generator, update_threads, background=self.lagged)
        self.width, self.idle_said, self.finished = 0, time.monotonic(), False
        self.started, self.steps_at_start, self.last_saved = time.monotonic(), self.state["env_steps"], None
        self.elapsed_at_start, self.last_finish = self.state["elapsed_s"], None  # wall clock, see _finish

    def _admission(self, obs_space) -> Admission:
        """What peers may claim on this rank, from the config and the machine's memory; said in one line, and
        the run refused at start if its own actors could not fit."""
        c = self.cfg.cluster
        admission = Admission.of(c.memory_budget_mb, c.max_envs_per_actor, self.cfg.num_envs, obs_space.shape,
                                 obs_space.dtype, self.cfg.ppo.num_steps).split(c.learners)
        if (why := check_run_fits(admission, self.cfg.num_envs // c.learners, c.min_envs)) is not None:
            raise StartupError(why)
        log.info("%s", admission.describe(self.cfg.num_envs // c.learners))
        return admission

    def _rank_targets(self) -> tuple[list[int], list[int]] | None:
        """Rank 0 of a multi-rank job sends joiners to the other ranks: until the first update's count each
        rank's share of min_envs is its target and its own local actors its load (they join it directly)."""
        if not (self.ranks.distributed and self.ranks.main):
            return None
        c, world = self.cfg.cluster, self.ranks.world
        targets = [min_envs_of_rank(c.min_envs, self.cfg.num_envs, c.actors, c.envs_per_actor, c.learners, rank)
                   for rank in range(world)]
        loads = [local_slots_of_rank(c.actors, c.envs_per_actor, c.learners, rank) for rank in range(world)]
        return targets, loads

    def _open_sockets(self) -> None:
        """The collection's sockets (actors' requests) and the weight publisher, bound at this rank's addresses."""
        cfg, ranks = self.cfg, self.ranks
        self.ctx = zmq.Context()
        self.curve = None
        if cfg.cluster.server_key:
            from protocol.security import ServerKeys
            with starting("cannot load the CURVE keys"):
                self.curve = ServerKeys.load(cfg.cluster.server_key, cfg.cluster.allowed_keys)
                self.curve.start_authenticator(self.ctx)
        run_id = uuid.uuid4().hex[:12]
        address, weights_address = (rank_address(local_address(a), ranks.rank)
                                    for a in (cfg.cluster.address, cfg.cluster.weights_address))
        with starting(f"cannot bind {address} (another learner there? port 0 picks a free one)"):
            self.collection = self._open_collection(address, run_id)
        with starting(f"cannot bind {weights_address} (another learner there? port 0 picks a free one)"):
            self.publisher = WeightPublisher(self.ctx, weights_address, curve=self.curve)
        endpoint = self.collection.endpoint
        advertised = advertised_address(endpoint, cfg.cluster.advertise_host)
        self.rank_addresses = ranks.gather_strings(advertised)  # where rank 0 redirects joiners: reachable
        if ranks.distributed and ranks.main:
            self.collection.know_ranks(self.rank_addresses)
        write_endpoints(self.run_dir, {"address": endpoint, "weights_address": self.publisher.endpoint,
                                       "advertised": advertised, "pid": os.getpid(), "run_id": run_id,
                                       "rank": ranks.rank, "ranks": self.rank_addresses,
                                       "collectors": self.collection.processes()}, ranks.rank)
        log.info("learner on %s%s (weights on %s), device %s, model %s", endpoint,
                 "" if advertised == endpoint else f" (advertised as {advertised})",
                 self.publisher.endpoint, self.device, type(self.model).__name__)

    def _open_collection(self, address: str, run_id: str) -> Collection:
        """In this process or in collector processes (cluster.collectors; see default_collectors)."""
        cfg = self.cfg
        k = default_collectors(cfg.cluster.collectors, self.device, os.cpu_count() or 1, cfg.run.deterministic,
                               cfg.normalize.obs)
        run = RankContext(cfg, str(self.run_dir), self.ranks.rank, run_id, self.state["update"], os.getpid(),
                          str(self.device))
        door = Door(self.ctx, address, self.curve, env_seed(cfg.run.seed, self.ranks.rank), self.admission)
        return open_collection(k, run, self.spaces, self.layout, door, Serving(self.policy, self.watchdog, self.link),
                               self._rank_targets(), [self.model, self.value_norm])

    def _sync_from_rank0(self) -> None:
        """Every rank starts from rank 0's weights, optimizer and counters (also after rank 0 resumed)."""
        if not self.ranks.distributed:
            return
        self.ranks.broadcast_tensors(list(self.model.parameters()) + list(self.model.buffers()))
        self.ranks.broadcast_optimizer(self.updater.optimizer)
        if self.value_norm is not None:
            self.ranks.broadcast_tensors(list(self.value_norm.buffers()))
        keys = ("update", "env_steps", "version", "elapsed_s")
        numbers = torch.tensor([float(self.state[k]) for k in keys] + [self.updater.beta, self.updater.lr],
                               dtype=torch.float64)
        self.ranks.broadcast_tensors([numbers])
        self.state = {k: (float(v) if k == "elapsed_s" else int(v)) for k, v in zip(keys, numbers.tolist())}
        self.updater.beta, self.updater.lr = float(numbers[-2]), float(numbers[-1])

    def _resume(self) -> None:
        """Continue from the newest checkpoint that loads (newer ones that do not are skipped, one line each)."""
        path, saved, skipped = checkpoint.load_newest(self.run_dir, self.device)
        for bad, why in skipped:
            log.warning("skipped %s: it does not load (%s)", bad.name, why)
        if path is None and skipped:
            raise StartupError(f"no checkpoint in {self.run_dir / 'checkpoints'} loads "
                               f"({len(skipped)} tried; the newest, {skipped[0][0].name}: {skipped[0][1]})")
        if path is None:
            log.info("no checkpoint in %s: starting from scratch", self.run_dir)
        else:
            with starting(f"cannot resume from {path}"):
                self._restore(saved)
            log.info("resumed from %s at update %d (%d env steps, %d episodes)", path.name, self.state["update"],
                     self.state["env_steps"], self.episodes.count)
        for name in ("metrics.jsonl", "episodes.jsonl"):
            if dropped := drop_rows_after(self.run_dir / name, self.state["update"]):
                log.info("%s: %d rows past update %d moved to %s.dropped", name, dropped, self.state["update"], name)

    def _restore(self, saved: dict) -> None:
        self.model.load_state_dict(saved["model"])
        self.updater.load_state_dict(saved["updater"])
        if self.obs_norm is not None:
            self.obs_norm.load_state_dict(saved["obs_norm"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(saved["reward_scaler"])
        if self.value_norm is not None:
            self._load_value_norm(saved.get("value_norm") or {})
        self.state = {k: saved[k] for k in self.state}
        if "episodes" in saved:  # the last-100 window and the count (checkpoints before issue 25 lack them)
            self.episodes.load_state_dict(saved["episodes"])

    def _load_value_norm(self, state: dict) -> None:
        if not state:  # a checkpoint of a run without normalize.value: its critic speaks raw returns
            raise StartupError("normalize.value is on but the checkpoint holds no value statistics "
                               "(it was written with normalize.value = false): resume with the same setting")
        self.value_norm.load_state_dict(state)

    def train(self) -> None:
        r, p, state = self.cfg.run, self.cfg.ppo, self.state
        in_flight = None  # policy lag: the update that runs while the next rollout is collected
        self.watchdog.pet()  # armed from the start: the first rollout's wait is covered too
        while state["env_steps"] < r.total_steps:
            t0 = time.monotonic()
            rollout = self.collection.collect(self._envs_needed(), self.stop, state["version"])
            if self.ranks.any(rollout is None or self.stop()):
                break
            t1 = time.monotonic()
            batch = rollout_to_batch(rollout, self.policy.value, p.gamma, p.gae_lambda, self.reward_scaler)
            n_valid = int(self.ranks.sum([batch.n_valid if batch else 0])[0])
            if in_flight is not None:  # done before the next rollout may reuse the buffer it reads
                self._finish(in_flight)
                in_flight = None
            if n_valid == 0:
                self._note_idle()
                continue
            self._note_width(batch.width if batch else 0)
            job = Job(state["update"] + 1, state["env_steps"] + n_valid, state["env_steps"] / r.total_steps,
                      batch, n_valid, t0, t1)
            state["update"], state["env_steps"] = job.update, job.env_steps
            self.watchdog.pet(self.runner.deadline() + 60)  # the update, run here or in the background
            self.runner.start(None if r.collect_only else (batch.data if batch else self.empty), job.progress)
            if self.lagged:
                in_flight = job
            else:
                self._finish(job)
        if in_flight is not None:
            self._finish(in_flight)
        # (stopped before its first update, e.g. Ctrl-C during start-up, a run has nothing to save)
        if state["update"] > 0 and (self.last_saved != state["update"] or not checkpoint.latest(self.run_dir)):
            if path := self._save_checkpoint(state["update"], state["env_steps"]):
                log.info("final checkpoint %s", path)
        log.info("learner done: %d updates, %d env steps", state["update"], state["env_steps"])
        self.finished = True

    def _envs_needed(self) -> int:
        """Env slots to wait for before a rollout starts. One rank alone waits for its first min_envs, then
        for any; a rank of several never waits past its first rollout (0: an empty rollout, weight 0)."""
        if self.collection.rollouts == 0:
            return max(self.min_envs, 0 if self.ranks.distributed else 1)
        return 0 if self.ranks.distributed else 1

    def _note_idle(self) -> None:
        if time.monotonic() - self.idle_said >= self.cfg.cluster.actor_timeout_s:
            self.idle_said = time.monotonic()
            if self.ranks.distributed:
                log.warning("waiting for actors: no learner rank has a live env slot")
            else:
                log.warning("waiting for actors: every actor has left; to add one: %s",
                            self.collection.join_command(self.width))

    def _note_width(self, width: int) -> None:
        if width != self.width and self.width:
            log.info("rollout width now %d env slots (was %d)", width, self.width)
        self.width = width

    def _finish(self, job: Job) -> None:
        """After an update: publish the new weights, write its metrics line, maybe a checkpoint.

        Timing is wall clock: elapsed_s is the time since this process started training (plus a resumed
        run's), sps the job's new env steps over the time since the last update finished (with policy lag
        the next rollout was collected meanwhile), collect_s the rollout's collection, update_s the update's
        own run (in the background with policy lag)."""
        self.watchdog.pet(self.runner.deadline() + 60)  # the join says why first, past runner.deadline()
        stats = {**self.runner.result(), "update_s": self.runner.took_s}
        now = time.monotonic()
        self.state["elapsed_s"] = self.elapsed_at_start + (now - self.started)
        interval, self.last_finish = now - (self.last_finish or job.t0), now
        if self.lagged:
            self.policy.follow(self.model)
        self.state["version"] += 1
        self.publisher.publish(self.weights, self.state["version"])
        for ret, length in self.ranks.gather_pairs(self.collection.take_episodes()):
            self.episodes.add(ret, int(length))
        widths = self.ranks.gather_ints(job.batch.width if job.batch else 0)
        actors = self.ranks.gather_ints(self.collection.actors())
        rank_slots = self.ranks.gather_ints(self.collection.live_slots())
        self.collection.after_update(self.state["version"], rank_slots if self.ranks.distributed else None)
        sums = self.ranks.gather_strings(checksum(self.model)) if self.ranks.distributed else None
        # the job's counts, not rank 0's: garbage sent to rank 1 or samples it dropped count too
        rejected, dropped = map(int, self.ranks.sum([self.collection.rejected(), job.batch.dropped if job.batch else 0]))
        events = self.collection.take_events()  # on every rank: the list stays bounded
        if self.ranks.main:
            self._log(job, stats, widths, actors, sums, rejected, dropped, interval, events)
        else:
            self.episodes.take_new()
        if job.update % self.cfg.run.checkpoint_every == 0:
            self._save_checkpoint(job.update, job.env_steps)

    def _log(self, job: Job, stats: dict, widths: list[int], actors: list[int], sums: list[str] | None,
             rejected: int, dropped: int, interval: float, events: list[str]) -> None:
        """Rank 0's metrics line and episodes.jsonl rows, for the whole job."""
        r, state = self.cfg.run, self.state
        rate = (job.env_steps - self.steps_at_start) / max(state["elapsed_s"] - self.elapsed_at_start, 1e-9)
        ep = self.episodes
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
            "actors": sum(actors), "env_slots": sum(widths), "weights_version": state["version"],
            "elapsed_s": state["elapsed_s"], "collect_s": job.t1 - job.t0, "update_s": stats["update_s"],
            "progress": min(job.env_steps / r.total_steps, 1.0),
            "eta_s": max(r.total_steps - job.env_steps, 0) / max(rate, 1e-9),
            "rejected_messages": rejected, "dropped_samples": dropped,
            "kl_beta": stats.get("kl_beta"), "update_kl": stats.get("update_kl"),
            "first_minibatch_ratio_max_dev": stats.get("first_minibatch_ratio_max_dev"),
            "policy_lag": r.policy_lag if self.lagged else 0, "events": events,
        }
        if r.batch_checksum:
            record["batch_checksum"] = stats.get("batch_checksum")
        if sums is not None:
            record.update(learners=self.ranks.world, rank_env_slots=widths, rank_actors=actors,
                          rank_weights_checksums=sums)
        self.metrics.write(record)
        for ret, length in ep.take_new():
            self.episodes_file.write(json.dumps({"update": job.update, "env_steps": job.env_steps,
                                                 "return": ret, "length": int(length)}) + "\n")

    def _save_checkpoint(self, update: int, env_steps: int) -> Path | None:
        """The update and env steps are those of the weights saved: with policy lag the loop is one rollout
        ahead of them, and a resume must neither skip nor repeat that rollout. Rank 0 saves for the job."""
        self.last_saved = update
        if not self.ranks.main:
            return None
        payload = {"model": self.model.state_dict(), "updater": self.updater.state_dict(),
                   "config": self.cfg.to_dict(), **self.state, "update": update, "env_steps": env_steps,
                   "episodes": self.episodes.state_dict(),
                   "obs_norm": self.obs_norm.state_dict() if self.obs_norm else {},
                   "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler else {},
                   "value_norm": self.value_norm.state_dict() if self.value_norm else {}}
        return checkpoint.save(self.run_dir, update, payload, keep=self.cfg.log.keep_checkpoints,
                               score=self.metrics.score())

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.metrics is not None:
            self.metrics.close()
            self.episodes_file.close()
        self.collection.close()
        self.publisher.close()
        if self.curve is not None:
            self.curve.stop()  # before term(): the authenticator's sockets would block it
        self.ctx.term()
        self.ranks.close(clean=self.finished)
