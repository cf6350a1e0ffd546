"""Throughput benchmark (issue 4): this system against the env ceiling and AsyncVectorEnv, side by side.

    python benchmarks/throughput.py                 # all rows, N = os.cpu_count(), sweep: ~5 min on 2 cores
    python benchmarks/throughput.py --quick         # smoke check (short durations, no sweep)
    python benchmarks/throughput.py --envs-per-actor 4 --groups 2 --no-sweep

Every row runs on the same cores in one invocation, one after the other, so the ratios are what to
read on a noisy machine. Rows (N = --actors processes, E = --envs-per-actor envs each):

  ceiling          N spawned processes each stepping E wrapped envs with random actions, no communication
  asyncvec         gymnasium AsyncVectorEnv of N*E make_env envs + batched Nature-CNN inference on CPU
  collect-random   python launch.py --collect-only --random-policy  (transport overhead vs the ceiling)
  collect-network  python launch.py --collect-only                  (compare with asyncvec)
  training         python launch.py                                 (full PPO; RSS of learner and actors)

System rows read metrics.jsonl: agent steps/s = env_steps delta / elapsed_s delta, skipping the first
rollout. Figures go to docs/results/throughput-<hostname>.json (--out) and a markdown table is printed.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _path in (REPO, HERE):  # actor/, learner/, protocol/; procfs.py (also seen by spawned children)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from breakdown import describe, steady_state  # noqa: E402
from procfs import (TICKS, children_of, cmdline, fmt, kill_group, kill_tree, machine_busy_ticks,  # noqa: E402
                    read_metrics, read_rss_mb, tail, terminate, tree_cpu_s)

_RUN_IDS = itertools.count()
_CHILDREN: list = []  # multiprocessing children and launch Popens still to be reaped on exit


# ----------------------------------------------------------------------------------------------- row 1

def _ceiling_worker(env_id: str, num_envs: int, seed: int, barrier, results, warmup: float, seconds: float):
    from actor.envs import make_env
    from protocol.settings import EnvSettings
    envs = [make_env(EnvSettings(env_id=env_id), seed + i) for i in range(num_envs)]
    for env in envs:
        env.reset()
    barrier.wait(timeout=300)
    start = time.monotonic()
    t_begin, t_end = start + warmup, start + warmup + seconds
    steps, now, counting, cpu0 = 0, start, False, 0.0
    while now < t_end:
        for env in envs:  # round robin, like an actor's env group; auto-reset like the actor does
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        now = time.monotonic()
        if counting:
            steps += num_envs
        elif now >= t_begin:
            counting, t_begin, cpu0 = True, now, time.process_time()
    results.put({"steps": steps, "elapsed": now - t_begin, "cpu_s": time.process_time() - cpu0,
                 "rss_mb": read_rss_mb(os.getpid())})
    for env in envs:
        env.close()


def run_ceiling(env_id: str, procs: int, envs_per_proc: int, warmup: float, seconds: float) -> dict:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_ceiling_worker, daemon=True, name=f"ceiling-{i}",
                           args=(env_id, envs_per_proc, 1000 * i + 1, barrier, results, warmup, seconds))
               for i in range(procs)]
    _CHILDREN.extend(workers)
    for w in workers:
        w.start()
    try:
        got = [_get(results, workers, warmup + seconds + 300) for _ in workers]
    finally:
        _reap(workers)
    sps = sum(g["steps"] / g["elapsed"] for g in got)
    return {"sps": sps, "procs": procs, "envs": procs * envs_per_proc,
            "cores_used": sum(g["cpu_s"] / g["elapsed"] for g in got),
            "per_proc_sps": [g["steps"] / g["elapsed"] for g in got],
            "env_process_rss_mb": max(g["rss_mb"] or 0 for g in got)}


def _get(queue, workers, timeout: float):
    import queue as q
    deadline = time.monotonic() + timeout
    while True:
        try:
            return queue.get(timeout=1.0)
        except q.Empty:
            dead = [w for w in workers if w.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{dead[0].name} failed with exit code {dead[0].exitcode}")
            if time.monotonic() > deadline:
                raise RuntimeError("benchmark worker timed out")


def _reap(workers) -> None:
    for w in workers:
        w.join(timeout=10)
        if w.is_alive():
            kill_tree(w.pid)
            w.join()
        if w in _CHILDREN:
            _CHILDREN.remove(w)


# ----------------------------------------------------------------------------------------------- row 2

def _asyncvec_worker(env_id: str, num_envs: int, torch_threads: int, num_steps: int, warmup: float,
                     seconds: float, results):
    import gymnasium as gym
    import torch
    from actor.envs import describe_spaces, make_env
    from learner.config import ModelConfig
    from learner.model.networks import build_model
    from protocol.settings import EnvSettings
    if torch_threads:
        torch.set_num_threads(torch_threads)  # what the learner does with run.torch_threads
    settings = EnvSettings(env_id=env_id)
    probe = make_env(settings, 0)  # like the learner's probe_spaces
    obs_space, action_space = describe_spaces(probe)
    probe.close()
    model = build_model(obs_space, action_space, ModelConfig())
    venv = gym.vector.AsyncVectorEnv([partial(make_env, settings, 1000 * i + 1) for i in range(num_envs)],
                                     context="spawn", autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        obs, _ = venv.reset()
        store = torch.zeros((num_steps, *obs.shape), dtype=torch.from_numpy(obs).dtype)  # CleanRL-style rollout
        gen = torch.Generator()
        gen.manual_seed(1)
        start = time.monotonic()
        t_begin, t_end = start + warmup, start + warmup + seconds
        steps, t, infer_s, now, counting, cpu0 = 0, 0, 0.0, start, False, 0.0
        while now < t_end:
            x = torch.from_numpy(obs)
            store[t % num_steps] = x
            t0 = time.monotonic()
            action, _, _ = model.act(x, generator=gen)
            t1 = time.monotonic()
            obs, _, _, _, _ = venv.step(action.numpy())
            t += 1
            now = time.monotonic()
            if counting:
                steps += num_envs
                infer_s += t1 - t0
            elif now >= t_begin:
                counting, t_begin, cpu0 = True, now, tree_cpu_s(os.getpid())  # this process + its env workers
        cpu = tree_cpu_s(os.getpid()) - cpu0
        results.put({"steps": steps, "elapsed": now - t_begin, "cpu_s": cpu,
                     "inference_share": infer_s / max(now - t_begin, 1e-9),
                     "torch_threads": torch.get_num_threads()})
    finally:
        venv.close(terminate=True)


def run_asyncvec(env_id: str, num_envs: int, torch_threads: int, warmup: float, seconds: float) -> dict:
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    w = ctx.Process(target=_asyncvec_worker, name="asyncvec", args=(env_id, num_envs, torch_threads, 128, warmup,
                                                                    seconds, results))
    _CHILDREN.append(w)
    w.start()
    try:
        g = _get(results, [w], warmup + seconds + 300)
    finally:
        _reap([w])
    return {"sps": g["steps"] / g["elapsed"], "procs": num_envs, "envs": num_envs,
            "cores_used": g["cpu_s"] / g["elapsed"],
            "inference_share": g["inference_share"], "torch_threads": g["torch_threads"]}


# ----------------------------------------------------------------------------------------------- rows 3-5

def cluster_pids(launch_pid: int, run_dir: Path) -> tuple[int | None, list[int]]:
    """(learner, actors) among the launch process's children: endpoints.json names the learner's pid;
    the spawn helper (resource_tracker) is not an actor."""
    learner = None
    try:
        learner = int(json.loads((run_dir / "endpoints.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        pass
    actors = [p for p in children_of(launch_pid) if p != learner and "resource_tracker" not in cmdline(p)]
    return learner, actors


def run_launch(name: str, flags: list[str], args, actors: int, tmp: Path, seconds: float) -> dict:
    run_dir = tmp / f"{next(_RUN_IDS):02d}-{name}-n{actors}"
    cmd = [sys.executable, "launch.py", "--actors", str(actors), "--envs-per-actor", str(args.envs_per_actor),
           "--groups", str(args.groups), "--total-steps", str(10**12), "--run-dir", str(run_dir),
           "--set", f"env.env_id={json.dumps(args.env)}",
           "--set", 'cluster.address="tcp://127.0.0.1:0"', "--set", 'cluster.weights_address="tcp://127.0.0.1:0"',
           "--set", f"run.torch_threads={args.torch_threads}", *args.launch_set, *flags]
    run_dir.mkdir(parents=True)
    logf = open(run_dir.with_suffix(".log"), "w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    _CHILDREN.append(proc)
    rss: dict[int, float] = {}
    learner = None
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + args.row_timeout
        while not read_metrics(metrics):  # start-up and the first rollout
            if proc.poll() is not None or time.monotonic() > deadline:
                why = (f"launch.py exited ({proc.returncode})" if proc.poll() is not None
                       else f"no rollout within --row-timeout {args.row_timeout:g}s")
                raise RowFailed(name, why, run_dir)
            time.sleep(0.2)
        t_start, cpu_start = time.monotonic(), tree_cpu_s(proc.pid)
        while True:
            time.sleep(0.5)
            learner, actor_pids = cluster_pids(proc.pid, run_dir)
            for pid in [learner, *actor_pids]:
                if pid is not None and (mb := read_rss_mb(pid)) is not None:
                    rss[pid] = max(rss.get(pid, 0.0), mb)
            if proc.poll() is not None:
                raise RowFailed(name, f"launch.py exited early ({proc.returncode})", run_dir)
            waited = time.monotonic() - t_start
            enough = len(read_metrics(metrics)) >= args.skip + args.rollouts
            if waited >= seconds and enough or waited >= max(3 * seconds + 60, args.row_timeout):
                cores_used = (tree_cpu_s(proc.pid) - cpu_start) / (time.monotonic() - t_start)
                break
    finally:
        _stop_launch(proc)
        logf.close()
    records = read_metrics(run_dir / "metrics.jsonl")
    state = steady_state(records, args.skip)  # records[skip - 1] is the base line
    if state is None:
        raise RowFailed(name, f"only {len(records)} rollouts", run_dir)
    sps, steady = state["sps"], records[max(args.skip, 1):]
    actor_rss = [v for p, v in rss.items() if p != learner]
    mean = lambda key: sum(r[key] for r in steady) / len(steady)  # noqa: E731
    return {"sps": sps, "procs": actors, "envs": actors * args.envs_per_actor, "rollouts": len(steady),
            "skipped_rollouts": state["skipped"], "breakdown": state["breakdown"],
            "cores_used": cores_used,
            "per_rollout_sps": [round(r["sps"], 1) for r in steady],
            "collect_s_mean": mean("collect_s"), "update_s_mean": mean("update_s"),
            "learner_rss_mb": rss.get(learner) if learner else None,
            "actor_rss_mb_max": max(actor_rss) if actor_rss else None,
            "actor_rss_mb_mean": sum(actor_rss) / len(actor_rss) if actor_rss else None,
            "command": " ".join(cmd[1:])}


class RowFailed(RuntimeError):
    """A launch.py row that made no progress: its name, why, and the learner's last log lines."""

    def __init__(self, row: str, why: str, run_dir: Path):
        super().__init__(f"row {row} failed: {why}; the learner's last log lines:\n"
                         + tail(run_dir / "learner.log", n=12, missing="(no learner.log)")
                         + "\nlaunch.py's last lines:\n" + tail(run_dir.with_suffix(".log"), n=6, missing="(none)"))


def _stop_launch(proc: subprocess.Popen) -> None:
    """SIGTERM (the launcher stops the learner, which says goodbye to the actors), then SIGKILL the group."""
    terminate(proc, 30)
    kill_group(proc.pid)  # stragglers: the launcher started its own session
    proc.wait()
    if proc in _CHILDREN:
        _CHILDREN.remove(proc)


# ----------------------------------------------------------------------------------------------- report

ROWS = ("ceiling", "asyncvec", "collect-random", "collect-network", "training")


def _our_cpu_s() -> float:
    t = os.times()  # children_* cover every reaped descendant: each of our processes waits for its own
    return t.user + t.system + t.children_user + t.children_system


def with_background(make, n: int) -> dict:
    """Run one row and add other_load_cores: CPU used meanwhile by processes that are not ours."""
    t0, busy0, ours0 = time.monotonic(), machine_busy_ticks(), _our_cpu_s()
    row = make(n)
    wall = time.monotonic() - t0
    row["other_load_cores"] = max(0.0, (machine_busy_ticks() - busy0) / TICKS - (_our_cpu_s() - ours0)) / wall
    row["row_wall_s"] = wall
    return row


def median_run(runs: list[dict]) -> dict:
    ordered = sorted(runs, key=lambda r: r["sps"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["sps_all"] = [r["sps"] for r in runs]
    return row


def ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or not b.get("sps"):
        return None
    return a["sps"] / b["sps"]


def per_cpu(row: dict | None) -> float | None:
    """Agent steps per CPU-second the row's own processes used: robust to other load, blind to idle waits."""
    return row["sps"] / row["cores_used"] if row and row.get("cores_used") else None


def cpu_ratio(a: dict | None, b: dict | None) -> float | None:
    x, y = per_cpu(a), per_cpu(b)
    return x / y if x and y else None


def markdown(result: dict) -> str:
    rows, r = result["rows"], result["ratios"]
    ceiling = rows.get("ceiling")
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    lines = ["| row | processes | envs | agent steps/s | vs ceiling | cores used | steps per CPU-s | "
             "per CPU-s vs ceiling | other load (cores) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, row in rows.items():
        lines.append(f"| {key} | {row['procs']} | {row['envs']} | {fmt(row['sps'])} | {pct(ratio(row, ceiling))} | "
                     f"{fmt(row.get('cores_used'), 2)} | {fmt(per_cpu(row))} | {pct(cpu_ratio(row, ceiling))} | "
                     f"{row['other_load_cores']:.2f} |")
    lines += ["", "| ratio | agent steps/s | per CPU-second | target |", "|---|---:|---:|---|"]
    targets = {"collect-random / ceiling": ">= 90%"}
    for key, value in r.items():
        lines.append(f"| {key} | {pct(value)} | {pct(result['cpu_ratios'].get(key))} | {targets.get(key, '')} |")
    t = rows.get("training")
    if t:
        lines += ["", f"training: {t['rollouts']} rollouts measured, per rollout collect {t['collect_s_mean']:.2f}s + "
                      f"update {t['update_s_mean']:.2f}s"]
    for key, row in rows.items():
        if "breakdown" in row:
            lines += ["", f"{key}: the first {row['skipped_rollouts']} rollouts skipped, {row['rollouts']} measured",
                      *describe(row["breakdown"])]
    mem = result.get("memory")
    if mem:
        lines += ["", "| resident memory (training, peak) | MB | target |", "|---|---:|---|",
                  f"| one actor process (max over actors) | {fmt(mem['actor_rss_mb_max'], 1)} | < 100 MB |",
                  f"| learner | {fmt(mem['learner_rss_mb'], 1)} | |",
                  f"| bare env process (ceiling worker, reference) | {fmt(mem['env_process_rss_mb'], 1)} | |"]
    if result.get("sweep"):
        lines += ["", "| actors N | ceiling | collect-random | ratio | per CPU-s ratio | other load (cores) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for s in result["sweep"]:
            load = " / ".join(f"{x:.2f}" for x in s["other_load_cores"])
            lines.append(f"| {s['n']} | {fmt(s['ceiling'])} | {fmt(s['collect_random'])} | {pct(s['ratio'])} | "
                         f"{pct(s['cpu_ratio'])} | {load} |")
    return "\n".join(lines)


def sweep_sizes(top: int) -> list[int]:
    sizes, n = [], 1
    while n < top:
        sizes.append(n)
        n *= 2
    return sizes + [top]


def git_describe() -> str | None:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="ALE/Breakout-v5", help="gymnasium id (default: %(default)s)")
    p.add_argument("--actors", type=int, default=os.cpu_count(), help="N: actor processes, ceiling processes "
                   "(default: os.cpu_count() = %(default)s)")
    p.add_argument("--envs-per-actor", type=int, default=32,
                   help="E: envs per process; many envs per message amortize its cost (default: %(default)s: "
                        "16 per message, 0.92x the ceiling on 2 cores where 8 per message gave 0.88x)")
    p.add_argument("--groups", type=int, default=2, choices=(1, 2), help="env groups per actor: 2 steps one half while the other waits (default: 2)")
    p.add_argument("--seconds", type=float, default=None, help="measured seconds per row (default: 20, --quick 5)")
    p.add_argument("--warmup", type=float, default=None, help="uncounted seconds before measuring the ceiling "
                   "and asyncvec rows (default: 3, --quick 1); system rows skip their first rollout instead")
    p.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=None,
                   help="scaling sweep 1, 2, 4, ... N for ceiling and collect-random (default: on, off with --quick)")
    p.add_argument("--rows", default="ceiling,asyncvec,collect-random,collect-network,training",
                   help="comma-separated rows to run (default: all)")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="run.torch_threads for the learner and the asyncvec row (0: torch's default, as the "
                        "default config)")
    p.add_argument("--launch-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="extra --set passed to every launch.py run; repeatable")
    p.add_argument("--repeat", type=int, default=1, help="rounds of the rows, interleaved; rows report the median "
                   "run, ratios the median of per-round ratios (default: %(default)s)")
    p.add_argument("--row-timeout", type=float, default=180.0,
                   help="a launch.py row with no rollout by then fails with the learner's last log lines, and the "
                        "next rows run (default: %(default)s s)")
    p.add_argument("--rollouts", type=int, default=None, help="launch.py rows: rollouts measured at least (default: "
                   "10, --quick 2)")
    p.add_argument("--skip", type=int, default=2, help="launch.py rows: first rollouts not measured (start-up, "
                   "buffers allocated and first touched; default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="short durations for a smoke check")
    p.add_argument("--keep-runs", action="store_true", help="keep the launch.py run directories and logs")
    p.add_argument("--out", default=None, help="JSON output (default: docs/results/throughput-<hostname>.json)")
    return p


def run_rounds(repeat: int, wanted: list[str], makers: dict, n: int, runs: dict, result: dict) -> None:
    """Every wanted row, in ROWS order, `repeat` times: each run appended to runs[row]; a row that fails is
    reported in result["errors"] and the next rows still run."""
    for _ in range(repeat):
        for key in ROWS:
            if key not in wanted:
                continue
            try:
                row = with_background(makers[key], n)
            except RowFailed as exc:
                print(f"  error: {exc}", file=sys.stderr, flush=True)
                result.setdefault("errors", []).append(str(exc))
                continue
            runs.setdefault(key, []).append(row)
            print(f"  {key:<16} {row['sps']:>9,.0f} agent steps/s  ({row['procs']} procs, {row['envs']} envs, "
                  f"{row['cores_used']:.2f} cores used; other load {row['other_load_cores']:.2f} cores)", flush=True)
            if "rollouts" in row:
                print(f"    steady state: {row['rollouts']} rollouts measured, the first {row['skipped_rollouts']} "
                      f"skipped", flush=True)
                print("\n".join(describe(row["breakdown"])), flush=True)


def run_sweep(n: int, makers: dict, rows: dict, result: dict) -> None:
    """ceiling and collect-random for 1, 2, 4, ... n actor processes (n's from the rows already run)."""
    for k in sweep_sizes(n):
        try:
            c = rows["ceiling"] if k == n and "ceiling" in rows else with_background(makers["ceiling"], k)
            s = (rows["collect-random"] if k == n and "collect-random" in rows
                 else with_background(makers["collect-random"], k))
        except RowFailed as exc:
            print(f"  error: sweep N={k}: {exc}", file=sys.stderr, flush=True)
            result.setdefault("errors", []).append(f"sweep N={k}: {exc}")
            continue
        result["sweep"].append({"n": k, "ceiling": c["sps"], "collect_random": s["sps"],
                                "ratio": s["sps"] / c["sps"] if c["sps"] else None,
                                "cpu_ratio": cpu_ratio(s, c),
                                "other_load_cores": [c["other_load_cores"], s["other_load_cores"]]})
        print(f"  sweep N={k:<3} ceiling {c['sps']:>9,.0f}  collect-random {s['sps']:>9,.0f}  "
              f"({100 * s['sps'] / c['sps']:.0f}%)", flush=True)


def stop_children(tmp: Path, keep_runs: bool) -> None:
    for child in list(_CHILDREN):
        if isinstance(child, subprocess.Popen):
            _stop_launch(child)
        else:
            kill_tree(child.pid)
    if not keep_runs:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


RATIO_PAIRS = {"collect-random / ceiling": ("collect-random", "ceiling"),
               "collect-network / asyncvec": ("collect-network", "asyncvec"),
               "training / ceiling": ("training", "ceiling"),
               "collect-network / ceiling": ("collect-network", "ceiling"),
               "asyncvec / ceiling": ("asyncvec", "ceiling")}


def add_ratios(runs: dict, result: dict) -> None:
    """Each pair's ratio per round (the two rows ran minutes apart at most), then the median of the rounds."""
    for name, (a, b) in RATIO_PAIRS.items():
        per_round = [x for x in map(ratio, runs.get(a, []), runs.get(b, [])) if x is not None]
        result["ratios"][name] = statistics.median(per_round) if per_round else None
        per_round = [x for x in map(cpu_ratio, runs.get(a, []), runs.get(b, [])) if x is not None]
        result["cpu_ratios"][name] = statistics.median(per_round) if per_round else None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.launch_set = [x for s in args.launch_set for x in ("--set", s)]
    args.rollouts = args.rollouts if args.rollouts is not None else (2 if args.quick else 10)
    seconds = args.seconds if args.seconds is not None else (5.0 if args.quick else 20.0)
    warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 3.0)
    sweep = args.sweep if args.sweep is not None else not args.quick
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    n, e = args.actors, args.envs_per_actor
    out = Path(args.out) if args.out else REPO / "docs" / "results" / f"throughput-{socket.gethostname()}.json"
    result = {"host": socket.gethostname(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
              "git": git_describe(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "settings": {"env": args.env, "actors": n, "envs_per_actor": e, "groups": args.groups,
                           "seconds": seconds, "warmup": warmup, "torch_threads": args.torch_threads,
                           "launch_set": args.launch_set[1::2], "sweep": sweep, "repeat": args.repeat},
              "load_avg_before": os.getloadavg(), "rows": {}, "runs": {}, "ratios": {}, "cpu_ratios": {},
              "sweep": []}
    rows = result["rows"]
    runs: dict[str, list[dict]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="ppo-throughput-"))
    t_all = time.monotonic()
    launch_rows = {"collect-random": ["--collect-only", "--random-policy"],
                   "collect-network": ["--collect-only"], "training": []}
    makers = {"ceiling": lambda k: run_ceiling(args.env, k, e, warmup, seconds),
              "asyncvec": lambda k: run_asyncvec(args.env, k * e, args.torch_threads, warmup, seconds),
              **{key: partial(lambda key, flags, k: run_launch(key, flags, args, k, tmp, seconds), key, flags)
                 for key, flags in launch_rows.items()}}
    try:
        print(f"throughput: {args.env}, N={n} x E={e} (groups {args.groups}), {seconds:g}s per row, "
              f"{args.repeat} round(s), load {os.getloadavg()[0]:.2f}; run dirs in {tmp}", flush=True)
        run_rounds(args.repeat, wanted, makers, n, runs, result)
        rows.update({key: median_run(rs) for key, rs in runs.items()})
        if sweep:
            run_sweep(n, makers, rows, result)
    except KeyboardInterrupt:
        print("interrupted: stopping every child process", file=sys.stderr)
        return 130
    finally:
        stop_children(tmp, args.keep_runs)
    add_ratios(runs, result)
    if "training" in rows:
        t = rows["training"]
        result["memory"] = {"actor_rss_mb_max": t["actor_rss_mb_max"], "actor_rss_mb_mean": t["actor_rss_mb_mean"],
                            "learner_rss_mb": t["learner_rss_mb"],
                            "env_process_rss_mb": rows.get("ceiling", {}).get("env_process_rss_mb")}
    result["runs"] = runs
    result["load_avg_after"] = os.getloadavg()
    result["wall_s"] = time.monotonic() - t_all
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(markdown(result))
    print(f"\nwall {result['wall_s']:.0f}s, load average {result['load_avg_before'][0]:.2f} -> "
          f"{result['load_avg_after'][0]:.2f}; figures in {out}")
    if result.get("errors"):
        print(f"{len(result['errors'])} row(s) failed: " + "; ".join(e.splitlines()[0] for e in result["errors"]),
              file=sys.stderr)
        return 1
    return 0


def _sigterm(*_):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored (cron, &)
    sys.exit(main())
