"""Learner-side frame stacking through the collector, rollout after rollout: the rollout keeps one frame per
step, and every stack rebuilt from it, every bootstrap and final observation is what the actor-side stack
would have been, whichever way groups move between rollouts (parked, flowing on, or with two rollouts alive).

A scripted actor (two groups of two envs, over inproc; and over TCP in the integration run: conftest.py) sends frames filled with known values, with resets after a
termination and after a truncation; the expected stacks are rebuilt here from those values alone.
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np
import pytest
import torch
import zmq

from learner.collection.collector import Collector, CollectorSettings
from learner.rollout.frames import StackedObs
from learner.rollout.layout import Layout
from learner.collection.inference import Inference
from learner.gateway.gateway import Gateway, Listen, Offer
from learner.gateway.registry import ActorRegistry
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

FRAME = SpaceSpec(kind="box", shape=(2, 2), dtype="uint8", low=[0.0], high=[255.0])
ACT = SpaceSpec(kind="discrete", n=3)
T, K, GROUPS, STACK, ROLLOUTS = 3, 2, 2, 3, 4
TERMINATES = {(0, 1, 2), (0, 1, 5), (1, 1, 7)}  # (group, env, step): the env's game ends with that step
TRUNCATES = {(1, 0, 4), (0, 0, 8)}  # cut by a time limit at that step: final frame sent, env reset


def frame_value(group: int, env: int, step: int, final: bool = False) -> int:
    """The value filling env's frame after `step` steps (its final frame before a reset: `final`)."""
    return (100 * final + 40 * group + 13 * env + 3 * step) % 256


def frames_of(group: int, step: int) -> np.ndarray:
    return np.array([np.full(FRAME.shape, frame_value(group, i, step), np.uint8) for i in range(K)])


class FrameActor(threading.Thread):
    """Answers every Actions message with its group's next frames until told to stop."""

    def __init__(self, ctx: zmq.Context, endpoint: str, deadline: float, odd_first: bool = False,
                 hold: tuple[int, int, int] | None = None):
        """hold (group, step, version): that group's report after that step is sent only once Actions of that
        version (or newer) have arrived."""
        super().__init__(daemon=True)
        self.ctx, self.endpoint, self.deadline, self.odd_first, self.hold = ctx, endpoint, deadline, odd_first, hold
        self.held = None
        self.stop, self.error = threading.Event(), None
        self.steps = [0] * GROUPS
        self.versions: list[int] = []  # of every Actions message, in order

    def run(self):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            sock.send_multipart(m.encode(m.Handshake(K * GROUPS, "frames", groups=GROUPS)))
            self._recv(sock)  # the welcome
            for g in range(GROUPS):
                sock.send_multipart(m.encode(self._first(g)))
            while not self.stop.is_set():
                msg = self._recv(sock)
                if msg is None:
                    continue
                self.versions.append(msg.version)
                report = self._report(msg.group)
                if self.hold is not None and (msg.group, self.steps[msg.group]) == self.hold[:2]:
                    self.held = report
                else:
                    sock.send_multipart(m.encode(report))
                if self.held is not None and msg.version >= self.hold[2]:
                    sock.send_multipart(m.encode(self.held))
                    self.held = None
        except BaseException as exc:  # re-raised by the test
            self.error = exc
        finally:
            sock.close()

    def _recv(self, sock):
        while time.monotonic() < self.deadline:
            if sock.poll(50):
                return m.decode(sock.recv_multipart())
            if self.stop.is_set():
                return None
        raise TimeoutError("frame actor: nothing from the learner before the deadline")

    def _first(self, g: int) -> m.StepReport:
        """The report after the first reset; odd_first: env 0's says it was truncated (nothing was), with a
        final frame, which a first report has no step to attach to."""
        zeros, trunc = np.zeros(K, bool), np.zeros(K, bool)
        odd = self.odd_first and g == 0
        trunc[0] = odd
        final = np.full((1, *FRAME.shape), 77, np.uint8) if odd else None
        return m.StepReport(g, frames_of(g, 0), np.zeros(K, np.float32), zeros, trunc, first=True,
                            final_index=np.array([0] if odd else [], np.int64), final_obs=final)

    def _report(self, g: int) -> m.StepReport:
        self.steps[g] += 1
        s = self.steps[g]
        term = np.array([(g, i, s) in TERMINATES for i in range(K)])
        trunc = np.array([(g, i, s) in TRUNCATES for i in range(K)])
        cut = np.flatnonzero(trunc)
        final = np.array([np.full(FRAME.shape, frame_value(g, i, s, final=True), np.uint8) for i in cut])
        return m.StepReport(g, frames_of(g, s), np.zeros(K, np.float32), term, trunc, final_index=cut.astype(np.int64),
                            final_obs=final if len(cut) else None)


def expected_stacks():
    """{(group, env): [stack after step s for s = 0, 1, ...]} and {(group, env, step): final stack}, as the
    actor-side FrameStack builds them: the last STACK frames, the first one repeated after a reset."""
    stacks, finals = {}, {}
    for g in range(GROUPS):
        for i in range(K):
            window = deque([frame_value(g, i, 0)] * STACK, maxlen=STACK)
            stacks[(g, i)] = [list(window)]
            for s in range(1, T * (ROLLOUTS + 2)):
                if (g, i, s) in TRUNCATES:
                    finals[(g, i, s)] = [*list(window)[1:], frame_value(g, i, s, final=True)]
                if (g, i, s) in TERMINATES or (g, i, s) in TRUNCATES:
                    window = deque([frame_value(g, i, s)] * STACK, maxlen=STACK)
                else:
                    window.append(frame_value(g, i, s))
                stacks[(g, i)].append(list(window))
    return stacks, finals


def values_of(stack: np.ndarray) -> list[int]:
    """A stored stack's frame values (each frame is filled with one value: checked)."""
    assert (stack == stack[:, :1, :1]).all()
    return stack[:, 0, 0].tolist()


class Answers:
    """Stands in for the scheduler's PolicyVersions: `answer()` is what `newer` says (None: the update runs)."""

    def __init__(self):
        self.answer = lambda: None

    def newer(self, serving: int) -> int | None:
        return self.answer()


class FrameSide:
    """A collector with random actions and a FrameActor on a socket at `address`; closed by `close`."""

    def __init__(self, address: str, policy_lag: bool = False, collect_only: bool = False, odd_first: bool = False,
                 hold: tuple[int, int, int] | None = None, lockstep: bool = False):
        self.ctx = zmq.Context()
        registry = ActorRegistry()
        self.gateway = Gateway(Listen(self.ctx, address, 1 << 20),
                               Offer(EnvSettings(env_id="ALE/Breakout-v5"), FRAME, ACT, 1, 0, "run"), registry=registry)
        policy = Inference(None, ACT, torch.device("cpu"), None, seed=0, random_actions=True)
        settings = CollectorSettings(T, torch.device("cpu"), actor_timeout_s=30, frame_stack=STACK,
                                     policy_lag=policy_lag, collect_only=collect_only, lockstep=lockstep)
        self.versions = Answers()
        self.collector = Collector(self.gateway, registry, policy,
                                   Layout((STACK, *FRAME.shape), torch.uint8, (), torch.long, stack=STACK), settings,
                                   newer=self.versions)
        self.deadline = time.monotonic() + 30
        self.actor = FrameActor(self.ctx, self.gateway.endpoint, self.deadline, odd_first=odd_first, hold=hold)
        self.actor.start()

    def collect(self, version: int = 0, newer=lambda: None):
        """`newer()`: what the collector hears while this rollout fills (None: no newer weights serve)."""
        self.versions.answer = newer
        buf = self.collector.collect(K * GROUPS, lambda: time.monotonic() > self.deadline or self.actor.error is not None,
                                     version)
        assert self.actor.error is None and buf is not None and buf.is_complete()
        return buf

    def close(self) -> None:
        self.actor.stop.set()
        self.actor.join(5)
        self.gateway.sock.close(linger=0)
        self.ctx.destroy(linger=0)
        assert self.actor.error is None, self.actor.error


def check_stacks(buf, r: int) -> None:
    """Rollout r (0-based) holds the stacks, bootstraps and final stacks the actor side would have built."""
    stacks, finals = expected_stacks()
    assert buf.slots == [0, 1, 2, 3] and buf.completed == [T] * 4
    assert buf.frames.shape == (T + STACK - 1, K * GROUPS, *FRAME.shape)  # one frame per step
    rebuilt = StackedObs(buf.frames, buf.restarts, STACK)
    for col in range(K * GROUPS):
        g, i = divmod(col, K)
        for t in range(T):
            stack = rebuilt[torch.tensor([t * K * GROUPS + col])][0]
            assert values_of(stack.numpy()) == stacks[(g, i)][r * T + t], (r, t, col)
        assert values_of(buf.bootstrap_obs[col]) == stacks[(g, i)][(r + 1) * T], (r, col)
    for (t, col), final in buf.final_obs.items():
        g, i = divmod(col, K)
        assert values_of(final) == finals[(g, i, r * T + t + 1)]
    assert len(buf.final_obs) == sum(r * T < s <= (r + 1) * T for _, _, s in TRUNCATES)


@pytest.mark.parametrize("mode", ["parked", "collect_only", "policy_lag", "lag_flowing", "odd_first"])
def test_stacks_rebuilt_from_the_rollout_are_exact(address, mode):
    """odd_first: a first report claiming a truncation (a buggy actor) is a first report like any other:
    it once stopped the learner (a KeyError stacking a final frame for a group with no stacks yet).
    lag_flowing: policy lag with the lagging update done at once, so groups flow on as with collect_only."""
    side = FrameSide(address, policy_lag=mode in ("policy_lag", "lag_flowing"), collect_only=mode == "collect_only",
                     odd_first=mode == "odd_first")
    try:
        for r in range(ROLLOUTS):
            buf = side.collect(r, newer=(lambda r=r: r + 1) if mode == "lag_flowing" and r > 0 else lambda: None)
            check_stacks(buf, r)
        if mode == "lag_flowing":
            assert side.collector.next is not None  # groups went on: the check above saw flowing rollouts
    finally:
        side.close()


@pytest.mark.parametrize("when", ["never", "at_once", "once_parked"])
def test_with_policy_lag_groups_flow_on_only_once_newer_weights_serve(address, when):
    """Rollout 2 is collected while update 1 runs (policy lag). `never`: it runs to the end, and whoever
    finished waits for the next rollout, all actions computed with version 1. `at_once`: the update is done when
    rollout 2 begins: it is acted by version 2 from its first step and the first group to finish goes on into
    rollout 3; `once_parked`: the update ends only after group 0 has finished and parked,
    and group 1's last report of rollout 2 is held back until group 0 gets actions of version 2: it must be
    freed between messages. Either way, every action after newer's answer is sent with version 2 and
    rollout 3 is exact."""
    side = FrameSide(address, policy_lag=True, hold=(1, 2 * T, 2) if when == "once_parked" else None)
    answers = {"never": lambda: None, "at_once": lambda: 2,
               "once_parked": lambda: 2 if side.collector.rollouts == 2 and side.collector.parked else None}
    try:
        check_stacks(side.collect(0), 0)
        assert side.collector.counts.lagged_steps == 0  # the first rollout: no update to lag behind
        sent = len(side.actor.versions)
        check_stacks(side.collect(1, newer=answers[when]), 1)
        versions = side.actor.versions[sent:]
        counts = side.collector.counts  # the steps acted with version 1 are those one version behind
        assert counts.acted_steps == K * GROUPS * T and counts.lagged_steps == K * versions.count(1)
        if when == "never":
            assert side.collector.next is None and set(versions) == {1}
        else:
            assert side.collector.next is not None and side.collector.next.slots == [0, 1, 2, 3]
            if when == "at_once":  # done before the rollout began: acted by version 2 from its first step, none lagged
                assert set(versions) == {2} and counts.lagged_steps == 0
            else:
                assert versions[0] == 1 and versions == sorted(versions) and versions[-1] == 2
        check_stacks(side.collect(2), 2)
    finally:
        side.close()


def test_a_deterministic_run_never_flows_on_whatever_newer_says(address):
    """In lockstep (deterministic) runs the weights switch only at the rollout's end: a switch mid-rollout would
    depend on when the update's thread ends, and the run would not repeat itself."""
    side = FrameSide(address, policy_lag=True, lockstep=True)
    try:
        check_stacks(side.collect(0), 0)
        sent = len(side.actor.versions)
        check_stacks(side.collect(1, newer=lambda: 2), 1)
        assert side.collector.next is None and set(side.actor.versions[sent:]) == {1}
    finally:
        side.close()
