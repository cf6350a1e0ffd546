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
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import torch
import zmq

from learner import checkpoint
from learner.collector import Collector
from learner.batch import TrainingBatch, rollout_to_batch
from learner.config import Config
from learner.gateway import Gateway
from learner.evaluate import broadcast_state
from learner.metrics import MetricsWriter, drop_rows_after, setup_logging
from learner.model import build_model
from learner.normalize import ObsNormalizer, RewardScaler
from learner.policy import Policy
from learner.ppo import PPOUpdater
from learner.update_runner import UpdateRunner
from learner.weights import WeightPublisher
from protocol.settings import EnvSettings

log = logging.getLogger("learner")
TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float64": torch.float32}


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
    return torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")


def probe_spaces(settings: EnvSettings, seed: int):
    """Build one env locally to learn its spaces."""
    from actor.envs import describe_spaces, make_env
    env = make_env(settings, seed)
    try:
        return describe_spaces(env)
    finally:
        env.close()


def write_endpoints(run_dir: Path, info: dict) -> None:
    tmp = run_dir / ".endpoints.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, run_dir / "endpoints.json")


class Stop:
    """Set by SIGTERM/SIGINT; checked between messages, so shutdown waits for no rollout."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, *_):
        self.requested = True

    def __call__(self) -> bool:
        return self.requested


def run(cfg: Config, run_dir: str | Path, resume: bool = False) -> int:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(run_dir)
    try:
        learner = Learner(cfg, run_dir, resume)
    except StartupError as exc:
        log.error("error: %s", exc)
        return 2
    try:
        learner.train()
    finally:
        learner.close()
    return 0


@dataclasses.dataclass
class Job:
    """One rollout on its way through the update: what its metrics line and checkpoint record."""
    update: int
    env_steps: int      # the run's env steps including this rollout
    progress: float     # env steps before this rollout / total steps: sets the learning rate
    batch: TrainingBatch
    t0: float           # collection began
    t1: float           # collection ended


class Learner:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool):
        self.cfg, self.run_dir, self.stop = cfg, run_dir, Stop()
        r, p = cfg.run, cfg.ppo
        # While collecting, the actors need the cores and the learner's ops are small: one thread avoids
        # OpenMP threads spinning against the actors. The update gets them all (actors wait then anyway).
        update_threads = r.torch_threads or torch.get_num_threads()
        torch.set_num_threads(1)
        if r.deterministic:
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(r.seed)
        self.device = device = pick_device(r.device)
        with starting(f"cannot make env {cfg.env.env_id!r}"):
            obs_space, action_space = probe_spaces(cfg.env, r.seed)
            # the actors' env: without its FrameStack when the learner stacks their newest frames
            stack = cfg.env.frame_stack if cfg.cluster.stack_on_learner and cfg.env.is_atari else 1
            actor_env = dataclasses.replace(cfg.env, frame_stack=1) if stack > 1 else cfg.env
            actor_obs_space = probe_spaces(actor_env, r.seed)[0] if stack > 1 else obs_space
        if cfg.normalize.obs and obs_space.dtype == "uint8":
            raise StartupError(f"normalize.obs is for vector observations; {cfg.env.env_id} gives uint8 images, "
                               "which the CNN already scales to [0, 1]: set normalize.obs = false")
        with starting("cannot build the model"):
            self.model = model = build_model(obs_space, action_space, cfg.model).to(device)
        self.obs_norm = ObsNormalizer(obs_space.shape, cfg.normalize.clip).to(device) if cfg.normalize.obs else None
        self.reward_scaler = RewardScaler(0, p.gamma, cfg.normalize.clip) if cfg.normalize.reward else None
        self.updater = PPOUpdater(model, p, device)
        self.state = {"update": 0, "env_steps": 0, "version": 0, "elapsed_s": 0.0}
        if resume:
            self._resume()
        self.ctx = zmq.Context()
        self.curve = None
        if cfg.cluster.server_key:
            from protocol.security import ServerKeys
            with starting("cannot load the CURVE keys"):
                self.curve = ServerKeys.load(cfg.cluster.server_key, cfg.cluster.allowed_keys)
                self.curve.start_authenticator(self.ctx)
        run_id = uuid.uuid4().hex[:12]
        with starting(f"cannot bind {cfg.cluster.address} (another learner there? port 0 picks a free one)"):
            self.gateway = Gateway(self.ctx, cfg.cluster.address, actor_env, actor_obs_space, action_space, r.seed,
                                   self.state["update"], run_id, cfg.cluster.max_message_mb << 20, curve=self.curve)
        with starting(f"cannot bind {cfg.cluster.weights_address} (another learner there? port 0 picks a free one)"):
            self.publisher = WeightPublisher(self.ctx, cfg.cluster.weights_address, curve=self.curve)
        write_endpoints(run_dir, {"address": self.gateway.endpoint, "weights_address": self.publisher.endpoint,
                                  "pid": os.getpid(), "run_id": run_id})
        log.info("learner on %s (weights on %s), device %s, model %s", self.gateway.endpoint, self.publisher.endpoint,
                 device, type(model).__name__)
        if stack > 1:
            log.info("actors send each env's newest frame; the learner stacks the last %d", stack)
        self.policy = Policy(model, action_space, device, self.obs_norm, seed=r.seed + self.state["update"],
                             random_actions=r.random_policy)
        self.collector = Collector(
            self.gateway, self.policy, p.num_steps, obs_space.shape, TORCH_DTYPES.get(obs_space.dtype, torch.float32),
            action_space.shape, torch.long if action_space.kind == "discrete" else torch.float32, device,
            cfg.cluster.actor_timeout_s, lockstep=r.deterministic, frame_stack=stack)
        self.collector.version = self.state["version"]
        self.collector.flow_through = r.collect_only and not r.deterministic  # no update: no weights to wait for
        generator = torch.Generator(device=device)
        generator.manual_seed(r.seed + 1 + self.state["update"])
        self.metrics = MetricsWriter(run_dir, cfg)
        self.episodes_file = open(run_dir / "episodes.jsonl", "a", buffering=1)  # every finished episode, raw
        self.weights = broadcast_state(model, self.obs_norm)  # the model, plus obs-normalizer stats for eval
        self.publisher.publish(self.weights, self.state["version"])
        self.lagged = r.policy_lag > 0 and not r.collect_only
        if self.lagged:  # Cleanba: actors are served by a copy holding the previous weights while the update runs
            self.policy.model = copy.deepcopy(model)
            self.collector.double_buffer = True
        self.runner = UpdateRunner(self.updater, generator, update_threads, background=self.lagged)
        self.width = 0
        self.started, self.steps_at_start, self.last_saved = time.monotonic(), self.state["env_steps"], None

    def _resume(self) -> None:
        path = checkpoint.latest(self.run_dir)
        if path is None:
            log.info("no checkpoint in %s: starting from scratch", self.run_dir)
        else:
            with starting(f"cannot load {path}"):
                saved = checkpoint.load(path, self.device)
            self.model.load_state_dict(saved["model"])
            self.updater.load_state_dict(saved["updater"])
            if self.obs_norm is not None:
                self.obs_norm.load_state_dict(saved["obs_norm"])
            if self.reward_scaler is not None:
                self.reward_scaler.load_state_dict(saved["reward_scaler"])
            self.state = {k: saved[k] for k in self.state}
            log.info("resumed from %s at update %d (%d env steps)", path.name, self.state["update"],
                     self.state["env_steps"])
        for name in ("metrics.jsonl", "episodes.jsonl"):
            if dropped := drop_rows_after(self.run_dir / name, self.state["update"]):
                log.info("%s: %d rows past update %d moved to %s.dropped", name, dropped, self.state["update"], name)

    def train(self) -> None:
        r, p, state = self.cfg.run, self.cfg.ppo, self.state
        min_envs = self.cfg.cluster.min_envs or self.cfg.num_envs
        in_flight = None  # policy lag: the update that runs while the next rollout is collected
        while state["env_steps"] < r.total_steps and not self.stop():
            t0 = time.monotonic()
            rollout = self.collector.collect(min_envs, self.stop)
            if rollout is None:
                break
            t1 = time.monotonic()
            batch = rollout_to_batch(rollout, self.policy.value, p.gamma, p.gae_lambda, self.reward_scaler)
            if batch is None:
                continue
            self._note_width(batch.width)
            job = Job(state["update"] + 1, state["env_steps"] + batch.n_valid, state["env_steps"] / r.total_steps,
                      batch, t0, t1)
            state["update"], state["env_steps"] = job.update, job.env_steps
            if in_flight is not None:
                self._finish(in_flight)
            self.runner.start(None if r.collect_only else batch.data, job.progress)
            if self.lagged:
                in_flight = job
            else:
                self._finish(job)
        if in_flight is not None:
            self._finish(in_flight)
        if self.last_saved != state["update"] or not checkpoint.latest(self.run_dir):
            log.info("final checkpoint %s", self._save_checkpoint(state["update"], state["env_steps"]))
        log.info("learner done: %d updates, %d env steps", state["update"], state["env_steps"])

    def _note_width(self, width: int) -> None:
        if width != self.width and self.width:
            log.info("rollout width now %d env slots (was %d)", width, self.width)
        self.width = width

    def _finish(self, job: Job) -> None:
        """After an update: publish the new weights, write its metrics line, maybe a checkpoint."""
        stats = self.runner.result()
        if self.lagged:
            self.policy.model.load_state_dict(self.model.state_dict())
        self.state["version"] += 1
        self.collector.version = self.state["version"]
        self.publisher.publish(self.weights, self.state["version"])
        self.collector.forgive_pause()
        self._log(job, stats)
        if job.update % self.cfg.run.checkpoint_every == 0:
            self._save_checkpoint(job.update, job.env_steps)

    def _log(self, job: Job, stats: dict) -> None:
        r, state, now = self.cfg.run, self.state, time.monotonic()
        state["elapsed_s"] += now - job.t0
        rate = (job.env_steps - self.steps_at_start) / max(now - self.started, 1e-9)
        ep, batch = self.collector.episodes, job.batch
        self.metrics.write({
            "update": job.update, "env_steps": job.env_steps, "sps": batch.n_valid / max(now - job.t0, 1e-9),
            "episode_return_mean": sum(ep.returns) / len(ep.returns) if ep.returns else None,
            "episode_length_mean": sum(ep.lengths) / len(ep.lengths) if ep.lengths else None,
            "episodes": ep.count, "policy_loss": stats.get("policy_loss"), "value_loss": stats.get("value_loss"),
            "entropy": stats.get("entropy"), "approx_kl": stats.get("approx_kl"),
            "clip_fraction": stats.get("clip_fraction"), "explained_variance": stats.get("explained_variance"),
            "learning_rate": stats.get("learning_rate", self.updater.learning_rate(job.progress)),
            "actors": len(self.gateway.registry), "env_slots": batch.width, "weights_version": state["version"],
            "elapsed_s": state["elapsed_s"], "collect_s": job.t1 - job.t0, "update_s": now - job.t1,
            "progress": min(job.env_steps / r.total_steps, 1.0),
            "eta_s": max(r.total_steps - job.env_steps, 0) / max(rate, 1e-9),
            "rejected_messages": self.gateway.rejected, "dropped_samples": batch.dropped,
            "kl_beta": stats.get("kl_beta"), "first_minibatch_ratio_max_dev": stats.get("first_minibatch_ratio_max_dev"),
            "policy_lag": r.policy_lag if self.lagged else 0, "events": self.gateway.events,
        })
        self.gateway.events = []
        for ret, length in ep.take_new():
            self.episodes_file.write(json.dumps({"update": job.update, "env_steps": job.env_steps,
                                                 "return": ret, "length": length}) + "\n")

    def _save_checkpoint(self, update: int, env_steps: int) -> Path:
        """The update and env steps are those of the weights saved: with policy lag the loop is one rollout
        ahead of them, and a resume must neither skip nor repeat that rollout."""
        payload = {"model": self.model.state_dict(), "updater": self.updater.state_dict(),
                   "config": self.cfg.to_dict(), **self.state, "update": update, "env_steps": env_steps,
                   "obs_norm": self.obs_norm.state_dict() if self.obs_norm else {},
                   "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler else {}}
        self.last_saved = update
        return checkpoint.save(self.run_dir, update, payload, keep=self.cfg.log.keep_checkpoints,
                               score=self.metrics.score())

    def close(self) -> None:
        self.metrics.close()
        self.episodes_file.close()
        self.gateway.close()
        self.publisher.close()
        if self.curve is not None:
            self.curve.stop()  # before term(): the authenticator's sockets would block it
        self.ctx.term()
