"""Training curves from metrics.jsonl: one panel per quantity, against env steps, one line per run.

    ppo-cluster plot runs/breakout-a                      # -> runs/breakout-a/plot.png
    ppo-cluster plot runs/breakout-a runs/breakout-b -o cmp.png   # overlaid; default ./runs_plot.png
    ppo-cluster plot --group lr3e-4=runs/a,runs/b --group lr8e-4=runs/c,runs/d --smooth 5 -o seeds.png

Panels: the return against env steps and against wall time (elapsed_s: training time, continued across
resumes), steps per second, policy loss, value loss, entropy, approx KL, clip fraction, explained
variance and the learning rate. The return is the mean raw return of the last 100 training episodes
(solid) and, when the run evaluated during training, the evaluation mean (dashed, with markers).
`--smooth N` draws every curve as the mean of its last N points (steps per second: of at least 10).
`--group NAME=RUN,RUN,...` (repeatable) draws the mean of those runs with a band of +- one standard
deviation, the runs interpolated onto the env steps (or seconds) of the shortest of them. The legend has
its own panel; the title names the env (from RUN_DIR/config.toml) and the runs.
"""
from __future__ import annotations

import argparse
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPS_WINDOW = 10  # steps per second swing from update to update: never drawn rawer than this
PANELS = (  # (metrics key, panel title); the two return panels come first
    ("sps", "env steps per second (smoothed)"),
    ("policy_loss", "policy loss"),
    ("value_loss", "value loss"),
    ("entropy", "entropy"),
    ("approx_kl", "approx KL"),
    ("clip_fraction", "clip fraction"),
    ("explained_variance", "explained variance"),
    ("learning_rate", "learning rate"),
)
RETURN_STEPS, RETURN_TIME = "return vs env steps (raw, mean of last 100)", "return vs wall time"
LEGEND = "legend"


class PlotError(Exception):
    pass


@dataclass
class Run:
    name: str
    records: list[dict]
    env_id: str | None = None


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise PlotError(f"{run_dir}: no metrics.jsonl (not a run directory, or the run has not logged yet)")
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if isinstance(record, dict) and isinstance(record.get("env_steps"), (int, float)):
            records.append(record)
    if not records:
        raise PlotError(f"{path}: no metrics records yet")
    return records


def read_env_id(run_dir: Path) -> str | None:
    """The env id from RUN_DIR/config.toml (None when the file is missing or unreadable)."""
    try:
        return tomllib.loads((Path(run_dir) / "config.toml").read_text())["env"]["env_id"]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return None


def load_runs(run_dirs: list[Path]) -> list[Run]:
    dirs = [Path(d) for d in run_dirs]
    names = [d.resolve().name for d in dirs]
    if len(set(names)) < len(names):  # same folder name in different places: use the paths as given
        names = [str(d) for d in dirs]
    return [Run(name, read_metrics(d), read_env_id(d)) for d, name in zip(dirs, names)]


def parse_group(text: str) -> tuple[str, list[Path]]:
    """'NAME=RUN1,RUN2,...' -> (NAME, [RUN1, RUN2, ...])."""
    name, sep, runs = text.partition("=")
    dirs = [Path(r) for r in runs.split(",") if r.strip()]
    if not sep or not name.strip() or not dirs:
        raise PlotError(f"--group {text!r}: expected NAME=RUN_DIR,RUN_DIR,...")
    return name.strip(), dirs


def series(records: list[dict], key: str, x: str = "env_steps") -> tuple[list[float], list[float]]:
    pts = [(r[x], r[key]) for r in records if isinstance(r.get(key), (int, float)) and isinstance(r.get(x), (int, float))]
    return [a for a, _ in pts], [b for _, b in pts]


def smooth(ys: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` points (fewer at the start)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def eval_points(records: list[dict]) -> tuple[list[float], list[float]]:
    """One point per evaluation, at the env steps of the update it evaluated (when logged)."""
    steps_at = {r.get("update"): r["env_steps"] for r in records}
    xs, ys, seen = [], [], set()
    for r in records:
        value, update = r.get("eval_return_mean"), r.get("eval_update")
        if isinstance(value, (int, float)) and (update, value) not in seen:
            seen.add((update, value))
            xs.append(steps_at.get(update, r["env_steps"]))
            ys.append(value)
    return xs, ys


def band(runs: list[Run], key: str, x: str, window: int):
    """(xs, mean, std) of `key` over the runs on the shortest run's x values; None when a run lacks it."""
    curves = [series(r.records, key, x) for r in runs]
    if any(not xs for xs, _ in curves):
        return None
    grid = np.asarray(min((xs for xs, _ in curves), key=lambda xs: xs[-1]), dtype=float)
    ys = np.stack([np.interp(grid, xs, smooth(vals, window)) for xs, vals in curves])
    return grid, ys.mean(0), ys.std(0)


def _title(runs: list[Run], groups: dict[str, list[Run]]) -> str:
    every = runs + [r for members in groups.values() for r in members]
    envs = sorted({r.env_id for r in every if r.env_id}) or ["env unknown"]
    names = [r.name for r in runs] + [f"{g} ({len(m)} runs)" for g, m in groups.items()]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{', '.join(envs)}: {shown}"


def _layout(plt):
    """12 cells: the two return panels, the eight others, the legend's own cell, one left empty."""
    fig, grid = plt.subplots(4, 3, figsize=(16, 15))
    cells = list(grid.flat)
    cells[-1].set_visible(False)
    return fig, cells[0], cells[1], dict(zip((k for k, _ in PANELS), cells[2:10])), cells[10]


def _draw_line(axes: dict, run: Run, color: str, window: int) -> None:
    ax_steps, ax_time, panels = axes["steps"], axes["time"], axes["panels"]
    xs, ys = series(run.records, "episode_return_mean")
    ax_steps.plot(xs, smooth(ys, window), color=color, label=run.name)
    ex, ey = eval_points(run.records)
    if ex:
        ax_steps.plot(ex, ey, color=color, linestyle="--", marker="o", markersize=3, label=f"{run.name} (eval)")
    ts, ys = series(run.records, "episode_return_mean", "elapsed_s")
    ax_time.plot([t / 60 for t in ts], smooth(ys, window), color=color)
    for key, ax in panels.items():
        xs, ys = series(run.records, key)
        ax.plot(xs, smooth(ys, max(window, SPS_WINDOW) if key == "sps" else window), color=color)


def _draw_band(axes: dict, name: str, runs: list[Run], color: str, window: int) -> None:
    label = f"{name} (mean +- std of {len(runs)} runs)"
    targets = [(axes["steps"], "episode_return_mean", "env_steps", 1.0),
               (axes["time"], "episode_return_mean", "elapsed_s", 1 / 60)]
    targets += [(ax, key, "env_steps", 1.0) for key, ax in axes["panels"].items()]
    for ax, key, x, scale in targets:
        got = band(runs, key, x, max(window, SPS_WINDOW) if key == "sps" else window)
        if got is None:
            continue
        grid, mean, std = got
        ax.plot(grid * scale, mean, color=color, linewidth=2, label=label if ax is axes["steps"] else None)
        ax.fill_between(grid * scale, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)


def draw(runs: list[Run], groups: dict[str, list[Run]] | None = None, window: int = 1):
    """The figure (matplotlib Figure, Agg) for these runs and groups; no file is read or written here."""
    import matplotlib  # here: optional (plots only) and slow to import
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = groups or {}
    fig, ax_steps, ax_time, panels, ax_legend = _layout(plt)
    axes = {"steps": ax_steps, "time": ax_time, "panels": panels}
    for i, run in enumerate(runs):
        _draw_line(axes, run, f"C{i % 10}", window)
    for j, (name, members) in enumerate(groups.items()):
        _draw_band(axes, name, members, f"C{(len(runs) + j) % 10}", window)
    ax_steps.set_title(RETURN_STEPS)
    ax_time.set_title(RETURN_TIME)
    ax_time.set_xlabel("wall time (minutes)")
    for key, title in PANELS:
        panels[key].set_title(title)
        panels[key].set_xlabel("env steps")
    ax_steps.set_xlabel("env steps")
    for ax in (ax_steps, ax_time, *panels.values()):
        ax.grid(alpha=0.3)
    panels["learning_rate"].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    handles, labels = ax_steps.get_legend_handles_labels()
    ax_legend.axis("off")
    ax_legend.set_title(LEGEND)
    if handles:
        ax_legend.legend(handles, labels, loc="upper left", frameon=False)
    fig.suptitle(_title(runs, groups), fontsize="large")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def plot_runs(run_dirs: list[Path], out: Path, groups: dict[str, list[Path]] | None = None, window: int = 1) -> Path:
    runs = load_runs(run_dirs)
    loaded = {name: load_runs(dirs) for name, dirs in (groups or {}).items()}
    fig = draw(runs, loaded, window)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    import matplotlib.pyplot as plt  # (see draw)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ppo-cluster plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run directories (each with a metrics.jsonl)")
    p.add_argument("--group", action="append", default=[], metavar="NAME=RUN_DIR,RUN_DIR,...",
                   help="draw these runs as one mean +- std band named NAME (repeatable)")
    p.add_argument("--smooth", type=int, default=1, metavar="N", help="trailing mean over N points (default: 1, none)")
    p.add_argument("-o", "--output", default=None, metavar="OUT.png",
                   help="image to write (default: RUN_DIR/plot.png for one run, ./runs_plot.png otherwise)")
    args = p.parse_args(argv)
    try:
        if args.smooth < 1:
            raise PlotError(f"--smooth must be >= 1, got {args.smooth}")
        groups = dict(parse_group(g) for g in args.group)
        dirs = [Path(d) for d in args.run_dirs]
        if not dirs and not groups:
            raise PlotError("give at least one RUN_DIR or --group")
        for d in dirs + [d for members in groups.values() for d in members]:
            read_metrics(d)  # fail on a bad directory before importing matplotlib
        single = len(dirs) == 1 and not groups
        out = Path(args.output) if args.output else (dirs[0] / "plot.png" if single else Path("runs_plot.png"))
        path = plot_runs(dirs, out, groups, args.smooth)
    except PlotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
