"""Who holds an env slot, and where each unfinished column of a rollout stands (learner/collection/slot_owners.py):
what a stalled rollout's one line names."""
from __future__ import annotations

import torch

from learner.collection.slot_owners import actor_of, group_of, unfinished
from learner.gateway.registry import ActorRegistry
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout


def test_a_slot_is_held_by_its_actor_and_the_group_its_position_says():
    registry = ActorRegistry()
    one, two = registry.join(b"one", "one", 2, 1, None), registry.join(b"two", "two", 4, 2, None)
    assert actor_of(registry, 1) is one and actor_of(registry, 5) is two and actor_of(registry, 9) is None
    assert [group_of(registry, s) for s in (0, 2, 3, 4, 5, 9)] == \
        [(one.actor_id, 0), (two.actor_id, 0), (two.actor_id, 0), (two.actor_id, 1), (two.actor_id, 1), None]


def test_each_unfinished_column_is_owed_by_a_group_or_named_with_where_it_stands():
    registry = ActorRegistry()
    actor = registry.join(b"a", "alpha", 4, 2, None)  # slots 0, 1 (group 0) and 2, 3 (group 1)
    actor.turns.owes = {0}
    buf = RolloutBuffer([0, 1, 2, 3, 7, 8], 2, Layout((1,), torch.float32, (), torch.long), torch.device("cpu"))
    buf.completed[3] = 2  # slot 3's column is done
    buf.mark_dead(5)  # slot 8's actor left: its column is cut, not waited on
    waiting = {(actor.actor_id, 1)}
    owing, stuck = unfinished(buf, registry, waiting, parked=set())
    assert owing == {"alpha group 0"}
    assert stuck == ["slot 2 at step 0/2 (waiting for inference)", "slot 7 at step 0/2 (owed by nobody)"]
    _, stuck = unfinished(buf, registry, set(), parked=waiting)
    assert stuck[0] == "slot 2 at step 0/2 (parked for the next rollout)"
