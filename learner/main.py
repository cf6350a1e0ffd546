"""The learner process: collect a rollout from the actors, compute GAE, update PPO, broadcast weights.

`Learner.train` reads top to bottom like CleanRL's loop: collect, advantages, update, publish, log,
checkpoint. Setting up (sockets, model, resume) is `Learner.__init__`; the pieces (gateway, collector,
batch, updater, publisher) live in their own modules.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path

import torch
import zmq

from learner.config import Config
from learner.config_rules import rate_horizon
from learner.lifecycle.process import EXIT_DONE, EXIT_FAILED, EXIT_NO_ACTORS, EXIT_REFUSED, ParentWatch, Stop
from learner.lifecycle.run_lock import RunDirForeign, RunDirHeld, RunLock, make_private
from learner.lifecycle.idle import IdleRollouts
from learner.lifecycle.preflight import admission_of, join_ranks, learner_spaces, pick_device
from learner.lifecycle.startup import StartupError, starting
from learner.seeds import collector_env_base, learner_policy_seed, update_seed
from learner.stalls import Stalled, Watchdog
from learner.collection import (Collection, GatewaySetup, Inference, NoActors, RanksStore, RanksUnreachable,
                                RunOnRank, has_policy_lag, open_collection, served_modules)
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.rollout.scheduler import PolicyVersions, RolloutScheduler
from learner.advantages.batch import empty_batch, rollout_to_batch
from learner.update.ppo import PPOUpdater
from learner.update.heap import UpdateHeap
from learner.update.runner import UpdateRunner
from learner.update.finite import NonFinite, NonFiniteWeights, check_finite
from learner.update.ranks import RanksLost, checksum, checksum_from_int, checksum_to_int, env_rank
from learner.gateway.placement import advertised_address, local_slots_of_rank, min_envs_of_rank, rank_address
from learner.weights import checkpoint
from learner.weights.checkpointing import Checkpointing, Learned
from learner.weights.message import broadcast_state
from learner.weights.publisher import WeightPublisher
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer, RewardScaler, ValueNormalizer
from learner.report.episodes import RecentEpisodes
from learner.report.metrics import log_name, setup_logging
from learner.report.reporter import Gathered, Job, Reporter, Since
from learner.report.serial import SerialPhases
from protocol.security import ServerKeys
from protocol.files import WriteFailed, atomic_write
from protocol.transport import local_addresses

log = logging.getLogger("learner")


def write_endpoints(run_dir: Path, info: dict, rank: int = 0) -> None:
    """RUN_DIR/endpoints.json (rank 0: the address actors name), endpoints-rank-N.json for the others."""
    name = f"endpoints-rank-{rank}.json" if rank else "endpoints.json"
    atomic_write(run_dir / name, json.dumps(info))


def run_learner(cfg: Config, run_dir: str | Path, resume: bool = False, parent_pid: int = 0) -> int:
    """parent_pid: the launcher's, which holds the run directory's lock; the learner stops when it is gone (0:
    nobody to watch, and the learner takes the lock itself)."""
    run_dir = Path(run_dir)
    try:
        make_private(run_dir)  # launch.py made it so already, or this learner runs on its own
        lock = None if parent_pid else RunLock(run_dir, env_rank())
    except (RunDirHeld, RunDirForeign) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        return _run(cfg, run_dir, resume, parent_pid)
    finally:
        if lock is not None:
            lock.release()


def _run(cfg: Config, run_dir: Path, resume: bool, parent_pid: int) -> int:
    setup_logging(run_dir, env_rank())
    stop = Stop()
    if parent_pid:
        ParentWatch(parent_pid, stop)
    try:
        learner = Learner(cfg, run_dir, resume, stop)
    except StartupError as exc:
        log.error("%s", exc)  # the level already says ERROR
        return EXIT_REFUSED
    except RanksLost as exc:
        log.error("%s", exc)  # the level already says ERROR
        return EXIT_FAILED
    try:
        learner.train()
    except (RanksLost, RanksUnreachable, Stalled, NonFiniteWeights) as exc:  # loud, nothing lost beyond the last
        # checkpoint
        log.error("%s", exc)  # the level already says ERROR
        return EXIT_FAILED
    except WriteFailed as exc:  # the run directory's disk is full or read-only: stop, resume when it is not
        log.error("%s: the run stops; nothing is lost beyond the newest checkpoint (--resume)", exc)
        return EXIT_FAILED
    finally:
        learner.close()
    if learner.no_actors:  # after its final checkpoint: loud, and not restarted (it would wait for them again)
        log.error("%s", learner.no_actors)
        return EXIT_NO_ACTORS
    return EXIT_FAILED if learner.checkpoints.save_failed else EXIT_DONE  # a final checkpoint not written: said above


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
        self.spaces = spaces = learner_spaces(cfg)
        obs_space, action_space = spaces.obs_space, spaces.action_space
        with starting("cannot build the model"):
            self.model = model = build_model(obs_space, action_space, cfg.model).to(device)
        self.obs_norm = ObsNormalizer(obs_space.shape, cfg.normalize.clip).to(device) if cfg.normalize.obs else None
        self.reward_scaler = RewardScaler(0, p.gamma, cfg.normalize.clip) if cfg.normalize.reward else None
        self.value_norm = ValueNormalizer().to(device) if cfg.normalize.value else None
        # with policy lag the update's collectives run in its thread, on a process group of their own
        update_ranks = ranks.own_group() if has_policy_lag(cfg) else ranks
        self.updater = PPOUpdater(model, p, device, update_ranks, self.value_norm, batch_checksum=r.batch_checksum,
                                  policy_lag=has_policy_lag(cfg), rate_horizon=rate_horizon(cfg))
        self.state = {"update": 0, "env_steps": 0, "version": 0, "elapsed_s": 0.0}
        self.episodes = RecentEpisodes()  # the job's: every rank's finished episodes, pooled
        self.checkpoints = Checkpointing(run_dir, cfg, ranks, Learned(
            model, self.updater, self.obs_norm, self.reward_scaler, self.value_norm, self.episodes), self.state)
        if resume and ranks.main:
            self.checkpoints.resume(device)
        self.checkpoints.sync_from_rank0()
        self.has_policy_lag = has_policy_lag(cfg)
        # Cleanba: with policy lag the actors are served by copies of the previous weights and value statistics while
        # the update runs (see served_modules)
        self.link = DeviceLink(device)  # every host <-> device copy of collection and rollouts, counted
        # the actors' policy when collecting here (cluster.collectors = 1); with collector processes, the
        # bootstrap values of their rollouts only
        served, served_value_norm = served_modules(model, self.value_norm, self.has_policy_lag)
        self.policy = Inference(served, action_space, device, self.obs_norm,
                                seed=learner_policy_seed(r.seed, self.state["update"], ranks.rank),
                                random_actions=r.random_policy, value_norm=served_value_norm, link=self.link)
        # past every deadline of its own (collectives, actors, the update's join): only a call that never returns
        self.watchdog = Watchdog(run_dir / log_name(ranks.rank), max(r.watchdog_s, 2 * cfg.cluster.collective_timeout_s))
        # stacked here without observation normalization: the rollout keeps one frame per step (stacks of
        # normalized observations are not frames: kept whole); and a recurrent core's states (model.core)
        self.layout = Layout.of(obs_space, action_space, 1 if cfg.normalize.obs else spaces.frame_stack, model, p.bptt)
        self.admission = admission_of(cfg, spaces, model.state_size)
        generator = torch.Generator(device=device)
        generator.manual_seed(update_seed(r.seed, self.state["update"], ranks.rank))
        runner = UpdateRunner(self.updater, generator, update_threads, policy_lag=self.has_policy_lag,
                              heap=UpdateHeap.for_update_on(device))
        # which weights serve the actors, and when newer ones may (asked by the collection while a rollout fills)
        self.versions = PolicyVersions(runner, self.policy, (model, self.value_norm), int(self.has_policy_lag),
                                       self.state["version"])
        self._open_sockets()
        self.scheduler = RolloutScheduler(self.collection, self.versions)
        self.since = Since(self.state["env_steps"], self.state["elapsed_s"])
        self.reporter = (Reporter(run_dir, cfg, self.episodes, self.updater, ranks.world,
                                  r.policy_lag if self.has_policy_lag else 0) if ranks.main else None)  # rank 0 writes them
        self.min_envs = min_envs_of_rank(cfg.cluster.min_envs, cfg.num_envs, cfg.cluster.actors,
                                         cfg.cluster.envs_per_actor, cfg.cluster.learners, ranks.rank)
        self.empty = empty_batch(self.layout, device)
        self.weights = broadcast_state(model, self.obs_norm)  # the model, plus obs-normalizer stats for eval
        self.publisher.publish(self.weights, self.state["version"])
        self.width, self.finished, self.no_actors = 0, False, ""  # no_actors: why the run ended, if it did
        self.idle = IdleRollouts(cfg.cluster, ranks, lambda: self.collection.join_command(self.width))
        self.nonfinite = NonFinite(self.collection.strike)
        self.started, self.last_finish = time.monotonic(), None  # wall clock, see _finish
        self.serial = SerialPhases()  # between rollouts, every actor parked: where that time goes

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
            with starting("cannot load the CURVE keys"):
                self.curve = ServerKeys.load(cfg.cluster.server_key, cfg.cluster.allowed_keys)
                self.curve.start_authenticator(self.ctx)
        run_id = uuid.uuid4().hex[:12]
        address, weights_address = (rank_address(a, ranks.rank)  # 'local': one private directory for both
                                    for a in local_addresses(cfg.cluster.address, cfg.cluster.weights_address))
        # run.segments on several ranks: one quota for the job's rollout, counted on a store that every rank reaches
        # (made by a collective; kept here, so that rank 0's server lives as long as this learner)
        self.ranks_store = store = ranks.store() if ranks.distributed and cfg.run.segments else None
        where = (RanksStore(store.host, store.port, cfg.cluster.collective_timeout_s, ranks.rank, ranks.world)
                 if store is not None else None)
        with starting(f"cannot bind {address} (another learner there? port 0 picks a free one)"):
            self.collection = self._open_collection(address, run_id, where)
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

    def _open_collection(self, address: str, run_id: str, ranks_store: RanksStore | None) -> Collection:
        """In this process or in collector processes (cluster.collectors; see learner/collection/__init__.py)."""
        cfg, rank = self.cfg, self.ranks.rank
        run = RunOnRank(cfg, str(self.run_dir), rank, run_id, self.state["update"], os.getpid(), str(self.device))
        gateway_setup = GatewaySetup(self.ctx, address, self.curve, collector_env_base(cfg.run.seed, rank),
                                     self.admission)
        return open_collection(run, self.spaces, self.layout, gateway_setup, policy=self.policy,
                               watchdog=self.watchdog, link=self.link, rank_targets=self._rank_targets(),
                               served=[self.model, self.value_norm], versions=self.versions,
                               ranks_store=ranks_store)

    def train(self) -> None:
        r, p, state = self.cfg.run, self.cfg.ppo, self.state
        horizon = rate_horizon(self.cfg)  # where the linear rate reaches 0
        view = (functools.partial(self.policy.prepare, update_stats=False)  # ppo.lag_fresh_advantages: batches
                if self.has_policy_lag and p.lag_fresh_advantages else None)  # keep GAE's inputs (GaeInputs)
        self.watchdog.pet()  # armed from the start: the first rollout's wait is covered too
        while state["env_steps"] < r.total_steps:
            t0 = time.monotonic()
            self.serial.close()
            try:
                rollout = self.scheduler.collect(self._envs_needed(), self.stop)
            except NoActors as exc:  # (a rank of several never waits: see IdleRollouts)
                self.no_actors, rollout = str(exc), None
            if self.ranks.any(rollout is None or self.stop()):
                break
            t1 = time.monotonic()
            self.serial.begin()
            batch = rollout_to_batch(rollout, self.policy.value, p.gamma, p.gae_lambda, self.reward_scaler, view)
            self.serial.mark("batch")  # bootstrap values, the rollout's copy to the device, GAE
            n_valid, nonfinite = map(int, self.ranks.sum([batch.n_valid if batch else 0,
                                                          len(batch.nonfinite_slots) if batch else 0]))
            self._finish_updates(running=0)  # policy lag: the update that ran while this rollout was collected
            if nonfinite:
                self.nonfinite.drop(batch.nonfinite_slots if batch else [], state["update"])
                continue
            if n_valid == 0:
                self.no_actors = self.idle.empty(first_done=self.collection.rollouts > 1) or ""
                if self.no_actors:
                    break
                continue
            self.idle.sampled()
            self._note_width(batch.width if batch else 0)
            job = Job(state["update"] + 1, state["env_steps"] + n_valid, state["env_steps"] / horizon,
                      batch, n_valid, t0, t1, self.collection.breakdown())
            state["update"], state["env_steps"] = job.update, job.env_steps
            self.watchdog.pet(self.scheduler.deadline() + 60)  # the update, run here or (policy lag) in a thread
            self.scheduler.start(None if r.collect_only else (batch.data if batch else self.empty), job)
            self.serial.mark("update")  # the update itself; with policy lag only its thread's start
            self._finish_updates(running=self.scheduler.max_lag)  # synchronous: this one, done already
        self._finish_updates(running=0)
        # (stopped before its first update, e.g. Ctrl-C during start-up, a run has nothing to save)
        if state["update"] > 0 and (self.checkpoints.last_saved != state["update"]
                                    or not checkpoint.latest(self.run_dir)):
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

    def _note_width(self, width: int) -> None:
        if width != self.width and self.width:
            log.info("rollout width now %d env slots (was %d)", width, self.width)
        self.width = width

    def _finish_updates(self, running: int) -> None:
        """Join updates until `running` are left (learner/rollout/scheduler.py), and finish each."""
        self.watchdog.pet(self.scheduler.deadline() + 60)  # the join says why first, past the deadline
        for job, stats in self.scheduler.finished(running):
            self._finish(job, stats)

    def _finish(self, job: Job, stats: dict) -> None:
        """After an update: publish the new weights, write its metrics line, maybe a checkpoint.

        Timing is wall clock: elapsed_s is the time since this process started training (plus a resumed
        run's), sps the job's new env steps over the time since the last update finished (with policy lag
        the next rollout was collected meanwhile), collect_s the rollout's collection, update_s the update's
        own run (in a thread with policy lag)."""
        self.serial.mark("join")  # waiting for the update (policy lag: its thread)
        self.nonfinite.after_update(stats, job.update)
        check_finite([self.model, self.obs_norm, self.value_norm], job.update)  # before publishing them
        now = time.monotonic()
        self.state["elapsed_s"] = self.since.elapsed_s + (now - self.started)
        interval, self.last_finish = now - (self.last_finish or job.t0), now
        self.state["version"] = self.scheduler.version
        self.publisher.publish(self.weights, self.state["version"])
        self.serial.mark("publish")
        gathered, episodes = self._gather(job)  # the collector processes' weights are published in it
        for ret, length in episodes:
            self.episodes.add(ret, int(length))
        self.serial.mark("gather")  # the job's episodes and counts from every rank; the collectors' weights
        if self.ranks.main:
            self.reporter.write(job, stats, gathered, interval, self.state, self.since, self.serial.last)
        else:
            self.episodes.take_new()
        if self.checkpoints.due(job.update):
            self._save_checkpoint(job.update, job.env_steps)
        self.serial.mark("report")  # the metrics line, a checkpoint

    def _gather(self, job: Job) -> tuple[Gathered, list[tuple[float, float]]]:
        """Every rank's part of the job's metrics line, and the job's finished episodes: one collective (every rank
        calls this) for its counts, weights checksum and episodes (two past 128 episodes on a rank)."""
        ranks, collection, batch = self.ranks, self.collection, job.batch
        episodes = collection.take_episodes()
        digest = checksum_to_int(checksum(self.model)) if ranks.distributed else 0
        # the job's counts, not rank 0's: garbage sent to rank 1 or samples it dropped count too
        rows, job_episodes = ranks.gather_rows_and_pairs(
            [batch.width if batch else 0, collection.actors(), collection.live_slots(), collection.rejected(),
             batch.dropped if batch else 0, digest, batch.n_valid if batch else 0], episodes)
        widths, actors, rank_slots, rejected, dropped, digests, samples = map(list, zip(*rows))
        collection.after_update(self.state["version"], rank_slots if ranks.distributed else None)
        sums = [checksum_from_int(d) for d in digests] if ranks.distributed else None
        events = collection.take_events()  # on every rank: the list stays bounded
        return Gathered(widths, actors, sums, sum(rejected), sum(dropped), events, samples), job_episodes

    def _save_checkpoint(self, update: int, env_steps: int) -> Path | None:
        return self.checkpoints.save(update, env_steps, self.reporter.score() if self.reporter else None)

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.reporter is not None:
            self.reporter.close()
        self.collection.close()
        self.publisher.close()
        if self.curve is not None:
            self.curve.stop()  # before term(): the authenticator's sockets would block it
        self.ctx.term()
        self.ranks.close(clean=self.finished)
