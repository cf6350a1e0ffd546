"""The learner's CPU time per env step with real actors, for one checkout or several, one after the other.

    python benchmarks/learner_cpu_real_actors.py . /tmp/main-before . /tmp/main-before   # interleaved rounds
    python benchmarks/learner_cpu_real_actors.py --tcp . .   # over TCP on 127.0.0.1 (--ipc: a socket file)

Each run is `launch.py --collect-only --random-policy --actors 2 --envs-per-actor 32 --groups 2 --device cpu`
in that checkout, at its default cluster.address; after its first rollout, the learner process's utime +
stime (from /proc) over 180k env steps, divided by the steps. Prints one JSON line per run.
(`learner_capacity.py` measures the same with synthetic actors, where the learner is the bottleneck.)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
STEPS = 180_000


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def last_row(path: Path) -> dict | None:
    lines = [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return json.loads(lines[-1]) if lines else None


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout_s:g}s")
        time.sleep(0.5)
    return value


ADDRESSES = {"tcp": "tcp://127.0.0.1:0", "ipc": "ipc://{run_dir}.sock"}


def measure(checkout: str, transport: str = "default") -> dict:
    """`transport`: default (the checkout's own cluster.address), tcp (127.0.0.1) or ipc (a socket file)."""
    run_dir = Path(tempfile.mkdtemp(prefix="ppo-learner-cpu-")) / "run"
    cmd = [sys.executable, "launch.py", "--collect-only", "--random-policy", "--actors", "2", "--envs-per-actor", "32",
           "--groups", "2", "--device", "cpu", "--total-steps", str(10**12), "--run-dir", str(run_dir),
           "--set", 'cluster.weights_address="tcp://127.0.0.1:0"']
    if transport != "default":
        cmd += ["--set", f'cluster.address="{ADDRESSES[transport].format(run_dir=run_dir)}"']
    proc = subprocess.Popen(cmd, cwd=checkout, env={**os.environ, "PYTHONPATH": checkout}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    metrics = run_dir / "metrics.jsonl"
    try:
        first = wait_for(lambda: last_row(metrics), 300, "first rollout")
        pid = json.loads((run_dir / "endpoints.json").read_text())["pid"]
        cpu0, t0 = cpu_s(pid), time.monotonic()
        last = wait_for(lambda: (r := last_row(metrics))["env_steps"] - first["env_steps"] >= STEPS and r,
                        STEPS / 100, f"{STEPS} env steps")
        steps = last["env_steps"] - first["env_steps"]
        return {"checkout": checkout, "transport": transport, "env_steps": steps,
                "learner_us_per_step": 1e6 * (cpu_s(pid) - cpu0) / steps, "sps": steps / (time.monotonic() - t0)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    args = sys.argv[1:]
    transport = "default"
    if args[:1] in (["--tcp"], ["--ipc"]):
        transport, args = args[0][2:], args[1:]
    for path in args or ["."]:
        print(json.dumps(measure(path, transport)), flush=True)
