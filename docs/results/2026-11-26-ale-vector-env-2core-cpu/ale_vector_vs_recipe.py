"""ale-py's AtariVectorEnv against the actors' wrappers (actor/envs.py): step for step, and speed.

Each check steps one env of each kind with the same random actions for STEPS agent steps (both reset with
seed 0) and counts the steps whose frame (the newest, 84x84), reward, terminated or truncated differ. The
stack is left to the learner (frame_stack = 1 here, stack_num = 1 there), as with cluster.stack_on_learner.
Then agent steps/s of N envs of each kind in one process, random actions, interleaved rounds.
    python docs/results/2026-11-26-ale-vector-env-2core-cpu/ale_vector_vs_recipe.py
"""
import sys
import time

import numpy as np
from ale_py.vector_env import AtariVectorEnv

sys.path.insert(0, ".")
from actor.envs import make_env  # noqa: E402
from protocol.settings import EnvSettings  # noqa: E402

STEPS, N, SECONDS, ROUNDS = 3000, 32, 6.0, 3


def compare(env_id: str, game: str, noop_max: int, fire: bool, life: bool) -> tuple[int, int, int]:
    ours = make_env(EnvSettings(env_id=env_id, noop_max=noop_max, fire_reset=fire, episodic_life=life,
                                clip_rewards=False, frame_stack=1), 0)
    theirs = AtariVectorEnv(game, 1, num_threads=1, stack_num=1, noop_max=noop_max, use_fire_reset=fire,
                            episodic_life=life, reward_clipping=False, autoreset_mode="SameStep")
    obs, _ = ours.reset()
    vobs, _ = theirs.reset(seed=0)
    first = None if np.array_equal(obs, vobs[0, 0]) else -1
    rng, differ, ends = np.random.default_rng(1), 0, 0
    for t in range(STEPS):
        a = int(rng.integers(ours.action_space.n))
        obs, r, term, trunc, _ = ours.step(a)
        if term or trunc:
            obs, _ = ours.reset()
            ends += 1
        vobs, vr, vterm, vtrunc, _ = theirs.step(np.array([a]))
        same = np.array_equal(obs, vobs[0, 0]) and r == vr[0] and term == vterm[0] and trunc == vtrunc[0]
        if not same:
            differ += 1
            first = t if first is None else first
    ours.close()
    theirs.close()
    return differ, ends, first


def speed(env_id: str, game: str) -> tuple[float, float]:
    settings = EnvSettings(env_id=env_id, frame_stack=1)
    envs = [make_env(settings, i) for i in range(N)]
    for env in envs:
        env.reset()
    vec = AtariVectorEnv(game, N, num_threads=1, stack_num=1, episodic_life=True, autoreset_mode="SameStep")
    vec.reset(seed=0)
    rng, rates = np.random.default_rng(0), {"wrappers": [], "vector": []}
    for _ in range(ROUNDS):
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < SECONDS:
            for env in envs:
                if any(env.step(int(rng.integers(env.action_space.n)))[2:4]):
                    env.reset()
            steps += N
        rates["wrappers"].append(steps / (time.perf_counter() - start))
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < SECONDS:
            vec.step(rng.integers(0, vec.single_action_space.n, N))
            steps += N
        rates["vector"].append(steps / (time.perf_counter() - start))
    return float(np.median(rates["wrappers"])), float(np.median(rates["vector"]))


def main() -> None:
    print("| game | noop_max | fire_reset | episodic_life | steps that differ | game/life ends (ours) | first at |")
    print("|---|---:|---|---|---:|---:|---:|")
    for env_id, game in (("ALE/Pong-v5", "pong"), ("ALE/Breakout-v5", "breakout")):
        for noop, fire, life in ((0, False, False), (0, True, False), (0, False, True), (30, False, False)):
            differ, ends, first = compare(env_id, game, noop, fire, life)
            print(f"| {game} | {noop} | {fire} | {life} | {differ} of {STEPS} | {ends} | "
                  f"{'-' if first is None else first} |")
    ours, vec = speed("ALE/Pong-v5", "pong")
    print(f"\nPong, {N} envs in one process, random actions: wrappers {ours:,.0f} agent steps/s, "
          f"AtariVectorEnv (1 thread) {vec:,.0f}: {vec / ours:.2f}x")


if __name__ == "__main__":
    main()
