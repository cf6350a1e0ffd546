"""The learner's compute on CPU, variant against variant, interleaved, with the median ratio (issue 12, item 4).

    python benchmarks/update_cost.py                        # layout: NCHW vs channels-last (the model's layout)
    python benchmarks/update_cost.py --compare compile      # eager vs torch.compile(model): compile time, per update
    python benchmarks/update_cost.py --compare gathers      # minibatch gathers: per minibatch vs once per epoch
    python benchmarks/update_cost.py --compare act          # acting under torch.no_grad vs torch.inference_mode
    python benchmarks/update_cost.py --rounds 5 --threads 1
    python benchmarks/update_cost.py --compare trees --base /tmp/base   # pong-fast's update: a checkout vs this tree
    python benchmarks/update_cost.py --compare trees --base /tmp/base --acting   # its inference batch of 24
    python benchmarks/update_cost.py --compare precision    # pong-fast's update: fp32 vs ppo.update_precision bf16
    python benchmarks/update_cost.py --compare adam         # pong-fast's Adam step: foreach vs fused
    python benchmarks/update_cost.py --compare activation   # pong-fast's update: ELU vs ReLU
    python benchmarks/update_cost.py --compare activation-acting   # its inference batch of 24: ELU vs ReLU
    python benchmarks/update_cost.py --compare recipe --candidate ppo.update_epochs=4,ppo.num_minibatches=4
        # pong-fast's update per sample, the file against a candidate, each on its own rollout (issue 59: at most 2x)

One update is CleanRL's Atari recipe: 1,024 samples of 4 x 84 x 84 frames, 4 epochs x 4 minibatches. Every
variant computes the same function; only how it runs differs. A ratio above 1 means the second variant is
faster. The pong-fast modes (issue 41) run configs/pong-fast.toml's update instead, with rl_games' 4 epochs x
4 minibatches of 2,048 (RL_GAMES_UPDATE) that its figures were measured on: 8,192 samples, ELU, input and value
normalization, the file's rate schedule (KL-adaptive until 2026-11-30, linear since).
`trees` runs each variant in a
child process with PYTHONPATH set to a checkout (--base, e.g. `git worktree add /tmp/base c3c58f9`) or to this
tree, so "before" is that commit's own code; bf16 changes the arithmetic, fp32 does not. With --acting, `trees`
times pong-fast's acting pass instead: one inference batch of 24 stacks, about what the policy serves per batch
on 2 cores (2 actors x 32 envs in 2 groups). This tree's rows tune
glibc's heap as the learner does (learner/update/heap.py); one bf16 row keeps glibc's default, to show its part.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from learner.config import Config, ModelConfig, PPOConfig, load
from learner.model.normalize import ValueNormalizer
from learner.model.networks import build_model
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

N = 1024
ROOT = Path(__file__).resolve().parent.parent
PONG_FAST = ROOT / "configs" / "pong-fast.toml"
RL_GAMES_UPDATE = ["ppo.update_epochs=4", "ppo.num_minibatches=4"]
"""The update issue 41 measured and its figures hold: rl_games' 4 epochs x 4 minibatches of 2,048 (pong-fast.toml
now runs 2 x 8 of 1,024 on the CPU, half the work)."""
PONG_N = 8192
ACT_BATCH = 24  # env slots per inference batch, pong-fast on 2 cores as it stood to 2026-12-01 (2 x 32 envs, 2 groups)
OBS = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
ACTIONS = SpaceSpec(kind="discrete", n=4)


def new_model(channels_last: bool = True):
    torch.manual_seed(0)
    model = build_model(OBS, ACTIONS, ModelConfig())
    if not channels_last:  # the old layout: NCHW weights and inputs
        model.to(memory_format=torch.contiguous_format)
        model.forward = _nchw_forward(model)
    return model


def _nchw_forward(model):
    def forward(obs):
        hidden = model.encoder.trunk(obs.float() * model.encoder.scale)
        return model.head(hidden), model.critic(hidden).squeeze(-1)
    return forward


def new_batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.randint(0, 255, (N, 4, 84, 84), dtype=torch.uint8, generator=g),
            "actions": torch.randint(0, 4, (N,), generator=g), "logprobs": torch.full((N,), -1.386),
            "values": torch.zeros(N), "advantages": torch.randn(N, generator=g), "returns": torch.randn(N, generator=g)}


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def update_s(model, repeats: int) -> tuple[float, float]:
    """(seconds of the first update, which includes any warm-up or compilation; median seconds per update after)."""
    batch, updater, gen = new_batch(), PPOUpdater(model, PPOConfig(), "cpu"), torch.Generator().manual_seed(0)
    first = median_time(lambda: updater.update(batch, 0.0, gen), 1)
    return first, median_time(lambda: updater.update(batch, 0.0, gen), repeats)


def compare_layout(repeats: int) -> tuple[float, float]:
    return update_s(new_model(channels_last=False), repeats)[1], update_s(new_model(), repeats)[1]


def compare_compile(repeats: int) -> tuple[float, float]:
    eager_first, eager = update_s(new_model(), repeats)
    torch._dynamo.reset()  # every round compiles from scratch, as a fresh run would
    torch._inductor.config.fx_graph_cache = False  # (nor from the on-disk cache of an earlier round)
    compiled = new_model()
    compiled.compile()
    first, per_update = update_s(compiled, repeats)
    print(f"  compile: first update {first:.1f} s (eager's first {eager_first:.1f} s), so about "
          f"{first - per_update:.1f} s of compilation; pays back after {_payback(first - per_update, eager, per_update)}")
    return eager, per_update


def _payback(cost: float, before: float, after: float) -> str:
    return f"{cost / (before - after):.0f} updates" if after < before else "never (no faster per update)"


def compare_gathers(repeats: int) -> tuple[float, float]:
    """The update's data movement alone: 4 epochs of 4 minibatch gathers of every key, or one gather of the
    whole batch per epoch and contiguous slices (the same minibatches, the same bytes copied)."""
    batch, gen = new_batch(), torch.Generator().manual_seed(0)

    def per_minibatch():
        for _ in range(4):
            for idx in torch.tensor_split(torch.randperm(N, generator=gen), 4):
                [v[idx] for v in batch.values()]

    def per_epoch():
        for _ in range(4):
            shuffled = [v[torch.randperm(N, generator=gen)] for v in batch.values()]
            for i in range(4):
                [v[i * N // 4:(i + 1) * N // 4] for v in shuffled]
    a, b = median_time(per_minibatch, repeats), median_time(per_epoch, repeats)
    update = update_s(new_model(), 1)[1]
    print(f"  gathers: {1000 * a:.1f} ms per update per minibatch, {1000 * b:.1f} ms once per epoch; "
          f"an update takes {1000 * update:.0f} ms")
    return a, b


def compare_act(repeats: int) -> tuple[float, float]:
    """One inference batch for 8 envs (the default 2 actors x 4 envs), as the policy serves it, 50 times."""
    model, g = new_model(), torch.Generator().manual_seed(0)
    model.eval()
    obs = torch.randint(0, 255, (8, 4, 84, 84), dtype=torch.uint8)

    def serve(mode):
        def run():
            for _ in range(50):
                with mode():
                    action, _, _ = model.act(obs, generator=g)
                    action.numpy()
        return run
    serve(torch.no_grad)()  # warm-up: oneDNN picks its kernels
    return median_time(serve(torch.no_grad), repeats) / 50, median_time(serve(torch.inference_mode), repeats) / 50


def pong_fast_update_s(overrides: list[str], repeats: int, config: Path = PONG_FAST, n: int = PONG_N,
                       heap: bool = False) -> float:
    """Median seconds of pong-fast's update (rl_games' 4 x 4, with the given --set overrides) of n samples after
    one warm-up update, on random frames whose input statistics the network has taken in. heap: glibc's
    allocator tuned and released after each update, as the learner does (learner/update/heap.py; this process
    for good)."""
    cfg = load(config, RL_GAMES_UPDATE + overrides)
    return _update_s(cfg, n, repeats, heap)


def recipe_s_per_sample(overrides: list[str], repeats: int) -> float:
    """Seconds per sample of pong-fast's update as the file (with the --set overrides) sets it: its own rollout
    (cluster.envs x ppo.num_steps samples), epochs and minibatches, glibc's heap tuned as the learner tunes it.
    A candidate with half the envs updates twice as often on half the samples: per sample is what compares."""
    cfg = load(PONG_FAST, overrides)
    n = cfg.cluster.envs * cfg.ppo.num_steps
    return _update_s(cfg, n, repeats, heap=True) / n


def _update_s(cfg: Config, n: int, repeats: int, heap: bool) -> float:
    torch.manual_seed(0)
    model = build_model(OBS, SpaceSpec(kind="discrete", n=6), cfg.model)
    g = torch.Generator().manual_seed(0)
    batch = {"obs": torch.randint(0, 255, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
             "actions": torch.randint(0, 6, (n,), generator=g), "logprobs": torch.full((n,), -1.792),
             "values": torch.randn(n, generator=g), "advantages": torch.randn(n, generator=g),
             "returns": torch.randn(n, generator=g)}
    model.observe(batch["obs"])
    updater = PPOUpdater(model, cfg.ppo, "cpu", value_norm=ValueNormalizer())
    release = lambda: None  # noqa: E731
    if heap:
        from learner.update.heap import UpdateHeap  # not in the checkouts before it
        release = UpdateHeap.for_update_on(torch.device("cpu")).release

    def update():
        updater.update(batch, 0.0, g)
        release()
    update()
    return median_time(update, repeats)


def pong_fast_act_s(repeats: int, config: Path = PONG_FAST, batch: int = ACT_BATCH,
                    overrides: tuple[str, ...] = ()) -> float:
    """Median seconds of one acting pass (model.act: actions, log-probs, values) of pong-fast's model (the
    config's, with the given --set overrides) over `batch` stacks, the network's input statistics taken in;
    50 passes per timing."""
    cfg = load(config, list(overrides))
    torch.manual_seed(0)
    model = build_model(OBS, SpaceSpec(kind="discrete", n=6), cfg.model)
    g = torch.Generator().manual_seed(0)
    model.observe(torch.randint(0, 255, (512, 4, 84, 84), dtype=torch.uint8, generator=g))
    model.eval()
    obs = torch.randint(0, 255, (batch, 4, 84, 84), dtype=torch.uint8, generator=g)

    def serve():
        for _ in range(50):
            action, _, _ = model.act(obs, generator=g)
            action.numpy()
    serve()  # warm-up: oneDNN picks its kernels
    return median_time(serve, repeats) / 50


def _child(tree: Path, overrides: list[str], repeats: int, threads: int, heap: bool = False,
           acting: bool = False) -> float:
    """pong_fast_update_s (or pong_fast_act_s) in a fresh process importing the learner from `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, __file__, "--child", json.dumps(overrides), "--repeats", str(repeats),
           "--threads", str(threads)] + (["--heap"] if heap else []) + (["--acting"] if acting else [])
    out = subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def trees_variants(base: Path, threads: int, acting: bool) -> list[tuple[str, Callable[[int], float]]]:
    if acting:
        return [(f"base {base.name}", lambda r: _child(base, [], r, threads, acting=True)),
                ("this tree", lambda r: _child(ROOT, [], r, threads, acting=True))]
    bf16 = ["ppo.update_precision=bf16"]
    return [(f"base {base.name} fp32", lambda r: _child(base, [], r, threads)),
            ("this tree fp32", lambda r: _child(ROOT, ["ppo.update_precision=fp32"], r, threads, heap=True)),
            ("this tree bf16, glibc's default heap", lambda r: _child(ROOT, bf16, r, threads)),
            ("this tree bf16", lambda r: _child(ROOT, bf16, r, threads, heap=True))]


def compare_precision(repeats: int) -> tuple[float, float]:
    return (pong_fast_update_s(["ppo.update_precision=fp32"], repeats),
            pong_fast_update_s(["ppo.update_precision=bf16"], repeats))


def compare_adam(repeats: int) -> tuple[float, float]:
    """16 Adam steps (one pong-fast update's) on the Nature CNN's parameters with gradients: torch's default
    (foreach) against fused=True."""
    def steps(fused: bool):
        params = [p.detach().clone().requires_grad_() for p in new_model().parameters()]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5, fused=fused or None)
        opt.step()
        return lambda: [opt.step() for _ in range(16)]
    return median_time(steps(False), repeats), median_time(steps(True), repeats)


def compare_activation(repeats: int) -> tuple[float, float]:
    """pong-fast's update with rl_games' ELU against CleanRL's ReLU: under bf16 autocast ELU's expm1 and its
    backward cost about as much as the convolutions' forward passes. glibc's heap tuned as the learner tunes it
    (with the default heap the page faults of fresh buffers hide the difference)."""
    return (pong_fast_update_s(["model.activation=elu"], repeats, heap=True),
            pong_fast_update_s(["model.activation=relu"], repeats, heap=True))


def compare_activation_acting(repeats: int) -> tuple[float, float]:
    """pong-fast's acting pass over an inference batch of 24 (one thread, as the collector serves it): ELU
    against ReLU."""
    torch.set_num_threads(1)
    return (pong_fast_act_s(repeats, overrides=("model.activation=elu",)),
            pong_fast_act_s(repeats, overrides=("model.activation=relu",)))


def compare_recipe(candidate: list[str]) -> Callable[[int], tuple[float, float]]:
    """pong-fast's update as its file sets it against the file with `candidate`'s --set overrides, each on its
    own rollout, in seconds per 8,192 samples (the file's rollout of 64 x 128): the cost per sample."""
    return lambda repeats: (PONG_N * recipe_s_per_sample([], repeats),
                            PONG_N * recipe_s_per_sample(candidate, repeats))


COMPARISONS = {"layout": (compare_layout, "NCHW", "channels-last", "s per update"),
               "compile": (compare_compile, "eager", "torch.compile", "s per update after the first"),
               "gathers": (compare_gathers, "per minibatch", "per epoch", "s of gathers per update"),
               "act": (compare_act, "no_grad", "inference_mode", "s per inference batch of 8"),
               "precision": (compare_precision, "fp32", "bf16", "s per pong-fast update"),
               "adam": (compare_adam, "foreach", "fused", "s per 16 Adam steps"),
               "activation": (compare_activation, "ELU", "ReLU", "s per pong-fast update"),
               "activation-acting": (compare_activation_acting, "ELU", "ReLU", "s per inference batch of 24")}


def run_trees(base: Path, rounds: int, repeats: int, threads: int, acting: bool) -> None:
    """Every variant once per round, in turn; each variant's ratio to the first, median and spread."""
    variants = trees_variants(base, threads, acting)
    unit = "ms per inference batch of %d" % ACT_BATCH if acting else "s per update"
    scale = 1000 if acting else 1
    times: dict[str, list[float]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        for name, run in variants:
            times[name].append(run(repeats))
        print(f"round {r + 1}: " + ", ".join(f"{name} {scale * t[-1]:.2f}" for name, t in times.items()) + f" {unit}",
              flush=True)
    first = times[variants[0][0]]
    for name, t in times.items():
        ratios = [a / b for a, b in zip(first, t)]
        print(f"{name}: median {scale * statistics.median(t):.2f} {unit} (min {scale * min(t):.2f}, "
              f"max {scale * max(t):.2f}); "
              f"speedup over {variants[0][0]}: median {statistics.median(ratios):.2f} "
              f"(rounds {', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compare", choices=sorted(COMPARISONS) + ["trees", "recipe"], default="layout")
    p.add_argument("--base", type=Path, help="trees: the checkout to compare this tree against")
    p.add_argument("--child", help=argparse.SUPPRESS)  # trees: one measurement, --set overrides as JSON
    p.add_argument("--heap", action="store_true", help=argparse.SUPPRESS)  # trees: the child tunes the heap
    p.add_argument("--acting", action="store_true", help="trees: time an inference batch, not the update")
    p.add_argument("--candidate", default="", help="recipe: the candidate's changes to configs/pong-fast.toml, "
                   "KEY=VALUE,KEY=VALUE")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2, help="timed runs per variant and round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, the cores)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child is not None and args.acting:
        print(pong_fast_act_s(args.repeats, Path.cwd() / "configs" / "pong-fast.toml"))
        return
    if args.child is not None:
        print(pong_fast_update_s(json.loads(args.child), args.repeats, Path.cwd() / "configs" / "pong-fast.toml",
                                 heap=args.heap))
        return
    if args.compare == "trees":
        if args.base is None:
            p.error("--compare trees needs --base CHECKOUT")
        run_trees(args.base.resolve(), args.rounds, args.repeats, args.threads, args.acting)
        return
    if args.compare == "recipe":
        if not args.candidate:
            p.error("--compare recipe needs --candidate KEY=VALUE[,KEY=VALUE]")
        run, name_a, name_b, unit = (compare_recipe(args.candidate.split(",")), "pong-fast.toml",
                                     f"with {args.candidate}", "s per 8,192 samples")
    else:
        run, name_a, name_b, unit = COMPARISONS[args.compare]
    ratios = []
    for r in range(args.rounds):
        a, b = run(args.repeats)
        ratios.append(a / b)
        print(f"round {r + 1}: {name_a} {a:.4g}, {name_b} {b:.4g} {unit}, ratio {a / b:.2f}", flush=True)
    print(f"median {name_a} / {name_b} over {args.rounds} rounds ({torch.get_num_threads()} threads): "
          f"{statistics.median(ratios):.2f}")
    if args.compare == "recipe":
        print(f"the candidate's update cost per sample: {1 / statistics.median(ratios):.2f}x the file's")


if __name__ == "__main__":
    main()
