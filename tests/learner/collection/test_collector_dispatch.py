"""The collector takes an admitted message by protocol/messages.py's table: a goodbye or an error ends the actor's
columns, anything the table does not give the collector is refused by name (the gateway counts and logs it and
retires the sender), never taken for a goodbye. Through a fake gateway: no socket."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.collection.collector import Collector, CollectorSettings
from learner.collection.inference import Inference
from learner.gateway.gateway import Incoming
from learner.gateway.registry import ActorRegistry
from learner.rollout.layout import Layout
from protocol import messages as m
from protocol.spaces import SpaceSpec
from tests.learner.collection.test_collector_watchdog import QuietGateway

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=2)


class ScriptedGateway(QuietGateway):
    """Hands the collector the messages it was given, once, and notes what the collector asked of it."""

    def __init__(self, items: list[Incoming]):
        super().__init__()
        self.items, self.retirements, self.refusals = items, [], []

    def poll(self, timeout_ms: int) -> list[Incoming]:
        items, self.items = self.items, []
        return items

    def retire(self, entry, reason, tell=True) -> None:
        self.retirements.append(reason)

    def refuse(self, entry, reason) -> None:
        self.refusals.append(reason)


def pump_one(msg) -> ScriptedGateway:
    registry = ActorRegistry()
    entry = registry.join(b"a", "a", 2, 1, None)
    gateway = ScriptedGateway([Incoming(entry, msg)])
    policy = Inference(None, ACT, torch.device("cpu"), None, seed=0, random_actions=True)
    collector = Collector(gateway, registry, policy, Layout(OBS.shape, torch.float32, (), torch.long),
                          CollectorSettings(4, torch.device("cpu"), actor_timeout_s=30))
    collector.pump(0)
    return gateway


@pytest.mark.parametrize("msg,said", [(m.Goodbye("done"), "said goodbye: done"),
                                      (m.Error("my envs differ"), "said error: my envs differ")])
def test_a_goodbye_or_an_error_ends_the_actors_columns(msg, said):
    gateway = pump_one(msg)
    assert gateway.retirements == [said] and gateway.refusals == []


@pytest.mark.parametrize("msg", [m.Starting(1, 2), m.Actions(0, np.zeros(2, np.int64)), m.Handshake(2, "x")],
                         ids=lambda msg: type(msg).__name__)
def test_a_message_not_the_collectors_is_refused_by_name_not_taken_for_a_goodbye(msg):
    gateway = pump_one(msg)
    assert gateway.refusals == [f"unexpected {type(msg).__name__}: not the collector's to take"]
    assert gateway.retirements == []
