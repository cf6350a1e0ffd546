"""Multi-seed learning benchmark: one recipe, several seeds, every run counted; the spread, not a best-of.

    python benchmarks/learning_seeds.py configs/pong-fast.toml --seeds 1-5 --target 20 --max-steps 1500000
    python benchmarks/learning_seeds.py configs/atari-fast.toml --name atari-fast-pong --seeds 1-3 --target 20 \
        --max-steps 1500000 -- --set env.env_id=ALE/Pong-v5
    python benchmarks/learning_seeds.py ... --publish-only      # the entry from the seeds that have run so far
    python benchmarks/learning_seeds.py ... --from docs/results/ENTRY   # its seeds counted, the others run here

What it does:
1. Runs `benchmarks/learning.py RECIPE --seed S --target T --max-steps N` for each seed, into
   runs/seeds/NAME/seed<S>/ (each run stops once its last-100-games mean holds the target, as learning.py does).
   `--parallel P` runs P seeds side by side (default: one per 8 cores, so one at a time on a small machine).
   Resumable per seed: a seed whose run has ended is not run again; one that was cut off (its learning.json
   missing, its metrics.jsonl there) resumes from its last checkpoint to the same budget.
   `--from ENTRY` (repeatable) brings the seeds of an entry this benchmark published with the same recipe,
   settings, target and budget (read from its command) into runs/seeds/NAME as ended seeds: on a new machine
   only the other seeds run, and the entry counts them all, naming where each imported seed ran.
2. Writes one docs/results/<date>-<hardware>-NAME-seeds<A-B>/ entry (the date its first ended seed was published:
   published again on a later day, the entry keeps its name): summary.json (every seed's summary and the
   aggregate), README.md (the table below; a "## Notes" section added by hand is kept when the entry is published
   again, and the command it names is the one that reproduces it, without --publish-only), plot.png (every
   seed's return against agent steps and against wall time, the target drawn), config.toml, and each seed's
   metrics.jsonl.gz and episodes.jsonl.gz (every game).

The aggregate (learning_spread.py, tested on made-up curves): seeds reached / seeds run; steps and wall time to
the target per seed, their median (over every seed run: a seed that did not reach it counts as later than all
that did, so the median exists only when more than half reached it) and range; at fixed step marks the median,
range and interquartile range of the return; per seed the 10th percentile and the worst of its last 100 games
(the games lost badly that hold a window under the target). A seed that stopped at the target before a mark
counts at that mark with its last window (it held the target when it stopped): say `--keep-going` to train every
seed to the budget.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling modules, run as a script

from learning import commit, gzip_copy, hardware_label, machine  # noqa: E402
from learning_spread import aggregate, markdown_table  # noqa: E402
from procfs import read_metrics  # noqa: E402


def seed_list(spec: str) -> list[int]:
    """'1-5' -> [1, 2, 3, 4, 5]; '1,3,7' -> [1, 3, 7]; '2-3,9' -> [2, 3, 9]."""
    seeds: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (dash and int(hi) < int(lo)):
            raise argparse.ArgumentTypeError(f"--seeds {spec!r}: expected e.g. 1-5 or 1,3,7")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {spec!r}: empty or repeated")
    return seeds


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", help="config TOML, e.g. configs/pong-fast.toml")
    ap.add_argument("--seeds", type=seed_list, default=seed_list("1-5"), help="e.g. 1-5 or 1,3,7 (default 1-5)")
    ap.add_argument("--target", type=float, required=True, help="mean return of the last 100 training games")
    ap.add_argument("--max-steps", type=int, required=True, help="agent-step budget of each seed")
    ap.add_argument("--name", help="the benchmark's name (default: the recipe's file name)")
    ap.add_argument("--marks", default="", help="agent-step marks for the spread, e.g. 300000,900000 "
                    "(default: fifths of --max-steps)")
    ap.add_argument("--parallel", type=int, default=max(1, (os.cpu_count() or 1) // 8),
                    help="seeds run side by side (default: one per 8 cores)")
    ap.add_argument("--keep-going", action="store_true", help="train every seed to the budget")
    ap.add_argument("--eval-episodes", type=int, default=5)
    ap.add_argument("--max-hours", type=float, default=24.0, help="each seed's wall-time limit")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "seeds", help="where the seeds' runs live")
    ap.add_argument("--results", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--publish-only", action="store_true", help="write the entry from the seeds run so far")
    ap.add_argument("--from", dest="imports", type=Path, action="append", default=[], metavar="ENTRY",
                    help="a docs/results entry of this benchmark (same recipe, settings, target, budget): its "
                    "seeds count as ended here (repeatable)")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:split])
    args.launch_args = argv[split + 1:]
    args.name = args.name or Path(args.recipe).stem
    if args.max_steps <= 0 or args.parallel < 1 or args.max_hours <= 0:
        ap.error("--max-steps, --parallel and --max-hours must be > 0")
    try:
        args.marks = [int(m) for m in args.marks.split(",") if m] or [args.max_steps * k // 5 for k in range(1, 6)]
    except ValueError:
        ap.error(f"--marks {args.marks!r}: expected agent steps separated by commas")
    return args


def seed_dir(args: argparse.Namespace, seed: int) -> Path:
    return args.runs / args.name / f"seed{seed}"


def seed_ended(args: argparse.Namespace, seed: int) -> bool:
    """Its run is published and held the target, spent the budget, or ran out of --max-hours (a run stopped
    by hand before any of these is resumed)."""
    published = sorted((args.runs / args.name / "published").glob(f"*-seed{seed}/summary.json"))
    if not published:
        return False
    summary = json.loads(published[-1].read_text())
    return ("imported_from" in summary or summary["reached"]
            or (summary["final"]["env_steps"] or 0) >= args.max_steps
            or any(run.get("stopped_for") == "max-hours" for run in summary["runs"]))


def import_entry(args: argparse.Namespace, entry: Path) -> list[int]:
    """The seeds of ENTRY (published by this benchmark with the same recipe, settings, target and budget, read
    from its command) written into runs/seeds/NAME as ended runs: metrics, games, config (its seed set) and a
    published summary naming where it ran (an entry's own imports keep their origin). Only --seeds are taken; a
    seed with a run here keeps it. Returns the seeds imported."""
    summary = json.loads((entry / "summary.json").read_text())
    theirs = parse_args(shlex.split(summary["command"])[2:])
    for key in ("recipe", "launch_args", "target", "max_steps"):
        if getattr(theirs, key) != getattr(args, key):
            raise SystemExit(f"--from {entry}: its {key} is {getattr(theirs, key)!r}, here {getattr(args, key)!r}")
    imported = []
    for seed in summary["seeds"]:
        run_dir = seed_dir(args, seed["seed"])
        if seed["seed"] not in args.seeds or run_dir.exists():
            continue
        run_dir.mkdir(parents=True)
        config = re.sub(r"(?m)^seed = \d+$", f"seed = {seed['seed']}", (entry / "config.toml").read_text(), count=1)
        (run_dir / "config.toml").write_text(config)
        for log in ("metrics", "episodes"):
            if (packed := entry / f"seed{seed['seed']}-{log}.jsonl.gz").exists():
                (run_dir / f"{log}.jsonl").write_bytes(gzip.decompress(packed.read_bytes()))
        published = args.runs / args.name / "published" / f"imported-seed{seed['seed']}"
        published.mkdir(parents=True, exist_ok=True)
        origin = (summary.get("imported") or {}).get(str(seed["seed"])) or {
            "imported_from": str(entry), "machine": summary["machine"], "commit": summary["commit"]}
        (published / "summary.json").write_text(json.dumps(
            {**origin, "reached": seed["reached"], "final": {"env_steps": seed["final_steps"]}, "runs": [],
             "evaluation": seed["evaluation"]}, indent=2) + "\n")
        imported.append(seed["seed"])
    return imported


def seed_command(args: argparse.Namespace, seed: int) -> list[str] | None:
    """learning.py's command for this seed: a fresh run, a resume, or None when its run has ended."""
    run_dir = seed_dir(args, seed)
    if seed_ended(args, seed):
        return None
    cmd = [sys.executable, str(ROOT / "benchmarks" / "learning.py"), args.recipe, "--seed", str(seed),
           "--target", str(args.target), "--max-steps", str(args.max_steps),
           "--results", str(args.runs / args.name / "published"), "--eval-episodes", str(args.eval_episodes),
           "--max-hours", str(args.max_hours)]
    if args.keep_going:
        cmd.append("--keep-going")
    if (run_dir / "metrics.jsonl").exists():  # cut off: its own config, to the same budget
        return cmd + ["--resume", str(run_dir)]
    return cmd + ["--run-dir", str(run_dir), "--", *args.launch_args]


class Terminated(Exception):
    pass


def _terminated(signum, frame):
    raise Terminated(f"signal {signum}")


def run_seeds(args: argparse.Namespace) -> None:
    """Every seed's learning.py, P at a time; each writes its output to runs/seeds/NAME/seed<S>.out.
    Ctrl-C reaches the seeds' runs from the terminal; SIGTERM is passed on to them: each stops with a final
    checkpoint and resumes when this command is run again."""
    pending = [(s, c) for s in args.seeds if (c := seed_command(args, s)) is not None]
    running: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, _terminated)
    try:
        while pending or running:
            while pending and len(running) < args.parallel:
                seed, cmd = pending.pop(0)
                print(f"seed {seed}:", " ".join(cmd[1:]), flush=True)
                out = args.runs / args.name / f"seed{seed}.out"
                out.parent.mkdir(parents=True, exist_ok=True)
                with open(out, "ab") as log:
                    running.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
            running[0].wait()
            running = [p for p in running if p.poll() is None]
    except Terminated:
        for proc in running:
            proc.terminate()
        raise
    finally:
        for proc in running:  # learning.py stops its run with a final checkpoint
            proc.wait()


def seed_records(args: argparse.Namespace) -> dict[int, list[dict]]:
    """Each seed's metrics rows, for the seeds that have logged."""
    out = {s: read_metrics(seed_dir(args, s) / "metrics.jsonl") for s in args.seeds}
    return {s: rows for s, rows in out.items() if rows}


def seed_games(args: argparse.Namespace, seed: int) -> list[float]:
    """Every finished game's return of the seed's run, in order (its episodes.jsonl)."""
    return [row["return"] for row in read_metrics(seed_dir(args, seed) / "episodes.jsonl")]


def seed_published(args: argparse.Namespace, seed: int) -> dict:
    """The seed's last published summary (learning.py's, or an import's); {} when there is none."""
    published = sorted((args.runs / args.name / "published").glob(f"*-seed{seed}/summary.json"))
    return json.loads(published[-1].read_text()) if published else {}


def plot(records: dict[int, list[dict]], target: float, title: str, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(13, 4.5))
    for seed, rows in sorted(records.items()):
        held = [r for r in rows if r.get("episode_return_mean") is not None]
        ret = [r["episode_return_mean"] for r in held]
        by_steps.plot([r["env_steps"] for r in held], ret, label=f"seed {seed}")
        by_time.plot([r["elapsed_s"] / 60 for r in held], ret, label=f"seed {seed}")
    for ax, xlabel in ((by_steps, "agent steps"), (by_time, "training minutes")):
        ax.axhline(target, color="grey", ls="--", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean return, last 100 games")
        ax.grid(alpha=0.3)
    by_steps.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def publish(args: argparse.Namespace) -> Path:
    """The entry over the seeds whose runs have ended (target, budget or --max-hours); a seed still running or
    not started yet is named as such and not counted (a partial entry, --publish-only while seeds run)."""
    logged = seed_records(args)
    records = {s: rows for s, rows in logged.items() if seed_ended(args, s)}
    if not records:
        raise SystemExit(f"no seed of {args.name} has ended yet (under {args.runs / args.name})")
    pending = [s for s in args.seeds if s not in records]
    spread = aggregate(records, args.target, args.marks, runs=len(records),
                       games={s: seed_games(args, s) for s in records})
    published = {s: seed_published(args, s) for s in records}
    for seed in spread["seeds"]:
        seed["evaluation"] = published[seed["seed"]].get("evaluation")
    imported = {s: {k: p[k] for k in ("imported_from", "machine", "commit")}
                for s, p in published.items() if "imported_from" in p}
    spec = f"{min(args.seeds)}-{max(args.seeds)}" if len(args.seeds) > 1 else str(args.seeds[0])
    entry = args.results / f"{entry_date(published)}-{hardware_label()}-{args.name}-seeds{spec}"
    entry.mkdir(parents=True, exist_ok=True)
    first = seed_dir(args, min(records))
    command = f"python benchmarks/learning_seeds.py {' '.join(a for a in sys.argv[1:] if a != '--publish-only')}"
    summary = {"name": args.name, "recipe": args.recipe, "launch_args": args.launch_args, "command": command,
               "date": dt.date.today().isoformat(), "machine": machine(), "commit": commit(), **spread,
               "pending": pending, "imported": imported}
    (entry / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    notes = _notes_of(entry / "README.md")
    (entry / "README.md").write_text(f"# {args.name}: {len(records)} of {len(args.seeds)} seeds ended, target "
                                     f"{args.target:g}\n\n`{command}`\n\n{summary['machine']}, commit "
                                     f"{summary['commit']}\n\n{_imported_line(imported)}"
                                     f"{_pending_line(pending, logged)}{markdown_table(spread)}\n\n"
                                     f"![curves](plot.png)\n{notes}")
    shutil.copy(first / "config.toml", entry / "config.toml")
    for seed in records:
        for log in ("metrics", "episodes"):
            if (path := seed_dir(args, seed) / f"{log}.jsonl").exists():
                gzip_copy(path, entry / f"seed{seed}-{log}.jsonl.gz")
    plot(records, args.target, f"{args.name}: {spread['reached']} of {spread['runs']} seeds reached "
         f"{args.target:g} by {args.max_steps:,} agent steps", entry / "plot.png")
    return entry


def _notes_of(readme: Path) -> str:
    """What a person wrote under "## Notes" in the entry's README (to its end), kept when the entry is published
    again as more seeds end; empty for a new entry."""
    if not readme.exists():
        return ""
    text = readme.read_text()
    at = re.search(r"^## Notes$", text, flags=re.M)
    return "" if at is None else "\n" + text[at.start():].rstrip("\n") + "\n"


def entry_date(published: dict[int, dict]) -> str:
    """The day the first of the ended seeds was published (today where none says): an entry published again as
    its later seeds end, on later days, keeps its name."""
    return min((p["date"] for p in published.values() if p.get("date")), default=dt.date.today().isoformat())


def _pending_line(pending: list[int], logged: dict[int, list[dict]]) -> str:
    """A partial entry's note of the seeds it does not count yet (empty when every seed ended)."""
    if not pending:
        return ""
    named = [f"seed {s} ({logged[s][-1]['env_steps']:,} agent steps so far)" if s in logged else f"seed {s} (not "
             f"started)" for s in pending]
    return f"Partial: not counted below until their runs end: {', '.join(named)}.\n\n"


def _imported_line(imported: dict[int, dict]) -> str:
    """Where each imported seed ran (its wall times are that machine's), or empty."""
    if not imported:
        return ""
    named = [f"seed {s} on {i['machine']}, commit {i['commit']} ({Path(i['imported_from']).name})"
             for s, i in sorted(imported.items())]
    return f"Imported, run elsewhere: {'; '.join(named)}.\n\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    for entry in args.imports:
        print(f"from {entry}: seeds {import_entry(args, entry) or 'none'} imported", flush=True)
    if not args.publish_only:
        run_seeds(args)
    entry = publish(args)
    print((entry / "README.md").read_text(), f"\nresults in {entry}", sep="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
