"""The learner process: collect a rollout from the actors, compute GAE, update PPO, broadcast weights.

Reads top to bottom like one CleanRL loop; the pieces (gateway, collector, updater, publisher) live in
their own modules.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
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
from learner.config import Config
from learner.gae import compute_gae
from learner.gateway import Gateway
from learner.evaluate import broadcast_state
from learner.metrics import MetricsWriter, setup_logging
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
        return _train(cfg, run_dir, resume)
    except StartupError as exc:
        log.error("error: %s", exc)
        return 2


def _train(cfg: Config, run_dir: Path, resume: bool) -> int:
    stop = Stop()
    r, p = cfg.run, cfg.ppo
    # While collecting, the actors need the cores and the learner's ops are small: one thread avoids
    # OpenMP threads spinning against the actors. The update gets them all (actors wait then anyway).
    update_threads = r.torch_threads or torch.get_num_threads()
    torch.set_num_threads(1)
    if r.deterministic:
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(r.seed)
    device = pick_device(r.device)
    with starting(f"cannot make env {cfg.env.env_id!r}"):
        obs_space, action_space = probe_spaces(cfg.env, r.seed)
        # the actors' env: without its FrameStack when the learner stacks their newest frames
        stack = cfg.env.frame_stack if cfg.cluster.stack_on_learner and cfg.env.is_atari else 1
        actor_env = dataclasses.replace(cfg.env, frame_stack=1) if stack > 1 else cfg.env
        actor_obs_space = probe_spaces(actor_env, r.seed)[0] if stack > 1 else obs_space
    with starting("cannot build the model"):
        model = build_model(obs_space, action_space, cfg.model).to(device)
    obs_norm = ObsNormalizer(obs_space.shape, cfg.normalize.clip).to(device) if cfg.normalize.obs else None
    reward_scaler = RewardScaler(cfg.num_envs or 1, p.gamma, cfg.normalize.clip) if cfg.normalize.reward else None
    width = cfg.num_envs or cfg.cluster.min_envs or 1  # the LR schedule assumes the configured width
    total_updates = max(1, math.ceil(r.total_steps / (width * p.num_steps)))
    updater = PPOUpdater(model, p, total_updates, device)
    state = {"update": 0, "env_steps": 0, "version": 0, "elapsed_s": 0.0}
    if resume and (path := checkpoint.latest(run_dir)) is not None:
        with starting(f"cannot load {path}"):
            saved = checkpoint.load(path, device)
        model.load_state_dict(saved["model"])
        updater.load_state_dict(saved["updater"])
        if obs_norm is not None:
            obs_norm.load_state_dict(saved["obs_norm"])
        if reward_scaler is not None:
            reward_scaler.load_state_dict(saved["reward_scaler"])
        state = {k: saved[k] for k in state}
        log.info("resumed from %s at update %d (%d env steps)", path.name, state["update"], state["env_steps"])

    def save_checkpoint():
        payload = {"model": model.state_dict(), "updater": updater.state_dict(), "config": cfg.to_dict(), **state,
                   "obs_norm": obs_norm.state_dict() if obs_norm else {},
                   "reward_scaler": reward_scaler.state_dict() if reward_scaler else {}}
        return checkpoint.save(run_dir, state["update"], payload, keep=cfg.log.keep_checkpoints,
                               score=metrics.score())

    ctx = zmq.Context()
    curve = None
    if cfg.cluster.server_key:
        from protocol.security import ServerKeys
        with starting("cannot load the CURVE keys"):
            curve = ServerKeys.load(cfg.cluster.server_key, cfg.cluster.allowed_keys)
            curve.start_authenticator(ctx)
    run_id = uuid.uuid4().hex[:12]
    with starting(f"cannot bind {cfg.cluster.address} (another learner there? port 0 picks a free one)"):
        gateway = Gateway(ctx, cfg.cluster.address, actor_env, actor_obs_space, action_space, r.seed, state["update"],
                          run_id, cfg.cluster.max_message_mb << 20, curve=curve)
    with starting(f"cannot bind {cfg.cluster.weights_address} (another learner there? port 0 picks a free one)"):
        publisher = WeightPublisher(ctx, cfg.cluster.weights_address, curve=curve)
    write_endpoints(run_dir, {"address": gateway.endpoint, "weights_address": publisher.endpoint,
                              "pid": os.getpid(), "run_id": run_id})
    log.info("learner on %s (weights on %s), device %s, model %s", gateway.endpoint, publisher.endpoint, device,
             type(model).__name__)
    if stack > 1:
        log.info("actors send each env's newest frame; the learner stacks the last %d", stack)
    policy = Policy(model, action_space, device, obs_norm, seed=r.seed + state["update"],
                    random_actions=r.random_policy)
    collector = Collector(gateway, policy, p.num_steps, obs_space.shape, TORCH_DTYPES.get(obs_space.dtype, torch.float32),
                          action_space.shape, torch.long if action_space.kind == "discrete" else torch.float32,
                          device, cfg.cluster.actor_timeout_s, lockstep=r.deterministic, frame_stack=stack)
    collector.version = state["version"]
    collector.flow_through = r.collect_only and not r.deterministic  # no update: no weights to wait for
    generator = torch.Generator(device=device)
    generator.manual_seed(r.seed + 1 + state["update"])
    metrics = MetricsWriter(run_dir, cfg)
    episodes_file = open(run_dir / "episodes.jsonl", "a", buffering=1)  # every finished episode, raw
    min_envs = cfg.cluster.min_envs or cfg.num_envs
    weights = broadcast_state(model, obs_norm)  # the model, plus obs-normalizer stats for the eval worker
    publisher.publish(weights, state["version"])
    started, steps_at_start, last_saved = time.monotonic(), state["env_steps"], state["update"]

    lagged = r.policy_lag > 0 and not r.collect_only
    if lagged:  # Cleanba: actors are served by a copy holding the previous weights while the update runs
        policy.model = copy.deepcopy(model)
        collector.double_buffer = True
    runner = UpdateRunner(updater, generator, update_threads, background=lagged)

    def complete(job: dict) -> None:
        """After an update: new weights out, one metrics line, maybe a checkpoint."""
        nonlocal last_saved
        stats = runner.result()
        if lagged:
            policy.model.load_state_dict(model.state_dict())
        state["version"] += 1
        collector.version = state["version"]
        publisher.publish(weights, state["version"])
        collector.forgive_pause()
        now = time.monotonic()
        state["elapsed_s"] += now - job["t0"]
        rate = (job["env_steps"] - steps_at_start) / max(now - started, 1e-9)
        ep = collector.episodes
        metrics.write({
            "update": job["update"], "env_steps": job["env_steps"], "sps": job["n_valid"] / max(now - job["t0"], 1e-9),
            "episode_return_mean": sum(ep.returns) / len(ep.returns) if ep.returns else None,
            "episode_length_mean": sum(ep.lengths) / len(ep.lengths) if ep.lengths else None,
            "episodes": ep.count, "policy_loss": stats.get("policy_loss"), "value_loss": stats.get("value_loss"),
            "entropy": stats.get("entropy"), "approx_kl": stats.get("approx_kl"),
            "clip_fraction": stats.get("clip_fraction"), "explained_variance": stats.get("explained_variance"),
            "learning_rate": stats.get("learning_rate", updater.learning_rate(job["update"])),
            "actors": len(gateway.registry), "env_slots": job["env_slots"], "weights_version": state["version"],
            "elapsed_s": state["elapsed_s"], "collect_s": job["t1"] - job["t0"], "update_s": now - job["t1"],
            "progress": min(job["env_steps"] / r.total_steps, 1.0),
            "eta_s": max(r.total_steps - job["env_steps"], 0) / max(rate, 1e-9),
            "rejected_messages": gateway.rejected, "dropped_samples": job["dropped"], "kl_beta": stats.get("kl_beta"),
            "first_minibatch_ratio_max_dev": stats.get("first_minibatch_ratio_max_dev"),
            "policy_lag": r.policy_lag if lagged else 0, "events": gateway.events,
        })
        gateway.events = []
        for ret, length in ep.take_new():
            episodes_file.write(json.dumps({"update": job["update"], "env_steps": job["env_steps"],
                                            "return": ret, "length": length}) + "\n")
        if job["update"] % r.checkpoint_every == 0:
            save_checkpoint()
            last_saved = job["update"]

    in_flight = None
    try:
        while state["env_steps"] < r.total_steps and not stop():
            t0 = time.monotonic()
            buf = collector.collect(min_envs, stop)
            if buf is None:
                break
            t1 = time.monotonic()
            extra = buf.finish(policy.value)
            valid, dones = extra["valid"], extra["dones"]
            n_valid = int(valid.sum())
            if n_valid == 0:
                continue
            rewards = buf.rewards
            if reward_scaler is not None:
                if reward_scaler.num_envs != buf.N:
                    reward_scaler.resize(buf.N)
                rewards = reward_scaler(rewards, dones).to(device)
            advantages, returns = compute_gae(rewards, buf.values, buf.next_values, buf.terminated, dones,
                                              p.gamma, p.gae_lambda)
            state["update"] += 1
            state["env_steps"] += n_valid
            if in_flight is not None:
                complete(in_flight)  # the previous update ran while this rollout was collected
                in_flight = None
            batch = None
            if not r.collect_only:
                # all valid (the usual case): views, not a copy of the whole rollout
                take = (lambda x: x.flatten(0, 1)) if n_valid == valid.numel() else (lambda x: x[valid])
                batch = {"obs": take(buf.obs), "actions": take(buf.actions), "logprobs": take(buf.logprobs),
                         "values": take(buf.values), "advantages": take(advantages), "returns": take(returns)}
            runner.start(batch, state["update"])
            job = {"update": state["update"], "env_steps": state["env_steps"], "n_valid": n_valid, "t0": t0, "t1": t1,
                   "env_slots": buf.N, "dropped": buf.T * buf.N - n_valid}
            if lagged:
                in_flight = job
            else:
                complete(job)
        if in_flight is not None:
            complete(in_flight)
        if state["update"] != last_saved or not checkpoint.latest(run_dir):
            path = save_checkpoint()
            log.info("final checkpoint %s", path)
    finally:
        metrics.close()
        episodes_file.close()
        gateway.close()
        publisher.close()
        if curve is not None:
            curve.stop()  # before term(): the authenticator's sockets would block it
        ctx.term()
    log.info("learner done: %d updates, %d env steps", state["update"], state["env_steps"])
    return 0
