"""A CartPole whose constructor takes SLOW_ENV_S seconds (default 12: longer than the default
cluster.actor_timeout_s), for start-up tests. Made by id: env.env_id = "tests.integration.slow_env:SlowCartPole-v0"
(gymnasium imports this module, which registers it)."""
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
