"""The choice between collection's two forms: in the training process (`cluster.collectors = 1`) or K collector
processes; the training loop gets a `Collection` either way."""
from __future__ import annotations

import dataclasses

from learner.collection.build import Door, RankContext, Serving, Spaces, assemble
from learner.collection.collection import Collection
from learner.collection.local import LocalCollection
from learner.collection.pool import CollectorPool
from learner.collection.process import CollectorRole, CollectorSpec
from learner.rollout.layout import Layout
from learner.gateway.placement import RankBalancer
from learner.weights.shared import SharedWeights


def collector_address(address: str, index: int) -> str:
    """Where collector `index` > 0 binds: a free port of collector 0's host, or an ipc path beside its own."""
    if address.startswith("ipc://"):
        return f"{address}-collector-{index}"
    return f"{address.rpartition(':')[0]}:0"


def open_collection(k: int, run: RankContext, spaces: Spaces, layout: Layout, door: Door, serving: Serving,
                    rank_targets: tuple | None, served: list) -> Collection:
    """k = 1: collection on this process's thread, with `serving.policy`; else K collector processes,
    collector 0 at door.address, the others on free ports of the same host, serving the `served` modules
    (published after each update). `rank_targets`: rank 0's of several ranks, for its RankBalancer."""
    if k == 1:
        door = dataclasses.replace(door, redirect_for=lambda registry: (
            RankBalancer(registry.num_slots, *rank_targets) if rank_targets else None))
        parts = assemble(run, spaces, layout, door, serving, in_process=True)
        return LocalCollection(parts.gateway, parts.registry, parts.collector, parts.redirect)
    specs = [CollectorSpec(run, spaces, layout, CollectorRole(
        i, k, door.address if i == 0 else collector_address(door.address, i), rank_targets if i == 0 else None,
        door.admission.split(k))) for i in range(k)]  # (deterministic runs have one collector)
    cfg = run.cfg
    return CollectorPool(specs, SharedWeights(served), served, cfg.ppo.num_steps, serving.link, serving.watchdog,
                         cfg.cluster.advertise_host)
