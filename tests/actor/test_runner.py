"""The actor's env group: what reaches env.step, and what it reports back (real Pendulum envs)."""
import gymnasium as gym
import numpy as np

from actor.envs import describe_spaces, make_env
from actor.runner import EnvGroup
from protocol.settings import EnvSettings


class Recorder(gym.Wrapper):
    """Passes everything through to the real env; keeps a copy of each action it was given."""

    def __init__(self, env):
        super().__init__(env)
        self.received = []

    def step(self, action):
        self.received.append(np.array(action, copy=True))
        return self.env.step(action)


def test_box_actions_are_clipped_for_the_env_and_the_sample_is_left_alone():
    settings = EnvSettings(env_id="Pendulum-v1")
    envs = [Recorder(make_env(settings, seed)) for seed in (1, 2)]
    _, action_space = describe_spaces(envs[0])
    assert (action_space.low, action_space.high) == ([-2.0], [2.0])
    group = EnvGroup(envs, [1, 2], action_space)
    try:
        sample = np.array([[5.5], [-0.75]], np.float32)  # what the learner drew and trains on
        sent = sample.copy()
        report = group.step(0, sent)
        assert np.array_equal(envs[0].received[-1], [2.0]) and np.array_equal(envs[1].received[-1], [-0.75])
        assert np.array_equal(sent, sample), "the learner's sample is not clipped in place"
        group.step(0, np.array([[-3.0], [2.5]], np.float32))
        assert np.array_equal(envs[0].received[-1], [-2.0]) and np.array_equal(envs[1].received[-1], [2.0])
        assert report.obs.shape == (2, 3) and report.rewards.shape == (2,)
    finally:
        group.close()
