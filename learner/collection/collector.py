"""Fills one rollout: step reports in, batched inference, actions out, until every live column has T steps.

Each actor group is served as soon as its report arrives (batched with whatever else is waiting), so a
slow actor delays only itself. In deterministic mode the collector waits for every group and infers
them in slot order, so the result does not depend on process scheduling.

With `collect_only` (collect-only runs, where the weights never change between rollouts) a group that
has done its T steps goes straight on into the next rollout instead of idling until the slowest group
catches up. With policy lag the collector asks its `newer` (learner/rollout/scheduler.py: PolicyVersions in
the training process, the shared weights in a collector process) between messages: once the lagging
update's weights serve (which keeps the lag at one version), groups flow on the same way.

With run.segments (issue 62) a rollout is not one column per env slot: it is full once its columns hold T steps
per env slot in all, from whichever slots produced them. A group that finishes its T-step segment first opens new
columns in the same rollout (a fast actor gives more segments), and at the close the slow groups' unfinished
segments are cut where their bootstrap is known (learner/rollout/buffer.py: close); their next observations start
new segments in the next rollout, and an outcome that was in flight at the close is dropped (counted among the
dropped samples). So no group waits for the slowest one at a rollout's end.

Which rollout each group's observation is acted on in (the current one, a new segment of it, the next one, or
none yet: parked), and those rollouts themselves, are its `Routes` (learner/collection/routes.py).
"""
from __future__ import annotations

import logging
import time
from itertools import chain
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from learner.gateway.registry import PAUSE_S, ActorEntry, ActorRegistry
from learner.collection.counters import RolloutCounters, RolloutCounts
from learner.collection.slot_owners import group_of, unfinished
from learner.collection.observations import Observations, episodes_of
from learner.collection.start_wait import StartWait
from learner.report.episodes import RecentEpisodes
from learner.gateway.gateway import Incoming
from learner.collection.inference import Inference
from learner.collection.routes import CloseRule, Routes, Waiting
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink
from learner.stalls import Stalled, Watchdog
from protocol import messages as m

log = logging.getLogger("learner")


class NewerWeights(Protocol):
    """Where a collector hears that newer weights serve (policy lag): `newer(serving)` gives their version once
    the update running while this rollout fills is done (and makes the policy serve them), else None."""

    def newer(self, serving: int) -> int | None: ...


class CollectorGateway(Protocol):
    """What the collector asks of its gateway (learner/gateway/gateway.py's `Gateway`; a unit test's fake needs
    no socket): the actors' messages in, actions out, who left, and the words for a wait's log line."""
    retired: dict  # identity -> why it was retired

    def poll(self, timeout_ms: int) -> list[Incoming]: ...
    def send_actions(self, entry: ActorEntry, group: int, actions, version: int) -> bool: ...
    def retire(self, entry: ActorEntry, reason: str, tell: bool = True) -> None: ...
    def refuse(self, entry: ActorEntry, reason: str) -> None: ...
    def take_departed(self) -> list[ActorEntry]: ...
    def check_liveness(self, timeout_s: float) -> None: ...
    def describe(self, limit: int = 8) -> str: ...
    def join_command(self, num_envs: int) -> str: ...


@dataclass(frozen=True)
class CollectorSettings:
    """How a collector runs its rollouts (made from the config in learner/collection/assembly.py).
    `lockstep` (deterministic runs): see the module doc; `startup_timeout_s`: 0, the first rollout waits for its
    actors for ever; `policy_lag`: the previous rollout is still being trained on while this
    one fills; `collect_only`: see the module doc."""
    num_steps: int
    device: torch.device
    actor_timeout_s: float
    lockstep: bool = False
    frame_stack: int = 1
    startup_timeout_s: float = 0.0
    no_actors_timeout_s: float = 0.0  # the same for a later rollout: every actor gone (0: waits for ever)
    policy_lag: bool = False
    collect_only: bool = False
    segments: bool = False  # run.segments: see the module doc


class Collector:
    def __init__(self, gateway: CollectorGateway, registry: ActorRegistry, policy: Inference, layout: Layout,
                 settings: CollectorSettings, watchdog: Watchdog | None = None, link: DeviceLink | None = None,
                 rows_for=None, newer: NewerWeights | None = None, quota: CloseRule | None = None):
        """`registry` is the gateway's (who is connected); `watchdog` is petted on every pass (the collector's
        loops are the learner's); `link` makes (and counts) the copies between the host rollouts and the
        device; `rows_for(width)`, in a collector process, gives the memory a rollout of `width` columns is
        written into (its columns of the shared rollout); `newer`: with policy lag, where newer weights are
        heard of (see the module doc; deterministic runs never ask: the switch would hang on thread timing);
        `quota`: when a segments rollout is full (None: at its own quota; K collector processes: the job's)."""
        s = settings
        self.gateway, self.registry, self.policy = gateway, registry, policy
        self.link = link or DeviceLink(s.device)
        self.observations = Observations(s.frame_stack, policy if policy.recurrent else None)
        self.layout = layout
        self.actor_timeout_s, self.lockstep = s.actor_timeout_s, s.lockstep
        self.policy_lag, self.collect_only = s.policy_lag, s.collect_only
        self.segments = s.segments and not s.lockstep
        self.routes = Routes(registry, layout, self.link, s.num_steps, self.segments, s.policy_lag, rows_for, quota)
        self.pass_ms = self.routes.rule.pass_ms  # the longest wait for a message in a pass of a rollout
        self.newer = newer if s.policy_lag and not s.lockstep else None
        self.lagged: int | None = None  # policy lag: this rollout's steps acted before newer weights served
        self.rollouts = 0  # started so far (in this process)
        self.heard = 0.0  # when the last message from an actor arrived
        self.listened = None  # when the last poll ended (the gap to the next is the learner's, see _pump)
        self.watchdog = watchdog
        self.episodes = RecentEpisodes()
        self.counters = RolloutCounters()  # where the rollout's time goes (learner/collection/counters.py)
        self.counts: RolloutCounts | None = None  # the last complete rollout's
        self.handlers = {r.cls: getattr(self, r.handler) for r in m.TABLE if m.COLLECTOR in r.by}  # type -> method
        self.start_wait = StartWait(self.routes.parked_slots, lambda: self._pump(100), self._waiting_on,
                                    gateway.join_command, s.actor_timeout_s, s.startup_timeout_s,
                                    s.no_actors_timeout_s)

    @property
    def version(self) -> int:
        """Of the weights actions are computed with (given to each collect, or by newer)."""
        return self.routes.version

    @property
    def buffer(self) -> RolloutBuffer | None:
        return self.routes.buffer

    @property
    def next(self) -> RolloutBuffer | None:
        return self.routes.next

    @property
    def waiting(self) -> dict:
        return self.routes.waiting

    @property
    def parked(self) -> dict:
        return self.routes.parked

    def pump(self, timeout_ms: int) -> int:
        """Between rollouts (a collector process waiting for its next one): admit joiners and their first
        reports, hear goodbyes, check liveness. Returns the env slots ready for the next rollout (with
        collect_only, those already in it too)."""
        self._pump(timeout_ms)
        return self.routes.parked_slots() + (self.next.env_slots() if self.next is not None else 0)

    def collect(self, min_envs: int, should_stop, version: int = 0, admit_first: bool = True) -> RolloutBuffer | None:
        """Start a rollout once `min_envs` env slots are ready and run it until complete; None when asked to
        stop first. The learner asks for its min_envs before the first rollout and for 1 after, so a run
        goes on after actors are lost for good (with no live env at all it waits, saying so). 0: start at
        once with whoever is ready, an empty rollout if nobody is (a rank of a multi-rank learner).
        `version`: the weights the actions are computed with, sent with them. `admit_first=False`: the caller
        has just been pumping (a collector process between rollouts), so a 0 starts without another pump.
        With policy lag `newer` is asked at the start and once a pass until it answers (the update reading the
        buffer the next rollout reuses is then done); from then on groups that finish this rollout go on into the
        next (from the first step when it answers at the start: none of the rollout's steps is lagged)."""
        version, flowing, self.lagged = max(version, self.version), self.collect_only, None
        if self.newer is not None and (newest := self.newer.newer(version)) is not None:
            version, flowing, self.lagged = newest, True, 0  # newer weights serve from the first step
        self.routes.serve(version, flowing)
        if self.next is not None:  # groups already went on into it while the last one finished
            self.routes.advance()  # its counting began at the last rollout's finish
        else:
            if min_envs == 0 and admit_first:  # admit what has arrived (handshakes, first reports), not waiting:
                self._pump(0)  # parked actors send nothing more, so a wait here was a whole timeout per rollout
            if not self.start_wait.until(min_envs, should_stop, first=self.rollouts == 0):
                return None
            self.counters.begin()
            self.routes.start(self.counters.started)
            self._infer()
        self.rollouts += 1
        self.heard = time.monotonic()
        while not self.routes.filled():
            if should_stop():
                return None
            self._pump(self.pass_ms)
            if not self.routes.flowing and self.newer is not None:
                self._ask_newer()
            if time.monotonic() - self.heard > self.actor_timeout_s and not self.routes.filled():
                self._check_stall()
        if self.segments:
            self.routes.close()
        self.counts = self.counters.finish(self.buffer.env_slots(), [w for w in self.parked.values() if not w.fresh])
        self.counts.acted_steps = acted = sum(self.buffer.acted)
        if self.policy_lag:  # one version behind: before newer answered (all if it never did, but in a first rollout)
            self.counts.lagged_steps = self.lagged if self.lagged is not None else 0 if self.rollouts == 1 else acted
        return self.buffer

    def _check_stall(self) -> None:
        """Nothing arrived for actor_timeout_s mid-rollout. Unless some actor owes a report (liveness
        retires it if it stays silent), nobody will ever finish the unfinished columns: the run ends,
        saying where each one stands."""
        owing, stuck = unfinished(self.buffer, self.registry, self.waiting, self.parked)
        if not owing:
            raise Stalled(f"rollout {self.rollouts} cannot finish, no actor owes it a step: {', '.join(stuck)}")
        log.warning("no step report for %.0fs; the rollout waits on %s (an actor silent for %gs is retired)",
                    time.monotonic() - self.heard, ", ".join(sorted(owing)), self.actor_timeout_s)
        self.heard = time.monotonic()

    def _waiting_on(self, need: int) -> str:
        retired = self.gateway.retired
        last = f"; {len(retired)} retirements so far, the last: {next(reversed(retired.values()))}" if retired else ""
        return f"{self.routes.parked_slots()} env slots ready, {need} needed; {self.gateway.describe()}{last}"

    def _pump(self, timeout_ms: int) -> None:
        """Admit what arrived, act on it, retire the silent. A gap of PAUSE_S or more since the last poll (an
        update, a weight load, the training process's commands) is the learner's own: the registry forgives it."""
        if self.listened is not None and (gap := time.monotonic() - self.listened) >= PAUSE_S:
            self.registry.deaf(gap)
        items = self.gateway.poll(timeout_ms)
        self.listened = time.monotonic()
        if self.watchdog is not None:
            self.watchdog.pet()
        if items:
            self.heard = time.monotonic()
        self._cut_departed()
        for item in items:
            if self.registry.get(item.actor.identity) is not item.actor:
                continue  # retired later in the same batch (a rejected message): its columns are cut already
            self.dispatch(item)
        self._infer()
        self.gateway.check_liveness(self.actor_timeout_s)
        self._cut_departed()

    def dispatch(self, item: Incoming) -> None:
        """Hand an admitted message to its handler, the one protocol/messages.py's table names; a type the table
        does not give the collector is refused by name (logged, counted, its sender retired), never guessed at."""
        handler = self.handlers.get(type(item.msg))
        if handler is None:
            self.gateway.refuse(item.actor, f"unexpected {type(item.msg).__name__}: not the collector's to take")
        else:
            handler(item.actor, item.msg)

    def on_goodbye(self, actor: ActorEntry, msg: m.Goodbye | m.Error) -> None:
        """The actor is leaving: its columns end here."""
        self.gateway.retire(actor, f"said {type(msg).__name__.lower()}: {msg.reason}", tell=False)

    def on_error(self, actor: ActorEntry, msg: m.Error) -> None:
        """An error the actor could not get past (its envs' spaces differ, say): it is leaving, as on a goodbye."""
        self.on_goodbye(actor, msg)

    def on_step(self, actor: ActorEntry, report: m.StepReport) -> None:
        slots = actor.group_slots(report.group)
        key = (actor.actor_id, report.group)
        routes = self.routes
        self.counters.message()
        if report.first:  # a new actor: it joins when the next rollout starts
            obs, restart = self.observations.observe(key, report)  # its episodes are counted when it is next inferred
            routes.aim(key, Waiting(actor, report.group, slots, obs, episodes_of(report), fresh=True, restart=restart),
                       None)
            return
        if routes.drops(slots):  # segments: in flight at its rollout's close
            obs, restart = self.observations.observe(key, report)
            item = Waiting(actor, report.group, slots, obs, episodes_of(report), restart=restart)
            item.arrived = self.listened
            routes.aim(key, item, routes.open_rollout(slots))
            return
        buf = routes.owed(slots[0])  # the rollout this step's outcome belongs to
        if buf is None:  # the gateway admitted an outcome no rollout waits for
            self.gateway.retire(actor, f"step report for group {report.group} matches no actions sent")
            return
        cols = buf.columns(slots)
        buf.record_outcome(cols, report.rewards, report.terminated, report.truncated)
        if len(report.final_index):
            self.observations.keep_finals(key, buf, cols, report, slots)
        finished = not buf.wants_action(cols[0])  # T steps done: this obs bootstraps them and starts what follows
        obs, restart = self.observations.observe(key, report)
        if finished:
            self.observations.keep_bootstrap(buf, cols, obs, restart, slots)
        target = routes.following(buf, slots, self.listened) if finished else buf  # where this obs is acted on
        item = Waiting(actor, report.group, slots, obs, episodes_of(report), restart=restart)
        item.arrived = self.listened
        routes.aim(key, item, target)

    def _ask_newer(self) -> None:
        """Policy lag: once newer weights serve, groups flow on (those parked already, at once)."""
        if (version := self.newer.newer(self.version)) is None:
            return
        self.lagged = sum(self.buffer.acted)
        if self.routes.switch(version, self.listened):
            self._infer()

    def _infer(self) -> None:
        buf = self.buffer
        if not self.waiting or buf is None:
            return
        if self.lockstep and any(buf.wants_action(c) and group_of(self.registry, buf.slots[c]) not in self.waiting
                                 for c in range(buf.N)):
            return
        batch = self.routes.take_waiting()
        self._count_episodes(batch)
        since = time.monotonic()
        rows = (np.fromiter(chain.from_iterable(w.slots for w in batch), np.int64),  # a recurrent core's: each row's
                np.concatenate([w.restart for w in batch])) if self.policy.recurrent else ()  # slot, and its reset
        result = self.policy.act([w.obs for w in batch], *rows)
        start = 0
        for w in batch:
            end = start + len(w.slots)
            if self.registry.get(w.actor.identity) is not w.actor:
                start = end
                continue
            seen = w.obs if result.obs is None else result.obs[start:end]  # what the network saw, stored
            w.buffer.record_actions(w.buffer.columns(w.slots), seen, result.actions[start:end],
                                    result.logprobs[start:end], result.values[start:end], w.restart,
                                    result.states[start:end] if rows else None)
            self.gateway.send_actions(w.actor, w.group, result.actions[start:end], self.version)
            start = end
        self.counters.served(batch, since)
        self._cut_departed()

    def _count_episodes(self, batch: list[Waiting]) -> None:
        for w in batch:  # in slot order, so the last-100 window is scheduling-independent in lockstep
            for ret, length in w.episodes:
                self.episodes.add(ret, length)

    def _cut_departed(self) -> None:
        for actor in self.gateway.take_departed():
            self._cut(actor)

    def _cut(self, actor: ActorEntry) -> None:
        """An actor left: its groups stop waiting, its columns end where they are, its envs' state is forgotten."""
        self.routes.forget(actor)
        self.observations.forget(actor.actor_id, actor.groups)
        self.policy.forget(actor.slots)  # a recurrent core's state of these slots
