"""Collection: step reports in, frame stacks, batched inference, actions out, filling a rollout. This module is
its front door: the training process (learner/main.py) imports collection from here and from nowhere else
(tests/test_dependencies.py checks it).

The public surface:
- `open_collection(...) -> Collection`: opens a rank's collection in one of its two forms, chosen by
  `cluster.collectors` (see `default_collectors`): on the training process's own thread
  (learner/collection/local.py) or in K collector processes (learner/collection/processes/). The training
  loop sees a `Collection` (learner/collection/collection.py) either way;
- what a caller describes a collection with (learner/collection/assembly.py): `Spaces` (the env's, as the
  actors run it and as the network sees it), `RunOnRank` (the run as one learner rank sees it) and
  `GatewaySetup` (where and how the gateway listens for actors, and whom it admits);
- the policy the actors are served with (learner/collection/inference.py): `Inference`, and `served_modules`
  (with policy lag, the snapshot it serves); `has_policy_lag`, the config's rule for that lag.

Inside: collector.py (the core loop) and its helpers (routes: which rollout each group's observation goes
into; observations, framestack, counters, start_wait, slot_owners); assembly.py, the one place a collection's parts are made; processes/, the process form.
"""
from __future__ import annotations

import os

import torch

from learner.collection.assembly import GatewaySetup, RunOnRank, Spaces, has_policy_lag
from learner.collection.collection import Collection
from learner.collection.inference import Inference, served_modules
from learner.collection.local import open_in_process
from learner.collection.processes.pool import default_collectors, start_collector_processes
from learner.collection.ranks_quota import RanksQuota, RanksStore, RanksUnreachable
from learner.collection.start_wait import NoActors
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.stalls import Watchdog

__all__ = ["open_collection", "Collection", "Spaces", "RunOnRank", "GatewaySetup", "Inference", "served_modules",
           "has_policy_lag", "NoActors", "RanksStore", "RanksUnreachable"]


def open_collection(run: RunOnRank, spaces: Spaces, layout: Layout, gateway_setup: GatewaySetup, *,
                    policy: Inference, watchdog: Watchdog | None, link: DeviceLink, rank_targets: tuple | None,
                    served: list, versions=None, ranks_store: RanksStore | None = None) -> Collection:
    """This rank's collection, listening at gateway_setup.address. One collector (the default on a CPU device,
    and always with run.deterministic or normalize.obs): on this process's thread, computing actions with
    `policy`. K > 1: K collector processes, each serving its own copy of the `served` modules (published
    after each update). `rank_targets`: rank 0's of several ranks, where it sends joiners; `versions` (the
    scheduler's PolicyVersions, learner/rollout/scheduler.py): with policy lag, when newer weights serve.
    `ranks_store`: run.segments on several ranks: where the job's store is, on which every collection of every rank
    counts its steps, so that one quota closes the job's rollout everywhere (learner/collection/ranks_quota.py)."""
    cfg = run.cfg
    k = default_collectors(cfg.cluster.collectors, torch.device(run.device), os.cpu_count() or 1,
                           cfg.run.deterministic, cfg.normalize.obs)
    where = store = None
    if ranks_store is not None and cfg.run.segments:
        where = ranks_store.of_collector(0, k)
        store = where.connect()
        where.post_empty_rows(store)  # this rank's k rows, before the ranks next meet
    if k == 1:
        quota = RanksQuota(where, store) if where is not None else None
        return open_in_process(run, spaces, layout, gateway_setup, policy, watchdog, link, rank_targets, versions,
                               quota)
    return start_collector_processes(k, run, spaces, layout, gateway_setup, link, watchdog, rank_targets, served,
                                     versions, where)
