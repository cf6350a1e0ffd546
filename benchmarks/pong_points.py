"""Point by point through a Pong checkpoint's games: where a stalled seed's lost games come from (issue 59).

    python benchmarks/pong_points.py runs/seeds/NAME/seed2/checkpoints/ckpt_00000150.pt --games 20 --seed 1
    python benchmarks/pong_points.py CKPT --games 20 --seed 1 --freeze-score   # the score shown as at 0-0
    python benchmarks/pong_points.py CKPT --games 12 --seed 1 --lost-points     # each lost point of a bad game
    python benchmarks/pong_points.py CKPT --games 20 --seed 1 --score-of-point 11   # the score shown as at 10-0

Plays whole games with sampled actions (as in training, on one torch thread) and prints each game's points in
order (+ won, - lost), then the share of points lost by the opponent's score at the time, and by the point's
number in its game. A policy that fails at random loses about as often at every score; one whose bad games are a
mode it stays in loses far more once the opponent has a few points, because only the bad games get there. One
that loses a state every game has once loses that point's number: a seed held at 19.5 lost the game's first
point, the opening serve, in 24 of 28 games and 0-2% of every later one (issue 59, 2026-12-01). The last tally
splits the points by their serve: Pong serves toward the side that won the last point and opens toward the
opponent, so only the opening and the points after a lost one start with the opponent returning a serve (its
opening return is one fixed trajectory: no sticky actions, and the agent cannot touch the ball before it).

--freeze-score pastes the first frame's score rows (0-0) over every observation before the network sees it,
to tell a mode the game's states put the policy in from one the score digits do (per-pixel input normalization
turns a rarely seen digit into saturated inputs). --score-of-point 11 shows the score of a later point (10-0 in a
won game) instead, the opening serve included: whether the 0-0 digits are what loses the opening.
--lost-points prints, for each point lost in a game under 10, the last 8 agent steps' paddle and ball (from the
console's RAM) and the actions of the last 40 steps: the same rows point after point are a deterministic loop
(no sticky actions) that the policy keeps losing.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as `python benchmarks/pong_points.py`

from actor.envs import make_env  # noqa: E402
from learner.evaluation.evaluate import load_policy, one_torch_thread  # noqa: E402

SCORE_ROWS = 9  # rows 0-8 of the 84 x 84 frame hold the score digits; the white border starts at row 9
RAM = {"paddle": 51, "ball y": 54, "ball x": 49}  # Pong's RAM: the agent's paddle, the ball (AtariARI's map)
BAD_GAME = 10  # --lost-points: games that end under this many points


def points_of(sequence: str) -> list[tuple[int, bool]]:
    """A game's points in order ("+" won, "-" lost) as (the opponent's score when it was played, won)."""
    return [(sequence[:i].count("-"), point == "+") for i, point in enumerate(sequence)]


def lose_rates_by_number(sequences: list[str], top: int = 3) -> dict[str, tuple[int, int]]:
    """(lost, played) by the point's number in its game (1 is the opening serve); `top` and later pooled."""
    return _tally(((i, point == "+") for sequence in sequences for i, point in enumerate(sequence, start=1)), top)


SERVES = ("the opening", "after a lost point", "after a won point")


def lose_rates_by_serve(sequences: list[str]) -> dict[str, tuple[int, int]]:
    """(lost, played) by the point's serve. Pong serves toward the side that won the last point and opens toward
    the opponent, so the opening and every point after a lost one begin with the opponent's return of a serve,
    the rest with the agent's; a good agent sees the first kind once a game."""
    rates = {serve: [0, 0] for serve in SERVES}
    for sequence in sequences:
        for i, point in enumerate(sequence):
            serve = SERVES[0] if i == 0 else SERVES[1] if sequence[i - 1] == "-" else SERVES[2]
            rates[serve][0] += point == "-"
            rates[serve][1] += 1
    return {serve: (lost, played) for serve, (lost, played) in rates.items() if played}


def lose_rates(points: list[tuple[int, bool]], top: int = 6) -> dict[str, tuple[int, int]]:
    """(lost, played) by the opponent's score when the point was played; `top` and above pooled as "top+"."""
    return _tally(points, top)


def _tally(points, top: int) -> dict[str, tuple[int, int]]:
    """(lost, played) per key of (key, won) points, in the keys' order; keys from `top` on pooled as "top+"."""
    rates: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
    for key, won in points:
        rates[min(key, top)][0] += not won
        rates[min(key, top)][1] += 1
    return {(str(k) if k < top else f"{top}+"): (v[0], v[1]) for k, v in sorted(rates.items())}


def play(ckpt: Path, games: int, seed: int, score_of_point: int, lost_points: bool) -> list[str]:
    """Play `games` games; print each one's points and return each game's points in order ("+" won, "-" lost).
    score_of_point N > 0: the score rows of the first game's N-th point (its first frame) are shown over every
    frame from then on; for N > 1 that first game is a warm-up, not counted."""
    policy = load_policy(ckpt)
    env = make_env(policy.cfg.env, seed)
    ram = env.unwrapped.ale.getRAM
    generator = torch.Generator().manual_seed(seed)
    sequences: list[str] = []
    recent: collections.deque = collections.deque(maxlen=40)
    obs, _ = env.reset(seed=seed)
    shown_rows, warm_up = None, score_of_point > 1
    game, sequence, losses = 0, "", []
    while game < games:
        x = torch.as_tensor(np.asarray(obs))[None]
        if score_of_point and shown_rows is None and len(sequence) == score_of_point - 1:
            shown_rows = x[0, -1:, :SCORE_ROWS].clone()  # the newest frame's rows, in every frame of the stack
        if shown_rows is not None:
            x = x.clone()
            x[0, :, :SCORE_ROWS] = shown_rows
        action = int(policy.model.act(x, generator=generator)[0][0])
        state = ram()
        recent.append((action, *(int(state[i]) for i in RAM.values())))
        obs, reward, terminated, truncated, info = env.step(action)
        if reward:
            sequence += "+" if reward > 0 else "-"
            if reward < 0 and lost_points:
                losses.append(lost_point_line(sequence, recent))
        if "episode" in info:
            if warm_up:
                print(f"warm-up game, its point {score_of_point}'s score rows kept: {sequence}", flush=True)
                warm_up = False
            else:
                game += 1
                print(f"game {game}: {info['episode']['r']:+g} {sequence}", flush=True)
                sequences.append(sequence)
                if info["episode"]["r"] < BAD_GAME:
                    print("\n".join(losses))
            sequence, losses = "", []
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return sequences


def lost_point_line(sequence: str, recent: collections.deque) -> str:
    columns = list(zip(*recent))
    where = ", ".join(f"{name} {list(columns[i + 1][-8:])}" for i, name in enumerate(RAM))
    actions = dict(sorted(collections.Counter(columns[0]).items()))
    return f"  lost at {sequence.count('+')}-{sequence.count('-')}: {where}; actions {actions}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="a Pong checkpoint (.pt) of a run")
    p.add_argument("--games", type=int, default=20)
    p.add_argument("--seed", type=int, default=1, help="env and action-sampling seed")
    p.add_argument("--freeze-score", action="store_true", help="show the network the score as at 0-0 "
                   "(--score-of-point 1)")
    p.add_argument("--score-of-point", type=int, default=0, metavar="N",
                   help="show the network the score as at the first game's N-th point (1-21), over every frame "
                        "from then on; for N > 1 that game is a warm-up, not counted")
    p.add_argument("--lost-points", action="store_true", help="print each lost point of a game under 10")
    args = p.parse_args(argv)
    if args.games < 1:
        p.error("--games must be >= 1")
    if not 0 <= args.score_of_point <= 21:
        p.error(f"--score-of-point must be 1-21 (a game's first 21 points), not {args.score_of_point}")
    score_of_point = 1 if args.freeze_score else args.score_of_point
    with torch.no_grad(), one_torch_thread():
        sequences = play(args.checkpoint, args.games, args.seed, score_of_point, args.lost_points)
    points = [point for sequence in sequences for point in points_of(sequence)]
    print("points lost by the opponent's score: " + shares(lose_rates(points)))
    print("points lost by their number in the game (1: the opening serve): " + shares(lose_rates_by_number(sequences)))
    print("points lost by their serve: " + shares(lose_rates_by_serve(sequences)))
    return 0


def shares(rates: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{k}: {lost}/{played} ({lost / played:.0%})" for k, (lost, played) in rates.items())


if __name__ == "__main__":
    raise SystemExit(main())
