"""Learner capacity: how many env steps per second one learner process takes, with no emulator in the way.

    python benchmarks/learner_capacity.py                         # 8, 16, 32 envs per message, random policy
    python benchmarks/learner_capacity.py --policy network        # the CNN too (on CPU it dominates)
    python benchmarks/learner_capacity.py --other /tmp/main-before  # the same load on another checkout, interleaved
    python benchmarks/learner_capacity.py --collectors 1,2,4 --actors 4  # K collector processes, side by side
    python benchmarks/learner_capacity.py --device cuda --policy network --collectors 1,2,4 --actors 16  # a GPU box
    python benchmarks/learner_capacity.py --codec none,zstd --transport tcp  # raw against compressed frames
    python benchmarks/learner_capacity.py --env-sleep-ms 10 --env-sleep-spread 0.5 --mode train --policy network \
        --config configs/cartpole.toml --launch-set run.policy_lag=1  # stragglers: the end-of-rollout barrier
    python benchmarks/learner_capacity.py --env-sleep-ms 0.625 --env-sleep-spread 0.5 --one-core --mode train \
        --policy network --config configs/cartpole.toml --launch-set run.policy_lag=1 --launch-set run.segments=true \
        --envs-per-actor 16 --groups 2,auto  # the same env-slot rate from actors that step on one core each
    python benchmarks/learner_capacity.py --env-sleep-ms 0.83 --one-core --envs 64 --envs-per-actor 4 \
        --groups 1,2,4,auto --inference-delay-ms 2  # few envs against a round trip: groups on an actor's one core

Synthetic actors (processes of this script) hand-shake with a real learner (`launch.py --actors 0
--collect-only`) over the real protocol and sockets, then answer every Actions message at once with a step
report replayed from frames recorded from the real env (one env is built per actor, only to record them).
An actor's cost per message is a receive, a decode and a send of pre-encoded frames, so even on 2 cores the
learner is the bottleneck. Per row it prints the learner's agent steps/s (from metrics.jsonl) and the
learner process's CPU microseconds per env step (utime + stime from /proc over the measured window; with
cluster.collectors = K > 1, the training process's and its K collector processes' together), and the
synthetic actors' beside it: on a small machine the two together are what the cores can give. The learner
listens on a Unix socket file, as the default cluster.address 'local' does on Linux (`--transport tcp`: on
127.0.0.1).

`--other PATH` runs every row a second time against the checkout at PATH (e.g. `git worktree add
/tmp/main-before <commit>`), right after this checkout's, so before and after are measured side by side
on the same machine state. The synthetic actors always speak this checkout's protocol (version 1).

`--codec none,zstd` runs every row once per cluster.codec value, side by side: with zstd the synthetic
actors offer it and replay reports compressed as a real actor sends them (the delta included; where the
replayed cycle wraps around, the learner undoes a delta against the wrong frame: the same work, other pixels).
"""
from __future__ import annotations

import argparse
import itertools
import json
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

from cli import add_cluster_flags, add_row_flags, parser  # noqa: E402
from breakdown import describe, steady_state  # noqa: E402
from procfs import TICKS, proc_stat, read_metrics, start_launch, stop_launch, tail  # noqa: E402
from synthetic import RECORDED_REPORTS, join, sleeping_actors, spread_step_ms  # noqa: E402
from protocol.processes import parent_alive  # noqa: E402

DELAY_DIR = Path(__file__).resolve().parent / "inference_delay"  # its sitecustomize.py (--inference-delay-ms)
_RUN_IDS = itertools.count()


# ----------------------------------------------------------------------------------------------- actors

def _record(settings_dict: dict, k: int, count: int, seed: int):
    """count observation batches of k envs, stepped from the real env with random actions."""
    import numpy as np
    from actor.envs import make_env
    from protocol.settings import EnvSettings
    env = make_env(EnvSettings.from_dict(settings_dict), seed)
    obs, _ = env.reset()
    frames = []
    for _ in range(count * k):
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        frames.append(obs)
        if term or trunc:
            obs, _ = env.reset()
    env.close()
    return [np.stack(frames[i * k:(i + 1) * k]) for i in range(count)]


def _encoded_reports(settings_dict: dict, k: int, group: int, seed: int, codec: str) -> tuple[list, list[list]]:
    """(the group's first report, its RECORDED_REPORTS step reports), encoded as an actor with `codec` sends them."""
    import numpy as np
    from protocol import compression
    from protocol import messages as m
    batches = _record(settings_dict, k, RECORDED_REPORTS, seed)
    sender = None if codec == compression.NONE else compression.Sender(codec)
    zeros, flags = np.zeros(k, np.float32), np.zeros(k, bool)
    first = m.encode(m.StepReport(group, batches[0], zeros, flags, flags, first=True), sender)
    return first, [[bytes(f) for f in m.encode(m.StepReport(group, obs, zeros, flags, flags), sender)]
                   for obs in batches]


def synthetic_actor(address: str, num_envs: int, groups: int, name: str, parent: int, codec: str = "none") -> None:
    """Join (following a Redirect to another collector or rank), then answer every Actions message with the
    next recorded report, until goodbye."""
    import zmq
    from protocol import messages as m
    ctx = zmq.Context()
    sock, welcome = join(ctx, address, num_envs, groups, name, parent, codec)
    if sock is None:
        return
    if welcome.codec != codec:
        raise SystemExit(f"{name}: asked for {codec} frames, the learner picked {welcome.codec}")
    k = num_envs // groups
    encoded = [_encoded_reports(welcome.env, k, g, 7919 * g + hash(name) % 1000, codec) for g in range(groups)]
    first, reports = [e[0] for e in encoded], [e[1] for e in encoded]
    for frames in first:
        sock.send_multipart(frames)
    turn = [0] * groups
    while True:
        if not sock.poll(1000):
            if not parent_alive(parent):
                return
            continue
        msg = m.decode(sock.recv_multipart(copy=False))
        if not isinstance(msg, m.Actions):
            return  # Goodbye or Error: the run is over
        g = msg.group
        sock.send_multipart(reports[g][turn[g] % RECORDED_REPORTS], copy=False)
        turn[g] += 1


# ----------------------------------------------------------------------------------------------- one row

def run_row(checkout: Path, per_message: int, policy: str, collectors: int, args, tmp: Path, label: str,
            codec: str = "none", envs: int | None = None, groups: int | str = 2) -> dict:
    """One row; with --envs-per-actor E, each actor's E envs in `groups` groups (per_message is then E / groups,
    None for auto), else per_message x groups envs per actor."""
    num_envs = args.envs_per_actor or per_message * groups
    actors = args.actors if envs is None else max(1, envs // num_envs)
    run_dir = tmp / f"{next(_RUN_IDS):02d}-{label}-{policy}-{per_message}-g{groups}-k{collectors}-{actors * num_envs}"
    address = "tcp://127.0.0.1:0" if args.transport == "tcp" else f"ipc://{run_dir}.sock"  # a file: any checkout
    cmd = [sys.executable, "launch.py", "--actors", "0", "--device", args.device,
           "--total-steps", str(10**12), "--run-dir", str(run_dir), "--config", args.config,
           "--set", f'cluster.address="{address}"', "--set", 'cluster.weights_address="tcp://127.0.0.1:0"',
           "--set", f"cluster.min_envs={actors * num_envs}", "--set", f"run.torch_threads={args.torch_threads}",
           *args.launch_set]
    if args.mode == "collect":  # else the real training loop: the update, the end-of-rollout barrier
        cmd.append("--collect-only")
    if policy == "random":
        cmd.append("--random-policy")
    if collectors > 1:  # not named at 1: a checkout from before cluster.collectors runs the same row
        cmd += ["--set", f"cluster.collectors={collectors}"]
    if codec != "none":  # likewise for a checkout from before cluster.codec
        cmd += ["--set", f'cluster.codec="{codec}"']
    delay = {}
    if args.inference_delay_ms > 0:  # the benchmark's, in every process of the learner (both checkouts alike)
        delay = {"PYTHONPATH": f"{checkout}{os.pathsep}{DELAY_DIR}",
                 "PPO_BENCH_INFERENCE_DELAY_MS": str(args.inference_delay_ms)}
    proc, log = start_launch(cmd, checkout, run_dir, env=delay)
    workers = []
    try:
        endpoints = _wait_for(lambda: _json(run_dir / "endpoints.json"), 120, "the learner's endpoints", proc, run_dir)
        chosen = mp.get_context("spawn").Queue() if groups == "auto" else None
        workers = _start_actors(endpoints["address"], actors, num_envs, groups, codec, args, chosen)
        metrics = run_dir / "metrics.jsonl"
        skip, chosen_groups = max(args.skip, 1), None
        if chosen is not None:  # measured from `skip` rollouts after the last actor's choice
            chosen_groups = _await_choices(chosen, actors, proc, run_dir, args.row_timeout)
            skip += len(read_metrics(metrics))
        _wait_for(lambda: len(read_metrics(metrics)) >= skip, args.row_timeout, f"{skip} rollouts", proc, run_dir)
        pids = {int(endpoints["pid"])} | {int(c["pid"]) for c in endpoints.get("collectors", [])}
        actor_pids, trainer = {w.pid for w in workers}, {int(endpoints["pid"])}
        a = len(read_metrics(metrics)), _cpu_ticks(pids), _cpu_ticks(actor_pids), _cpu_ticks(trainer)
        t_a = time.monotonic()
        _wait_for(lambda: len(read_metrics(metrics)) >= a[0] + args.rollouts and time.monotonic() - t_a >= args.seconds,
                  args.row_timeout + args.seconds, f"{args.rollouts} rollouts measured", proc, run_dir, poll_s=0.05)
        records = read_metrics(metrics)
        b = len(records), _cpu_ticks(pids), _cpu_ticks(actor_pids), _cpu_ticks(trainer)
    finally:
        stop_launch(proc, workers, log)
    steady = steady_state(records[:b[0]], a[0])
    steps = records[b[0] - 1]["env_steps"] - records[a[0] - 1]["env_steps"]
    if steady is None or steps <= 0:
        raise RuntimeError(f"{label} {policy} {per_message}: no progress")
    cpu_s, actors_s, trainer_s = ((b[i] - a[i]) / TICKS for i in (1, 2, 3))
    seconds = steps / steady["sps"]
    per_core = 1 if args.one_core else num_envs  # envs an actor steps at once: one on its core, or all side by side
    ceiling = (sum(per_core * 1000 / ms for ms in spread_step_ms(args.env_sleep_ms, args.env_sleep_spread, actors))
               if args.env_sleep_ms > 0 else None)
    return {"checkout": label, "codec": codec, "policy": policy, "envs_per_message": per_message, "collectors": collectors,
            "groups": groups, "envs_per_actor": num_envs, "one_core": args.one_core,
            "envs": actors * num_envs, "actors": actors, "mode": args.mode, "env_sleep_ms": args.env_sleep_ms,
            "env_sleep_spread": args.env_sleep_spread,
            "device": args.device, "transport": args.transport, "sps": steady["sps"], "env_ceiling_sps": ceiling,
            "learner_us_per_step": 1e6 * cpu_s / steps, "learner_cores": cpu_s / max(seconds, 1e-9),
            "actor_us_per_step": 1e6 * actors_s / steps, "training_process_us_per_step": 1e6 * trainer_s / steps,
            "env_steps": steps, "rollouts": steady["rollouts"], "skipped_rollouts": steady["skipped"],
            "chosen_groups": chosen_groups,
            "breakdown": steady["breakdown"]}


def _await_choices(chosen, actors: int, proc, run_dir: Path, timeout: float) -> dict[int, int]:
    """Groups "auto": wait until every sleeping actor has chosen; {groups: actors that chose it}."""
    got: list = []
    _wait_for(lambda: _drain(chosen, got) >= actors, timeout, f"the {actors} actors' choice of groups", proc, run_dir)
    return {g: sum(1 for _, c in got if c == g) for g in sorted({c for _, c in got})}


def _drain(queue, into: list) -> int:
    while not queue.empty():
        into.append(queue.get())
    return len(into)


def _start_actors(address: str, actors: int, num_envs: int, groups: int, codec: str, args, chosen=None) -> list:
    """Replaying actors, one process each; or (--env-sleep-ms) sleeping ones, --actors-per-process per process
    (`chosen`: told each "auto" actor's choice)."""
    ctx = mp.get_context("spawn")
    if args.env_sleep_ms > 0:
        per = max(1, args.actors_per_process)
        step_ms = spread_step_ms(args.env_sleep_ms, args.env_sleep_spread, actors)
        jobs = [(sleeping_actors, (address, min(per, actors - i), num_envs, groups, step_ms[i:i + per],
                                   f"sleeping-{i}", os.getpid(), args.one_core, chosen)) for i in range(0, actors, per)]
    else:
        jobs = [(synthetic_actor, (address, num_envs, groups, f"synthetic-{i}", os.getpid(), codec))
                for i in range(actors)]
    workers = [ctx.Process(target=target, args=job_args, daemon=True) for target, job_args in jobs]
    for w in workers:
        w.start()
    return workers


def _cpu_ticks(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        stat = proc_stat(pid)
        if stat is None:
            raise RuntimeError(f"a measured process (pid {pid}) is gone")
        total += stat[4]
    return total


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _wait_for(predicate, timeout: float, what: str, proc, run_dir: Path, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout
    while (value := predicate()) in (None, False):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:g}s (launch.py exit {proc.poll()}); the learner's log:\n"
                               + tail(run_dir / "learner.log", n=10, missing="(no learner.log)"))
        time.sleep(poll_s)
    return value


# ----------------------------------------------------------------------------------------------- report

def build_parser() -> argparse.ArgumentParser:
    p = parser(__doc__)
    add_cluster_flags(p, "synthetic actor processes, --groups groups each", "none",
                      "cluster.codec values, comma-separated, e.g. none,zstd")
    p.add_argument("--config", default="configs/breakout.toml", help="learner config (default: %(default)s)")
    p.add_argument("--envs-per-message", default="8,16,32", help="comma-separated (default: %(default)s)")
    p.add_argument("--policy", default="random", help="random, network, or both as random,network")
    p.add_argument("--collectors", default="1", help="cluster.collectors values, comma-separated (default: 1)")
    p.add_argument("--seconds", type=float, default=15.0, help="measured seconds per row at least (default: %(default)s)")
    p.add_argument("--rollouts", type=int, default=10, help="measured rollouts per row at least (default: %(default)s)")
    p.add_argument("--skip", type=int, default=2, help="first rollouts not measured (start-up, buffers allocated and "
                   "first touched; default: %(default)s)")
    p.add_argument("--env-sleep-ms", type=float, default=0.0, help="sleeping actors: each env step is a sleep of this "
                   "many ms, no CPU, random frames (benchmarks/synthetic.py); 0: replaying actors (default)")
    p.add_argument("--env-sleep-spread", type=float, default=0.0, help="sleeping actors of unequal speed: actor "
                   "steps spread evenly from ms x (1 - this) to ms x (1 + this) (stragglers; default: %(default)s)")
    p.add_argument("--envs", default=None, help="total env slots per row, comma-separated, e.g. 64,256 (the actors: "
                   "envs / (envs per message x 2 groups)); default: --actors")
    p.add_argument("--actors-per-process", type=int, default=8, help="sleeping actors per process (default: %(default)s)")
    p.add_argument("--one-core", action="store_true", help="sleeping actors whose groups share one core, as a real "
                   "actor's do: a group of k envs sleeps k x --env-sleep-ms after the actor's step before it (the "
                   "ceiling: 1000 / ms per actor)")
    p.add_argument("--groups", default="2", help="groups per actor, comma-separated rows, e.g. 1,2,4,auto (auto: "
                   "sleeping actors only, as a real actor chooses; default: %(default)s)")
    p.add_argument("--envs-per-actor", type=int, default=None, help="envs per actor for every row, split into "
                   "--groups (instead of --envs-per-message x groups)")
    p.add_argument("--mode", choices=("collect", "train"), default="collect",
                   help="collect: --collect-only (groups flow on between rollouts); train: the real training loop "
                        "(the update, the end-of-rollout barrier; a cheap one: --config configs/cartpole.toml)")
    p.add_argument("--launch-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="extra --set for the learner; repeatable")
    p.add_argument("--repeat", type=int, default=1, help="rounds; rows report the median (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="the learner's device, e.g. cuda (default: %(default)s)")
    p.add_argument("--transport", choices=("tcp", "ipc"), default="ipc",
                   help="the learner's address: a Unix socket file, as the learner's default 'local' on Linux, or "
                        "tcp on 127.0.0.1 (default: %(default)s)")
    add_row_flags(p, torch_threads=1, row_timeout_s=300.0, row_timeout_help="a row without its rollouts by then fails")
    p.add_argument("--inference-delay-ms", type=float, default=0.0, help="a wait after each inference batch in the "
                   "learner and its collector processes, as a GPU's latency (the H200's: about 2; "
                   "benchmarks/inference_delay/sitecustomize.py; default: none)")
    return p


def main(argv=None) -> int:
    parser_ = build_parser()
    args = parser_.parse_args(argv)
    if not 0 <= args.env_sleep_spread < 1:
        parser_.error(f"--env-sleep-spread must be in [0, 1): the slowest and fastest steps are ms x (1 -+ it), "
                      f"got {args.env_sleep_spread:g}")
    args.launch_set = [x for s in args.launch_set for x in ("--set", s)]
    envs_list = [int(x) for x in args.envs.split(",")] if args.envs else [None]
    shapes = _shapes(parser_, args)  # (envs per message, groups) of each row
    policies = [x.strip() for x in args.policy.split(",")]
    ks = [int(x) for x in args.collectors.split(",")]
    codecs = [x.strip() for x in args.codec.split(",")]
    checkouts = [(f"this/{c}" if len(codecs) > 1 else "this", REPO, c) for c in codecs]
    checkouts += [(f"other/{c}" if len(codecs) > 1 else "other", Path(args.other).resolve(), c)
                  for c in codecs] if args.other else []
    tmp = Path(tempfile.mkdtemp(prefix="ppo-capacity-"))
    runs: dict[tuple, list[dict]] = {}
    spread = f", spread +-{100 * args.env_sleep_spread:g}% over the actors" if args.env_sleep_spread else ""
    kind = f"sleeping actors ({args.env_sleep_ms:g} ms per step{spread})" if args.env_sleep_ms > 0 else "synthetic actors"
    kind += " sharing one core each" if args.one_core else ""
    print(f"learner capacity ({args.mode}): {kind}, at least {args.seconds:g}s and {args.rollouts} rollouts "
          f"per row after {args.skip}, {args.repeat} round(s); checkouts: "
          + ", ".join(f"{n}={p}" for n, p, _ in checkouts), flush=True)
    for _ in range(args.repeat):
        for policy, shape, k, envs in itertools.product(policies, shapes, ks, envs_list):
            for label, path, codec in checkouts:
                row = run_row(path, shape[0], policy, k, args, tmp, label.replace("/", "-"), codec, envs, shape[1])
                row["checkout"] = label
                runs.setdefault((policy, shape, k, envs, label), []).append(row)
                _print_row(label, row)
    print("\n| policy | envs per message | groups | collectors | envs | "
          + " | ".join(f"{n} steps/s | {n} us/step" for n, _, _ in checkouts)
          + (" | first / second steps/s |" if args.other or len(codecs) > 1 else " | vs K=1 |")
          + (" first / env ceiling |" if args.env_sleep_ms > 0 else ""))
    print("|---|---:|---:|---:|---:|" + "---:|---:|" * len(checkouts) + "---:|" + ("---:|" if args.env_sleep_ms > 0 else ""))
    table = []
    for policy, shape, k, envs in itertools.product(policies, shapes, ks, envs_list):
        med = {label: _median(runs[(policy, shape, k, envs, label)]) for label, _, _ in checkouts}
        cells = " | ".join(f"{med[n]['sps']:,.0f} | {med[n]['learner_us_per_step']:.1f}" for n, _, _ in checkouts)
        first, second = checkouts[0][0], checkouts[1][0] if len(checkouts) > 1 else None
        if args.other or len(codecs) > 1:  # this / other, or the first codec's row over the second's
            ratio = med[first]["sps"] / med[second]["sps"]
        else:
            ratio = med[first]["sps"] / _median(runs[(policy, shape, ks[0], envs, first)])["sps"]
        ceiling = med[first]["env_ceiling_sps"]
        print(f"| {policy} | {shape[0] or 'auto'} | {shape[1]} | {k} | {med[first]['envs']} | {cells} | {ratio:.2f}x |"
              + (f" {med[first]['sps'] / ceiling:.2f}x |" if ceiling else ""))
        table.append(med)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": table, "runs": [r for v in runs.values() for r in v]}, indent=2))
    return 0


def _shapes(parser_, args) -> list[tuple[int | None, int | str]]:
    """(envs per message, groups) of each row: --envs-per-message x --groups, or --envs-per-actor split into each
    of --groups (None envs per message: auto)."""
    groups = [g if g == "auto" else int(g) for g in (x.strip() for x in args.groups.split(","))]
    if "auto" in groups and not (args.env_sleep_ms > 0 and args.envs_per_actor):
        parser_.error("--groups auto: for sleeping actors (--env-sleep-ms) with --envs-per-actor")
    if any(g != "auto" and not 1 <= g <= 8 for g in groups):
        parser_.error(f"--groups: each in [1, 8] or auto, got {args.groups}")
    if not args.envs_per_actor:
        return [(int(x), g) for x in args.envs_per_message.split(",") for g in groups]
    if any(g != "auto" and args.envs_per_actor % g for g in groups):
        parser_.error(f"--envs-per-actor {args.envs_per_actor} must be divisible by each of --groups {args.groups}")
    return [(None if g == "auto" else args.envs_per_actor // g, g) for g in groups]


def _print_row(label: str, row: dict) -> None:
    ceiling = row["env_ceiling_sps"]
    vs = f" ({row['sps'] / ceiling:.2f}x the env ceiling {ceiling:,.0f})" if ceiling else ""
    chose = f" (chosen: {row['chosen_groups']})" if row["chosen_groups"] else ""
    print(f"  {label:<10} {row['policy']:<8} {row['envs']:>4} envs, {row['envs_per_message'] or 'auto':>3} envs/message "
          f"in {row['groups']} groups{chose}, "
          f"K={row['collectors']}  {row['sps']:>9,.0f} steps/s{vs} over {row['rollouts']} rollouts  "
          f"{row['learner_us_per_step']:>6.1f} us learner CPU per env step  ({row['learner_cores']:.2f} cores; of it "
          f"the training process {row['training_process_us_per_step']:.1f} us; actors {row['actor_us_per_step']:.1f} us)",
          flush=True)
    print("\n".join(describe(row["breakdown"])), flush=True)


def _median(rows: list[dict]) -> dict:
    ordered = sorted(rows, key=lambda r: r["sps"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["sps_all"] = [r["sps"] for r in rows]
    row["us_all"] = [r["learner_us_per_step"] for r in rows]
    return row


if __name__ == "__main__":
    sys.exit(main())
