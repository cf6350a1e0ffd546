"""A CartPole whose constructor takes SLOW_ENV_S seconds (default 12: longer than the default
cluster.actor_timeout_s), for start-up tests. Made by id: env.env_id = "tests.integration.slow_env:SlowCartPole-v0"
(gymnasium imports this module, which registers it). SlowStepCartPole-v0: one whose steps take SLOW_STEP_S."""
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SlowCartPole(CartPoleEnv):
    def __init__(self, **kwargs):
        time.sleep(float(os.environ.get("SLOW_ENV_S", "12")))  # the slow construction under test, not a wait
        super().__init__(**kwargs)


if "SlowCartPole-v0" not in gym.registry:
    gym.register("SlowCartPole-v0", entry_point=SlowCartPole, max_episode_steps=500)


class SlowStepCartPole(CartPoleEnv):
    """A CartPole whose every step takes SLOW_STEP_S seconds (default 0.01) of its actor's time, as an
    emulator's work would (a sleep: the actor's one thread is held all the same, and the machine's load barely
    stretches it)."""

    def step(self, action):
        time.sleep(float(os.environ.get("SLOW_STEP_S", "0.01")))  # the env's work under test, not a wait
        return super().step(action)


if "SlowStepCartPole-v0" not in gym.registry:
    gym.register("SlowStepCartPole-v0", entry_point=SlowStepCartPole, max_episode_steps=500)
