"""The actor's env group: what reaches env.step, and what it reports back (real Pendulum, CartPole, Breakout)."""
import gymnasium as gym
import numpy as np
import pytest

from actor.env_groups import ActorEnvs, EnvGroup, SpacesDiffer
from actor.envs import describe_spaces, make_env
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.actor.test_envs_games_cut_in_reset import play_noop


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


def test_an_env_that_ends_restarts_and_only_a_time_limit_cut_sends_its_last_observation():
    """CartPole pushed one way: env 0 is cut by a 3-step limit (again and again, each game restarting); env 1
    falls over on step 10, the very step its 10-step limit strikes: terminated, so nothing to bootstrap and no
    final observation, though truncated too."""
    envs = [make_env(EnvSettings(env_id="CartPole-v1", max_episode_steps=limit), seed) for seed, limit in
            ((1, 3), (2, 10))]
    group = EnvGroup(envs, [1, 2], describe_spaces(envs[0])[1])
    try:
        reports = []
        for _ in range(12):
            reports.append(group.step(0, np.ones(2, np.int64)))
            reports[-1].obs = reports[-1].obs.copy()  # the group rewrites its buffer on the next step
    finally:
        group.close()
    assert not np.array_equal(reports[0].obs[1], reports[1].obs[1])  # each step's observation is reported
    cut = [t for t, r in enumerate(reports) if r.truncated[0]]
    assert cut == [2, 5, 8, 11]  # a fresh game after each cut: the limit strikes every 3 steps
    for t in cut:
        r = reports[t]
        assert r.final_index.tolist() == [0] and r.final_obs.shape == (1, 4)
        assert not np.array_equal(r.final_obs[0], r.obs[0])  # the report's obs is the new game's first
        assert 3 in r.episode_lengths.tolist()
    fell = reports[9]
    assert fell.terminated[1] and fell.truncated[1], "the case is not exercised: env 1 did not fall on step 10"
    assert 1 not in fell.final_index.tolist() and np.abs(fell.obs[1]).max() <= 0.05  # a reset state
    assert fell.episode_lengths.tolist()[-1] == 10


def test_a_game_ended_inside_the_reset_is_reported_as_the_env_itself_reports_it():
    """Breakout on NOOP with a 26-step limit: each game ends on a step taken inside reset() (EpisodicLife's
    no-op), and the group reports it as the env's own reset info does (test_envs_games_cut_in_reset.py)."""
    games, lengths, in_reset = play_noop(26)
    assert in_reset == games > 0  # the case is exercised
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5", max_episode_steps=26), seed=3)
    group = EnvGroup([env], [3], describe_spaces(env)[1])
    try:
        reported = [n for _ in range(80) for n in group.step(0, np.zeros(1, np.int64)).episode_lengths.tolist()]
    finally:
        group.close()
    assert reported == lengths


def _welcome(settings: EnvSettings, obs_space, action_space) -> m.Welcome:
    return m.Welcome(actor_id=1, slots=[0, 1], seeds=[5, 6], env=settings.to_dict(), obs_space=obs_space,
                     action_space=action_space)


def test_envs_are_built_in_groups_and_kept_only_when_their_spaces_are_the_learners():
    settings = EnvSettings(env_id="CartPole-v1")
    env = make_env(settings, 0)
    obs_space, action_space = describe_spaces(env)
    env.close()
    envs = ActorEnvs()
    envs.build(("same",), _welcome(settings, obs_space, action_space), groups=2)
    try:
        assert [len(g.envs) for g in envs.groups] == [1, 1] and envs.reusable(("same",), 2)
        assert not envs.reusable(("other",), 2) and not envs.reusable(("same",), 1)
    finally:
        envs.close()
    other = SpaceSpec.from_gym(gym.spaces.Box(-1, 1, (5,), np.float32))  # a learner that expects 5 numbers
    with pytest.raises(SpacesDiffer, match="different spaces"):
        envs.build(("other",), _welcome(settings, other, action_space), groups=2)
    assert envs.groups == [] and not envs.reusable(("other",), 2)


def test_regrouped_envs_go_on_with_their_games_in_the_new_groups():
    """Groups "auto" rejoins with another count: the same envs, split anew, each keeping its observation and
    its game (nothing reset), and the new groups step them as before."""
    settings = EnvSettings(env_id="CartPole-v1")
    env = make_env(settings, 0)
    obs_space, action_space = describe_spaces(env)
    env.close()
    envs = ActorEnvs()
    welcome = m.Welcome(actor_id=1, slots=[0, 1, 2, 3], seeds=[5, 6, 7, 8], env=settings.to_dict(),
                        obs_space=obs_space, action_space=action_space)
    envs.build(("same",), welcome, groups=1)
    try:
        before = envs.groups[0].step(0, np.ones(4, np.int64)).obs.copy()
        playing = list(envs.groups[0].envs)
        envs.regroup(4)
        assert [g.envs for g in envs.groups] == [[e] for e in playing] and envs.reusable(("same",), 4)
        assert np.array_equal(np.concatenate([g.obs for g in envs.groups]), before)
        assert all(np.allclose(e.unwrapped.state, o) for e, o in zip(playing, before))  # no env was reset
        after = [g.step(i, np.ones(1, np.int64)) for i, g in enumerate(envs.groups)]
        assert all(r.obs.shape == (1, 4) and not r.first for r in after)
    finally:
        envs.close()
