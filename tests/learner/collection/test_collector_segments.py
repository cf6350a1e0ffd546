"""run.segments (issue 62): a rollout full at T steps per env slot from whichever slots produce them, over a real
gateway on an inproc socket, with a fast actor and a slow one whose pace is tied to the fast one's (the slow
one reports its k-th step only after the fast one has been sent 3 (k + 1) actions): no sleeping, and the rollout
must close without waiting for the slow actor."""
from __future__ import annotations

import threading
import time

import numpy as np
import torch
import zmq

from learner.collection.collector import Collector, CollectorSettings
from learner.collection.inference import Inference
from learner.config import ModelConfig
from learner.gateway.gateway import Gateway, Listen, Offer
from learner.gateway.registry import ActorRegistry
from learner.model.networks import build_model
from learner.rollout.layout import Layout
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="discrete", shape=(), dtype="int64", n=2)
T, K = 4, 2  # steps per segment, envs per actor
FAST, SLOW = 0.0, 1000.0  # each actor's observations: [base + steps taken, env, 0.5]


class Pace:
    """Actions received by the fast actor, which the slow one waits on (with a deadline)."""

    def __init__(self, deadline: float):
        self.cond, self.actions, self.deadline, self.stopped = threading.Condition(), 0, deadline, False

    def received(self) -> None:
        with self.cond:
            self.actions += 1
            self.cond.notify_all()

    def wait_for(self, n: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.actions >= n or self.stopped,
                                      timeout=max(0.0, self.deadline - time.monotonic())) and not self.stopped

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


class PacedActor(threading.Thread):
    def __init__(self, ctx: zmq.Context, endpoint: str, base: float, pace: Pace, slow: bool):
        super().__init__(daemon=True)
        self.ctx, self.endpoint, self.base, self.pace, self.slow = ctx, endpoint, base, pace, slow
        self.error: BaseException | None = None

    def obs(self, steps: int) -> np.ndarray:
        return np.array([[self.base + steps, i, 0.5] for i in range(K)], np.float32)

    def run(self):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        zeros = np.zeros(K, np.float32), np.zeros(K, bool), np.zeros(K, bool)
        try:
            sock.connect(self.endpoint)
            sock.send_multipart(m.encode(m.Handshake(K, "slow" if self.slow else "fast")))
            self.recv(sock)  # welcome
            sock.send_multipart(m.encode(m.StepReport(0, self.obs(0), *zeros, first=True)))
            for k in range(10_000):
                if self.recv(sock) is None:
                    return
                if self.slow and not self.pace.wait_for(3 * (k + 1)):
                    return
                if not self.slow:
                    self.pace.received()
                sock.send_multipart(m.encode(m.StepReport(0, self.obs(k + 1), *zeros)))
        except BaseException as exc:  # re-raised by the test
            self.error = exc
        finally:
            sock.close()

    def recv(self, sock):
        while not self.pace.stopped and time.monotonic() < self.pace.deadline:
            if sock.poll(50):
                return m.decode(sock.recv_multipart())
        return None


def collector_with_segments(address: str):
    ctx = zmq.Context()
    registry = ActorRegistry()
    gateway = Gateway(Listen(ctx, address, 1 << 20), Offer(EnvSettings(env_id="CartPole-v1"), OBS, ACT, 1, 0, "run"),
                      registry=registry)
    torch.manual_seed(0)
    policy = Inference(build_model(OBS, ACT, ModelConfig(hidden=8)), ACT, torch.device("cpu"), None, seed=0)
    settings = CollectorSettings(T, torch.device("cpu"), actor_timeout_s=30, segments=True)
    collector = Collector(gateway, registry, policy, Layout(OBS.shape, torch.float32, (), torch.long), settings)
    return ctx, gateway, registry, policy, collector


def columns_of(buf, slots: set[int]) -> list[int]:
    return [c for c in range(buf.opened) if buf.slots[c] in slots]


def test_a_rollout_closes_at_its_steps_without_waiting_for_the_slow_actor(address):
    ctx, gateway, registry, policy, collector = collector_with_segments(address)
    pace = Pace(time.monotonic() + 20)
    fast = PacedActor(ctx, gateway.endpoint, FAST, pace, slow=False)
    slow = PacedActor(ctx, gateway.endpoint, SLOW, pace, slow=True)
    try:
        fast.start()
        slow.start()
        stop = lambda: time.monotonic() > pace.deadline or fast.error is not None or slow.error is not None  # noqa: E731
        first = collector.collect(2 * K, stop)
        assert first is not None and first.closed
        named = {a.name: a.slots for a in registry.by_identity.values()}
        fast_slots, slow_slots = named["fast"], named["slow"]
        fast_cols, slow_cols = columns_of(first, set(fast_slots)), columns_of(first, set(slow_slots))

        # the fast actor gave a second segment in the same rollout; the slow one's did not wait to be done
        assert len(fast_cols) == 2 * K and len(slow_cols) == K, (first.slots, first.opened)
        assert all(first.completed[c] == T for c in fast_cols[:K])
        assert all(first.completed[c] < T for c in slow_cols), first.completed
        assert sum(first.acted) >= first.quota
        # every column is one env's consecutive steps; a fast env's second segment goes on from its first
        for c in range(first.opened):
            steps = first.obs[:first.completed[c], c, 0].numpy()
            np.testing.assert_array_equal(steps, steps[0] + np.arange(len(steps)))
        for c, c2 in zip(fast_cols[:K], fast_cols[K:]):
            assert first.obs[0, c2, 0] == first.obs[T - 1, c, 0] + 1

        acted = {c: first.acted[c] for c in range(first.opened)}
        extra = first.finish(policy.value)
        for c in range(first.opened):
            n = first.completed[c]  # after the cut: the unfinished segments end where their bootstrap is known
            assert n >= 1 and first.truncated[n - 1, c] if c in slow_cols else True
            if c in slow_cols and acted[c] > n:
                assert first.next_values[n - 1, c] == first.values[n, c]  # V(the next obs), inferred in time
        assert int(extra["valid"].sum()) == sum(first.completed)
        in_flight = {first.slots[c]: float(first.obs[first.completed[c], c, 0]) for c in slow_cols
                     if acted[c] > first.completed[c]}

        second = collector.collect(1, stop)
        assert second is not None
        # the outcome in flight at the close was dropped, not taken for a protocol error: nobody retired
        assert gateway.rejected == 0 and len(registry) == 2
        for slot, step in in_flight.items():
            first_col = min(col for col in range(second.opened) if second.slots[col] == slot)
            assert float(second.obs[0, first_col, 0]) == step + 1  # exactly the one step in flight is gone
    finally:
        pace.stop()
        for actor in (fast, slow):
            actor.join(timeout=5)
        gateway.sock.close(linger=0)
        ctx.destroy(linger=0)
    assert fast.error is None and slow.error is None, (fast.error, slow.error)
