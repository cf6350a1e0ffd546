"""Evaluation plays the game the agent was trained on (issue 10, point 5), on the real Breakout env.

Training with episodic life and FIRE reset presses FIRE after each lost life, so a trained policy need
never learn to press it. Evaluation must do the same and still score the whole game: a policy that never
presses FIRE loses its 5 lives quickly (about 115 agent steps) and reaches game over, instead of stalling
with the ball unlaunched until the time limit.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from actor.envs import describe_spaces, make_env
from learner.config import Config, apply_overrides
from learner.evaluation.worker import Evaluator
from learner.evaluation.evaluate import LoadedPolicy, build_policy, eval_settings, evaluate
from protocol.settings import EnvSettings

NOOP = 0
LIMIT = 2000  # agent steps; a stalled game runs into it, a real one ends within a few hundred
WELL_UNDER = 500


def never_fire(model: torch.nn.Module) -> torch.nn.Module:
    """The real network with a policy head that always prefers NOOP: greedy play never presses FIRE."""
    with torch.no_grad():
        model.head.linear.weight.zero_()
        model.head.linear.bias.zero_()
        model.head.linear.bias[NOOP] = 10.0
    return model


def play_noops(settings: EnvSettings, seed: int = 0) -> dict:
    """Step an evaluation env with NOOP until the game ends; what happened to lives, resets and the episode."""
    env = make_env(eval_settings(settings), seed)
    try:
        env.reset()
        lives, soft_resets, steps, episode = [env.unwrapped.ale.lives()], [], 0, None
        while episode is None:
            _, _, terminated, truncated, info = env.step(NOOP)
            steps += 1
            if env.unwrapped.ale.lives() != lives[-1]:
                lives.append(env.unwrapped.ale.lives())
            episode = info.get("episode")
            if episode is None and (terminated or truncated):
                soft_resets.append(env.reset()[1].get("real_reset"))
        return {"lives": lives, "soft_resets": soft_resets, "steps": steps, "episode": episode,
                "truncated": truncated, "game_over": env.unwrapped.ale.game_over()}
    finally:
        env.close()


def test_eval_env_fires_after_each_lost_life_and_plays_to_game_over():
    out = play_noops(EnvSettings(env_id="ALE/Breakout-v5", max_episode_steps=LIMIT))
    assert out["lives"] == [5, 4, 3, 2, 1, 0], out  # every new ball was launched without the policy's FIRE
    assert out["game_over"] and not out["truncated"], out
    assert out["soft_resets"] == [False] * 4, out  # each lost life continued the same game
    assert out["episode"]["l"] == out["steps"] < WELL_UNDER, out  # one episode spanning all 5 lives


def test_eval_env_presses_fire_only_where_training_did():
    # Trained without episodic life: FIRE only at the game's start, so NOOP stalls after the first ball.
    out = play_noops(EnvSettings(env_id="ALE/Breakout-v5", episodic_life=False, max_episode_steps=300))
    assert out["lives"] == [5, 4] and out["truncated"] and out["episode"]["l"] == out["steps"], out
    # Trained without FIRE reset: the ball is never launched.
    out = play_noops(EnvSettings(env_id="ALE/Breakout-v5", fire_reset=False, max_episode_steps=300))
    assert out["lives"] == [5] and out["truncated"] and out["episode"]["l"] == out["steps"], out


def breakout_config(*extra: str) -> Config:
    return apply_overrides(Config(), ["env.env_id='ALE/Breakout-v5'", f"env.max_episode_steps={LIMIT}", *extra])


def test_evaluate_never_firing_policy_reaches_game_over():
    cfg = breakout_config()
    env = make_env(eval_settings(cfg.env), 0)
    try:
        model, obs_norm = build_policy(cfg, *describe_spaces(env))
    finally:
        env.close()
    policy = LoadedPolicy(cfg, never_fire(model), obs_norm, Path("never-fire"))
    with torch.no_grad():
        episodes, _ = evaluate(policy, 2, greedy=True, seed=5)
    assert len(episodes) == 2
    assert all(0 < e.length < WELL_UNDER for e in episodes), episodes  # game over, far from the time limit


def test_eval_worker_scores_whole_games_of_a_never_firing_policy(tmp_path):
    evaluator = Evaluator(breakout_config("eval.episodes=2", "eval.greedy=true"), tmp_path)
    try:
        never_fire(evaluator.model)
        with torch.no_grad():
            result = evaluator.evaluate(7, video=False)
    finally:
        evaluator.close()
    assert result["eval_episodes"] == 2 and 0 < result["eval_length_mean"] < WELL_UNDER, result
    assert json.loads((tmp_path / "eval.jsonl").read_text()) == result

