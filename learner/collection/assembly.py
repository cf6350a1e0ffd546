"""The one place a collection's parts are assembled from the config: the registry of connected actors, the
gateway they talk to and the collector that fills rollouts with their steps. The training process does it
once (`cluster.collectors = 1`, learner/collection/local.py) and each collector process does it for its own
share (learner/collection/processes/process.py); what differs between the two is said by `in_process`.

The records a caller describes a collection with: `Spaces` (the env's), `RunOnRank` (the run as one learner
rank sees it) and `GatewaySetup` (where and how the gateway listens for actors, and whom it admits).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import zmq

from learner.config import Config
from learner.collection.collector import Collector, CollectorSettings, NewerWeights
from learner.collection.inference import Inference
from learner.collection.routes import CloseRule
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
class RunOnRank:
    """The run as one learner rank's training process sees it, shared by every collection of that rank
    (picklable: it crosses a spawn)."""
    cfg: Config
    run_dir: str
    rank: int
    run_id: str
    generation: int  # the update the run (re)started from
    parent_pid: int  # the training process
    device: str


@dataclass(frozen=True)
class GatewaySetup:
    """Where and how a collection's gateway listens for actors, the env seeds it hands them, whom it admits
    and where it redirects joiners."""
    ctx: zmq.Context
    address: str                 # where to bind (port 0: any free one)
    curve: object | None         # protocol.security.ServerKeys, or None
    env_seed: int                # its actors' env seeds' base (learner/seeds.py: collector_env_base)
    admission: Admission | None  # what its peers may claim
    redirect_for: Callable[[ActorRegistry], Callable[[int], str | None] | None] = lambda registry: None
    wake: int | None = None      # a file descriptor whose input ends the gateway's idle wait


@dataclass(frozen=True)
class CollectionParts:
    """What `assemble` made: the registry, the gateway, the collector and the gateway's redirect."""
    registry: ActorRegistry
    gateway: Gateway
    collector: Collector
    redirect: Callable[[int], str | None] | None  # what gateway_setup.redirect_for made


def has_policy_lag(cfg: Config) -> bool:
    """Policy lag: the actors are served by the previous weights while the update runs."""
    return cfg.run.policy_lag > 0 and not cfg.run.collect_only


def collector_settings(cfg: Config, device: torch.device, frame_stack: int, in_process: bool) -> CollectorSettings:
    """In a collector process the pool's wait for a rollout has the deadlines, and its rows are the training
    process's (policy lag alternates two sets of each collector's); deterministic runs have a single,
    in-process collector."""
    r, c = cfg.run, cfg.cluster
    return CollectorSettings(
        cfg.ppo.num_steps, device, c.actor_timeout_s, lockstep=r.deterministic, frame_stack=frame_stack,
        startup_timeout_s=c.startup_timeout_s if in_process else 0.0,
        no_actors_timeout_s=c.no_actors_timeout_s if in_process else 0.0,
        policy_lag=has_policy_lag(cfg), segments=r.segments,
        collect_only=r.collect_only and not r.deterministic)  # collect-only: no weights to wait for


def assemble(run: RunOnRank, spaces: Spaces, layout: Layout, gateway_setup: GatewaySetup, policy: Inference,
             watchdog: Watchdog | None, link: DeviceLink, in_process: bool,
             rows_for: Callable[[int], dict] | None = None, newer: NewerWeights | None = None,
             quota: CloseRule | None = None) -> CollectionParts:
    """Registry, gateway and collector of one collection (the training process's, or a collector process's):
    the collector computes actions with `policy`, pets `watchdog`, copies through `link`; `rows_for`: a
    collector process's columns of the training process's shared rollout; `newer`: where it hears of newer
    weights (policy lag); `quota`: when a segments rollout is full (None: at the collector's own quota)."""
    c, setup = run.cfg.cluster, gateway_setup
    registry = ActorRegistry(admission=setup.admission)  # the gateway admits actors, the collector serves them
    redirect = setup.redirect_for(registry)
    offer = Offer(spaces.actor_env, spaces.actor_obs_space, spaces.action_space, setup.env_seed, run.generation,
                  run.run_id, c.codec, (c.max_abs_reward, c.max_abs_obs))
    receive = setup.admission.receive if setup.admission is not None else None  # the run's own message sizes
    listen = Listen(setup.ctx, setup.address, receive.message_bytes if receive else c.max_message_mb << 20,
                    setup.curve, setup.wake, receive.queued_messages if receive else 1000)
    gateway = Gateway(listen, offer, registry=registry, redirect=redirect)
    settings = collector_settings(run.cfg, torch.device(run.device), spaces.frame_stack, in_process)
    collector = Collector(gateway, registry, policy, layout, settings, watchdog=watchdog, link=link,
                          rows_for=rows_for, newer=newer, quota=quota)
    return CollectionParts(registry, gateway, collector, redirect)
