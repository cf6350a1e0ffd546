"""Training curves from metrics.jsonl: return, SPS, losses and approx KL against env steps, one line per run.

    python -m learner.plot runs/breakout-a                      # -> runs/breakout-a/plot.png
    python -m learner.plot runs/breakout-a runs/breakout-b -o cmp.png   # default ./runs_plot.png

Return shows the mean raw return of the last 100 training episodes (solid) and, when the run evaluated
during training, the evaluation mean (dashed, with markers).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


class PlotError(Exception):
    pass


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


def series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["env_steps"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [x for x, _ in pts], [y for _, y in pts]


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


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(Path(d), read_metrics(d)) for d in run_dirs]
    names = [d.resolve().name for d, _ in runs]
    if len(set(names)) < len(names):  # same folder name in different places: use the paths as given
        names = [str(d) for d, _ in runs]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), sharex=True)
    (ax_ret, ax_sps), (ax_loss, ax_kl) = axes
    for i, ((_, records), name) in enumerate(zip(runs, names)):
        color = f"C{i % 10}"
        ax_ret.plot(*series(records, "episode_return_mean"), color=color, label=name)
        ex, ey = eval_points(records)
        if ex:
            ax_ret.plot(ex, ey, color=color, linestyle="--", marker="o", markersize=3, label=f"{name} (eval)")
        ax_sps.plot(*series(records, "sps"), color=color, label=name)
        ax_loss.plot(*series(records, "policy_loss"), color=color, label=f"{name} policy")
        ax_loss.plot(*series(records, "value_loss"), color=color, linestyle=":", label=f"{name} value")
        ax_kl.plot(*series(records, "approx_kl"), color=color, label=name)
    titles = {ax_ret: "episode return (raw, mean of last 100)", ax_sps: "env steps per second",
              ax_loss: "losses (solid: policy, dotted: value)", ax_kl: "approx KL"}
    for ax, title in titles.items():
        ax.set_title(title)
        ax.grid(alpha=0.3)
    for ax in (ax_loss, ax_kl):
        ax.set_xlabel("env steps")
    ax_ret.legend(fontsize="small")
    if len(runs) > 1:
        ax_sps.legend(fontsize="small")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m learner.plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (each with a metrics.jsonl)")
    p.add_argument("-o", "--output", default=None, metavar="OUT.png",
                   help="image to write (default: RUN_DIR/plot.png for one run, ./runs_plot.png for several)")
    args = p.parse_args(argv)
    dirs = [Path(d) for d in args.run_dirs]
    out = Path(args.output) if args.output else (dirs[0] / "plot.png" if len(dirs) == 1 else Path("runs_plot.png"))
    try:
        for d in dirs:
            read_metrics(d)  # fail on a bad directory before importing matplotlib
        path = plot_runs(dirs, out)
    except PlotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
