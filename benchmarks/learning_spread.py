"""The spread of a recipe over seeds, from each seed's metrics rows: what benchmarks/learning_seeds.py publishes.

Every seed run counts. Steps to the target: the first update whose 100-game window is full and whose mean is
>= the target (benchmarks/learning.py's rule). Their median is taken over every seed run, a seed that did not
reach the target counting as later than every seed that did; it exists only when more than half reached it.
At each step mark, a seed's return is its last window at or before the mark; a seed that stopped at the target
before the mark counts with its last window, one that stopped short of the mark otherwise is left out (n says
how many seeds a mark holds).

The tail of the seed's last games (`last_games`): the window's mean can stand a point or two under the target
because most games fall a little short, or because a few games are lost badly (issue 59: Pong seeds that stall
at 19.4-19.9 lose 5-9% of their games by 6 points or more, while the seeds that reach 20 lose 1-2%). The mean of
the last LAST_GAMES games without their worst tenth tells the two apart: at or above the target, the tail is
what holds the window down.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # learning.py, a sibling module
from learning import first_hit  # noqa: E402

LAST_GAMES = 100  # the games the tail is read from: the last window's


def return_at(rows: list[dict], mark: int, stopped_at_target: bool) -> float | None:
    """The seed's mean return at agent step `mark` (None: no window yet, or the run ended before the mark)."""
    held = [r for r in rows if r.get("episode_return_mean") is not None]
    if not held or (rows[-1]["env_steps"] < mark and not stopped_at_target):
        return None
    before = [r for r in held if r["env_steps"] <= mark]
    return before[-1]["episode_return_mean"] if before else None


def median_with_misses(values: list[float | None], runs: int) -> float | None:
    """The median over `runs` seeds, each None (or a seed not listed) later than every value: None if it is one."""
    ordered = sorted(v for v in values if v is not None) + [math.inf] * (runs - sum(v is not None for v in values))
    if not ordered:
        return None
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return None if math.isinf(median) else median


def spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "q25": None, "q75": None}
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return {"n": len(values), "median": float(median), "min": min(values), "max": max(values),
            "q25": float(q25), "q75": float(q75)}


def last_games(returns: list[float]) -> dict | None:
    """The last LAST_GAMES games' mean, their mean without the worst tenth (at least one game dropped when there
    are two or more), and the worst (None: no game finished)."""
    last = sorted(returns[-LAST_GAMES:])
    if not last:
        return None
    kept = last[max(len(last) // 10, 1):] if len(last) > 1 else last
    return {"n": len(last), "mean": float(np.mean(last)), "mean_without_worst_tenth": float(np.mean(kept)),
            "worst": float(last[0])}


def seed_summary(seed: int, rows: list[dict], target: float, marks: list[int],
                 games: list[float] | None = None) -> dict:
    """`games`: every finished game's return in order (episodes.jsonl), for the tail of the last ones."""
    hit = first_hit(rows, target)
    last = rows[-1]
    means = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None]
    return {"seed": seed, "reached": hit is not None,
            "steps_to_target": hit and hit["env_steps"], "wall_s_to_target": hit and hit["elapsed_s"],
            "final_steps": last["env_steps"], "final_wall_s": last["elapsed_s"],
            "final_return": means[-1] if means else None, "best_return": max(means, default=None),
            "return_at": {str(m): return_at(rows, m, hit is not None) for m in marks},
            "last_games": last_games(games) if games is not None else None}


def aggregate(records: dict[int, list[dict]], target: float, marks: list[int], runs: int | None = None,
              games: dict[int, list[float]] | None = None) -> dict:
    """The seeds' summaries and their spread. `runs`: the seeds asked for (default: those in `records`);
    `games`: each seed's game returns in order, where known."""
    runs = len(records) if runs is None else runs
    games = games or {}
    seeds = [seed_summary(s, rows, target, marks, games.get(s)) for s, rows in sorted(records.items())]
    steps = [s["steps_to_target"] for s in seeds if s["reached"]]
    walls = [s["wall_s_to_target"] for s in seeds if s["reached"]]
    return {
        "target": target, "runs": runs, "logged": len(seeds), "reached": len(steps), "marks": marks,
        "steps_to_target": {"median": median_with_misses(steps, runs), "min": min(steps, default=None),
                            "max": max(steps, default=None)},
        "wall_s_to_target": {"median": median_with_misses(walls, runs), "min": min(walls, default=None),
                             "max": max(walls, default=None)},
        "return_at": {str(m): spread([v for s in seeds if (v := s["return_at"][str(m)]) is not None])
                      for m in marks},
        "seeds": seeds,
    }


def _num(x, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown_table(agg: dict) -> str:
    """Two tables: one row per seed, then the spread at each mark."""
    head = [f"**{agg['reached']} of {agg['runs']} seeds reached {agg['target']:g}**; median agent steps to it "
            f"{_num(agg['steps_to_target']['median'])} (range {_num(agg['steps_to_target']['min'])}-"
            f"{_num(agg['steps_to_target']['max'])}), median training time "
            f"{_num(agg['wall_s_to_target']['median'], '{:,.0f} s')}.", "",
            "| seed | reached | agent steps to target | minutes to target | last return | best return | steps run "
            f"| last {LAST_GAMES} games: mean without the worst tenth / worst |",
            "|---|---|---|---|---|---|---|---|"]
    for s in agg["seeds"]:
        wall = s["wall_s_to_target"] and s["wall_s_to_target"] / 60
        tail = s.get("last_games")
        head.append(f"| {s['seed']} | {'yes' if s['reached'] else 'no'} | {_num(s['steps_to_target'])} | "
                    f"{_num(wall, '{:.1f}')} | {_num(s['final_return'], '{:.2f}')} | "
                    f"{_num(s['best_return'], '{:.2f}')} | {_num(s['final_steps'])} | "
                    f"{_num(tail and tail['mean_without_worst_tenth'], '{:.2f}')} / {_num(tail and tail['worst'], '{:g}')} |")
    head += ["", "| agent steps | seeds | median return | range | IQR |", "|---|---|---|---|---|"]
    for mark, sp in agg["return_at"].items():
        f = "{:.2f}"
        head.append(f"| {int(mark):,} | {sp['n']} | {_num(sp['median'], f)} | {_num(sp['min'], f)} to "
                    f"{_num(sp['max'], f)} | {_num(sp['q25'], f)} to {_num(sp['q75'], f)} |")
    return "\n".join(head)
