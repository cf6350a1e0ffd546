"""Helpers for tests that start real clusters: bounded waits, and no process left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launch(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "launch.py", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)


def run_launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = launch(*args)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        raise AssertionError(f"launch.py {' '.join(args)} did not finish in {timeout}s:\n{out[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def start_actor(address: str, *extra: str) -> subprocess.Popen:
    """A standalone actor (python -m actor) in its own process group, Ctrl-C-able like one a terminal starts."""
    return subprocess.Popen([sys.executable, "-m", "actor", "--learner", address, *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=sigint_as_in_a_terminal)


def sigint_as_in_a_terminal() -> None:
    """SIGINT back to its default in a child: a shell that started the tests in the background (`cmd &`
    without job control) hands every process SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def endpoints(run_dir: Path) -> dict | bool:
    """The learner's endpoints.json, once it is written (False before)."""
    path = Path(run_dir) / "endpoints.json"
    return path.exists() and json.loads(path.read_text())


def stop(proc: subprocess.Popen) -> str:
    """SIGTERM (a clean stop: final checkpoint), wait, kill whatever is left; returns the output."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, interval: float = 0.1):
    """Poll a condition until it holds; fail (naming it) at the deadline or if proc exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) while waiting for {what}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_pids(run_dir: Path) -> list[int]:
    info = json.loads((Path(run_dir) / "processes.json").read_text())
    return [info["launch"], info["learner"], *info.get("learners", []), *info["actors"].values(),
            *([info["evaluator"]] if info.get("evaluator") else [])]


def assert_no_stragglers(run_dir: Path, timeout: float = 10) -> None:
    pids = run_pids(run_dir)
    wait_for(lambda: not any(alive(p) for p in pids), timeout, f"processes {pids} to exit")


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`: launch() starts launch.py as a session leader, so this is
    every process of that run, whether or not processes.json named it yet."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(entry.name))
    return found


def assert_session_gone(sid: int, timeout: float = 10) -> None:
    wait_for(lambda: not session_pids(sid), timeout, f"every process of session {sid} to exit")


def curve_keys(root: Path, allowed: tuple[str, ...], others: tuple[str, ...] = ()) -> dict[str, tuple[Path, Path]]:
    """(public, secret) key files under root/keys, by name: the learner's, each of `allowed` (its public key
    copied into root/allowed, the learner's allow-list) and each of `others` (valid pairs it does not know)."""
    from protocol.security import generate_keypair
    (root / "allowed").mkdir()
    pairs = {name: generate_keypair(root / "keys", name) for name in ("learner", *allowed, *others)}
    for name in allowed:
        public = pairs[name][0]
        (root / "allowed" / public.name).write_text(public.read_text())
    return pairs


def curve_settings(root: Path, pairs: dict[str, tuple[Path, Path]], client: str) -> list[str]:
    """launch.py's --set flags for curve_keys(root, ...): the learner's secret key, its allow-list, and the key
    pair `client` that the actors it starts use."""
    return ["--set", f"cluster.server_key='{pairs['learner'][1]}'", "--set", f"cluster.allowed_keys='{root / 'allowed'}'",
            "--set", f"cluster.client_key='{pairs[client][1]}'"]


def finish_with_one_more_actor(proc: subprocess.Popen, run_dir: Path, *actor_args: str, before=None,
                               timeout: float = 180) -> str:
    """Start one more actor (`python -m actor --learner ADDRESS *actor_args`) once the run's address is known and
    `before()` has returned, wait for the run to end by itself, and leave neither behind: the run's output."""
    extra = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        if before is not None:
            before()
        extra = start_actor(address, *actor_args)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if extra is not None:
            kill_group(extra)
        kill_group(proc)
    return out


def assert_breakdown(records: list[dict], collectors: int) -> None:
    """Every line's `collection`: where its rollout's env-slot time went, its batches, its messages per
    collector; from the second line on, the serial time before it by phase."""
    for r in records:
        c = r["collection"]
        parts = c["waiting_actions_s"] + c["parked_end_s"] + c["with_actors_s"]
        assert c["env_slots"] == r["env_slots"] and abs(parts - c["slot_s"]) < 0.01 * c["slot_s"] + 0.01, c
        assert len(c["messages_per_s"]) == collectors and all(x > 0 for x in c["messages_per_s"]), c
        assert c["batches"] > 0 and 0 < c["batch_slots"]["p50"] <= c["env_slots"], c
        assert 0 < c["batch_latency_ms"]["p50"] <= c["batch_latency_ms"]["p99"], c
    for r in records[1:]:
        serial = r["collection"]["serial_s"]
        assert {"batch", "update", "join", "publish", "total"} <= serial.keys() and serial["total"] > 0, serial


NO_RESTART = "--max-learner-restarts"  # with "0": a learner that ends abnormally ends the run (as before issue 43)


def lose_and_replace_the_actor_of_collector_1(proc: subprocess.Popen, run_dir: Path, updates_after: int = 0) -> str:
    """With cluster.collectors = 2 and no actors of the launcher's own: "first" joins (collector 0), "second"
    (collector 1, the least loaded), two updates, second killed and retired, "third" joins in its place, then
    `updates_after` more updates; the run is stopped. Returns its output; every actor is cleaned up."""
    actors = []
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        log = run_dir / "learner.log"
        actors = [start_actor(address, "--envs", "4", "--name", "first")]
        wait_for(lambda: "actor first joined" in log.read_text(), 60, "the first actor in", proc)
        actors.append(start_actor(address, "--envs", "4", "--name", "second"))
        wait_for(lambda: len(metrics(run_dir)) >= 2, 120, "two updates", proc)
        os.killpg(actors[1].pid, signal.SIGKILL)  # "second" joined collector 1 (collector 0 had 4 slots)
        wait_for(lambda: any(r["actors"] == 1 for r in metrics(run_dir)), 60, "the lost actor retired", proc)
        actors.append(start_actor(address, "--envs", "4", "--name", "third"))
        wait_for(lambda: metrics(run_dir)[-1]["actors"] == 2, 60, "the joiner in", proc)
        joined = len(metrics(run_dir))
        wait_for(lambda: len(metrics(run_dir)) >= joined + updates_after, 60, "updates with the joiner", proc)
        return stop(proc)
    finally:
        for actor in actors:
            kill_group(actor)
        kill_group(proc)


def fast_and_slow_actors(proc: subprocess.Popen, run_dir: Path, monkeypatch, timeout: float = 120) -> str:
    """Against a learner started with --actors 0 and env.env_id = tests.integration.slow_env:SlowStepCartPole-v0:
    a fast actor (2 ms a step) and, once it has joined (on any rank), a slow one (20 ms), 4 envs each; then the run's
    end. Returns its output; every process is gone after."""
    actors = []
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        monkeypatch.setenv("SLOW_STEP_S", "0.002")
        actors.append(start_actor(address, "--envs", "4", "--name", "fast"))
        wait_for(lambda: any("actor fast joined" in log.read_text() for log in Path(run_dir).glob("learner*.log")),
                 60, "the fast actor in", proc)
        monkeypatch.setenv("SLOW_STEP_S", "0.02")
        actors.append(start_actor(address, "--envs", "4", "--name", "slow"))  # where there are 0 slots
        out, _ = proc.communicate(timeout=timeout)
    finally:
        for actor in actors:
            kill_group(actor)
        kill_group(proc)
    return out
