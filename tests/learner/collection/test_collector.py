"""The collector with a real gateway, a real policy and a scripted actor on an inproc socket (unit tests), and
the same over loopback TCP (integration: conftest.py's `address`).

The actor side is scripted (known rewards, a truncation and a termination at known steps) so that
every entry of the finished rollout can be checked: what the network saw, the actions sent on the
wire (unclipped: the actor clips, the learner trains on the sample), rewards and flags at the right
step, the truncated episode's final observation and the bootstrap observation.
"""
from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np
import pytest
import torch
import zmq

from learner.collection.collector import Collector, CollectorSettings
from learner.rollout.layout import Layout
from learner.config import ModelConfig
from learner.gateway.gateway import Gateway, Listen, Offer
from learner.gateway.registry import ActorRegistry
from learner.model.networks import build_model
from learner.collection.inference import Inference
from learner.stalls import Stalled
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="box", shape=(2,), dtype="float32", low=[-1.0, -1.0], high=[1.0, 1.0])
T, K = 4, 2
TRUNCATED_AT, TERMINATED_AT = (1, 0), (2, 1)  # (step t, env): env 0 is truncated at t=1, env 1 terminates at t=2
FINAL = np.array([99.0, 0.0, 0.0], np.float32)


def obs_after(k: int) -> np.ndarray:
    """The group's observation after k steps (k = 0: the first reset)."""
    return np.array([[k, i, 0.5] for i in range(K)], np.float32)


def reward(t: int, i: int) -> float:
    return 10.0 * t + i


class ScriptedActor(threading.Thread):
    def __init__(self, ctx: zmq.Context, endpoint: str, deadline: float):
        super().__init__(daemon=True)
        self.ctx, self.endpoint, self.deadline = ctx, endpoint, deadline
        self.received: list[m.Actions] = []
        self.welcome = None
        self.error: BaseException | None = None

    def recv(self, sock):
        while time.monotonic() < self.deadline:
            if sock.poll(100):
                return m.decode(sock.recv_multipart())
        raise TimeoutError("scripted actor: nothing from the learner before the deadline")

    def run(self):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            sock.send_multipart(m.encode(m.Handshake(K, "scripted")))
            self.welcome = self.recv(sock)
            sock.send_multipart(m.encode(m.StepReport(0, obs_after(0), np.zeros(K, np.float32), np.zeros(K, bool),
                                                      np.zeros(K, bool), first=True)))
            for t in range(T):
                self.received.append(self.recv(sock))
                term, trunc = np.zeros(K, bool), np.zeros(K, bool)
                final_index, final_obs = np.zeros(0, np.int64), None
                if t == TRUNCATED_AT[0]:
                    trunc[TRUNCATED_AT[1]] = True
                    final_index, final_obs = np.array([TRUNCATED_AT[1]], np.int64), FINAL[None]
                if t == TERMINATED_AT[0]:
                    term[TERMINATED_AT[1]] = True
                rewards = np.array([reward(t, i) for i in range(K)], np.float32)
                sock.send_multipart(m.encode(m.StepReport(0, obs_after(t + 1), rewards, term, trunc,
                                                          final_index=final_index, final_obs=final_obs)))
        except BaseException as exc:  # re-raised by the test
            self.error = exc
        finally:
            sock.close()


class ForgetfulCollector(Collector):
    """A learner bug, simulated: a group that reported is never inferred."""

    def _infer(self) -> None:
        self.waiting.clear()


class ListeningGateway(Gateway):
    """The real gateway, the timeout of every poll noted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts: list[int] = []

    def poll(self, timeout_ms: int):
        self.timeouts.append(timeout_ms)
        return super().poll(timeout_ms)


def make_learner_side(address: str, collector_class=Collector, actor_timeout_s: float = 30, gateway_class=Gateway):
    ctx = zmq.Context()
    registry = ActorRegistry()
    gateway = gateway_class(Listen(ctx, address, 1 << 20), Offer(EnvSettings(env_id="Pendulum-v1"), OBS, ACT, 1, 0,
                                                                       "run"), registry=registry)
    torch.manual_seed(0)
    model = build_model(OBS, ACT, ModelConfig(hidden=8))
    with torch.no_grad():
        model.head.log_std.fill_(math.log(5.0))  # most samples fall outside [-1, 1]
    policy = Inference(model, ACT, torch.device("cpu"), None, seed=0)
    collector = collector_class(gateway, registry, policy, Layout(OBS.shape, torch.float32, ACT.shape, torch.float32),
                                CollectorSettings(T, torch.device("cpu"), actor_timeout_s=actor_timeout_s))
    return ctx, gateway, model, policy, collector


@pytest.fixture
def learner_side(address):
    side = make_learner_side(address)
    yield side
    side[1].sock.close(linger=0)
    side[0].destroy(linger=0)


@pytest.fixture
def quick_side(address):
    """Actors count as silent after 0.3 s."""
    side = make_learner_side(address, actor_timeout_s=0.3)
    yield side
    side[1].sock.close(linger=0)
    side[0].destroy(linger=0)


@pytest.fixture
def forgetful_side(address):
    side = make_learner_side(address, ForgetfulCollector, actor_timeout_s=0.3)
    yield side
    side[1].sock.close(linger=0)
    side[0].destroy(linger=0)


def test_a_rank_of_several_starts_each_rollout_without_waiting_on_the_socket(address):
    """collect(0), a rank of a multi-rank learner after its first rollout: it admits what has arrived and starts
    at once. Its parked actors send nothing until they get actions, so a wait there cost a whole poll timeout
    per rollout (100 ms: two CartPole ranks collected 5x slower than one rank)."""
    ctx, gateway, _, _, collector = make_learner_side(address, gateway_class=ListeningGateway)
    try:
        for _ in range(3):
            rollout = collector.collect(0, lambda: False)
            assert rollout is not None and rollout.N == 0  # nobody here: an empty rollout, weight 0
        assert gateway.timeouts and set(gateway.timeouts) == {0}, gateway.timeouts
    finally:
        gateway.sock.close(linger=0)
        ctx.destroy(linger=0)


def test_one_rollout_lands_where_it_belongs(learner_side):
    ctx, gateway, model, policy, collector = learner_side
    deadline = time.monotonic() + 20
    actor = ScriptedActor(ctx, gateway.endpoint, deadline)
    actor.start()
    buf = collector.collect(K, lambda: time.monotonic() > deadline or actor.error is not None)
    actor.join(timeout=max(deadline - time.monotonic(), 0.1))
    assert actor.error is None, actor.error
    assert buf is not None and buf.is_complete()
    assert actor.welcome.slots == [0, 1] and buf.slots == [0, 1]
    assert buf.completed == [T, T] and gateway.rejected == 0
    counts = collector.counts  # where the rollout's time went: every report and batch counted once
    assert (counts.env_slots, counts.messages, counts.batch_slots.tolist()) == (K, T, [K] * T)  # the first report
                                                                                       # came before it began
    assert counts.wall_s > 0 and counts.waiting_actions_s > 0 and counts.parked_end_s >= 0

    # what the network saw, step by step (no normalizer: the raw observations)
    for t in range(T):
        np.testing.assert_array_equal(buf.obs[t].numpy(), obs_after(t))
    # the actions sent are the stored ones, exactly: the learner keeps the unclipped sample
    wire = np.stack([a.actions for a in actor.received])
    np.testing.assert_array_equal(buf.actions.numpy(), wire)
    assert (np.abs(wire) > 1).any(), "no sample outside the bounds: clipping would go unnoticed"
    assert all(a.group == 0 and a.version == collector.version for a in actor.received)
    with torch.no_grad():
        logprob, _, value = model.evaluate(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    torch.testing.assert_close(buf.logprobs.flatten(), logprob)
    torch.testing.assert_close(buf.values.flatten(), value)

    expected_rewards = np.array([[reward(t, i) for i in range(K)] for t in range(T)], np.float32)
    np.testing.assert_array_equal(buf.rewards.numpy(), expected_rewards)
    terminated, truncated = np.zeros((T, K), bool), np.zeros((T, K), bool)
    terminated[TERMINATED_AT], truncated[TRUNCATED_AT] = True, True
    np.testing.assert_array_equal(buf.terminated.numpy(), terminated)
    np.testing.assert_array_equal(buf.truncated.numpy(), truncated)
    assert set(buf.final_obs) == {TRUNCATED_AT}
    np.testing.assert_array_equal(buf.final_obs[TRUNCATED_AT], FINAL)
    for col in range(K):
        np.testing.assert_array_equal(buf.bootstrap_obs[col], obs_after(T)[col])

    extra = buf.finish(policy.value)
    with torch.no_grad():
        v_final = model.value(torch.from_numpy(FINAL[None]))[0]
        v_boot = model.value(torch.from_numpy(obs_after(T)))
    torch.testing.assert_close(buf.next_values[TRUNCATED_AT], v_final)
    torch.testing.assert_close(buf.next_values[T - 1], v_boot)
    torch.testing.assert_close(buf.next_values[0], buf.values[1])
    np.testing.assert_array_equal(extra["dones"].numpy(), terminated | truncated)
    assert extra["valid"].all()


def _join_without_serving(ctx, endpoint: str):
    """An actor that hands in its first report and then only listens: it owes the learner nothing."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart(m.encode(m.Handshake(K, "listener")))
    sock.send_multipart(m.encode(m.StepReport(0, obs_after(0), np.zeros(K, np.float32), np.zeros(K, bool),
                                              np.zeros(K, bool), first=True)))
    return sock


def test_a_group_nobody_serves_ends_the_rollout_loud(forgetful_side):
    """A learner bug that forgets a group would leave the rollout waiting forever (the actor owes nothing,
    so no liveness check fires): the collector says which slots wait on nobody and stops the run."""
    ctx, gateway, model, policy, collector = forgetful_side
    sock = _join_without_serving(ctx, gateway.endpoint)
    deadline = time.monotonic() + 20
    try:
        with pytest.raises(Stalled, match=r"no actor owes it a step: slot 0 at step 0/4 \(owed by nobody\), slot 1 at step 0/4 \(owed by nobody\)"):
            collector.collect(K, lambda: time.monotonic() > deadline)
    finally:
        sock.close()


def test_a_silent_actor_is_named_then_retired_and_the_rollout_ends(quick_side, caplog):
    """No false alarm: an actor that was sent actions and never answers owes a report: it is waited on (and
    named, if nothing else arrives meanwhile), then retired, and the rollout ends without its columns."""
    ctx, gateway, model, policy, collector = quick_side
    sock = _join_without_serving(ctx, gateway.endpoint)
    deadline = time.monotonic() + 20
    try:
        with caplog.at_level(logging.INFO, logger="learner"):
            buf = collector.collect(K, lambda: time.monotonic() > deadline)
    finally:
        sock.close()
    assert buf is not None and buf.dead == [True, True] and buf.completed == [0, 0]
    assert "actor listener left: silent for more than 0.3s" in caplog.text
