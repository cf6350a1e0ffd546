"""The reusable evaluation pieces without a training run (learner/evaluation/evaluate.py): settings, episodes."""
from __future__ import annotations

import torch

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


class StateSpy:
    """A recurrent model as play_episodes sees it, recording the state each step enters with and leaves with."""

    def __init__(self, model):
        self.model, self.recurrent, self.initial_state = model, True, model.initial_state
        self.entered, self.left = [], []

    def greedy(self, x, state):
        self.entered.append(state.clone())
        out = self.model.greedy(x, state)
        self.left.append(state.clone())
        return out


def test_a_recurrent_policy_carries_its_state_through_an_episode_and_starts_each_from_zeros():
    """model.core (issue 63): each step enters with the state the step before left, except an episode's first,
    which enters with zeros, as the collector resets a slot's state in training."""
    cfg = apply_overrides(Config(), ["env.env_id='CartPole-v1'", "env.max_episode_steps=30", "model.core='lstm'"])
    env = make_env(eval_settings(cfg.env), 3)
    try:
        model, _ = build_policy(cfg, *describe_spaces(env))
        spy = StateSpy(model)
        episodes = play_episodes(spy, env, 3, seed=3, greedy=True)
    finally:
        env.close()
    firsts = [0, episodes[0].length, episodes[0].length + episodes[1].length]
    assert len(spy.entered) == sum(e.length for e in episodes)
    for t, state in enumerate(spy.entered):
        if t in firsts:
            assert not state.any(), t
        else:
            assert torch.equal(state, spy.left[t - 1]) and state.any(), t


def test_a_recurrent_checkpoint_keeps_its_core_and_ppo_cluster_evaluate_plays_it(tmp_path, capsys):
    from learner.evaluation.evaluate import load_policy, main
    from learner.weights import checkpoint
    cfg = apply_overrides(Config(), ["env.env_id='CartPole-v1'", "env.max_episode_steps=20", "model.core='gru'"])
    env = make_env(eval_settings(cfg.env), 0)
    try:
        model, _ = build_policy(cfg, *describe_spaces(env))
    finally:
        env.close()
    checkpoint.save(tmp_path, 1, {"update": 1, "env_steps": 64, "config": cfg.to_dict(), "updater": {},
                                  "model": model.state_dict()}, keep=1)
    loaded = load_policy(tmp_path).model
    assert loaded.recurrent and torch.equal(loaded.core.rnn.weight_hh_l0, model.core.rnn.weight_hh_l0)
    assert main([str(tmp_path), "--episodes", "2"]) == 0
    assert "over 2 episode(s)" in capsys.readouterr().out


class ThreadsSpy:
    """The real model as play_episodes sees it, recording torch's intra-op threads at each step."""

    def __init__(self, model):
        self.model, self.recurrent = model, False
        self.threads = []

    def act(self, x, **kwargs):
        self.threads.append(torch.get_num_threads())
        return self.model.act(x, **kwargs)


def test_evaluate_plays_on_one_torch_thread_and_gives_the_callers_threads_back():
    """Beside a training run on the same cores, an evaluation on the default threads spun OpenMP workers between
    its steps: on 2 cores the learner's update went 4x slower (the evaluation itself 5x). Batches of one gain
    nothing from a second thread."""
    from learner.evaluation.evaluate import LoadedPolicy, evaluate
    cfg = apply_overrides(Config(), ["env.env_id='CartPole-v1'", "env.max_episode_steps=10"])
    env = make_env(eval_settings(cfg.env), 0)
    try:
        model, obs_norm = build_policy(cfg, *describe_spaces(env))
    finally:
        env.close()
    spy = ThreadsSpy(model)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        episodes, _ = evaluate(LoadedPolicy(cfg, spy, obs_norm, path=None), 2)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert len(episodes) == 2 and spy.threads and set(spy.threads) == {1}
    assert after == 2
