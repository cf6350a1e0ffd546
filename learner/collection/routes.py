"""Where each actor group's newest observation is acted on, for the collector (learner/collection/collector.py):
into the rollout filling now, into the one after it (groups flowing on: collect-only runs, policy lag), or
nowhere yet (parked until the next rollout starts). `Routes` holds those rollouts and makes them: a column per
env slot, or with run.segments room for SEGMENT_ROOM columns per env slot and a quota of T steps per slot
(learner/rollout/buffer.py). With segments it also closes a full rollout: its unfinished segments end there, the
groups about to act into it go on into the next, and the outcomes in flight to it are dropped when they come.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from learner.gateway.registry import ActorEntry, ActorRegistry
from learner.rollout.buffer import SEGMENT_ROOM, RolloutBuffer
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink

Key = tuple[bytes, int]  # a group: (actor id, group index)


@dataclass
class Waiting:
    """One actor group's newest observation, waiting for actions."""
    actor: ActorEntry
    group: int
    slots: list[int]
    obs: np.ndarray
    episodes: list = field(default_factory=list)
    buffer: RolloutBuffer | None = None  # the rollout its actions go into
    fresh: bool = False  # its envs were just (re)started: a join, or a restart
    restart: np.ndarray | None = None  # which envs start over (learner-side frame stacking: their stacks; a
                                       # recurrent core: their state)
    arrived: float = field(init=False, default=0.0)  # when it began waiting (its report's poll; a rollout's
                                                     # start): see RolloutCounters


class CloseRule(Protocol):
    """When the rollout filling now is full (run.segments): `OwnQuota`, or with K collector processes the job's
    quota on their shared board (learner/collection/processes/board.py: JobQuota). `pass_ms`: the collector's
    longest wait for a message before it asks again."""
    pass_ms: int

    def begin(self, buf: RolloutBuffer) -> None: ...
    def full(self, buf: RolloutBuffer) -> bool: ...


class OwnQuota:
    """One collector's rule: a rollout is full once its own columns hold its quota (T steps per env slot)."""
    pass_ms = 100

    def begin(self, buf: RolloutBuffer) -> None:
        pass

    def full(self, buf: RolloutBuffer) -> bool:
        return buf.is_full()


def mark_fresh(w: Waiting) -> None:
    """A group whose envs were just (re)started: its columns of the rollout it enters start fresh."""
    if w.fresh:
        w.buffer.fresh.update(w.buffer.columns(w.slots))
        w.fresh = False


class Routes:
    def __init__(self, registry: ActorRegistry, layout: Layout, link: DeviceLink, num_steps: int, segments: bool,
                 policy_lag: bool, rows_for: Callable[[int], dict] | None = None, rule: CloseRule | None = None):
        """`registry`: who is connected (a segments rollout is sized for every connected env slot); `link`: the
        rollouts' device and copies; `rows_for(width)`: the memory a rollout of `width` columns is written into
        (a collector process's columns of the shared rollout; None: fresh host memory); `policy_lag`: the rollout
        before the current one is still being trained on, so a new one reuses the one before that; `rule`: when
        a segments rollout is full (None: OwnQuota)."""
        self.registry, self.layout, self.link, self.T = registry, layout, link, num_steps
        self.segments, self.policy_lag, self.rows_for = segments, policy_lag, rows_for
        self.rule = rule or OwnQuota()
        self.waiting: dict[Key, Waiting] = {}  # groups whose obs waits for inference
        self.parked: dict[Key, Waiting] = {}  # groups waiting for the next rollout
        self.dropping: set[int] = set()  # segments: slots whose outcome in flight at a close is not kept
        self.buffer: RolloutBuffer | None = None  # the rollout filling now
        self.next: RolloutBuffer | None = None  # the one groups flowed on into while this one fills
        self.older: RolloutBuffer | None = None  # the one before the current (policy lag: being trained on)
        self.version = 0  # of the weights actions are computed with
        self.flowing = False  # groups that finish go on into the next rollout

    def parked_slots(self) -> int:
        return sum(len(w.slots) for w in self.parked.values())

    def serve(self, version: int, flowing: bool) -> None:
        """A rollout begins: its actions are computed with `version`'s weights; `flowing`: groups that finish it go
        on into the next at once."""
        self.version, self.flowing = version, flowing

    def advance(self) -> None:
        """The rollout groups flowed on into becomes the current one."""
        self.older, self.buffer, self.next = self.buffer, self.next, None
        self.buffer.set_version(self.version)
        self.rule.begin(self.buffer)

    def switch(self, version: int, at: float) -> bool:
        """Newer weights serve from now on, mid-rollout: the current rollout's steps not acted yet are theirs, and
        groups that finish go on into the next rollout, those parked already at once (`at`: the time their wait
        starts from). True: some wait for inference now."""
        self.version, self.flowing = version, True
        self.buffer.set_version(version)
        if not self.parked:
            return False
        self.start_next(at)
        return True

    def start(self, at: float) -> None:
        """A rollout starts now (`at`) for every parked group: each waits for inference into it."""
        groups = sorted(self.parked.values(), key=lambda w: w.slots[0])
        slots = [s for w in groups for s in w.slots]
        reuse = self.older if self.policy_lag else self.buffer
        self.older = self.buffer
        self.buffer = self._rollout(slots, reuse)
        for w in groups:
            w.buffer, w.arrived = self.buffer, at
            mark_fresh(w)
        self.waiting, self.parked = {(w.actor.actor_id, w.group): w for w in groups}, {}
        self.rule.begin(self.buffer)

    def filled(self) -> bool:
        """The current rollout is done: every column (a column per env slot), or with segments full by the close
        rule (asked first: it posts this collector's count), or every column opened done once the outcomes in
        flight at the last close have come (their groups may yet open columns in it: a collector process's
        rollout may begin with none of its groups ready)."""
        return self.rule.full(self.buffer) or (self.buffer.is_complete() and not self.dropping)

    def start_next(self, at: float) -> None:
        """Open the following rollout for the current one's live columns and every parked group."""
        buf = self.buffer
        live = {s for c, s in enumerate(buf.slots) if not buf.dead[c]}
        slots = sorted(live.union(*(w.slots for w in self.parked.values())))  # parked: joiners, or done early
        self.next = self._rollout(slots, self.older)
        for key, w in self.parked.items():
            w.buffer, w.arrived = self.next, at
            mark_fresh(w)
            self.waiting[key] = w
        self.parked = {}

    def _rollout(self, slots: list[int], reuse: RolloutBuffer | None) -> RolloutBuffer:
        """A rollout opening a column for each of `slots`; with segments, full at T steps per env slot connected
        (or opening now), with room for SEGMENT_ROOM times as many columns."""
        width = max(len(slots), self.registry.num_slots()) if self.segments else len(slots)
        capacity = SEGMENT_ROOM * width if self.segments else 0
        rows = None if self.rows_for is None else self.rows_for(max(capacity, len(slots)))
        buf = RolloutBuffer(slots, self.T, self.layout, self.link.device, reuse=reuse, link=self.link, rows=rows,
                            capacity=capacity, quota=self.T * width if self.segments else 0)
        buf.set_version(self.version)
        return buf

    def take_waiting(self) -> list[Waiting]:
        """Every group waiting for inference, in slot order (none waits any more)."""
        batch = sorted(self.waiting.values(), key=lambda w: w.slots[0])
        self.waiting = {}
        return batch

    def aim(self, key: Key, w: Waiting, target: RolloutBuffer | None) -> None:
        """A group's observation waits for inference into `target`, or (None) parks for the next rollout."""
        w.buffer = target
        if target is None:
            self.parked[key] = w
        else:
            self.waiting[key] = w

    def following(self, buf: RolloutBuffer, slots: list[int], at: float) -> RolloutBuffer | None:
        """The rollout a group that finished `buf` goes on into at once: with segments `buf` itself while it has
        room; the next one when flowing (opened now, `at`, if it is not yet); else None: it is parked."""
        if self.segments and self._has_room(buf, slots):
            return buf
        if not (self.flowing and buf is self.buffer):
            return None
        if self.next is None:
            self.start_next(at)
        return self.next if slots[0] in self.next.column else None

    def open_rollout(self, slots: list[int]) -> RolloutBuffer | None:
        """Segments: the rollout these slots act into next: the one after the current, if started; else the
        current one while it is open and has room; None: they park for the next rollout."""
        if self.next is not None and slots[0] in self.next.column:
            return self.next
        buf = self.buffer
        if buf is None or buf.closed:
            return None
        if slots[0] in buf.column and buf.wants_action(buf.column[slots[0]]):
            return buf
        return buf if self._has_room(buf, slots) else None

    def _has_room(self, buf: RolloutBuffer, slots: list[int]) -> bool:
        """Segments: new columns opened in `buf` for these slots' next segments, unless it is closed, full or out
        of room."""
        return not buf.closed and not self.rule.full(buf) and buf.open_columns(slots)

    def owed(self, slot: int) -> RolloutBuffer | None:
        """The rollout holding an action for `slot` whose outcome has not arrived yet."""
        for buf in (self.buffer, self.next):
            if buf is not None and slot in buf.column and buf.completed[buf.column[slot]] < buf.acted[buf.column[slot]]:
                return buf
        return None

    def drops(self, slots: list[int]) -> bool:
        """Segments: whether these slots' outcome was in flight at its rollout's close (it is then not kept)."""
        if not self.dropping or slots[0] not in self.dropping:
            return False
        self.dropping.difference_update(slots)
        return True

    def close(self) -> None:
        """Segments: the full rollout's unfinished segments end here; the groups waiting to act into it go on
        into the next rollout (or park for it), and outcomes in flight to it are dropped when they come."""
        buf = self.buffer
        self.dropping.update(buf.close())
        for key, w in list(self.waiting.items()):
            if w.buffer is buf:
                del self.waiting[key]
                self.aim(key, w, self.open_rollout(w.slots))

    def forget(self, actor: ActorEntry) -> None:
        """An actor left: its groups stop waiting and its columns end where they are."""
        for key in [k for k in (*self.waiting, *self.parked) if k[0] == actor.actor_id]:
            self.waiting.pop(key, None)
            self.parked.pop(key, None)
        self.dropping.difference_update(actor.slots)
        for buf in (self.buffer, self.next):
            for slot in actor.slots if buf is not None else ():
                if slot in buf.column:
                    buf.mark_dead(buf.column[slot])
