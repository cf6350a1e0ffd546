"""The chaos soak (issue 43, point 7): chaos.py's faults injected at random moments into one run, for a given time.

    python benchmarks/chaos_soak.py                         # 30 minutes on 2 cores, every fault, seed 0
    python benchmarks/chaos_soak.py --minutes 5 --seed 3 --faults kill-learner,stop-learner,flood

One CartPole run as in benchmarks/chaos.py (2 actors x 4 envs, 2 collector processes, a checkpoint every 5
updates, on a tmpfs when root may mount one, for disk-full), with a step budget that it reaches after about
--minutes: a calibration run without faults measures the steps per second first. After the first minute of
training, and then every --gap-s seconds (drawn at random between its bounds), the next fault of a shuffled
deck of them all is injected (every fault once, in a random order, before any comes again), and the soak
waits for the run to train with every env slot again (chaos.py's deadlines). No person
acts: the run is never started again from here; if it ends before its budget, the soak says so and fails.

About one fault in three ends the learner, so launch.py's --max-learner-restarts is raised for the soak's run
(the limit, 3 by default, has its own tests). It prints a row per fault (as chaos.py), then: faults injected,
recovered without a person, updates redone
(those past the checkpoint a restarted learner went on from), checkpoints lost (the newest checkpoint before a
fault no longer loading, and none newer), the learner's resident memory (itself and its collector processes)
after the first minute and at the end of the steady state, and how the run ended: its budget reached, exit 0.
Exit status 0 when every fault was recovered, no checkpoint lost and the run reached its budget with exit 0.
"""
from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from chaos import (ENDS_THE_RUN, FAULTS, RUN_SETTINGS, Failed, Row, Run, mount_tmpfs, print_row,  # noqa: E402
                   run_fault, wait)
from procfs import read_rss_mb  # noqa: E402

SLOTS = 8
CALIBRATION_S = 45.0  # seconds of training without faults to measure the steps per second
FAULT_TIME_S = 0.15  # the share of the soak that faults and recoveries are expected to cost (the budget leaves it)
END_DEADLINE_S = 600.0  # after the last fault, the run's time to reach its budget
QUIET_S = END_DEADLINE_S / 10  # the run's last seconds without a new fault (--quiet-s)
MAX_RESTARTS = 1000  # launch.py --max-learner-restarts for the soak's run (default 3: a real run's faults are rare)


def calibrate(base: Path, seconds: float = CALIBRATION_S) -> float:
    """Steps per second of the soak's run without faults: a short run of its own, stopped after `seconds`."""
    (base / "calibration").mkdir()
    run = Run(base / "calibration" / "run", base / "calibration")
    run.start(resume=False)
    try:
        wait(lambda: len(run.rows()) >= 2, "two calibration updates", time.monotonic(), timeout=180)
        first, t0 = run.last(), time.monotonic()
        time.sleep(seconds)  # measuring a rate over a span of time, not synchronization
        last = run.last()
        return (last["env_steps"] - first["env_steps"]) / (time.monotonic() - t0)
    finally:
        run.stop()


def steady(run: Run) -> None:
    """The run trains with every env slot; Failed if it ended (nobody starts it again here)."""
    if not run.live():
        raise Failed(f"the run ended (exit {run.proc.returncode}) before its budget")
    u = run.last()["update"]
    wait(lambda: run.trained_after(u) or not run.live(), "update with every env slot", time.monotonic(), timeout=120)
    if not run.live():
        raise Failed(f"the run ended (exit {run.proc.returncode}) before its budget")


def shuffled_forever(names: list[str], rng: random.Random):
    """Every fault once in a random order, then again in another, and so on: none left out by chance."""
    while True:
        yield from rng.sample(names, len(names))


def server_rss_mb(run: Run) -> float:
    return round(sum(read_rss_mb(p) or 0.0 for p in run.server_pids() if p), 1)


def parse_args(argv) -> tuple[argparse.Namespace, list[str]]:
    """The options, and the faults to draw from (checked by name)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long the run lasts, about (default 30)")
    p.add_argument("--faults", default=",".join(f for f in FAULTS if f not in ENDS_THE_RUN),
                   help="comma-separated, drawn from at random (default: all but those that end the run, hang-up)")
    p.add_argument("--gap-s", default="20,60", help="seconds between two faults, drawn between these bounds")
    p.add_argument("--seed", type=int, default=0, help="the draws of faults and gaps")
    p.add_argument("--first-after-s", type=float, default=60.0, help="training before the first fault")
    p.add_argument("--calibration-s", type=float, default=CALIBRATION_S, help="the calibration run's measured span")
    p.add_argument("--quiet-s", type=float, default=QUIET_S, help="the run's last seconds with no new fault (default 60)")
    args = p.parse_args(argv)
    names = [f for f in args.faults.split(",") if f]
    if unknown := [f for f in names if f not in FAULTS or f in ENDS_THE_RUN]:
        p.error(f"unknown faults {unknown}; known: {', '.join(f for f in FAULTS if f not in ENDS_THE_RUN)}")
    return args, names


def main(argv=None) -> int:
    args, names = parse_args(argv)
    gap_lo, gap_hi = (float(x) for x in args.gap_s.split(","))
    rng = random.Random(args.seed)
    deck = shuffled_forever(names, rng)
    base = Path(tempfile.mkdtemp(prefix="soak-"))
    (base / "fs").mkdir()
    no_tmpfs = mount_tmpfs(base / "fs", size_mb=512)
    if no_tmpfs and "disk-full" in names:
        names.remove("disk-full")
        print(f"disk-full {no_tmpfs}")
    sps = calibrate(base, args.calibration_s)
    budget = int(sps * args.minutes * 60 * (1 - FAULT_TIME_S))
    print(f"soak: CartPole, 2 actors x 4 envs, 2 collectors, {sps:.0f} steps/s without faults: a budget of "
          f"{budget:,} steps for about {args.minutes:g} minutes; seed {args.seed}; in {base}\n")
    # about one fault in three ends the learner: far more restarts than a real run's; the limit has its own tests
    run = Run(base / "fs" / "run", base, launch=[*RUN_SETTINGS, "--total-steps", str(budget),
                                                 "--max-learner-restarts", str(MAX_RESTARTS)])
    rows, lost = [], 0
    started = time.monotonic()
    end_of_faults = started + args.minutes * 60 - args.quiet_s
    run.start(resume=False)
    memory, final, code = {}, {}, None
    print("| at min | fault | detected after s | recovered after s | updates redone | episodes lost | memory peak MB | "
          "recovered | note |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---|", flush=True)
    try:
        steady(run)  # Failed here: the run never trained; the summary says so
        time.sleep(args.first_after_s)  # training before the first fault (the steady state's start)
        memory["start"] = server_rss_mb(run)
        # the first fault comes even when reaching the steady state took past end_of_faults (a loaded machine)
        while (not rows or time.monotonic() < end_of_faults) and run.live() and run.last()["env_steps"] < 0.95 * budget:
            name, at = next(deck), round((time.monotonic() - started) / 60, 1)
            row = Row(name)
            lost += run_fault(run, name, row, settle=steady)  # never started again from here
            rows.append(row)
            print(f"| {at} ", end="")
            print_row(row)
            if not row.survived and not run.live():
                break
            memory["end"] = server_rss_mb(run)  # the newest reading while the run trains
            time.sleep(rng.uniform(gap_lo, gap_hi))  # the next fault's moment, drawn at random
        deadline = time.monotonic() + END_DEADLINE_S
        while run.live() and time.monotonic() < deadline:
            time.sleep(1.0)  # waiting for the run to end by itself at its budget, polled
        code = run.proc.returncode if not run.live() else None
    except Failed as exc:
        print(f"the soak could not go on: {exc}")
    finally:
        final = run.last()  # read before the tmpfs goes
        run.stop()
        if run.run_dir.exists():
            shutil.copytree(run.run_dir, base / "run", ignore=shutil.ignore_patterns("tb", "*.pt"))
        if not no_tmpfs:
            subprocess.run(["umount", "-l", str(base / "fs")], check=False)
    return summarize(rows, lost, memory, final, code, budget, started, base)


def summarize(rows: list, lost: int, memory: dict, final: dict, code: int | None, budget: int, started: float,
              base: Path) -> int:
    """The soak's closing lines; 0 when every fault was recovered from, no checkpoint lost and the run ended at its
    budget by itself."""
    reached = final.get("env_steps", 0) >= budget
    recovered = sum(r.survived for r in rows)
    redone = sum(r.updates_lost for r in rows)
    print(f"\n{(time.monotonic() - started) / 60:.1f} minutes; logs in {base}")
    print(f"faults injected: {len(rows)} ({', '.join(sorted({r.fault for r in rows}))})")
    print(f"recovered without a person: {recovered} of {len(rows)}")
    print(f"updates redone: {redone}")
    print(f"checkpoints lost: {lost}")
    print(f"learner memory (RSS, learner + collectors): {memory.get('start', '-')} MB after the first minute, "
          f"{memory.get('end', '-')} MB after the last fault")
    ended = "still running at the deadline" if code is None else f"exit {code}"
    print(f"the run: {final.get('env_steps', 0):,} of {budget:,} steps, {ended}")
    ok = recovered == len(rows) and lost == 0 and reached and code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
