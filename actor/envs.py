"""Build an actor's environment from the learner's `EnvSettings` (never imports torch)."""
from __future__ import annotations

import gymnasium as gym

from actor.wrappers import (AgentStepLength, ClipReward, RecordEpisode, EpisodicLife, FireReset,
                            FrameStack, KeepEntries, MaxAndSkip, NoopReset, SeedOnFirstReset, WarpFrame, needs_fire)
from protocol.settings import POSITIONS, EnvSettings, task_name
from protocol.spaces import SpaceSpec

ATARI_DEFAULT_MAX_STEPS = EnvSettings.model_fields["max_episode_steps"].default
"""The settings' default limit is meant for Atari; a non-Atari env keeps its own unless told otherwise."""


def is_atari(env_id: str) -> bool:
    """True for ids that get the Atari recipe (same rule as `EnvSettings.is_atari`)."""
    return EnvSettings(env_id=env_id).is_atari


def make_env(settings: EnvSettings, seed: int, render_mode: str | None = None) -> gym.Env:
    """Make one environment for an actor, with `info["episode"] = {"r", "l"}` on every game end.

    Atari ids (`settings.is_atari`) get the recipe, innermost first: ALE with frameskip=1, grayscale
    frames and `repeat_action_probability=settings.sticky_actions`; NoopReset (noop_max > 0);
    MaxAndSkip (frame_skip > 1); TimeLimit in agent steps (max_episode_steps > 0, which then replaces
    ALE's own frame limit; 0 keeps ALE's registered limit, 108,000 frames for v5 ids); RecordEpisode;
    EpisodicLife; FireReset (if enabled and the game uses FIRE); WarpFrame; ClipReward; FrameStack
    (frame_stack > 1); AgentStepLength (so `l` counts the caller's steps only). Sticky actions 0.25
    with episodic_life=False is the Machado et al. protocol.

    TimeLimit sits below EpisodicLife so that a truncation ends the game for real (the next reset
    starts a new game, RecordEpisode reports it); it therefore also counts the few automatic FIRE /
    no-op steps taken on resets, so a game is cut a handful of agent steps early.

    Any other id is made as registered, with RecordEpisode on top. Its registered time limit is kept
    unless `max_episode_steps` is > 0 and differs from the Atari default (27,000), which would
    otherwise cut e.g. CartPole at 27,000 instead of 500 just because the setting was left alone.
    `observe = "positions"` then keeps only the task's positions and angles (KeepEntries).

    Seeding: the action space is seeded now; the env itself is reset with `seed` on its first
    reset, whether the caller passes `reset(seed=seed)` or plain `reset()` (make_env does not reset).
    Later resets are unseeded, so auto-resets continue the seeded random streams.

    render_mode is passed to gymnasium.make ("rgb_array": `env.render()` returns the full-colour frame,
    for Atari the 210x160 screen, whatever the observation preprocessing).
    """
    if settings.is_atari and settings.observe != "all":
        raise ValueError(f"env.observe = {settings.observe!r} is for vector tasks, not Atari ({settings.env_id})")
    env = _make_atari(settings, render_mode) if settings.is_atari else _make_other(settings, render_mode)
    env = SeedOnFirstReset(env, seed)
    env.action_space.seed(seed)
    return env


def _make_atari(s: EnvSettings, render_mode: str | None = None) -> gym.Env:
    import ale_py  # here: only Atari ids need ALE
    # ALE's C++ logger prints a start-up banner to stderr at Info level, once per process: keep the
    # console and logs to one line per event (its warnings and errors still get through)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    gym.register_envs(ale_py)
    kwargs = dict(frameskip=1, repeat_action_probability=s.sticky_actions,
                  full_action_space=s.full_action_space, obs_type="grayscale")
    if s.max_episode_steps > 0:
        kwargs["max_num_frames_per_episode"] = 0  # 0 = no ALE limit; TimeLimit below is the one
    env = gym.make(s.env_id, render_mode=render_mode, **kwargs)
    if s.noop_max > 0:
        env = NoopReset(env, s.noop_max)
    if s.frame_skip > 1:
        env = MaxAndSkip(env, s.frame_skip)
    if s.max_episode_steps > 0:
        # Below EpisodicLife, so a truncation is a real game end: the next reset starts a new game.
        env = gym.wrappers.TimeLimit(env, s.max_episode_steps)
    env = RecordEpisode(env)
    if s.episodic_life:
        env = EpisodicLife(env)
    if s.fire_reset and needs_fire(env):
        env = FireReset(env)
    env = WarpFrame(env, s.resolution)
    if s.clip_rewards:
        env = ClipReward(env)
    if s.frame_stack > 1:
        env = FrameStack(env, s.frame_stack)
    return AgentStepLength(env)


def _make_other(s: EnvSettings, render_mode: str | None = None) -> gym.Env:
    kwargs = {}
    if s.max_episode_steps > 0 and s.max_episode_steps != ATARI_DEFAULT_MAX_STEPS:
        kwargs["max_episode_steps"] = s.max_episode_steps
    env = RecordEpisode(gym.make(s.env_id, render_mode=render_mode, **kwargs))
    if s.observe == "positions":
        entries = POSITIONS.get(task_name(s.env_id))
        if entries is None:
            raise ValueError(f"env.observe = 'positions' knows the positions of {', '.join(POSITIONS)} only, "
                             f"not of {s.env_id}")
        env = KeepEntries(env, entries)
    return env


def describe_spaces(env: gym.Env) -> tuple[SpaceSpec, SpaceSpec]:
    """(observation spec, action spec) for the handshake; ProtocolError for unsupported spaces."""
    return SpaceSpec.from_gym(env.observation_space), SpaceSpec.from_gym(env.action_space)
