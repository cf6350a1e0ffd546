"""What the learner settles before it opens a socket: its device, its place among the ranks, the env's spaces
(as the actors send them and as the network sees them), and what peers may claim on this rank. Each refuses a
run that cannot start with one line (StartupError)."""
from __future__ import annotations

import logging
import os

import torch

from actor.envs import describe_spaces, make_env
from learner.collection import Spaces
from learner.config import Config, ConfigError
from learner.config_rules import check_multi_rank
from learner.gateway.admission import Admission, check_run_fits, state_bytes
from learner.gateway.receive import ReceiveLimits
from learner.rollout.buffer import SEGMENT_ROOM
from learner.lifecycle.startup import StartupError, starting
from learner.update.ranks import Ranks
from protocol.settings import EnvSettings

log = logging.getLogger("learner")


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
    env = make_env(settings, seed)
    try:
        return describe_spaces(env)
    finally:
        env.close()


def learner_spaces(cfg: Config) -> Spaces:
    """The env's spaces as the actors send them and as the network sees them (stacked here or not)."""
    with starting(f"cannot make env {cfg.env.env_id!r}"):
        obs_space, action_space = probe_spaces(cfg.env, cfg.run.seed)
        # the actors' env: without its FrameStack when the learner stacks their newest frames
        stack = cfg.env.frame_stack if cfg.cluster.stack_on_learner and cfg.env.is_atari else 1
        actor_env = cfg.env.model_copy(update={"frame_stack": 1}) if stack > 1 else cfg.env
        actor_obs_space = probe_spaces(actor_env, cfg.run.seed)[0] if stack > 1 else obs_space
    if cfg.normalize.obs and obs_space.dtype == "uint8":
        raise StartupError(f"normalize.obs is for vector observations; {cfg.env.env_id} gives uint8 images, "
                           "which the CNN already scales to [0, 1]: set normalize.obs = false "
                           "(model.normalize_input standardizes the pixels inside the CNN)")
    if stack > 1:
        log.info("actors send each env's newest frame; the learner stacks the last %d", stack)
    return Spaces(actor_env, actor_obs_space, obs_space, action_space, stack)


def admission_of(cfg: Config, spaces: Spaces, state_size: int = 0) -> Admission:
    """What peers may claim on this rank, from the config and the machine's memory (and a recurrent core's
    `state_size` floats per env slot), with what each peer's messages may hold before they are read (from the
    messages of this run's env, receive.py); said in one line, and the run refused at start if its own actors
    could not fit."""
    c, p, obs = cfg.cluster, cfg.ppo, spaces.obs_space
    state = state_bytes(state_size, p.num_steps, p.bptt or p.num_steps)
    # run.segments: SEGMENT_ROOM columns per env slot, with K collector processes too (each keeps that room for its
    # own slots under the job-wide quota: docs/design.md, "Segments")
    rollouts = Admission.of(c.memory_budget_mb, c.max_envs_per_actor, cfg.num_envs, obs.shape, obs.dtype,
                            p.num_steps, state=state, columns=SEGMENT_ROOM if cfg.run.segments else 1)
    receive = ReceiveLimits.of(spaces.actor_obs_space, spaces.action_space, spaces.actor_env.env_id,
                               rollouts.max_envs_per_actor, c.max_message_mb << 20)
    admission = rollouts.with_queues(receive).split(c.learners)
    run_envs, run_actors = cfg.num_envs // c.learners, -(-c.actors // c.learners)
    if (why := check_run_fits(admission, run_envs, c.min_envs, run_actors)) is not None:
        raise StartupError(why)
    log.info("%s", admission.describe(run_envs, run_actors))
    return admission

