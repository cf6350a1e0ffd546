"""Learner memory per env slot: the PSS of the learner's processes against the number of env slots.

    python benchmarks/memory.py                                  # Pong (configs/pong-fast.toml), 128 steps, 16 and 64 slots
    python benchmarks/memory.py --other /tmp/base-mem            # the same rows on another checkout, interleaved
    python benchmarks/memory.py --slots 32,64,128 --updates 4

Each row trains (network policy, `ppo.update_epochs` 1 to keep a row short; the rollout, its minibatches and
the bootstrap are what they are with any epoch count) with `--slots` env slots of learner_capacity.py's
synthetic actors (2 processes, 2 groups each, replaying frames recorded from the real env: no emulator
competes for the cores). From the first update's line in metrics.jsonl until `--updates` updates are in,
the PSS (/proc/PID/smaps_rollup: shared pages divided among the processes that map them) of the training
process and its collector processes (endpoints.json) is summed every 0.2 s. Per row:

  * `resident`: the lowest sum, what stays between updates (the rollout, the model, the runtime);
  * `peak`: the highest, the update's working set on top (its minibatches grow with the slots too).

MB per slot: the least-squares slope of each over the rows (two rows: the difference over the slots added).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (REPO, HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from cli import add_row_flags, parser  # noqa: E402
from learner_capacity import _json, _wait_for, synthetic_actor  # noqa: E402
from procfs import read_metrics, read_pss_mb, start_launch, stop_launch  # noqa: E402

ACTORS, GROUPS = 2, 2


def run_row(checkout: Path, slots: int, args, tmp: Path, label: str) -> dict:
    """One training run with `slots` env slots: its resident and peak PSS (MB)."""
    run_dir = tmp / f"{label}-{slots}"
    cmd = [sys.executable, "launch.py", "--actors", "0", "--device", "cpu", "--total-steps", str(10**12),
           "--run-dir", str(run_dir), "--config", args.config,
           "--set", f'cluster.address="ipc://{run_dir}.sock"', "--set", 'cluster.weights_address="tcp://127.0.0.1:0"',
           "--set", f"cluster.min_envs={slots}", "--set", f"cluster.envs={slots}",
           "--set", f"ppo.num_steps={args.num_steps}", "--set", "ppo.update_epochs=1",
           "--set", f"run.torch_threads={args.torch_threads}",
           "--set", "cluster.actor_timeout_s=300"]  # a loaded machine: a synthetic actor records its frames first
    proc, log = start_launch(cmd, checkout, run_dir)
    workers = []
    try:
        endpoints = _wait_for(lambda: _json(run_dir / "endpoints.json"), 120, "the learner's endpoints", proc, run_dir)
        ctx = mp.get_context("spawn")
        for i in range(ACTORS):
            w = ctx.Process(target=synthetic_actor, args=(endpoints["address"], slots // ACTORS, GROUPS,
                                                          f"synthetic-{i}", os.getpid()), daemon=True)
            w.start()
            workers.append(w)
        pids = {int(endpoints["pid"])} | {int(c["pid"]) for c in endpoints.get("collectors", [])}  # (1: itself)
        metrics = run_dir / "metrics.jsonl"
        _wait_for(lambda: len(read_metrics(metrics)) >= 1, args.row_timeout, "a first update", proc, run_dir)
        samples = []
        deadline = time.monotonic() + args.row_timeout
        while True:  # at least one sample, also when the last update came before the first one
            samples.append(sum(read_pss_mb(pid) or 0.0 for pid in pids))
            if len(read_metrics(metrics)) >= args.updates or time.monotonic() >= deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        if len(read_metrics(metrics)) < args.updates:
            raise RuntimeError(f"{label} {slots} slots: fewer than {args.updates} updates in {args.row_timeout:g}s")
    finally:
        stop_launch(proc, workers, log)
    return {"checkout": label, "slots": slots, "resident_mb": min(samples), "peak_mb": max(samples),
            "samples": len(samples), "processes": len(pids)}


def slope(rows: list[dict], key: str) -> float:
    """Least-squares MB per slot of rows[key] against rows' slots."""
    xs, ys = [r["slots"] for r in rows], [r[key] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def build_parser():
    p = parser(__doc__)
    p.add_argument("--config", default="configs/pong-fast.toml", help="learner config (default: %(default)s)")
    p.add_argument("--slots", default="16,64", help="env slots per row, comma-separated (default: %(default)s)")
    p.add_argument("--num-steps", type=int, default=128, help="ppo.num_steps (default: %(default)s)")
    p.add_argument("--updates", type=int, default=2, help="updates sampled per row (default: %(default)s)")
    add_row_flags(p, torch_threads=2, row_timeout_s=600.0, row_timeout_help="a row slower than this fails")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    slots = [int(x) for x in args.slots.split(",")]
    if len(slots) < 2 or any(s % (ACTORS * GROUPS) for s in slots):
        raise SystemExit(f"--slots: at least two values, each a multiple of {ACTORS * GROUPS}")
    checkouts = [("this", REPO)] + ([("other", Path(args.other).resolve())] if args.other else [])
    tmp = Path(tempfile.mkdtemp(prefix="ppo-memory-"))
    print(f"learner memory: {args.config}, {args.num_steps} steps, slots {slots}; checkouts: "
          + ", ".join(f"{n}={p}" for n, p in checkouts), flush=True)
    rows: dict[str, list[dict]] = {n: [] for n, _ in checkouts}
    for s in slots:
        for label, path in checkouts:
            row = run_row(path, s, args, tmp, label)
            rows[label].append(row)
            print(f"  {label:<6} {s:>4} slots  resident {row['resident_mb']:8.1f} MB  peak {row['peak_mb']:8.1f} MB  "
                  f"({row['processes']} processes, {row['samples']} samples)", flush=True)
    print("\n| checkout | " + " | ".join(f"{s} slots resident / peak MB" for s in slots)
          + " | MB per slot, resident | MB per slot, peak |")
    print("|---|" + "---:|" * (len(slots) + 2))
    for label, _ in checkouts:
        cells = " | ".join(f"{r['resident_mb']:.0f} / {r['peak_mb']:.0f}" for r in rows[label])
        print(f"| {label} | {cells} | {slope(rows[label], 'resident_mb'):.2f} | {slope(rows[label], 'peak_mb'):.2f} |")
    if args.out:
        import json
        Path(args.out).write_text(json.dumps({"rows": rows, "command": sys.argv}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
