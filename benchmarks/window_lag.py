"""How far the 100-game window trails the policy: for each seed of published multi-seed entries, the first agent
step at which the mean of the last N games holds the target, for N = 20, 50 and 100, and where that 100-game
window began (issue 59: the target is the last 100 games' mean at a step mark).

    python benchmarks/window_lag.py docs/results/2026-11-30-2core-cpu-pong-fast-e32-h2m-entconst-seeds1-5-avx2 \
        --target 20 --mark 900000

Reads each seed's episodes.jsonl.gz (every game: `env_steps` when it ended, `return`); the medians count a seed
that never held the target as later than every seed that did (learning_spread.py's rule). A window of N games
at a step is the last N games ended at or before it, as the learner's 100-game window is.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # learning_spread.py, a sibling module
from learning_spread import median_with_misses  # noqa: E402

WINDOWS = (20, 50, 100)


def first_held(steps: np.ndarray, returns: np.ndarray, games: int, target: float) -> tuple[int, int] | None:
    """(the step of the game that first makes the last `games` games' mean >= target, the step the window's
    first game ended at), or None when no such window exists."""
    if len(returns) < games:
        return None
    sums = np.convolve(returns, np.ones(games), mode="valid")  # sums[i]: games i .. i + games - 1
    held = np.flatnonzero(sums >= target * games - 1e-9)
    if not len(held):
        return None
    i = int(held[0])
    return int(steps[i + games - 1]), int(steps[i])


def seed_games(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(path, "rt") as f:
        games = [json.loads(line) for line in f if line.strip()]
    return (np.array([g["env_steps"] for g in games], np.int64), np.array([g["return"] for g in games], np.float64))


def seed_of(path: Path) -> int:
    """The seed number in `seed<S>-episodes.jsonl.gz`."""
    return int(re.match(r"seed(\d+)-", path.name).group(1))


def entry_rows(entry: Path, target: float) -> list[dict]:
    rows = []
    for path in sorted(entry.glob("seed*-episodes.jsonl.gz"), key=seed_of):
        steps, returns = seed_games(path)
        row = {"seed": seed_of(path)}
        for n in WINDOWS:
            hit = first_held(steps, returns, n, target)
            row[n] = hit[0] if hit else None
            if n == WINDOWS[-1]:
                row["window_from"] = hit[1] if hit else None
        rows.append(row)
    return rows


def table(entry: Path, target: float, mark: int) -> str:
    rows = entry_rows(entry, target)
    fmt = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    head = " | ".join(f"{n} games" for n in WINDOWS)
    lines = [f"`{entry.name}`: the first agent step at which the last N games' mean holds {target:g}", "",
             f"| seed | {head} | the 100 games from |", "|---:|" + "---:|" * (len(WINDOWS) + 1)]
    for r in rows:
        lines.append(f"| {r['seed']} | " + " | ".join(fmt(r[n]) for n in WINDOWS) + f" | {fmt(r['window_from'])} |")
    medians = [median_with_misses([r[n] for r in rows], len(rows)) for n in WINDOWS]
    lines.append("| median | " + " | ".join(fmt(m) for m in medians) + " | |")
    by_mark = [sum(r[n] is not None and r[n] <= mark for r in rows) for n in WINDOWS]
    lines.append(f"| by {mark:,} | " + " | ".join(f"{k} of {len(rows)}" for k in by_mark) + " | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("entries", nargs="+", type=Path, help="docs/results entries written by learning_seeds.py")
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--mark", type=int, default=900_000, help="count the seeds each window holds by (default 900k)")
    args = p.parse_args(argv)
    for entry in args.entries:
        if not any(entry.glob("seed*-episodes.jsonl.gz")):
            p.error(f"{entry}: no seed*-episodes.jsonl.gz (an entry of benchmarks/learning_seeds.py?)")
        print(table(entry, args.target, args.mark), end="\n\n")


if __name__ == "__main__":
    main()
