"""Learning benchmark: train a recipe to a target mean return or a step budget, then publish the result.

    python benchmarks/learning.py configs/pong-fast.toml --target 20 --max-steps 2000000 --seed 1
    python benchmarks/learning.py configs/pong-fast.toml --target 20 --max-steps 2000000 -- --device cpu --set ...
    python benchmarks/learning.py configs/pong-fast.toml --target 20 --max-steps 2000000 --resume RUN_DIR

What it does, in order:
1. Runs `python launch.py --config RECIPE --seed S --total-steps MAX_STEPS ARGS...` (or `--resume RUN_DIR`: the
   run's own config, to the same budget) and follows RUN_DIR/metrics.jsonl. The return is the mean raw game
   score of the last 100 training games (the README's definition); the target counts as held from the first
   update whose window is full (100 games) and whose mean is >= TARGET. The run then stops (Ctrl-C: a final
   checkpoint, every process ends) unless --keep-going, or ends at the budget.
2. Evaluates RUN_DIR/checkpoints/best.pt (the best smoothed return seen) over --eval-episodes full games
   with `python -m ppo_cluster evaluate`.
3. Writes docs/results/<date>-<hardware>-<recipe>-seed<S>/: summary.json (target step and wall time, the
   evaluation, the command, commit, date, hardware, resumes), plot.png (`python -m ppo_cluster plot`: the return
   against steps and against wall time, and the PPO statistics), metrics.jsonl.gz, config.toml and
   learner.log.gz.

--finish RUN_DIR skips step 1: it publishes a run that already ended.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # protocol.files, run as `python benchmarks/learning.py`
sys.path.insert(0, str(Path(__file__).resolve().parent))  # procfs, a sibling module

from procfs import read_metrics  # noqa: E402
from protocol.files import atomic_write  # noqa: E402
WINDOW = 100  # games in the training return's window
POLL_S = 5.0
STOP_GRACE_S = 120.0


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", help="config TOML, e.g. configs/pong-fast.toml")
    ap.add_argument("--target", type=float, required=True, help="mean return of the last 100 training games")
    ap.add_argument("--max-steps", type=int, required=True, help="agent-step budget")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run-dir", type=Path, help="run directory (default: runs/learning-<recipe>-seed<S>-<time>)")
    ap.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a run that was cut off")
    ap.add_argument("--finish", type=Path, metavar="RUN_DIR", help="only evaluate and publish an ended run")
    ap.add_argument("--keep-going", action="store_true", help="train to the budget even after the target")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--hardware", default="", help="label for the results folder (default: from the machine)")
    ap.add_argument("--results", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--max-hours", type=float, default=24.0, help="stop the run after this wall time")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:split])
    args.launch_args = argv[split + 1:]  # after --: more launch.py arguments (topology, --set ...)
    if args.max_steps <= 0 or args.eval_episodes < 0 or args.max_hours <= 0:
        ap.error("--max-steps and --max-hours must be > 0, --eval-episodes >= 0")
    if args.resume and args.finish:
        ap.error("--resume and --finish exclude each other")
    return args


def full_window_rows(rows: list[dict]) -> list[dict]:
    """The rows whose last-100 window is full (`episodes` counts the run's finished games so far)."""
    return [r for r in rows if (r.get("episodes") or 0) >= WINDOW and r.get("episode_return_mean") is not None]


def first_hit(rows: list[dict], target: float) -> dict | None:
    """The first update whose window is full and whose mean return is >= target."""
    return next((r for r in full_window_rows(rows) if r["episode_return_mean"] >= target), None)


def launch_command(args: argparse.Namespace, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "launch.py"]
    if args.resume:
        return cmd + ["--resume", str(run_dir), "--total-steps", str(args.max_steps)]
    return cmd + ["--config", args.recipe, "--seed", str(args.seed), "--total-steps", str(args.max_steps),
                  "--run-dir", str(run_dir), "--set", "log.progress_bar=false", *args.launch_args]


def train(args: argparse.Namespace, run_dir: Path) -> dict:
    """Run launch.py until the target is held (then Ctrl-C it), the budget is spent, or --max-hours pass."""
    cmd = launch_command(args, run_dir)
    print("run:", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + args.max_hours * 3600
    stopped_for = None
    try:
        while proc.poll() is None:
            try:
                proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
            hit = first_hit(read_metrics(run_dir / "metrics.jsonl"), args.target)
            if stopped_for is None and ((hit and not args.keep_going) or time.monotonic() > deadline):
                stopped_for = "target" if hit and not args.keep_going else "max-hours"
                print(f"stopping the run ({stopped_for}): Ctrl-C, final checkpoint", flush=True)
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=STOP_GRACE_S)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # the launcher checkpoints and stops its children
            proc.wait(timeout=STOP_GRACE_S)
        raise
    return {"command": " ".join(cmd[1:]), "exit_code": proc.returncode, "stopped_for": stopped_for or "budget"}


def evaluate(run_dir: Path, episodes: int) -> dict | None:
    best = run_dir / "checkpoints" / "best.pt"
    if episodes == 0 or not best.exists():
        return None
    cmd = [sys.executable, "-m", "ppo_cluster", "evaluate", str(best), "--episodes", str(episodes)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    print(out.stdout, out.stderr, sep="", flush=True)
    returns = [float(m) for m in re.findall(r"^episode \d+: return (\S+)", out.stdout, re.M)]
    best_info = run_dir / "checkpoints" / "best.json"
    return {"command": f"python -m ppo_cluster evaluate {best} --episodes {episodes}", "returns": returns,
            "mean": sum(returns) / len(returns) if returns else None,
            "best_checkpoint": json.loads(best_info.read_text()) if best_info.exists() else None}


def hardware_label() -> str:
    try:
        import torch
        if torch.cuda.is_available():
            return "gpu-" + re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-")
    except ImportError:
        pass
    return f"{os.cpu_count()}core-cpu"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores, {cpu}{cpu_vectors()}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def cpu_vectors() -> str:
    """What the CPU's vector units give torch: its kernels' level and whether bf16 runs at speed there (the update's
    precision under `ppo.update_precision = "auto"`: the same recipe runs bf16 on one VM and fp32 on another)."""
    try:
        import torch
        from learner.update.precision import native_bf16
    except ImportError:  # an actor-only install
        return ""
    fast = native_bf16(torch.device("cpu"))
    return f" ({torch.backends.cpu.get_cpu_capability()}, bf16 {'fast' if fast else 'slow: fp32 updates'})"


def commit() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def gzip_copy(src: Path, dst: Path) -> None:
    """`src` compressed to `dst` with no time or name in the gzip header: the same log gives the same bytes, so an
    entry published again shows only its changed files in git."""
    with open(src, "rb") as source, open(dst, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
        shutil.copyfileobj(source, packed)


def summarize(args: argparse.Namespace, run_dir: Path, runs: list[dict], evaluation: dict | None) -> dict:
    rows = read_metrics(run_dir / "metrics.jsonl")
    hit = first_hit(rows, args.target)
    last = rows[-1] if rows else {}
    best = max((r["episode_return_mean"] for r in full_window_rows(rows)), default=None)
    return {
        "recipe": args.recipe, "seed": args.seed, "target": args.target, "max_steps": args.max_steps,
        "reached": hit is not None,
        "target_env_steps": hit and hit["env_steps"], "target_wall_s": hit and hit["elapsed_s"],
        "target_update": hit and hit["update"],
        "final": {k: last.get(k) for k in ("update", "env_steps", "elapsed_s", "episode_return_mean")},
        "best_training_return_mean": best, "evaluation": evaluation, "runs": runs,
        "resumed": any("--resume" in r["command"] for r in runs),
        "date": dt.date.today().isoformat(), "machine": machine(),
        "commit": runs[0].get("commit") if runs else None, "published_at_commit": commit(),
        "run_dir": str(run_dir),
    }


def publish(args: argparse.Namespace, run_dir: Path, summary: dict) -> Path:
    recipe = Path(args.recipe).stem
    entry = args.results / f"{summary['date']}-{args.hardware or hardware_label()}-{recipe}-seed{args.seed}"
    entry.mkdir(parents=True, exist_ok=True)
    atomic_write(entry / "summary.json", json.dumps(summary, indent=2) + "\n")
    for name in ("metrics.jsonl", "learner.log"):
        if (run_dir / name).exists():
            gzip_copy(run_dir / name, entry / f"{name}.gz")
    shutil.copy(run_dir / "config.toml", entry / "config.toml")
    subprocess.run([sys.executable, "-m", "ppo_cluster", "plot", str(run_dir), "-o", str(entry / "plot.png")],
                   cwd=ROOT, check=False, timeout=600)
    return entry


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    args = parse_args(argv)
    # Stopped by SIGTERM, or by Ctrl-C even when started in the background (where SIGINT comes ignored): the
    # run stops as at the target, with a final checkpoint, and can be resumed.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    run_dir = args.finish or args.resume or args.run_dir or (
        ROOT / "runs" / f"learning-{Path(args.recipe).stem}-seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    summary_file = run_dir / "learning.json"  # the runs so far, kept across resumes
    runs = json.loads(summary_file.read_text())["runs"] if summary_file.exists() else []
    if not args.finish:
        started = {"started": dt.datetime.now().isoformat(timespec="seconds"), "commit": commit()}
        runs.append({**started, **train(args, run_dir)})
        if not run_dir.is_dir():  # the launcher refused the run (its log line says why) and removed the directory
            print(f"the run did not start (launch.py exited with code {runs[-1]['exit_code']}): nothing to "
                  "publish", file=sys.stderr)
            return 1
        atomic_write(summary_file, json.dumps({"runs": runs}, indent=2) + "\n")
    summary = summarize(args, run_dir, runs, evaluate(run_dir, args.eval_episodes))
    entry = publish(args, run_dir, summary)
    hit = "reached" if summary["reached"] else "did not reach"
    print(f"{hit} {args.target:g}: env steps {summary['target_env_steps']}, wall {summary['target_wall_s']} s; "
          f"evaluation mean {summary['evaluation'] and summary['evaluation']['mean']}; results in {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
