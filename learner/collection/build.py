"""The one place a collection's parts are assembled from the config: the registry of connected actors, the
gateway they talk to and the collector that fills rollouts with their steps. The training process does it
once (`cluster.collectors = 1`, learner/collection/local.py) and each collector process does it for its own
share (learner/collection/process.py); what differs between the two is said by `in_process`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import zmq

from learner.config import Config
from learner.collection.collector import Collector, CollectorSettings
from learner.collection.inference import Inference
from learner.gateway.admission import Admission
from learner.gateway.gateway import Gateway, Listen, Offer
from learner.gateway.registry import ActorRegistry
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.stalls import Watchdog
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec


@dataclass(frozen=True)
class Spaces:
    """The env as the actors run it and as the learner sees it."""
    actor_env: EnvSettings       # what the actors run: without its FrameStack when the learner stacks
    actor_obs_space: SpaceSpec   # what the actors send
    obs_space: SpaceSpec         # what the network sees (stacked)
    action_space: SpaceSpec
    frame_stack: int             # stacked on the learner (1: not stacked here)


@dataclass(frozen=True)
class RankContext:
    """What every collection of one learner rank shares (picklable: it crosses a spawn)."""
    cfg: Config
    run_dir: str
    rank: int
    run_id: str
    generation: int  # the update the run (re)started from
    parent_pid: int  # the training process
    device: str


@dataclass(frozen=True)
class Door:
    """Where and how a gateway listens for actors."""
    ctx: zmq.Context
    address: str                 # where to bind (port 0: any free one)
    curve: object | None         # protocol.security.ServerKeys, or None
    env_seed: int                # its actors' env seeds' base (learner/seeds.py: collector_env_base)
    admission: Admission | None  # what its peers may claim
    redirect_for: Callable[[ActorRegistry], Callable[[int], str | None] | None] = lambda registry: None
    wake: int | None = None      # a file descriptor whose input ends the gateway's idle wait


@dataclass(frozen=True)
class Serving:
    """What the collector computes actions with and reports to."""
    policy: Inference
    watchdog: Watchdog | None
    link: DeviceLink
    rows_for: Callable[[int], dict] | None = None  # a collector process: its columns of the shared rollout


@dataclass(frozen=True)
class Parts:
    registry: ActorRegistry
    gateway: Gateway
    collector: Collector
    redirect: Callable[[int], str | None] | None  # what door.redirect_for made


def has_policy_lag(cfg: Config) -> bool:
    """Policy lag: the actors are served by the previous weights while the update runs."""
    return cfg.run.policy_lag > 0 and not cfg.run.collect_only


def collector_settings(cfg: Config, device: torch.device, frame_stack: int, in_process: bool) -> CollectorSettings:
    """In a collector process the pool's wait for the first rollout has the deadline, and its rows are the
    training process's (policy lag alternates those); deterministic runs have a single, in-process collector."""
    r, c = cfg.run, cfg.cluster
    return CollectorSettings(
        cfg.ppo.num_steps, device, c.actor_timeout_s, lockstep=r.deterministic, frame_stack=frame_stack,
        startup_timeout_s=c.startup_timeout_s if in_process else 0.0,
        policy_lag=has_policy_lag(cfg) and in_process,
        collect_only=r.collect_only and not r.deterministic)  # collect-only: no weights to wait for


def assemble(run: RankContext, spaces: Spaces, layout: Layout, door: Door, serving: Serving,
             in_process: bool) -> Parts:
    """Registry, gateway and collector of one collection (the training process's, or a collector process's)."""
    c = run.cfg.cluster
    registry = ActorRegistry(admission=door.admission)  # the gateway admits actors, the collector serves them
    redirect = door.redirect_for(registry)
    offer = Offer(spaces.actor_env, spaces.actor_obs_space, spaces.action_space, door.env_seed, run.generation,
                  run.run_id, c.codec)
    listen = Listen(door.ctx, door.address, c.max_message_mb << 20, door.curve, door.wake)
    gateway = Gateway(listen, offer, registry=registry, redirect=redirect)
    settings = collector_settings(run.cfg, torch.device(run.device), spaces.frame_stack, in_process)
    collector = Collector(gateway, registry, serving.policy, layout, settings, watchdog=serving.watchdog,
                          link=serving.link, rows_for=serving.rows_for)
    return Parts(registry, gateway, collector, redirect)
