"""What a recurrent core costs per agent step (issue 63): inference and update, model.core none against lstm and
gru, side by side, in interleaved rounds on this CPU, with the median time per agent step and its ratio to none.

    python benchmarks/recurrent_cost.py                       # configs/cartpole-positions.toml's network and update
    python benchmarks/recurrent_cost.py --task atari          # the Nature CNN on 4 x 84 x 84, a 256-wide core,
                                                              # CleanRL's 128 x 8 rollout, 4 epochs x 4 minibatches
    python benchmarks/recurrent_cost.py --rounds 7 --threads 1

Inference: one batch of `--batch` rows through learner.collection.inference.Inference, as the collector serves it
(a recurrent core's state gathered by slot, reset where episodes start, stepped and scattered back). Update: one
PPOUpdater.update over a rollout acted by that policy (num_steps x envs agent steps, about 5% of them episode
starts), including the recurrent core's exact-replay pass. Both are divided by the agent steps they cover.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from learner.advantages.batch import rollout_to_batch  # noqa: E402
from learner.collection.inference import Inference  # noqa: E402
from learner.config import ModelConfig, PPOConfig, load  # noqa: E402
from learner.model.networks import build_model  # noqa: E402
from learner.rollout.buffer import RolloutBuffer  # noqa: E402
from learner.rollout.layout import Layout  # noqa: E402
from learner.update.ppo import PPOUpdater  # noqa: E402
from protocol.spaces import SpaceSpec  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORES = ("none", "lstm", "gru")


def task(name: str) -> tuple[SpaceSpec, SpaceSpec, ModelConfig, PPOConfig]:
    """(observation space, action space, model, PPO settings) of a task, with core "none"."""
    if name == "cartpole":
        cfg = load(ROOT / "configs" / "cartpole-positions.toml")
        return (SpaceSpec(kind="box", shape=(2,), dtype="float32"), SpaceSpec(kind="discrete", n=2),
                cfg.model.model_copy(update={"core": "none"}), cfg.ppo)
    return (SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8"), SpaceSpec(kind="discrete", n=6),
            ModelConfig(core_size=256), PPOConfig())


class Setup:
    """One core's model, inference policy and an acted rollout of num_steps x envs."""

    def __init__(self, core: str, spaces, envs: int, seed: int = 0):
        obs_space, action_space, model_cfg, self.ppo = spaces
        torch.manual_seed(seed)
        self.model = build_model(obs_space, action_space, model_cfg.model_copy(update={"core": core}))
        self.policy = Inference(self.model, action_space, torch.device("cpu"), None, seed=seed)
        self.rng = np.random.default_rng(seed)
        self.obs_space, self.envs = obs_space, envs
        self.layout = Layout(tuple(obs_space.shape), torch.uint8 if obs_space.dtype == "uint8" else torch.float32,
                             (), torch.long, state_size=self.model.state_size, bptt=self.ppo.bptt)

    def observations(self, n: int) -> np.ndarray:
        if self.obs_space.dtype == "uint8":
            return self.rng.integers(0, 256, size=(n, *self.obs_space.shape), dtype=np.uint8)
        return self.rng.normal(size=(n, *self.obs_space.shape)).astype(np.float32)

    def act(self, obs: np.ndarray, slots: np.ndarray, starts: np.ndarray):
        if self.model.recurrent:
            return self.policy.act([obs], slots, starts)
        return self.policy.act([obs])

    def rollout(self) -> dict:
        T, N = self.ppo.num_steps, self.envs
        buf = RolloutBuffer(list(range(N)), T, self.layout, "cpu")
        cols, slots, starts = list(range(N)), np.arange(N), np.ones(N, bool)
        for _ in range(T):
            obs = self.observations(N)
            r = self.act(obs, slots, starts)
            buf.record_actions(cols, obs, r.actions, r.logprobs, r.values, starts, r.states)
            starts = self.rng.random(N) < 0.05
            buf.record_outcome(cols, self.rng.normal(size=N).astype(np.float32), starts, np.zeros(N, bool))
        for c in cols:
            buf.bootstrap_obs[c] = self.observations(1)[0]
            buf.bootstrap_states[c] = np.zeros(self.model.state_size, np.float32)
        return rollout_to_batch(buf, self.policy.value, self.ppo.gamma, self.ppo.gae_lambda).data


def timed(fn, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def measure(spaces, envs: int, batch: int, rounds: int) -> dict[str, dict[str, float]]:
    """{core: {"inference_us", "update_us"}}: the median over rounds of microseconds per agent step."""
    setups = {core: Setup(core, spaces, envs) for core in CORES}
    obs = setups["none"].observations(batch)
    slots, starts = np.arange(batch), np.zeros(batch, bool)
    batches = {core: s.rollout() for core, s in setups.items()}
    updaters = {core: PPOUpdater(s.model, s.ppo, "cpu") for core, s in setups.items()}
    samples = {core: {"inference_us": [], "update_us": []} for core in CORES}
    steps = setups["none"].ppo.num_steps * envs
    for _ in range(rounds):
        for core in CORES:  # interleaved: a load that comes and goes hits every core alike
            s = setups[core]
            samples[core]["inference_us"].append(timed(lambda: s.act(obs, slots, starts), 20) / batch * 1e6)
            generator = torch.Generator().manual_seed(0)
            samples[core]["update_us"].append(timed(lambda: updaters[core].update(batches[core], 0.0, generator), 1)
                                              / steps * 1e6)
    return {core: {k: statistics.median(v) for k, v in d.items()} for core, d in samples.items()}


def report(figures: dict[str, dict[str, float]]) -> str:
    lines = [f"{'core':6} {'inference us/step':>18} {'x none':>7} {'update us/step':>15} {'x none':>7}"]
    base = figures["none"]
    for core, f in figures.items():
        lines.append(f"{core:6} {f['inference_us']:18.1f} {f['inference_us'] / base['inference_us']:7.2f} "
                     f"{f['update_us']:15.1f} {f['update_us'] / base['update_us']:7.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=("cartpole", "atari"), default="cartpole")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the learner collects with 1)")
    p.add_argument("--envs", type=int, default=8, help="env slots of the rollout the update trains on")
    p.add_argument("--batch", type=int, default=8, help="rows per inference batch")
    args = p.parse_args(argv)
    if min(args.rounds, args.threads, args.envs, args.batch) < 1:
        p.error("--rounds, --threads, --envs and --batch must be >= 1")
    torch.set_num_threads(args.threads)
    spaces = task(args.task)
    print(f"{args.task}: inference batches of {args.batch}, updates of {spaces[3].num_steps} x {args.envs} agent "
          f"steps ({spaces[3].update_epochs} epochs x {spaces[3].num_minibatches} minibatches), {args.threads} "
          f"thread(s), median of {args.rounds} interleaved rounds")
    print(report(measure(spaces, args.envs, args.batch, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
