"""The reusable evaluation pieces without a training run: settings, episodes, weight broadcasts, scheduling."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from actor.envs import describe_spaces, make_env
from learner.config import Config, ModelConfig, apply_overrides
from learner.evaluation.worker import _due
from learner.weights.message import broadcast_state, load_broadcast
from learner.evaluation.evaluate import (build_policy, eval_settings, play_episodes,
                              summarize)
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer
from learner.weights.message import state_arrays
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.integration.cluster import ROOT


def test_eval_settings_keep_the_training_recipe():
    train = EnvSettings(sticky_actions=0.0, max_episode_steps=27000)
    s = eval_settings(train)
    assert s == train  # episodic life and FIRE reset too: lost lives are handled as in training
    assert eval_settings(EnvSettings(episodic_life=False, fire_reset=False)).episodic_life is False
    s = eval_settings(train, sticky_actions=0.25, max_steps=500)
    assert s.sticky_actions == 0.25 and s.max_episode_steps == 500
    assert eval_settings(train, sticky_actions=-1.0).sticky_actions == 0.0  # -1: as in training
    assert train.sticky_actions == 0.0 and train.max_episode_steps == 27000  # the training settings are left alone


def test_play_episodes_cartpole_returns_raw_episodes():
    cfg = apply_overrides(Config(), ["env.env_id='CartPole-v1'", "env.max_episode_steps=40"])
    env = make_env(eval_settings(cfg.env), 3)
    try:
        model, obs_norm = build_policy(cfg, *describe_spaces(env))
        episodes = play_episodes(model, env, 3, seed=3)
        again = play_episodes(model, env, 3, seed=3)
        greedy = play_episodes(model, env, 2, seed=3, greedy=True)
    finally:
        env.close()
    assert len(episodes) == 3 and len(greedy) == 2
    assert all(1 <= e.length <= 40 and e.ret == e.length for e in episodes)  # CartPole: +1 per step
    assert [(e.ret, e.length) for e in episodes] == [(e.ret, e.length) for e in again]  # seeded
    s = summarize([e.ret for e in episodes])
    assert s["min"] <= s["mean"] <= s["max"] and s["episodes"] == 3


def test_broadcast_carries_obs_norm_and_round_trips():
    obs = SpaceSpec(kind="box", shape=(3,), dtype="float32", low=[-1.0] * 3, high=[1.0] * 3)
    act = SpaceSpec(kind="box", shape=(1,), dtype="float32", low=[-2.0], high=[2.0])
    model, norm = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
    norm.update(torch.randn(64, 3) * 3 + 1)
    assert broadcast_state(model, None) is model  # no normalizer: exactly the model's tensors
    msg = m.decode(m.encode(m.Weights(5, state_arrays(broadcast_state(model, norm)))))
    model2, norm2 = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
    load_broadcast(model2, norm2, msg.tensors)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k
    np.testing.assert_allclose(norm2.rms.mean.numpy(), norm.rms.mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(norm2.rms.count), float(norm.rms.count), rtol=1e-6)
    with pytest.raises(ValueError, match="lacks"):
        load_broadcast(model2, None, {})


def test_due_tolerates_skipped_versions():
    assert not _due(0, 5, 0) and not _due(4, 5, 0) and _due(5, 5, 0) and _due(7, 5, 0)
    assert not _due(9, 5, 7) and _due(10, 5, 7) and _due(13, 5, 7)
    assert not _due(100, 0, 0)  # 0: never
    assert _due(1, 1, 0) and _due(2, 1, 1) and not _due(2, 1, 2)


READ_ONLY_BROADCAST = """
import torch
from learner.config import ModelConfig
from learner.weights.message import broadcast_state, load_broadcast
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer
from learner.weights.message import state_arrays
from protocol.spaces import SpaceSpec
obs = SpaceSpec(kind="box", shape=(3,), dtype="float32", low=[-1.0] * 3, high=[1.0] * 3)
act = SpaceSpec(kind="discrete", n=2)
model, norm = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
tensors = {k: v.copy() for k, v in state_arrays(broadcast_state(model, norm)).items()}
for arr in tensors.values():
    arr.setflags(write=False)
model2, norm2 = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
load_broadcast(model2, norm2, tensors)
assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))
print("loaded")
"""


@pytest.mark.integration
def test_load_broadcast_takes_read_only_arrays_without_a_warning():
    """A Weights message's arrays are read-only views of the received frames (issue 25, item 10): torch's
    'The given NumPy array is not writable' warning reached the eval worker's console on every run. In a
    fresh process, since torch gives that warning once per process."""
    result = subprocess.run([sys.executable, "-W", "error", "-c", READ_ONLY_BROADCAST], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "loaded\n", result.stderr[-2000:]
    assert "not writable" not in result.stderr
