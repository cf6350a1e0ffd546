"""A game whose time limit strikes on a step taken inside reset() (EpisodicLife's no-op, FireReset's FIRE)
is still reported, with the caller's step count: no episode statistics are lost."""
from actor.envs import make_env
from protocol.settings import EnvSettings


def play_noop(max_steps: int, caller_steps: int = 80) -> tuple[int, list[int], int]:
    """NOOP Breakout (the ball is lost at once): real game ends seen, lengths reported, and how many of
    the games ended inside a reset."""
    env = make_env(EnvSettings(env_id="ALE/Breakout-v5", max_episode_steps=max_steps), seed=3)
    env.reset()
    games, lengths, in_reset = 0, [], 0
    for _ in range(caller_steps):
        _, _, terminated, truncated, info = env.step(0)
        if "episode" in info:
            lengths.append(info["episode"]["l"])
        if terminated or truncated:
            _, info = env.reset()
            if "episode" in info:
                lengths.append(info["episode"]["l"])
                in_reset += 1
            games += info["real_reset"]
    env.close()
    return games, lengths, in_reset


def test_every_game_ended_is_reported_whatever_step_the_limit_strikes_on():
    struck_inside_a_reset = 0
    for max_steps in range(20, 40):
        games, lengths, in_reset = play_noop(max_steps)
        assert games > 0 and len(lengths) == games, f"max_steps {max_steps}: {games} games ended, {len(lengths)} reported"
        assert all(0 < n <= max_steps for n in lengths), (max_steps, lengths)
        struck_inside_a_reset += in_reset
    assert struck_inside_a_reset > 0, "no limit struck inside a reset: the case is not exercised"
