"""Who is connected: actor identities, their env slots, what each may send next, liveness, and
misbehaviour strikes and bans (both tables bounded, so actor churn cannot grow them)."""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from learner.gateway.admission import Admission, AdmissionRefused
from protocol import messages as m
from protocol.messages import MAX_ENV_SLOTS, Expect

MAX_STRIKES = 20  # rejected messages tolerated from one peer before it is banned
MAX_TRACKED_PEERS = 4096  # strike and ban tables keep at most this many identities (oldest forgotten first)
BAN_S = 600.0  # how long a ban lasts
PAUSE_S = 0.25  # a gap this long between two polls is the learner's own pause (an update): nobody's silence
LEARNER_TURNS = m.turns_for(m.LEARNER)  # what an actor may send the learner, and when


@dataclass
class Turns:
    """Where an actor stands in the protocol, group by group: what it may send next (`out_of_turn`)."""
    groups: int
    owes: set = field(default_factory=set)  # groups that owe a report: their first, or the outcome of actions
    started: set = field(default_factory=set)  # groups whose first report has arrived
    prepared: tuple[int, int] | None = None  # (envs built, envs in all) from its last Starting message
    phase: str = field(init=False, default=m.BUILDING)  # BUILDING until every first report, then RUNNING

    def out_of_turn(self, msg) -> str | None:
        """Why the actor may not send `msg` now (None: it may): the turn protocol/messages.py's table gives its
        type in the actor's `phase` (Starting only while some group has not sent its first report; Goodbye or
        Error at any time), then a step report's own rule, per group: one first report after the Welcome, then
        exactly one outcome per Actions message."""
        when = LEARNER_TURNS.get(type(msg))
        if when is None or self.phase not in when:
            return m.refusal_of(msg, m.LEARNER, self.phase)
        if isinstance(msg, m.StepReport):
            g = msg.group
            if msg.first:
                return f"a second first report for group {g}" if g in self.started else None
            if g not in self.started:
                return f"a step report for group {g} before its first report"
            return None if g in self.owes else f"a step report for group {g} that was not sent actions"
        return None

    def accept(self, msg) -> None:
        """Advance the protocol state for an in-turn message (see out_of_turn)."""
        if isinstance(msg, m.StepReport):
            self.owes.discard(msg.group)
            self.started.add(msg.group)
            self.phase = m.RUNNING if len(self.started) == self.groups else m.BUILDING
        elif isinstance(msg, m.Starting):
            self.prepared = (msg.built, msg.total)

    def state(self) -> str:
        """Where the actor stands at start-up, for the learner's log."""
        if len(self.started) == self.groups:
            return "ready"
        built = f" ({self.prepared[0]}/{self.prepared[1]} built)" if self.prepared else ""
        return f"building its envs{built}"


@dataclass
class ActorEntry:
    """A connected actor: who it is, its env slots, what its messages must look like (`expect`), where it
    stands in the protocol (`turns`) and when it was last heard (kept by the registry: see silence)."""
    identity: bytes
    actor_id: int
    name: str
    slots: list[int]
    groups: int
    expect: Expect
    reuses: list[int] = field(default_factory=list)  # per slot: how many actors held it before this one
    turns: Turns = field(init=False)
    last_seen: float = field(init=False, default_factory=time.monotonic)
    deaf_at_seen: float = field(init=False, default=0.0)  # the registry's deaf_s when last_seen was set

    def __post_init__(self):
        self.turns = Turns(self.groups)

    @property
    def group_size(self) -> int:
        return len(self.slots) // self.groups

    def group_slots(self, group: int) -> list[int]:
        k = self.group_size
        return self.slots[group * k:(group + 1) * k]


class ActorRegistry:
    def __init__(self, max_envs: int = MAX_ENV_SLOTS, admission: Admission | None = None):
        """`admission`: the limits a handshake's claim is checked against (none: max_envs in all)."""
        self.by_identity: dict[bytes, ActorEntry] = {}
        self.next_actor_id = 0
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.max_envs = max_envs
        self.admission = admission
        self.strikes: OrderedDict[bytes, int] = OrderedDict()  # identity -> rejected messages (bounded)
        self.slot_uses: dict[int, int] = {}  # slot -> actors it has been assigned to so far
        self.bans: OrderedDict[bytes, float] = OrderedDict()  # identity -> when its ban ends (bounded)
        self.deaf_s = 0.0  # seconds the learner spent not listening (its pauses), see silence()

    def __len__(self) -> int:
        return len(self.by_identity)

    def __contains__(self, identity: bytes) -> bool:
        return identity in self.by_identity

    def get(self, identity: bytes) -> ActorEntry | None:
        return self.by_identity.get(identity)

    def num_slots(self) -> int:
        return sum(len(a.slots) for a in self.by_identity.values())

    def check_claim(self, num_envs: int) -> None:
        """AdmissionRefused (for good) for a claim that no collector of the run could admit."""
        if self.admission is not None:
            self.admission.check_claim(num_envs)

    def join(self, identity: bytes, name: str, num_envs: int, groups: int, expect: Expect) -> ActorEntry:
        """Assign slots, reusing those of departed actors first so slot ids (and env seeds) stay compact."""
        if self.admission is not None:
            self.admission.check(num_envs, self.num_slots(), len(self.by_identity))  # AdmissionRefused, a ValueError
        if self.num_slots() + num_envs > self.max_envs:
            raise AdmissionRefused(f"joining would exceed the limit of {self.max_envs} env slots", retry=True)
        self.free_slots.sort()
        slots = []
        while len(slots) < num_envs:
            if self.free_slots:
                slots.append(self.free_slots.pop(0))
            else:
                slots.append(self.next_slot)
                self.next_slot += 1
        reuses = [self.slot_uses.get(s, 0) for s in slots]
        for s in slots:
            self.slot_uses[s] = self.slot_uses.get(s, 0) + 1
        entry = ActorEntry(identity, self.next_actor_id, name or f"actor-{self.next_actor_id}", slots, groups, expect,
                           reuses=reuses)
        self.next_actor_id += 1
        self.by_identity[identity] = entry
        self.heard(entry)
        return entry

    def leave(self, identity: bytes) -> ActorEntry | None:
        entry = self.by_identity.pop(identity, None)
        if entry is not None:
            self.free_slots.extend(entry.slots)
        return entry

    def strike(self, identity: bytes, now: float | None = None) -> bool:
        """Count one rejected message; True when the peer has now used up its strikes (it is banned for
        BAN_S and its strikes start again from 0 afterwards)."""
        count = self.strikes.pop(identity, 0) + 1
        if count < MAX_STRIKES:
            _put_bounded(self.strikes, identity, count)
            return False
        _put_bounded(self.bans, identity, (time.monotonic() if now is None else now) + BAN_S)
        return True

    def is_banned(self, identity: bytes, now: float | None = None) -> bool:
        until = self.bans.get(identity)
        if until is None:
            return False
        if (time.monotonic() if now is None else now) < until:
            return True
        del self.bans[identity]
        return False

    def heard(self, entry: ActorEntry, now: float | None = None) -> None:
        """`entry` spoke (or was just asked to): its silence counts from now."""
        entry.last_seen = time.monotonic() if now is None else now
        entry.deaf_at_seen = self.deaf_s

    def deaf(self, seconds: float) -> None:
        """The learner did not listen for `seconds` (an update, a slow load): nobody's silence meanwhile
        counts, since what a peer sent then waits unread in the socket's queue."""
        self.deaf_s += seconds

    def silence(self, entry: ActorEntry, now: float | None = None) -> float:
        """How long the learner has listened without hearing from `entry`."""
        now = time.monotonic() if now is None else now
        return now - entry.last_seen - (self.deaf_s - entry.deaf_at_seen)

    def overdue(self, timeout_s: float, now: float | None = None) -> list[ActorEntry]:
        """Peers that owe a message (a report, or their first) and were silent for timeout_s of the learner's
        listening: a peer's own silence, whatever the learner's pauses, and only its own."""
        now = time.monotonic() if now is None else now
        return [a for a in self.by_identity.values() if a.turns.owes and self.silence(a, now) > timeout_s]


def _put_bounded(table: OrderedDict, key, value) -> None:
    """Insert as the newest entry, forgetting the oldest past MAX_TRACKED_PEERS."""
    table.pop(key, None)
    table[key] = value
    while len(table) > MAX_TRACKED_PEERS:
        table.popitem(last=False)
