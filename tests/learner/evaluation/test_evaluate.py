"""The reusable evaluation pieces without a training run (learner/evaluation/evaluate.py): settings, episodes."""
from __future__ import annotations

from actor.envs import describe_spaces, make_env
from learner.config import Config, apply_overrides
from learner.evaluation.evaluate import build_policy, eval_settings, play_episodes, summarize
from protocol.settings import EnvSettings


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
