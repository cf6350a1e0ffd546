"""Soak test (issue 5): run a cluster for a long time and check that memory stays put and throughput stays flat.

    python benchmarks/soak.py                                   # Breakout, os.cpu_count() actors, 30 minutes
    python benchmarks/soak.py --minutes 120 --config configs/pong.toml --actors 8
    python benchmarks/soak.py --config configs/smoke.toml --set run.total_steps=100000000 --minutes 3

Starts `python launch.py` in its own process group (RUN_DIR: --run-dir, else a temporary directory) and every
--interval seconds samples

  * the resident memory (VmRSS, /proc/PID/status) of every process of the cluster: launch.py, the learner, each
    actor (pids from RUN_DIR/processes.json, re-read each time since actors may be restarted), the evaluator if
    any, and any other descendant of launch.py ("other");
  * agent steps (env_steps of the newest line of RUN_DIR/metrics.jsonl) -> SPS over the interval;
  * CPU: cores kept busy by the cluster, and by everything else on the machine (/proc/stat) over the interval.

Samples go to OUT.csv (one row per sample) and OUT.json (samples, per-process series and the summary); OUT is
--out, default RUN_DIR/soak. At the end the cluster gets SIGTERM (then SIGKILL for its whole process group after
--stop-timeout-s), the script checks that no process of it is left, and prints a summary:

  * steady state: everything after the warm-up (--warmup-s; default 10% of the run, at least 60 s, at most half);
  * RSS per kind (launch, learner, actor max over the actors, actor sum, evaluator) at the start of the steady
    state and at the end (each the mean over the first / last 5% of steady samples, at least one), and growth %;
  * SPS over the first and the last quarter of the steady state (steps delta / time delta) and their ratio.

Pass: every kind's RSS grows less than --max-rss-growth-pct (10), and last/first-quarter SPS is within
[--sps-min-ratio, --sps-max-ratio] (0.9 .. 1.1), and the cluster ran for the whole time, and nothing was left
running. Exit status 0 on pass, 1 on fail. When other processes keep more than --noise-cores cores busy in the
first or the last quarter, the summary warns that the SPS comparison measured the machine, not the cluster.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # procfs.py, next to this script

from procfs import (TICKS, alive, all_stats, descendants, fmt, kill, kill_group, last_metrics,  # noqa: E402
                    machine_busy_ticks, read_rss_mb, tail, terminate)

KINDS = ("launch", "learner", "actor_max", "actor_sum", "evaluator", "other")


# ----------------------------------------------------------------------------------------------- run dir

def read_processes(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "processes.json").read_text())
    except (OSError, ValueError):
        return {}  # not written yet (or being replaced: launch.py writes it atomically, so rarely)


def classify(launch_pid: int, info: dict, stats: dict) -> dict[str, dict[int, str]]:
    """kind -> {pid: name} for launch.py and every descendant of it."""
    named: dict[int, tuple[str, str]] = {launch_pid: ("launch", "launch")}
    if info.get("learner"):
        named[int(info["learner"])] = ("learner", "learner")
    for i, pid in (info.get("actors") or {}).items():
        named[int(pid)] = ("actor", f"actor-{i}")
    if info.get("evaluator"):
        named[int(info["evaluator"])] = ("evaluator", "evaluator")
    out: dict[str, dict[int, str]] = {"launch": {}, "learner": {}, "actor": {}, "evaluator": {}, "other": {}}
    for pid in {launch_pid} | descendants(launch_pid, stats) | set(named):
        st = stats.get(pid)
        if st is None or st[0] == "Z":
            continue
        kind, name = named.get(pid, ("other", f"pid-{pid}"))
        out[kind][pid] = name
    return out


# ----------------------------------------------------------------------------------------------- sampling

class Soak:
    def __init__(self, args, run_dir: Path):
        self.args, self.run_dir = args, run_dir
        self.samples: list[dict] = []
        self.seen: dict[int, tuple[str, int]] = {}  # pid -> (name, starttime): every cluster process ever sampled
        self.proc: subprocess.Popen | None = None
        self.t0 = 0.0
        self.early_exit: int | None = None
        self.cpu_base: dict[int, int] = {}  # pid -> its CPU ticks at the previous sample
        self.busy_base = 0

    def command(self) -> list[str]:
        cmd = [sys.executable, "launch.py", "--config", self.args.config, "--actors", str(self.args.actors),
               "--run-dir", str(self.run_dir)]
        for item in self.args.set:
            cmd += ["--set", item]
        return cmd + self.args.launch_arg

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.run_dir / "launch.out", "w")
        print(f"soak: {' '.join(self.command())}", flush=True)
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()
        self.t0 = time.monotonic()

    def sample(self) -> dict:
        stats = all_stats()
        info = read_processes(self.run_dir)
        kinds = classify(self.proc.pid, info, stats)
        row = {"t_s": round(time.monotonic() - self.t0, 2), "time": time.time()}
        busy, cluster_ticks = machine_busy_ticks(), 0
        rss: dict[str, float] = {}
        for kind, pids in kinds.items():
            for pid, name in pids.items():
                mb = read_rss_mb(pid)
                if mb is None:
                    continue
                rss[name] = round(mb, 1)
                cluster_ticks += stats[pid][4] - self.cpu_base.get(pid, 0)
                self.cpu_base[pid] = stats[pid][4]
                self.seen.setdefault(pid, (name, stats[pid][3]))
                if kind == "actor":
                    row["actor_max"] = max(row.get("actor_max", 0.0), mb)
                    row["actor_sum"] = row.get("actor_sum", 0.0) + mb
                elif kind == "other":
                    row["other"] = row.get("other", 0.0) + mb
                else:
                    row[kind] = mb
        row["actors"] = len(kinds["actor"])
        # cores busy over the interval: this cluster's processes, and everything else on the machine (noise)
        row["cpu_cluster"] = row["cpu_other"] = None
        if self.samples and row["t_s"] > self.samples[-1]["t_s"]:
            dt = (row["t_s"] - self.samples[-1]["t_s"]) * TICKS
            row["cpu_cluster"] = cluster_ticks / dt
            row["cpu_other"] = max(busy - self.busy_base - cluster_ticks, 0) / dt
        self.busy_base = busy
        m = last_metrics(self.run_dir / "metrics.jsonl")
        row["update"] = m.get("update") if m else None
        row["env_steps"] = m.get("env_steps") if m else None
        prev = self.samples[-1] if self.samples else None
        if prev and prev["env_steps"] is not None and row["env_steps"] is not None and row["t_s"] > prev["t_s"]:
            row["sps"] = (row["env_steps"] - prev["env_steps"]) / (row["t_s"] - prev["t_s"])
        else:
            row["sps"] = None
        row["rss_mb"] = rss
        self.samples.append(row)
        return row

    def run(self) -> None:
        duration = self.args.minutes * 60.0
        next_at = self.t0
        while True:
            now = time.monotonic()
            if now - self.t0 >= duration:
                break
            if self.proc.poll() is not None:
                self.early_exit = self.proc.returncode
                print(f"soak: launch.py exited early with code {self.early_exit} at "
                      f"{now - self.t0:.0f}s (see {self.run_dir / 'launch.out'})", flush=True)
                break
            if now >= next_at:
                row = self.sample()
                print(f"soak: t={row['t_s']:7.0f}s  steps={fmt(row['env_steps'])}  sps={fmt(row['sps'])}  "
                      f"launch={fmt(row.get('launch'))}MB  learner={fmt(row.get('learner'))}MB  "
                      f"actor_max={fmt(row.get('actor_max'))}MB  actors={row['actors']}  "
                      f"cpu cluster/other={fmt(row['cpu_cluster'], 2)}/{fmt(row['cpu_other'], 2)}", flush=True)
                next_at += self.args.interval
                while next_at <= now:  # fell behind (a suspended machine): do not burst
                    next_at += self.args.interval
            time.sleep(max(0.0, min(next_at, self.t0 + duration) - time.monotonic()) + 0.01)
        if self.early_exit is None:
            self.sample()  # the end point of the steady state

    def leftovers(self) -> list[tuple[int, str]]:
        """Processes of this cluster still running: any sampled one (same pid and start time), and any process
        in launch.py's process group (its children inherit it)."""
        left = {pid: name for pid, (name, start) in self.seen.items() if alive(pid, start)}
        for pid, st in all_stats().items():
            if st[2] == self.proc.pid and st[0] != "Z" and pid not in left:
                left[pid] = self.seen.get(pid, (f"pid {pid} (process group)",))[0]
        return sorted(left.items())

    def stop(self) -> list[str]:
        """SIGTERM launch.py and wait for it; then SIGKILL whatever of the cluster is still running.

        Returns the processes that were left over: still running --stop-timeout-s after the SIGTERM (launch.py)
        or a few seconds after launch.py exited (anything else; launch.py itself waits for its children)."""
        if self.proc is None:
            return []
        if not terminate(self.proc, self.args.stop_timeout_s):
            print(f"soak: launch.py still running {self.args.stop_timeout_s:g}s after SIGTERM", flush=True)
        deadline = time.monotonic() + 5.0
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        if left:
            print(f"soak: left over, killing: {left}", flush=True)
            kill_group(self.proc.pid)
            for pid, (_, start) in self.seen.items():
                if alive(pid, start):
                    kill(pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        still = self.leftovers()
        if still:
            print(f"soak: WARNING: still running after SIGKILL: {still}", flush=True)
        return [f"{name} (pid {pid})" for pid, name in left]


# ----------------------------------------------------------------------------------------------- summary

def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(samples: list[dict], args, early_exit: str | None, leftovers: list[str]) -> dict:
    duration = samples[-1]["t_s"] if samples else 0.0
    warmup = args.warmup_s if args.warmup_s is not None else min(max(60.0, 0.1 * args.minutes * 60), 0.5 * args.minutes * 60)
    steady = [s for s in samples if s["t_s"] >= warmup]
    summary: dict = {"duration_s": duration, "warmup_s": warmup, "samples": len(samples),
                     "steady_samples": len(steady), "rss": {}, "checks": {}}
    k = max(1, round(0.05 * len(steady)))
    for kind in KINDS:
        values = [s[kind] for s in steady if s.get(kind) is not None]
        if len(values) < 2:
            continue
        start, end = _mean(values[:k]), _mean(values[-k:])
        summary["rss"][kind] = {"start_mb": start, "end_mb": end, "growth_pct": 100.0 * (end - start) / start,
                                "max_mb": max(values)}
    # SPS: steps delta / time delta over the first and the last quarter of the steady state
    with_steps = [s for s in steady if s.get("env_steps") is not None]
    sps = {}
    if len(with_steps) >= 5:
        t_a, t_b = with_steps[0]["t_s"], with_steps[-1]["t_s"]
        q = (t_b - t_a) / 4
        first = [s for s in with_steps if s["t_s"] <= t_a + q + 1e-9]
        last = [s for s in with_steps if s["t_s"] >= t_b - q - 1e-9]
        for name, part in (("first_quarter", first), ("last_quarter", last)):
            if len(part) >= 2 and part[-1]["t_s"] > part[0]["t_s"]:
                sps[name] = (part[-1]["env_steps"] - part[0]["env_steps"]) / (part[-1]["t_s"] - part[0]["t_s"])
                summary.setdefault("cpu_other_cores", {})[name] = _mean(
                    [s["cpu_other"] for s in part[1:] if s.get("cpu_other") is not None])
                cpu_s = sum(b["cpu_cluster"] * (b["t_s"] - a["t_s"]) for a, b in zip(part, part[1:])
                            if b.get("cpu_cluster") is not None)
                if cpu_s > 0:  # steps per CPU-second of the cluster: flat even when the machine is shared
                    summary.setdefault("steps_per_cpu_s", {})[name] = (part[-1]["env_steps"] - part[0]["env_steps"]) / cpu_s
        sps["steady"] = (t_b > t_a and (with_steps[-1]["env_steps"] - with_steps[0]["env_steps"]) / (t_b - t_a)) or None
        if sps.get("first_quarter") and sps.get("last_quarter") is not None:
            sps["ratio"] = sps["last_quarter"] / sps["first_quarter"]
    summary["sps"] = sps
    checks = summary["checks"]
    checks["ran_full_time"] = {"ok": early_exit is None, "detail": early_exit or "yes"}
    for kind in ("launch", "learner", "actor_max"):
        r = summary["rss"].get(kind)
        checks[f"rss_{kind}"] = ({"ok": r["growth_pct"] < args.max_rss_growth_pct,
                                  "detail": f"{r['growth_pct']:+.1f}% (< {args.max_rss_growth_pct:g}%)"} if r else
                                 {"ok": False, "detail": "not enough steady-state samples"})
    ratio = sps.get("ratio")
    checks["sps_flat"] = ({"ok": args.sps_min_ratio <= ratio <= args.sps_max_ratio,
                           "detail": f"last/first quarter {ratio:.3f} (in [{args.sps_min_ratio:g}, {args.sps_max_ratio:g}])"}
                          if ratio is not None else {"ok": False, "detail": "not enough steady-state samples with steps"})
    checks["no_leftovers"] = {"ok": not leftovers, "detail": ", ".join(leftovers) or "none"}
    noise = [v for v in (summary.get("cpu_other_cores") or {}).values() if v is not None]
    if noise and max(noise) > args.noise_cores:
        summary["warning"] = (f"other processes kept {max(noise):.2f} of {os.cpu_count()} cores busy in a quarter "
                              f"(first {fmt(summary['cpu_other_cores'].get('first_quarter'), 2)}, last "
                              f"{fmt(summary['cpu_other_cores'].get('last_quarter'), 2)}): the SPS comparison "
                              "measures the machine, not the cluster; rerun on an idle machine")
    summary["pass"] = all(c["ok"] for c in checks.values())
    return summary


def report(summary: dict) -> str:
    lines = [f"soak summary: {summary['duration_s']:.0f}s, warm-up {summary['warmup_s']:.0f}s, "
             f"{summary['samples']} samples ({summary['steady_samples']} steady)",
             "",
             "| process | RSS start (MB) | RSS end (MB) | growth | max (MB) |",
             "|---|---:|---:|---:|---:|"]
    for kind, r in summary["rss"].items():
        lines.append(f"| {kind} | {r['start_mb']:.1f} | {r['end_mb']:.1f} | {r['growth_pct']:+.1f}% | {r['max_mb']:.1f} |")
    s = summary["sps"]
    lines += ["", f"SPS: steady {fmt(s.get('steady'))}, first quarter {fmt(s.get('first_quarter'))}, "
                  f"last quarter {fmt(s.get('last_quarter'))}, ratio {fmt(s.get('ratio'), 3)}"]
    eff = summary.get("steps_per_cpu_s") or {}
    if eff.get("first_quarter") and eff.get("last_quarter"):
        lines.append(f"steps per cluster CPU-second: first quarter {fmt(eff['first_quarter'])}, last quarter "
                     f"{fmt(eff['last_quarter'])}, ratio {eff['last_quarter'] / eff['first_quarter']:.3f}")
    noise = summary.get("cpu_other_cores") or {}
    lines += [f"cores busy outside the cluster: first quarter {fmt(noise.get('first_quarter'), 2)}, "
              f"last quarter {fmt(noise.get('last_quarter'), 2)}", ""]
    if summary.get("warning"):
        lines += [f"WARNING: {summary['warning']}", ""]
    for name, c in summary["checks"].items():
        lines.append(f"  {'PASS' if c['ok'] else 'FAIL'}  {name}: {c['detail']}")
    lines.append(f"\nsoak: {'PASS' if summary['pass'] else 'FAIL'}")
    return "\n".join(lines)


def write_samples(out: Path, samples: list[dict], summary: dict | None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cols = ["t_s", "time", "update", "env_steps", "sps", "actors", "cpu_cluster", "cpu_other", *KINDS]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for s in samples:
            w.writerow({c: (round(s[c], 2) if isinstance(s.get(c), float) else s.get(c)) for c in cols})
    out.with_suffix(".json").write_text(json.dumps({"samples": samples, "summary": summary}, indent=1))


# ----------------------------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python benchmarks/soak.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the run (default: %(default)s)")
    p.add_argument("--config", default="configs/breakout.toml", help="run config (default: %(default)s)")
    p.add_argument("--actors", type=int, default=os.cpu_count() or 1, help="actor processes (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="passed to launch.py (repeatable)")
    p.add_argument("--launch-arg", action="append", default=[], metavar="ARG",
                   help="any other argument for launch.py, e.g. --launch-arg=--groups=2 (repeatable)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default: %(default)s)")
    p.add_argument("--warmup-s", type=float, default=None,
                   help="seconds before the steady state (default: 10%% of the run, at least 60, at most half)")
    p.add_argument("--run-dir", default=None, help="run directory (default: a temporary one, removed after)")
    p.add_argument("--out", default=None, help="samples go to OUT.csv and OUT.json (default: RUN_DIR/soak; "
                                               "with a temporary run dir: ./soak-<timestamp>)")
    p.add_argument("--max-rss-growth-pct", type=float, default=10.0, help="fail at this RSS growth (default: %(default)s)")
    p.add_argument("--sps-min-ratio", type=float, default=0.9, help="last/first-quarter SPS floor (default: %(default)s)")
    p.add_argument("--sps-max-ratio", type=float, default=1.1, help="last/first-quarter SPS ceiling (default: %(default)s)")
    p.add_argument("--noise-cores", type=float, default=0.25,
                   help="warn when processes outside the cluster keep more cores than this busy (default: %(default)s)")
    p.add_argument("--stop-timeout-s", type=float, default=60.0,
                   help="wait this long for launch.py after SIGTERM before SIGKILL (default: %(default)s)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.interval <= 0 or args.actors < 0:
        p.error("--minutes and --interval must be > 0, --actors >= 0")
    if args.interval * 8 > args.minutes * 60:
        p.error(f"--interval {args.interval:g}s leaves fewer than 8 samples in {args.minutes:g} minutes")
    if args.sps_min_ratio > args.sps_max_ratio:
        p.error("--sps-min-ratio must be <= --sps-max-ratio")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    tmp = None
    if args.run_dir:
        run_dir = Path(args.run_dir).resolve()
    else:
        tmp = tempfile.TemporaryDirectory(prefix="soak-")
        run_dir = Path(tmp.name) / "run"
    out = Path(args.out) if args.out else (run_dir / "soak" if tmp is None else Path(f"soak-{time.strftime('%Y%m%d-%H%M%S')}"))
    soak = Soak(args, run_dir)
    interrupted = False

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    summary = None
    try:
        try:
            soak.start()
            soak.run()
        except KeyboardInterrupt:
            interrupted = True
            print("soak: interrupted; stopping the cluster", flush=True)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cluster stop cleanly
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            leftovers = soak.stop()
        early = ("interrupted" if interrupted else
                 None if soak.early_exit is None else f"launch.py exited early with code {soak.early_exit}")
        summary = summarize(soak.samples, args, early, leftovers)
        summary["config"] = {"command": soak.command(), "minutes": args.minutes, "interval_s": args.interval,
                             "max_rss_growth_pct": args.max_rss_growth_pct,
                             "sps_ratio_band": [args.sps_min_ratio, args.sps_max_ratio], "cpus": os.cpu_count()}
        write_samples(out, soak.samples, summary)
        if early:
            print(f"--- launch.out (tail) ---\n{tail(run_dir / 'launch.out')}")
        print(report(summary))
        print(f"samples: {out.with_suffix('.csv')}, {out.with_suffix('.json')}")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0 if summary and summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
