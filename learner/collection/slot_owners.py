"""Who holds an env slot, and, when a rollout cannot finish, where each of its unfinished columns stands."""
from __future__ import annotations

from learner.gateway.registry import ActorEntry, ActorRegistry
from learner.rollout.buffer import RolloutBuffer


def actor_of(registry: ActorRegistry, slot: int) -> ActorEntry | None:
    return next((actor for actor in registry.by_identity.values() if slot in actor.slots), None)


def actors_of(registry: ActorRegistry, slots: list[int]) -> list[ActorEntry]:
    """The actors holding any of `slots`, each once."""
    held = set(slots)
    return [actor for actor in registry.by_identity.values() if held.intersection(actor.slots)]


def group_of(registry: ActorRegistry, slot: int) -> tuple[bytes, int] | None:
    """The (actor id, group) key of the group that holds `slot`, or None."""
    actor = actor_of(registry, slot)
    return None if actor is None else (actor.actor_id, actor.slots.index(slot) // actor.group_size)


def unfinished(buf: RolloutBuffer, registry: ActorRegistry, waiting, parked) -> tuple[set[str], list[str]]:
    """The groups that owe `buf` a step report, and where each unfinished column nobody owes stands (`waiting`,
    `parked`: the collector's groups waiting for inference, for the next rollout)."""
    owing, stuck = set(), []
    for col in range(buf.N):
        if buf.dead[col] or buf.completed[col] >= buf.T:
            continue
        key, actor = group_of(registry, buf.slots[col]), actor_of(registry, buf.slots[col])
        if actor is not None and key[1] in actor.turns.owes:
            owing.add(f"{actor.name} group {key[1]}")
            continue
        where = ("waiting for inference" if key in waiting else
                 "parked for the next rollout" if key in parked else "owed by nobody")
        stuck.append(f"slot {buf.slots[col]} at step {buf.completed[col]}/{buf.T} ({where})")
    return owing, stuck
