"""Gymnasium wrappers for the standard Atari PPO recipe (baselines / CleanRL semantics).

`actor.envs.make_env` stacks them, innermost first:

    ALE (frameskip=1, grayscale) -> NoopReset -> MaxAndSkip -> TimeLimit -> RecordEpisode
        -> EpisodicLife -> FireReset -> WarpFrame -> ClipReward -> FrameStack -> AgentStepLength

RecordEpisode sits above MaxAndSkip/TimeLimit (so it counts agent steps and sees a time-limit
truncation as the end of the game) but below EpisodicLife and ClipReward (so its return is the raw
score of the whole game, over all lives). No module here imports torch.
"""
from __future__ import annotations

import cv2
import gymnasium as gym
import numpy as np


class RecordEpisode(gym.Wrapper):
    """Report `info["episode"] = {"r": raw return, "l": length}` on the step where the game ends.

    "Ends" means terminated or truncated at this level: a real game over or the time limit, never a
    lost life (EpisodicLife is above us). The length counts every step taken at this level, so it
    also includes the few automatic FIRE / no-op steps FireReset and EpisodicLife take on reset;
    AgentStepLength, outermost, corrects it to the caller's steps."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._return, self._length = 0.0, 0

    def reset(self, **kwargs):
        self._return, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:  # a new dict: never mutate one an inner env may reuse
            info = {**info, "episode": {"r": self._return, "l": self._length}}
        return obs, reward, terminated, truncated, info


class NoopReset(gym.Wrapper):
    """On a real reset, take 1..noop_max no-ops so episodes don't all start from the same state.

    The count comes from the env's own seeded RNG, so a seeded env repeats its starts exactly.
    `last_noops` records the count (for tests and diagnostics)."""

    def __init__(self, env: gym.Env, noop_max: int = 30):
        super().__init__(env)
        assert noop_max >= 1, "leave NoopReset out to disable no-ops"
        self.noop_max, self.last_noops = noop_max, 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.last_noops = int(self.unwrapped.np_random.integers(1, self.noop_max + 1))
        for _ in range(self.last_noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # a game that ends during no-ops: start over, unseeded
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Repeat the action `skip` frames, sum the rewards, observe the max of the last two frames.

    The max removes the flicker of sprites drawn only on alternate frames. If the game ends early,
    the max is over the frames actually seen (baselines would use a stale buffer)."""

    def __init__(self, env: gym.Env, skip: int = 4):
        super().__init__(env)
        assert skip >= 1
        self.skip = skip

    def step(self, action):
        total, prev, obs = 0.0, None, None
        for _ in range(self.skip):
            prev = obs
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        if prev is not None:
            obs = np.maximum(prev, obs)
        return obs, total, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the training episode (terminated=True); the game resets only on game over.

    This gives the value function a terminal at each life loss without throwing away the rest of
    the game. reset() after a mere life loss takes one no-op step and continues from there
    (baselines semantics). `info["real_reset"]` says which happened.
    A reset with an explicit seed is always a real one."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.real_done = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.real_done = terminated or truncated
        lives = self.unwrapped.ale.lives()
        if 0 < lives < self.lives:  # lives == 0 is the game over itself, already terminated
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        real = self.real_done or kwargs.get("seed") is not None
        ended = {}
        if not real:
            obs, _, terminated, truncated, ended = self.env.step(0)
            real = terminated or truncated  # the no-op itself ended the game (a time limit)
            kwargs = {}
        if real:
            obs, info = self.env.reset(**kwargs)
            info = _carry_episode(info, ended)
        else:
            info = ended
        self.real_done = False
        self.lives = self.unwrapped.ale.lives()
        return obs, {**info, "real_reset": real}


def _carry_episode(info: dict, ended: dict) -> dict:
    """A game that ended on a step taken inside reset() (its time limit struck there) is reported in the
    reset's info, so its statistics are not lost; callers read info["episode"] after reset() too."""
    return {**info, "episode": ended["episode"]} if "episode" in ended else info


def needs_fire(env: gym.Env) -> bool:
    """True for games that wait for FIRE: FIRE is in the game's minimal action set.

    The minimal set is asked (not the env's action set) so that `full_action_space=True`, where
    every game lists FIRE, doesn't turn FIRE-reset on for games that never use it."""
    ale = env.unwrapped.ale
    meanings = env.unwrapped.get_action_meanings()
    fire_in_game = any(a.name == "FIRE" for a in ale.getMinimalActionSet())
    return fire_in_game and len(meanings) >= 3 and meanings[1] == "FIRE"


class FireReset(gym.Wrapper):
    """Press FIRE (action 1) then action 2 on reset, as baselines does, for games that wait for it.

    Without it, an agent can stall forever before launching the ball. Because EpisodicLife's soft
    reset also goes through reset(), Breakout gets FIRE after each lost life too. Use `needs_fire`
    to decide whether a game gets this wrapper."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, step_info = self.env.step(action)
            if terminated or truncated:  # rare (a time limit); start again without replaying the seed
                obs, info = self.env.reset()
                info = _carry_episode(info, step_info)
            else:
                info = {**info, **step_info}  # keep real_reset, refresh lives / frame numbers
        return obs, info


class WarpFrame(gym.ObservationWrapper):
    """Grayscale and resize to resolution x resolution (INTER_AREA), uint8, shape (res, res).

    make_env asks ALE for grayscale frames directly (cheaper, and MaxAndSkip then maxes in gray
    space); RGB input is still converted here so the wrapper works on any Atari env."""

    def __init__(self, env: gym.Env, resolution: int = 84):
        super().__init__(env)
        self.resolution = resolution
        self.observation_space = gym.spaces.Box(0, 255, (resolution, resolution), np.uint8)

    def observation(self, obs):
        if obs.ndim == 3:
            obs = cv2.cvtColor(obs, cv2.COLOR_RGB2GRAY)
        return cv2.resize(obs, (self.resolution, self.resolution), interpolation=cv2.INTER_AREA)


class ClipReward(gym.RewardWrapper):
    """Train on sign(reward), so one set of hyperparameters fits every game's score scale.

    Logged returns stay raw: RecordEpisode, below this wrapper, sums the unclipped rewards."""

    def reward(self, reward):
        return float(np.sign(reward))


class FrameStack(gym.Wrapper):
    """Stack the last k frames channel-first, (k, res, res) uint8, oldest first, C-contiguous.

    Frames go into a ring buffer (one frame written per step); the returned array is a fresh
    contiguous copy callers may keep. reset() fills the stack with the first frame."""

    def __init__(self, env: gym.Env, k: int = 4):
        super().__init__(env)
        assert k >= 1
        space = env.observation_space
        self.k, self._next = k, 0  # _next: slot of the oldest frame, where the next one goes
        self._frames = np.zeros((k, *space.shape), dtype=space.dtype)
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low[None], k, axis=0), np.repeat(space.high[None], k, axis=0),
            (k, *space.shape), space.dtype)

    def _stacked(self):
        return np.concatenate((self._frames[self._next:], self._frames[:self._next]))

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._frames[:] = obs
        self._next = 0
        return self._stacked(), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames[self._next] = obs
        self._next = (self._next + 1) % self.k
        return self._stacked(), reward, terminated, truncated, info


class AgentStepLength(gym.Wrapper):
    """Outermost: make `info["episode"]["l"]` the exact number of agent (outer) steps in the game.

    RecordEpisode, deeper down, also counts the automatic FIRE / no-op steps taken inside reset();
    here only the caller's steps count. The count restarts at each game end and at each real reset
    (`info["real_reset"]`, absent = real), so it spans all the lives of one game."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._steps = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if "episode" in info:  # a game ended inside the reset: it ran for the caller's steps so far
            info = {**info, "episode": {**info["episode"], "l": self._steps}}
        if info.get("real_reset", True):
            self._steps = 0
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if "episode" in info:
            info = {**info, "episode": {**info["episode"], "l": self._steps}}
            self._steps = 0
        return obs, reward, terminated, truncated, info


class SeedOnFirstReset(gym.Wrapper):
    """Use `seed` for the first reset if the caller gives none; later resets stay unseeded.

    So both `env.reset()` and `env.reset(seed=seed)` start a make_env env reproducibly, and the
    auto-resets that follow continue the seeded RNG streams instead of replaying the same game."""

    def __init__(self, env: gym.Env, seed: int):
        super().__init__(env)
        self._seed: int | None = seed

    def reset(self, *, seed=None, options=None):
        seed, self._seed = (self._seed if seed is None else seed), None
        return self.env.reset(seed=seed, options=options)


class KeepEntries(gym.ObservationWrapper):
    """Observe only some entries of a vector observation (env.observe = "positions": a task's positions and
    angles without its velocities, protocol.settings.POSITIONS)."""

    def __init__(self, env: gym.Env, entries: tuple[int, ...]):
        super().__init__(env)
        self.entries = np.asarray(entries, np.int64)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.entries], space.high[self.entries],
                                                dtype=space.dtype)

    def observation(self, observation):
        return observation[self.entries]
