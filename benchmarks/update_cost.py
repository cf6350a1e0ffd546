"""The CPU cost of one PPO update (CleanRL's Atari recipe: 1,024 samples, 4 epochs x 4 minibatches) for the
Nature CNN in channels-last (the model's layout) against NCHW, interleaved, with the median ratio.

    python benchmarks/update_cost.py                     # 3 rounds x 2 updates each, torch threads = cores
    python benchmarks/update_cost.py --rounds 5 --threads 1

Same math either way (only the memory layout of the conv activations and weights differs).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from learner.config import ModelConfig, PPOConfig
from learner.model import build_model
from learner.ppo import PPOUpdater
from protocol.spaces import SpaceSpec


def one_update_s(channels_last: bool, repeats: int) -> float:
    torch.manual_seed(0)
    model = build_model(SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8"), SpaceSpec(kind="discrete", n=4),
                        ModelConfig())
    if not channels_last:  # the old layout: NCHW weights and inputs
        model.to(memory_format=torch.contiguous_format)
        model.forward = _nchw_forward(model)
    n = 1024
    batch = {"obs": torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8), "actions": torch.randint(0, 4, (n,)),
             "logprobs": torch.full((n,), -1.386), "values": torch.zeros(n), "advantages": torch.randn(n),
             "returns": torch.randn(n)}
    updater = PPOUpdater(model, PPOConfig(), "cpu")
    gen = torch.Generator().manual_seed(0)
    updater.update(batch, 0.0, gen)  # warm-up: oneDNN picks its kernels
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        updater.update(batch, 0.0, gen)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _nchw_forward(model):
    def forward(obs):
        hidden = model.trunk(obs.float() * model.scale)
        return model.head(hidden), model.critic(hidden).squeeze(-1)
    return forward


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2, help="timed updates per variant and round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, the cores)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ratios = []
    for r in range(args.rounds):
        nchw, nhwc = one_update_s(False, args.repeats), one_update_s(True, args.repeats)
        ratios.append(nchw / nhwc)
        print(f"round {r + 1}: NCHW {nchw:.2f} s, channels-last {nhwc:.2f} s per update, ratio {nchw / nhwc:.2f}")
    print(f"median NCHW / channels-last over {args.rounds} rounds ({torch.get_num_threads()} threads): "
          f"{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
