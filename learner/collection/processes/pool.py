"""K collector processes (`cluster.collectors`), seen by the training loop as one collection: `collect` returns
the whole rollout, their shards side by side.

Collector 0 binds the learner's address, the door actors are told about; it redirects each joiner to the
collector with the fewest env slots (the existing `Redirect`), which the actor then joins directly. Every
collector infers with its own copy of the model, loaded from `SharedWeights` before a rollout of a new
version. The training process waits for the first rollout's env slots on the shared board, starts the K
rollouts together, and merges the shards. A collector that dies or fails ends the run with one error
naming it; none outlives the training process (they watch it, and are daemons of it).

With policy lag (issue 62) the weights of the update that runs while a rollout fills are published as soon
as it is done (the scheduler's PolicyVersions says when); each collector loads them between messages and its
groups that finish go on into the next rollout at once. Each collector then starts its rollouts at its own
time, so each has its own two sets of shared rows (`Rows` answers its `Width` whenever it comes) and the
merged rollout is their concatenation, made once per rollout.
"""
from __future__ import annotations

import logging
import signal
import time
from collections import deque
from multiprocessing.connection import wait

import torch

from learner.stalls import Stalled
from learner.collection.assembly import GatewaySetup, RunOnRank, Spaces, has_policy_lag
from learner.collection.collection import Collection
from learner.collection.counters import summarize
from learner.collection.processes.pipe import Collect, Done, Know, Ready, Rows, Strike, Width, describe_failure
from learner.collection.processes.board import BEAT, BOARD_COLUMNS, READY
from learner.collection.processes.process import CollectorRole, CollectorSpec, collector_main
from learner.collection.processes.shard import Shard, SharedRows, merge_shards
from learner.collection.ranks_quota import RanksStore
from learner.collection.start_wait import StartWait
from learner.report.episodes import RecentEpisodes
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.gateway.events import cap_events
from learner.gateway.gateway import join_command
from learner.gateway.registry import MAX_ENV_SLOTS
from learner.gateway.placement import advertised_address
from learner.weights.shared import SharedWeights

log = logging.getLogger("learner")
START_DEADLINE_S = 120.0  # a collector process that has not bound its socket by then will not
CLOSE_GRACE_S = 10.0
SILENT_FLOOR_S = 10.0  # a collector process without a sign of life for max(this, 2 x actor_timeout_s) is lost


class CollectorLost(Stalled):
    """A collector process died or failed: the run stops with this error (nothing lost beyond the last
    checkpoint, as with any stall)."""


def default_collectors(requested: int, device: torch.device, cores: int, deterministic: bool,
                       normalize_obs: bool) -> int:
    """cluster.collectors = 0: one collector per 8 cores of the learner host on a GPU (at most 4; each feeds
    one device with about a core's worth of Python), 1 on a CPU device, where inference competes with the
    actors and the update for the same cores, and 1 where several would not be exact or would keep their own
    observation statistics. (A recurrent core's state per env slot lives in the process that infers for it.)"""
    if requested:
        return requested
    if deterministic or normalize_obs or device.type == "cpu":
        return 1
    return max(1, min(4, cores // 8))


def collector_address(address: str, index: int) -> str:
    """Where collector `index` > 0 binds: a free port of collector 0's host, or an ipc path beside its own."""
    if address.startswith("ipc://"):
        return f"{address}-collector-{index}"
    return f"{address.rpartition(':')[0]}:0"


def start_collector_processes(k: int, run: RunOnRank, spaces: Spaces, layout: Layout, gateway_setup: GatewaySetup,
                              link: DeviceLink, watchdog, rank_targets: tuple | None, served: list,
                              versions=None, ranks_store: RanksStore | None = None) -> CollectorPool:
    """K collector processes, collector 0 at gateway_setup.address, the others on free ports of the same host,
    serving the `served` modules (published after each update); `rank_targets`: rank 0's of several ranks;
    `versions`: with policy lag, says when the update running meanwhile is done (learner/rollout/scheduler.py);
    `ranks_store`: run.segments on several ranks, the job's store (each collector closes at the job's quota)."""
    specs = [CollectorSpec(run, spaces, layout, CollectorRole(
        i, k, gateway_setup.address if i == 0 else collector_address(gateway_setup.address, i),
        rank_targets if i == 0 else None, gateway_setup.admission.split(k),
        ranks_store.of_collector(i, k) if ranks_store is not None else None)) for i in range(k)]
    return CollectorPool(specs, SharedWeights(served), served, run.cfg.ppo.num_steps, link, watchdog,
                         run.cfg.cluster.advertise_host, versions)


class CollectorPool(Collection):
    def __init__(self, specs: list[CollectorSpec], weights: SharedWeights, served: list, num_steps: int,
                 link: DeviceLink, watchdog, advertise_host: str, versions=None):
        """`served`: the training process's modules the collectors serve (published after each update, and with
        policy lag as soon as `versions` says the update is done)."""
        self.specs, self.weights, self.served, self.versions = specs, weights, served, versions
        first = specs[0]
        self.layout, self.num_steps, self.link, self.watchdog = first.layout, num_steps, link, watchdog
        self.shared_rows = first.shared_rows
        c = first.run.cfg.cluster
        self.silent_s = max(SILENT_FLOOR_S, 2 * c.actor_timeout_s)  # see _check_alive
        self.board = torch.zeros(len(specs), BOARD_COLUMNS, dtype=torch.int64).share_memory_()
        self.halt = torch.zeros(1, dtype=torch.int8).share_memory_()
        self.procs, self.conns = [], []
        self._start(specs, weights)
        try:
            self.endpoints = [self._expect_ready(k) for k in range(len(specs))]
        except CollectorLost:
            self.close()  # the others started: none is left behind
            raise
        self.endpoint = self.endpoints[0]
        self.addresses = [advertised_address(e, advertise_host) for e in self.endpoints]
        self._send(0, Know(self.addresses, None))
        self.rollouts = 0
        self.episodes = RecentEpisodes()
        self.latest: dict[int, Shard] = {}
        self.counts: list = []  # each collector's RolloutCounts of the last rollout
        self.events: list[str] = []
        self.rank_slots: list[int] | None = None  # for rank 0's RankBalancer, with the next collect
        self.start_wait = StartWait(lambda: int(self.board[:, READY].sum()), lambda: self._watch(0.05),
                                    self._ready_line, self.join_command, c.actor_timeout_s, c.startup_timeout_s,
                                    c.no_actors_timeout_s)
        self.lag = has_policy_lag(first.run.cfg) and self.shared_rows
        self.rows = SharedRows(num_steps, self.layout, False)  # where the collectors write (synchronous)
        self.own_rows = [SharedRows(num_steps, self.layout, True) for _ in specs] if self.lag else []  # (lag)
        self.handed: list[deque] = [deque() for _ in specs]  # (lag) each collector's rows of the rollouts it began
        self.sent: list[set[int]] = [set() for _ in specs]  # ids of the row arrays each collector holds
        log.info("%d collector processes on %s", len(specs), ", ".join(self.endpoints))

    def _start(self, specs: list[CollectorSpec], weights: SharedWeights) -> None:
        ctx = torch.multiprocessing.get_context("spawn")
        for spec in specs:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=collector_main, name=f"collector-{spec.index}", daemon=True,
                               args=(spec, theirs, weights, self.board, self.halt))
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # until collector_main ignores it
            try:
                proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            theirs.close()
            self.procs.append(proc)
            self.conns.append(mine)

    def _expect_ready(self, k: int) -> str:
        if not self.conns[k].poll(START_DEADLINE_S):
            raise CollectorLost(f"collector {k} did not start within {START_DEADLINE_S:g}s")
        message = self._receive(k)
        if not isinstance(message, Ready):
            raise CollectorLost(describe_failure(message, f"collector {k} could not start"))
        return message.endpoint

    def _receive(self, k: int):
        try:
            return self.conns[k].recv()
        except (EOFError, OSError):
            raise self._lost(k) from None

    def _send(self, k: int, message) -> None:
        try:
            self.conns[k].send(message)
        except OSError:  # its end of the pipe is closed: it died between two rollouts
            raise self._lost(k) from None

    def _lost(self, k: int) -> CollectorLost:
        proc = self.procs[k]
        proc.join(1.0)
        return CollectorLost(f"collector {k} (pid {proc.pid}) exited with code {proc.exitcode} "
                             f"without a word (see the log above)")

    # -- what the training loop calls ------------------------------------------------------------------

    def processes(self) -> list[dict]:
        """Where each collector listens, and its process (for endpoints.json)."""
        return [{"address": e, "pid": p.pid} for e, p in zip(self.endpoints, self.procs)]

    def join_command(self, num_envs: int) -> str:
        return join_command(self.endpoint, num_envs, bool(self.specs[0].run.cfg.cluster.server_key))

    def know_ranks(self, rank_addresses: list[str]) -> None:
        self._send(0, Know(self.addresses, rank_addresses))

    def collect(self, min_envs: int, should_stop, version: int) -> RolloutBuffer | None:
        """Every collector's shard of one rollout, merged (see the module doc for policy lag)."""
        if not self.start_wait.until(min_envs, should_stop, first=self.rollouts == 0):
            return None
        if self.weights.current() < version:  # a resumed run's first rollout: the checkpoint's weights, by their version
            self.weights.publish(self.served, version)
        for k in range(len(self.conns)):
            self._send(k, Collect(version, self.rank_slots if k == 0 else None))
        self.rank_slots = None
        if self.shared_rows and not self.lag:
            widths = self._gather(Width, should_stop)
            if widths is None:
                return None
            rows = self._hand_out_rows([w.columns for w in widths])
        done = self._gather(Done, should_stop)
        if done is None:
            return None
        shards = [d.shard for d in done]
        self.counts = [d.counts for d in done if d.counts is not None]
        if self.lag:
            rows = self._joined_rows(shards)
        elif not self.shared_rows:  # collect-only: the collectors kept their rows; these only carry the counts
            rows = self.rows.take(sum(len(s.columns.slots) for s in shards))[1]
        self.rollouts += 1
        for shard in shards:
            for ret, length in shard.episodes:
                self.episodes.add(ret, length)
            self.events = cap_events(self.events + shard.events)  # bounded until the update takes them
            self.latest[shard.collector] = shard
        return merge_shards(shards, self.num_steps, self.layout, self.link.device, self.link, rows)

    def _hand_out_rows(self, widths: list[int]) -> dict:
        """Each collector's columns of this rollout's shared arrays, side by side in collector order."""
        rows_id, rows = self.rows.take(sum(widths))
        alive = {s[0] for s in self.rows.sets if s is not None}
        offset = 0
        for k in range(len(self.conns)):
            self._send(k, Rows(rows_id, offset, None if rows_id in self.sent[k] else rows, alive))
            self.sent[k] = (self.sent[k] & alive) | {rows_id}
            offset += widths[k]
        return rows

    def _own_rows(self, k: int, width: int) -> None:
        """Policy lag: collector k begins a rollout of `width` columns (whenever it does): its next own set."""
        rows_id, rows = self.own_rows[k].take(width)
        alive = {s[0] for s in self.own_rows[k].sets if s is not None}
        self._send(k, Rows(rows_id, 0, None if rows_id in self.sent[k] else rows, alive))
        self.sent[k] = (self.sent[k] & alive) | {rows_id}
        self.handed[k].append(rows)

    def _joined_rows(self, shards: list) -> dict:
        """Policy lag: the rollout's rows, each collector's oldest rows handed out side by side (one copy)."""
        parts = []
        for shard in shards:
            k, width = shard.collector, len(shard.columns.slots)
            rows = self.handed[k].popleft() if self.handed[k] else None
            if rows is None or rows["rewards"].shape[1] != width:
                raise CollectorLost(f"collector {k}: a shard of {width} columns does not match the rows it was given")
            parts.append(rows)
        return {name: torch.cat([p[name] for p in parts], dim=1) for name in parts[0]}

    def _serve_newer(self) -> None:
        """Policy lag: publish the weights of the update running meanwhile as soon as it is done."""
        if self.lag and self.versions is not None:
            if (version := self.versions.newer(self.weights.current())) is not None \
                    and version > self.weights.current():
                self.weights.publish(self.served, version)

    def _ready_line(self, need: int) -> str:
        ready = self.board[:, READY].tolist()
        return f"{sum(ready)} env slots ready, {need} needed (per collector: {ready})"

    def _watch(self, timeout_s: float) -> None:
        """Between rollouts a collector says nothing: anything readable is its error, or its death."""
        self._check_alive(range(len(self.conns)))
        self._pet()
        for conn in wait(self.conns, timeout_s):
            k = self.conns.index(conn)
            raise CollectorLost(describe_failure(self._receive(k), f"collector {k}"))

    def _check_alive(self, collectors) -> None:
        """A collector process beats on the board at every pass of its loops (BeatingWatchdog); one silent for
        silent_s is stopped (SIGSTOP) or hung: the run ends naming it (its last checkpoint kept), rather than
        wait on it for ever."""
        now_ms = int(time.monotonic() * 1000)
        for k in collectors:
            quiet = (now_ms - int(self.board[k, BEAT])) / 1000
            if quiet > self.silent_s:
                self.procs[k].kill()  # stopped or hung: it would not exit when told (SIGKILL ends a stopped one)
                raise CollectorLost(f"collector {k} (pid {self.procs[k].pid}) showed no sign of life for {quiet:.0f}s: "
                                    f"stopped or hung (the limit is {self.silent_s:g}s: twice cluster.actor_timeout_s, "
                                    f"at least {SILENT_FLOOR_S:g}s)")

    def _pet(self) -> None:
        if self.watchdog is not None:
            self.watchdog.pet()

    def _gather(self, kind: type, should_stop) -> list | None:
        """Every collector's answer of `kind` (Width, Done), in collector order (None: asked to stop first, and
        the collectors told)."""
        answers: dict[int, object] = {}
        while len(answers) < len(self.conns):
            if should_stop():
                self.halt[0] = 1
                return None
            self._check_alive([k for k in range(len(self.conns)) if k not in answers])
            self._pet()  # only on the awaited collectors' signs of life: never while one of them is stopped
            self._serve_newer()
            wake = self.versions.wake() if self.lag and self.versions is not None else None
            awaited = [c for k, c in enumerate(self.conns) if k not in answers]
            for conn in wait(awaited + ([wake] if wake is not None else []), 1.0):
                if isinstance(conn, int):
                    continue  # the update running meanwhile is done: its weights are published above, next pass
                k = self.conns.index(conn)
                message = self._receive(k)
                if self.lag and isinstance(message, Width):
                    self._own_rows(k, message.columns)
                    continue
                if not isinstance(message, kind):
                    raise CollectorLost(describe_failure(message, f"collector {k}"))
                answers[k] = message
        return [answers[k] for k in range(len(self.conns))]

    def strike(self, slots: list[int], reason: str) -> None:
        """Each collector strikes the holders of its own slots (merged_slot numbers them by collector)."""
        by_collector: dict[int, list[int]] = {}
        for slot in slots:
            k, own = divmod(slot, MAX_ENV_SLOTS)
            by_collector.setdefault(k, []).append(own)
        for k, own in by_collector.items():
            self._send(k, Strike(own, reason))

    def take_episodes(self) -> list[tuple[float, int]]:
        return self.episodes.take_new()

    def actors(self) -> int:
        return sum(s.actors for s in self.latest.values())

    def live_slots(self) -> int:
        return sum(s.live_slots for s in self.latest.values())

    def rejected(self) -> int:
        return sum(s.rejected for s in self.latest.values())

    def breakdown(self) -> dict | None:
        return summarize(self.counts)

    def take_events(self) -> list[str]:
        events, self.events = self.events, []
        return events

    def after_update(self, version: int, rank_slots: list[int] | None) -> None:
        """The update is done: the collectors serve its weights from the next rollout on (with policy lag
        they may have been published mid-rollout already)."""
        if self.weights.current() != version:
            self.weights.publish(self.served, version)
        self.rank_slots = rank_slots

    def close(self) -> None:
        """Every collector says goodbye to its actors and exits; one that does not is killed."""
        self.halt[0] = 1
        deadline = time.monotonic() + CLOSE_GRACE_S
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                log.warning("collector %s did not exit within %gs: killing it", proc.name, CLOSE_GRACE_S)
                proc.kill()
                proc.join(5.0)
        for conn in self.conns:
            conn.close()
