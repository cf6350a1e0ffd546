"""Where a group's observation goes (learner/collection/routes.py), without sockets: run.segments' close and the
rollout that begins while outcomes from the last one are still in flight."""
import numpy as np
import torch

from learner.collection.routes import Routes, Waiting
from learner.gateway.registry import ActorRegistry
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink

T, ENVS = 4, 2


def act(routes: Routes) -> None:
    """Inference for every waiting group: one action each, no outcome yet."""
    for w in routes.take_waiting():
        n = len(w.slots)
        w.buffer.record_actions(w.buffer.columns(w.slots), w.obs, np.zeros(n, np.int64), np.zeros(n, np.float32),
                                np.zeros(n, np.float32))


def test_a_rollout_begun_while_its_groups_outcomes_are_in_flight_waits_for_them():
    """A collector process begins each rollout at once with the groups ready (collect(0)). Its only group's
    outcome was in flight at the last close: the new rollout has no column open yet, but it is not done (it
    was complete at once, empty, and its actor sat the rollout out); the group opens its columns when it comes."""
    registry = ActorRegistry()
    actor = registry.join(b"a", "a", ENVS, 1, None)
    routes = Routes(registry, Layout((3,), torch.float32, (), torch.long), DeviceLink("cpu"), T, segments=True,
                    policy_lag=False)
    key, slots = (actor.actor_id, 0), actor.group_slots(0)
    routes.aim(key, Waiting(actor, 0, slots, np.zeros((ENVS, 3), np.float32)), None)
    routes.start(0.0)
    act(routes)
    routes.close()  # full (here: asked to) with the group's step in flight
    assert routes.dropping == set(slots) and not routes.parked and not routes.waiting

    routes.start(1.0)  # nobody parked: no column opened, room for the connected slots' segments
    assert routes.buffer.opened == 0 and routes.buffer.is_complete()
    assert not routes.filled()
    assert routes.drops(slots)  # the outcome in flight comes, and is dropped
    assert routes.open_rollout(slots) is routes.buffer and routes.buffer.opened == ENVS
    assert not routes.filled()
