"""The collector pets the watchdog on every pass of listening (learner/collection/collector.py): its loops are
the learner's, so a learner waiting for actors, or between rollouts, is alive and not stalled. Driven through
a fake gateway (the collector's `CollectorGateway`): no socket, no process."""
from __future__ import annotations

import torch

from learner.collection.collector import Collector, CollectorSettings
from learner.collection.inference import Inference
from learner.config import ModelConfig
from learner.gateway.registry import ActorRegistry
from learner.model.networks import build_model
from learner.rollout.layout import Layout
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="box", shape=(2,), dtype="float32", low=[-1.0, -1.0], high=[1.0, 1.0])


class QuietGateway:
    """No actor ever says anything."""
    retired: dict = {}

    def __init__(self):
        self.polls = 0

    def poll(self, timeout_ms: int) -> list:
        self.polls += 1
        return []

    def send_actions(self, entry, group, actions, version) -> bool:
        raise AssertionError("no actor asked for actions")

    def retire(self, entry, reason, tell=True) -> None:
        raise AssertionError("no actor to retire")

    def take_departed(self) -> list:
        return []

    def check_liveness(self, timeout_s: float) -> None:
        pass

    def describe(self, limit: int = 8) -> str:
        return "no actors"

    def join_command(self, num_envs: int) -> str:
        return f"python -m actor --num-envs {num_envs}"


class CountingWatchdog:
    def __init__(self):
        self.pets = 0

    def pet(self, budget_s: float | None = None) -> None:
        self.pets += 1


def quiet_collector() -> tuple[Collector, QuietGateway, CountingWatchdog]:
    gateway, watchdog = QuietGateway(), CountingWatchdog()
    policy = Inference(build_model(OBS, ACT, ModelConfig(hidden=8)), ACT, torch.device("cpu"), None, seed=0)
    layout = Layout(OBS.shape, torch.float32, ACT.shape, torch.float32)
    settings = CollectorSettings(4, torch.device("cpu"), actor_timeout_s=30)
    return Collector(gateway, ActorRegistry(), policy, layout, settings, watchdog=watchdog), gateway, watchdog


def test_every_pass_between_rollouts_pets_the_watchdog():
    collector, gateway, watchdog = quiet_collector()
    for _ in range(3):
        assert collector.pump(0) == 0
    assert (gateway.polls, watchdog.pets) == (3, 3)


def test_waiting_for_the_first_actors_pets_the_watchdog_on_every_pass():
    collector, gateway, watchdog = quiet_collector()
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 5

    assert collector.collect(1, should_stop) is None  # nobody came: asked to stop while waiting
    assert gateway.polls == 5 and watchdog.pets == 5
