"""A recurrent core through the collector (issue 63), rollout after rollout with a scripted actor whose envs
terminate and are truncated at known steps: each step's episode-start flag, each sequence's first state, and the
states of bootstrap and final observations are what the acting policy had, so that replaying a column's
sequence from its stored state gives back exactly the stored log-probs and values."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import zmq

from learner.collection.collector import Collector, CollectorSettings
from learner.collection.inference import Inference
from learner.config import ModelConfig
from learner.gateway.gateway import Gateway, Listen, Offer
from learner.gateway.registry import ActorRegistry
from learner.model.core import reset
from learner.model.networks import build_model
from learner.rollout.frames import StackedObs
from learner.rollout.layout import Layout
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.learner.collection.test_collector_framestack import (ACT, FRAME, GROUPS, K, STACK, T, TERMINATES, TRUNCATES,
                                                                FrameActor)

pytestmark = pytest.mark.integration
N = K * GROUPS


class RecurrentSide:
    """A collector serving a FrameActor with a recurrent policy (learner-side stacks of 3 frames)."""

    def __init__(self, core: str, bptt: int):
        torch.manual_seed(0)
        stacked = SpaceSpec(kind="box", shape=(STACK, *FRAME.shape), dtype="uint8")
        self.model = build_model(stacked, ACT, ModelConfig(kind="mlp", core=core, core_size=6))
        self.ctx = zmq.Context()
        registry = ActorRegistry()
        self.gateway = Gateway(Listen(self.ctx, "tcp://127.0.0.1:0", 1 << 20),
                               Offer(EnvSettings(env_id="ALE/Breakout-v5"), FRAME, ACT, 1, 0, "run"), registry=registry)
        self.policy = Inference(self.model, ACT, torch.device("cpu"), None, seed=0)
        settings = CollectorSettings(T, torch.device("cpu"), actor_timeout_s=30, frame_stack=STACK, lockstep=True)
        layout = Layout((STACK, *FRAME.shape), torch.uint8, (), torch.long, stack=STACK,
                        state_size=self.model.state_size, bptt=bptt)
        self.collector = Collector(self.gateway, registry, self.policy, layout, settings)
        self.deadline = time.monotonic() + 30
        self.actor = FrameActor(self.ctx, self.gateway.endpoint, self.deadline)
        self.actor.start()

    def collect(self):
        buf = self.collector.collect(N, lambda: time.monotonic() > self.deadline or self.actor.error is not None)
        assert self.actor.error is None and buf is not None and buf.is_complete()
        return buf

    def close(self) -> None:
        self.actor.stop.set()
        self.actor.join(5)
        self.gateway.sock.close(linger=0)
        self.ctx.destroy(linger=0)


def expected_starts(r: int) -> np.ndarray:
    """(T, N): the episode starts at step s of env (g, i) after a join (s = 0) or a reset at step s."""
    out = np.zeros((T, N), bool)
    for col in range(N):
        g, i = divmod(col, K)
        for t in range(T):
            s = r * T + t
            out[t, col] = s == 0 or (g, i, s) in TERMINATES or (g, i, s) in TRUNCATES
    return out


@torch.no_grad()
def check_replay(model, buf, bptt: int) -> None:
    """Step each column from its stored sequence states as acting did: the states of its final and bootstrap
    observations come back; and evaluate, replaying each sequence as the update does, gives back the stored
    log-probs and values."""
    obs = StackedObs(buf.frames, buf.restarts, STACK)[torch.arange(T * N)].reshape(T, N, STACK, *FRAME.shape)
    length = bptt or T
    h = None
    for t in range(T):
        if t % length == 0:
            h = buf.states[t // length].clone()
        h = reset(h, buf.starts[t])
        model.act(obs[t], state=h)  # steps h in place: the state after step t
        for col in range(N):
            if (t, col) in buf.final_states:
                torch.testing.assert_close(torch.from_numpy(buf.final_states[(t, col)]), h[col], rtol=0, atol=1e-6)
    ended = buf.terminated[T - 1] | buf.truncated[T - 1]
    for col in range(N):
        expected = torch.zeros_like(h[col]) if ended[col] else h[col]
        torch.testing.assert_close(torch.from_numpy(buf.bootstrap_states[col]), expected, rtol=0, atol=1e-6)
    for k in range(T // length):
        rows = slice(k * length, (k + 1) * length)
        logprob, _, value = model.evaluate(obs[rows].flatten(0, 1), buf.actions[rows].flatten(), state=buf.states[k],
                                           starts=buf.starts[rows].flatten())
        torch.testing.assert_close(logprob, buf.logprobs[rows].flatten(), rtol=0, atol=1e-6)
        torch.testing.assert_close(value, buf.values[rows].flatten(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("core, bptt", [("lstm", 0), ("gru", 1)])
def test_starts_states_and_replay_of_every_rollout_are_the_acting_policys(core, bptt):
    side = RecurrentSide(core, bptt)
    try:
        for r in range(4):
            buf = side.collect()
            assert buf.starts.numpy().tolist() == expected_starts(r).tolist(), r
            assert buf.states.shape == (T // (bptt or T), N, side.model.state_size)
            if r > 0:  # a later rollout's columns start from the state the previous one left
                assert buf.states[0][~buf.starts[0]].abs().sum() > 0
            check_replay(side.model, buf, bptt)
            assert len(buf.final_states) == len(buf.final_obs)
    finally:
        side.close()
