"""Policy lag against the synchronous learner (issue 12, item 2): the same run twice, side by side.

    python benchmarks/lag_vs_sync.py                              # Breakout, 200,704 steps each, seed 1
    python benchmarks/lag_vs_sync.py --total-steps 50176 --rounds 2
    python benchmarks/lag_vs_sync.py --config configs/cartpole.toml --total-steps 100000 --bin 10000

Each round runs `python launch.py` with `run.policy_lag=0` and then with `run.policy_lag=1` (same config,
seed and steps), one after the other on the same cores. Printed: the wall time of each run, and the mean
game return per bin of env steps (from each run's episodes.jsonl), so the learning curves can be read
side by side. Figures go to docs/results/lag-vs-sync-<hostname>.json (--out).
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"synchronous": 0, "policy_lag=1": 1}


def run(config: str, steps: int, seed: int, lag: int, run_dir: Path, timeout_s: float) -> float:
    cmd = [sys.executable, "launch.py", "--config", config, "--total-steps", str(steps), "--seed", str(seed),
           "--run-dir", str(run_dir), "--set", f"run.policy_lag={lag}", "--set", "log.progress_bar=false",
           "--set", 'cluster.address="tcp://127.0.0.1:0"', "--set", 'cluster.weights_address="tcp://127.0.0.1:0"']
    start = time.monotonic()
    with open(run_dir.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=True)
    return time.monotonic() - start


def binned_returns(run_dir: Path, width: int) -> dict[int, tuple[float, int]]:
    """bin index -> (mean game return, episodes) of the episodes that ended in that bin of env steps."""
    bins: dict[int, list[float]] = {}
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            bins.setdefault(row["env_steps"] // width, []).append(row["return"])
    return {b: (statistics.mean(v), len(v)) for b, v in sorted(bins.items())}


def table(curves: dict[str, dict[int, tuple[float, int]]], width: int) -> str:
    names = list(curves)
    lines = ["| env steps | " + " | ".join(f"{n}: mean return (episodes)" for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for b in sorted(set().union(*curves.values())):
        cells = [f"{curves[n][b][0]:.2f} ({curves[n][b][1]})" if b in curves[n] else "-" for n in names]
        lines.append(f"| {b * width // 1000}k-{(b + 1) * width // 1000}k | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/breakout.toml")
    p.add_argument("--total-steps", type=int, default=200_704)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds; the curves are the first round's")
    p.add_argument("--bin", type=int, default=25_000, help="env steps per row of the curve table")
    p.add_argument("--timeout-s", type=float, default=3600, help="per run")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ppo-lag-vs-sync-"))
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        for name, lag in VARIANTS.items():
            run_dir = tmp / f"r{r}-lag{lag}"
            walls[name].append(run(args.config, args.total_steps, args.seed, lag, run_dir, args.timeout_s))
            print(f"round {r + 1}: {name} {walls[name][-1]:.0f} s", flush=True)
    curves = {name: binned_returns(tmp / f"r0-lag{lag}", args.bin) for name, lag in VARIANTS.items()}
    ratio = statistics.median(s / l for s, l in zip(walls["synchronous"], walls["policy_lag=1"]))
    print(f"\nwall time, median of {args.rounds} round(s): synchronous {statistics.median(walls['synchronous']):.0f} s, "
          f"policy_lag=1 {statistics.median(walls['policy_lag=1']):.0f} s; synchronous / policy_lag=1 {ratio:.2f}\n")
    print(table(curves, args.bin))
    out = Path(args.out) if args.out else REPO / "docs" / "results" / f"lag-vs-sync-{socket.gethostname()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "wall_s": walls, "sync_over_lag": ratio,
                               "curves": {n: {str(b * args.bin): v for b, v in c.items()} for n, c in curves.items()},
                               "runs": str(tmp)}, indent=2) + "\n")
    print(f"\nfigures in {out}; run directories in {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
