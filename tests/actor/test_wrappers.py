"""The actor's environment side: the Atari recipe wrappers and make_env, on real ALE games."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from actor.envs import describe_spaces, is_atari, make_env
from actor.wrappers import MaxAndSkip, NoopReset, WarpFrame, needs_fire
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec


def _ale(game: str, **kwargs) -> gym.Env:
    import ale_py
    gym.register_envs(ale_py)
    return gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0, **kwargs)


def test_breakout_observations_are_stacked_84x84_uint8():
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5"), seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.flags.c_contiguous
    assert all(np.array_equal(obs[0], obs[i]) for i in range(4))  # reset fills with the first frame
    previous = obs
    for _ in range(20):
        obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.flags.c_contiguous
        assert np.array_equal(obs[:-1], previous[1:])  # oldest frame dropped, newest appended
        previous = obs
    assert obs.max() > 0  # an image, not an empty buffer
    obs_spec, act_spec = describe_spaces(env)
    assert (obs_spec.kind, obs_spec.shape, obs_spec.dtype) == ("box", (4, 84, 84), "uint8")
    assert (act_spec.kind, act_spec.n) == ("discrete", 4)
    assert is_atari("ALE/Breakout-v5") and is_atari("BreakoutNoFrameskip-v4")
    assert not is_atari("CartPole-v1")


def test_clipped_training_rewards_but_raw_logged_return():
    """Same seed and actions, clipped vs unclipped: clipped == sign(raw), logged return == raw sum."""
    common = dict(env_id="ALE/SpaceInvaders-v5", episodic_life=False, max_episode_steps=300)
    clipped = make_env(EnvSettings(clip_rewards=True, **common), seed=5)
    raw = make_env(EnvSettings(clip_rewards=False, **common), seed=5)
    clipped.reset(seed=5), raw.reset(seed=5)
    rng = np.random.default_rng(0)
    raw_sum, steps, saw_big = 0.0, 0, False
    for _ in range(300):
        action = int(rng.integers(clipped.action_space.n))
        _, r_clip, term, trunc, info = clipped.step(action)
        _, r_raw, _, _, raw_info = raw.step(action)
        raw_sum, steps, saw_big = raw_sum + r_raw, steps + 1, saw_big or r_raw > 1
        assert r_clip in (-1.0, 0.0, 1.0) and r_clip == np.sign(r_raw)
        if term or trunc:
            break
    assert saw_big, "no raw reward > 1 seen: the test did not exercise clipping"
    assert term or trunc, "the game neither ended nor was truncated within 300 steps"
    assert info["episode"] == {"r": raw_sum, "l": steps} == raw_info["episode"]
    assert raw_sum > 1


def test_lost_life_ends_training_episode_but_not_the_game():
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5"), seed=1)
    _, info = env.reset(seed=1)
    ale = env.unwrapped.ale
    assert info["real_reset"] and ale.lives() == 5
    steps = 0
    for _ in range(2000):
        lives_before, frame_before = ale.lives(), ale.getEpisodeFrameNumber()
        _, _, term, trunc, info = env.step(0)  # NOOP: FireReset launched the ball, we miss it
        steps += 1
        if term:
            break
    assert term and not trunc and "episode" not in info
    assert ale.lives() == lives_before - 1 == 4 and not ale.game_over()
    _, info = env.reset()
    assert not info["real_reset"] and ale.lives() == 4  # lives not restored: same game continues
    assert ale.getEpisodeFrameNumber() > frame_before
    lost = 1
    for _ in range(5000):  # play the game out: four more lives, one episode report at the very end
        _, _, term, trunc, info = env.step(0)
        steps += 1
        if term or trunc:
            lost += 1
            if "episode" in info:
                break
            assert not ale.game_over()
            env.reset()
    assert lost == 5 and ale.lives() == 0 and info["episode"]["l"] == steps
    _, info = env.reset()
    assert info["real_reset"] and ale.lives() == 5 and ale.getEpisodeFrameNumber() < 100


def test_noop_count_stays_within_1_to_noop_max():
    env = NoopReset(_ale("Pong"), noop_max=3)
    env.reset(seed=0)
    counts = []
    for _ in range(60):
        _, info = env.reset()
        counts.append(env.last_noops)
        assert info["episode_frame_number"] == env.last_noops  # the no-ops were really taken
    assert set(counts) == {1, 2, 3}


def test_noops_through_make_env():
    settings = EnvSettings(env_id="ALE/Pong-v5", noop_max=3, fire_reset=False, episodic_life=False)
    env = make_env(settings, seed=2)
    for i in range(10):
        _, info = env.reset()
        noops = env.get_wrapper_attr("last_noops")
        assert 1 <= noops <= 3 and info["episode_frame_number"] == noops


def test_fire_reset_launches_the_ball_in_breakout():
    """Only NOOPs: with FireReset the ball is served (after every lost life too) and lives are lost;
    without it the ball is never served and nothing happens."""
    lost = {}
    for fire in (True, False):
        env = make_env(EnvSettings(env_id="ALE/Breakout-v5", fire_reset=fire), seed=3)
        env.reset()
        lost[fire] = 0
        for _ in range(400):
            _, _, term, _, _ = env.step(0)
            if term:
                lost[fire] += 1
                env.reset()
    assert lost[True] >= 3 and lost[False] == 0


def test_needs_fire_follows_the_game():
    assert needs_fire(_ale("Breakout")) and needs_fire(_ale("SpaceInvaders"))
    assert not needs_fire(_ale("Freeway"))
    assert not needs_fire(_ale("Freeway", full_action_space=True))  # FIRE listed but never used


def test_same_seed_same_game_different_seed_different_game():
    settings = EnvSettings(env_id="ALE/Breakout-v5", sticky_actions=0.25)

    def rollout(seed, explicit_seed):
        env = make_env(settings, seed=seed)
        obs, _ = env.reset(seed=seed) if explicit_seed else env.reset()
        frames, rng = [obs], np.random.default_rng(42)
        for _ in range(300):
            obs, reward, term, trunc, _ = env.step(int(rng.integers(4)))
            frames.append(obs)
            if term or trunc:
                frames.append(env.reset()[0])  # auto-resets are unseeded yet reproducible
        return np.stack(frames)

    first = rollout(7, explicit_seed=True)
    assert np.array_equal(first, rollout(7, explicit_seed=False))
    other = rollout(8, explicit_seed=True)
    assert first.shape != other.shape or not np.array_equal(first, other)


@pytest.mark.parametrize("prob", [0.0, 0.25])
def test_sticky_actions_reach_ale(prob):
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5", sticky_actions=prob), seed=0)
    env.reset()
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(prob)


def test_time_limit_truncates_and_reports():
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5", episodic_life=False, max_episode_steps=50),
                   seed=0)
    env.reset()
    for step in range(1, 51):
        _, _, term, trunc, info = env.step(0)
        assert not term and (trunc == (step >= 48))  # FireReset's 2 steps count toward the limit
        if trunc:
            break
    assert info["episode"]["l"] == 48
    _, info = env.reset()
    assert info.get("real_reset", True) and env.unwrapped.ale.getEpisodeFrameNumber() < 100


def test_cartpole_through_make_env():
    env = make_env(EnvSettings(env_id="CartPole-v1"), seed=0)
    assert env.spec.max_episode_steps == 500  # Atari's 27,000 default does not apply
    obs_spec, act_spec = describe_spaces(env)
    assert (obs_spec.kind, obs_spec.shape, act_spec.n) == ("box", (4,), 2)
    obs, _ = env.reset(seed=0)
    total, steps = 0.0, 0
    while True:
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        total, steps = total + reward, steps + 1
        if term or trunc:
            break
        assert "episode" not in info
    assert info["episode"] == {"r": total, "l": steps}
    short = make_env(EnvSettings(env_id="CartPole-v1", max_episode_steps=5), seed=0)
    short.reset()
    results = [short.step(0)[3] for _ in range(5)]
    assert results == [False] * 4 + [True]


def test_max_and_skip_maxes_last_two_frames_and_stops_at_game_end():
    class Counter(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)
        action_space = gym.spaces.Discrete(1)

        def __init__(self, end_at):
            self.t, self.end_at = 0, end_at

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return np.array([0, 10], np.uint8), {}

        def step(self, action):
            self.t += 1
            return np.array([self.t, 10 - self.t], np.uint8), 1.0, self.t == self.end_at, False, {}

    env = MaxAndSkip(Counter(end_at=100), skip=4)
    env.reset()
    obs, reward, *_ = env.step(0)
    assert obs.tolist() == [4, 7] and reward == 4.0  # max of frames 3 and 4, four rewards
    env = MaxAndSkip(Counter(end_at=2), skip=4)
    env.reset()
    obs, reward, term, *_ = env.step(0)
    assert term and reward == 2.0 and obs.tolist() == [2, 9]


@pytest.mark.parametrize("space", [
    gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
    gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))),
])
def test_unsupported_space_is_a_protocol_error(space):
    with pytest.raises(ProtocolError, match=type(space).__name__):
        SpaceSpec.from_gym(space)


def _area_weights(src: int, dst: int) -> np.ndarray:
    """[dst, src]: the fraction of source pixel j inside output pixel i's footprint [i*s, (i+1)*s), s = src/dst."""
    scale = src / dst
    w = np.zeros((dst, src))
    for i in range(dst):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(int(np.ceil(hi)), src)):
            w[i, j] = min(hi, j + 1) - max(lo, j)
    return w / scale


def test_warp_frame_is_an_area_average():
    """Downscaling by area averaging (INTER_AREA) against a reference: each output pixel is the mean of
    its footprint in the source frame, partial pixels weighted by their overlap."""
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5", frame_stack=1), seed=0)
    warp = env
    while not isinstance(warp, WarpFrame):
        warp = warp.env
    frame = np.random.default_rng(0).integers(0, 256, size=(210, 160), dtype=np.uint8)  # noise: filters differ
    out = warp.observation(frame)
    reference = _area_weights(210, 84) @ frame.astype(np.float64) @ _area_weights(160, 84).T
    assert out.shape == (84, 84) and out.dtype == np.uint8
    assert np.abs(out.astype(np.float64) - reference).max() <= 1.0  # rounding only
    env.close()


def test_observe_positions_hides_cartpoles_velocities():
    """env.observe = "positions" (issue 63): cart position and pole angle only, the same values as the full
    observation's entries 0 and 2, step after step."""
    full = make_env(EnvSettings(env_id="CartPole-v1"), 7)
    part = make_env(EnvSettings(env_id="CartPole-v1", observe="positions"), 7)
    try:
        assert part.observation_space.shape == (2,)
        a, _ = full.reset()
        b, _ = part.reset()
        for _ in range(5):
            np.testing.assert_array_equal(b, a[[0, 2]])
            assert part.observation_space.contains(b)
            a = full.step(1)[0]
            b = part.step(1)[0]
    finally:
        full.close()
        part.close()


def test_observe_positions_refuses_a_task_it_does_not_know():
    with pytest.raises(ValueError, match="knows the positions of CartPole"):
        make_env(EnvSettings(env_id="FrozenLake-v1", observe="positions"), 0)
    with pytest.raises(ValueError, match="not Atari"):
        make_env(EnvSettings(env_id="ALE/Pong-v5", observe="positions"), 0)
