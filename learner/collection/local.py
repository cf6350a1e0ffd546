"""Collection in the training process itself (`cluster.collectors = 1`): the gateway, the collector and its
inference on the learner's own thread, behind the same face as the pool of collector processes."""
from __future__ import annotations

import dataclasses
import os

from learner.collection.assembly import GatewaySetup, RunOnRank, Spaces, assemble
from learner.collection.collection import Collection
from learner.collection.collector import Collector, NewerWeights
from learner.collection.counters import summarize
from learner.collection.inference import Inference
from learner.collection.routes import CloseRule
from learner.collection.slot_owners import actors_of
from learner.gateway.gateway import Gateway
from learner.gateway.registry import ActorRegistry
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.gateway.placement import RankBalancer
from learner.stalls import Watchdog


def open_in_process(run: RunOnRank, spaces: Spaces, layout: Layout, gateway_setup: GatewaySetup, policy: Inference,
                    watchdog: Watchdog | None, link: DeviceLink, rank_targets: tuple | None,
                    versions: NewerWeights | None = None, quota: CloseRule | None = None) -> LocalCollection:
    """Collection on this process's thread, computing actions with `policy`; `rank_targets`: rank 0's of several
    ranks, for its RankBalancer (the gateway redirects joiners with it); `versions`: where newer weights are
    heard of (policy lag); `quota`: when a segments rollout is full (None: at this rank's own quota)."""
    gateway_setup = dataclasses.replace(gateway_setup, redirect_for=lambda registry: (
        RankBalancer(registry.num_slots, *rank_targets) if rank_targets else None))
    parts = assemble(run, spaces, layout, gateway_setup, policy, watchdog, link, in_process=True, newer=versions,
                     quota=quota)
    return LocalCollection(parts.gateway, parts.registry, parts.collector, parts.redirect)


class LocalCollection(Collection):
    def __init__(self, gateway: Gateway, registry: ActorRegistry, collector: Collector,
                 balancer: RankBalancer | None = None):
        """`balancer`: rank 0's of a multi-rank job (the gateway redirects joiners with it)."""
        self.gateway, self.registry, self.collector, self.balancer = gateway, registry, collector, balancer
        self.endpoint, self.layout = gateway.endpoint, collector.layout

    @property
    def rollouts(self) -> int:
        return self.collector.rollouts

    def processes(self) -> list[dict]:
        """Where each collector listens, and its process (for endpoints.json): here, this one."""
        return [{"address": self.endpoint, "pid": os.getpid()}]

    def join_command(self, num_envs: int) -> str:
        return self.gateway.join_command(num_envs)

    def know_ranks(self, rank_addresses: list[str]) -> None:
        if self.balancer is not None:
            self.balancer.know(rank_addresses)

    def collect(self, min_envs: int, should_stop, version: int) -> RolloutBuffer | None:
        return self.collector.collect(min_envs, should_stop, version)

    def strike(self, slots: list[int], reason: str) -> None:
        """(Nothing was received since the rollout ended: the slots' holders are the actors that filled them.)"""
        for entry in actors_of(self.registry, slots):
            self.gateway.strike(entry, reason)

    def take_episodes(self) -> list[tuple[float, int]]:
        return self.collector.episodes.take_new()

    def actors(self) -> int:
        return len(self.registry)

    def live_slots(self) -> int:
        return self.registry.num_slots()

    def rejected(self) -> int:
        return self.gateway.rejected

    def breakdown(self) -> dict | None:
        counts = self.collector.counts
        return summarize([counts] if counts is not None else [])

    def take_events(self) -> list[str]:
        return self.gateway.take_events()

    def after_update(self, version: int, rank_slots: list[int] | None) -> None:
        """The update is done (the policy serving the actors already follows it)."""
        if self.balancer is not None and rank_slots is not None:
            self.balancer.after_update(rank_slots)

    def close(self) -> None:
        self.gateway.close()
