"""Who is connected: actor identities, their env slots, liveness, and misbehaviour strikes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from protocol.messages import Expect

MAX_STRIKES = 20  # malformed messages tolerated from one peer before it is dropped
MAX_ENV_SLOTS = 4096  # env slots one learner serves (each actor may host up to as many, see Handshake)


@dataclass
class ActorEntry:
    identity: bytes
    actor_id: int
    name: str
    slots: list[int]
    groups: int
    expect: Expect
    last_seen: float = field(default_factory=time.monotonic)
    owes: set = field(default_factory=set)  # groups that were sent actions and have not reported yet
    reuses: list[int] = field(default_factory=list)  # per slot: how many actors held it before this one

    @property
    def group_size(self) -> int:
        return len(self.slots) // self.groups

    def group_slots(self, group: int) -> list[int]:
        k = self.group_size
        return self.slots[group * k:(group + 1) * k]


class ActorRegistry:
    def __init__(self, max_envs: int = MAX_ENV_SLOTS):
        self.by_identity: dict[bytes, ActorEntry] = {}
        self.next_actor_id = 0
        self.free_slots: list[int] = []
        self.next_slot = 0
        self.max_envs = max_envs
        self.strikes: dict[bytes, int] = {}
        self.slot_uses: dict[int, int] = {}  # slot -> actors it has been assigned to so far
        self.banned: set[bytes] = set()

    def __len__(self) -> int:
        return len(self.by_identity)

    def __contains__(self, identity: bytes) -> bool:
        return identity in self.by_identity

    def get(self, identity: bytes) -> ActorEntry | None:
        return self.by_identity.get(identity)

    def num_slots(self) -> int:
        return sum(len(a.slots) for a in self.by_identity.values())

    def join(self, identity: bytes, name: str, num_envs: int, groups: int, expect: Expect) -> ActorEntry:
        """Assign slots, reusing those of departed actors first so slot ids (and env seeds) stay compact."""
        if self.num_slots() + num_envs > self.max_envs:
            raise ValueError(f"joining would exceed the limit of {self.max_envs} env slots")
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
        return entry

    def leave(self, identity: bytes) -> ActorEntry | None:
        entry = self.by_identity.pop(identity, None)
        if entry is not None:
            self.free_slots.extend(entry.slots)
        return entry

    def strike(self, identity: bytes) -> bool:
        """Count one malformed message; True when the peer has now used up its strikes."""
        self.strikes[identity] = self.strikes.get(identity, 0) + 1
        if self.strikes[identity] >= MAX_STRIKES:
            self.banned.add(identity)
            return True
        return False

    def overdue(self, timeout_s: float, now: float | None = None) -> list[ActorEntry]:
        now = time.monotonic() if now is None else now
        return [a for a in self.by_identity.values() if a.owes and now - a.last_seen > timeout_s]

    def touch_all(self) -> None:
        """Forgive the time the learner itself spent away (an update): actors could not answer then."""
        now = time.monotonic()
        for a in self.by_identity.values():
            a.last_seen = now
