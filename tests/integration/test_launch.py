"""The README's promise, end to end: real actor processes, a real learner, real sockets."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from tests.integration.cluster import (ROOT, assert_breakdown, assert_no_stragglers, assert_session_gone, kill_group,
                                      launch, metrics, run_launch, stop, wait_for)

pytestmark = pytest.mark.integration

# the fields every metrics.jsonl line has (docs/running.md lists them with their meaning)
FIELDS = ("update", "env_steps", "sps", "episode_return_mean", "episode_length_mean", "episodes",
          "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
          "learning_rate", "actors", "weights_version", "elapsed_s")


def test_smoke_run_trains_checkpoints_and_cleans_up(tmp_path):
    run_dir = tmp_path / "smoke"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    records = metrics(run_dir)
    assert len(records) >= 2
    for record in records:
        missing = [f for f in FIELDS if f not in record]
        assert not missing, f"metrics.jsonl lacks {missing}"
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))
    assert records[-1]["env_steps"] >= 256 and records[-1]["actors"] == 2
    assert all(r["weights_version"] == r["update"] for r in records)
    assert_breakdown(records, collectors=1)
    ckpts = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts, "no checkpoint written"
    state = torch.load(ckpts[-1], weights_only=True)
    assert state["update"] == records[-1]["update"] and state["env_steps"] == records[-1]["env_steps"]
    assert {"model", "updater", "config"} <= state.keys()
    assert (run_dir / "config.toml").exists() and (run_dir / "learner.log").read_text().count("update ") >= 2
    assert "update 1 |" in result.stdout
    for text in (result.stdout, (run_dir / "learner.log").read_text(), (run_dir / "actors.log").read_text()):
        assert "A.L.E" not in text and "Stella" not in text, "the emulator's banner reached the console or a log"
    assert_no_stragglers(run_dir)


def test_sigterm_checkpoints_and_exits_zero(tmp_path):
    run_dir = tmp_path / "term"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", "10000000")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, out[-3000:]
    last = metrics(run_dir)[-1]["update"]
    state = torch.load(sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert state["update"] == last, "the final checkpoint must hold the last update"
    assert_no_stragglers(run_dir)


@pytest.mark.parametrize("args, needle", [
    (["--set", "ppo.no_such_key=1"], "ppo.no_such_key"),
    (["--set", "ppo.gamma=2.0"], "ppo.gamma"),
    (["--set", "ppo.clip_coef=abc"], "ppo.clip_coef"),
    (["--actors", "-2"], "cluster.actors"),
    (["--config", "configs/nope.toml"], "configs/nope.toml"),
    (["--envs-per-actor", "3", "--groups", "2"], "--envs-per-actor (cluster.envs_per_actor, 3) must be divisible by 2"),
    (["--actors", "2", "--envs-per-actor", "4000"], "more than the learner's limit of 4096"),
    (["--envs-per-actor", "5000"], "cluster.envs_per_actor must be in [0, 4096], got 5000"),
    (["--set", "cluster.min_envs=5000"], "cluster.min_envs must be in [0, 4096]"),
    (["--groups", "9"], "cluster.groups must be in [1, 8] or 'auto', got 9"),
    (["--groups", "some"], "cluster.groups must be in [1, 8] or 'auto', got 'some'"),
    (["--groups", "auto", "--deterministic"], "cluster.groups = 'auto' chooses from measured timings"),
])
def test_bad_config_exits_2_naming_it(tmp_path, args, needle):
    run_dir = tmp_path / "bad"
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), *args, timeout=60)
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stdout
    assert not run_dir.exists(), "nothing may start on a bad config"


def test_groups_2_with_one_env_per_actor_is_refused_within_seconds(tmp_path):
    """Every actor's handshake would be refused (1 env cannot split into 2 groups): say so, start nothing.
    (8 actors leave the default recipe's 8 envs at 1 per actor.)"""
    run_dir = tmp_path / "groups"
    started = time.monotonic()
    result = run_launch("--groups", "2", "--actors", "8", "--run-dir", str(run_dir), timeout=30)
    assert time.monotonic() - started < 15
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --groups 2") and "(cluster.envs_per_actor, 1)" in lines[0], lines
    assert not run_dir.exists(), "nothing may start on an impossible topology"


def test_help_lists_every_option_and_config_key():
    result = run_launch("--help", timeout=30)
    assert result.returncode == 0
    for option in ("--config", "--actors", "--envs-per-actor", "--total-steps", "--device", "--seed", "--run-dir",
                   "--set", "--resume", "configs/breakout.toml", "ppo.clip_coef", "env.sticky_actions"):
        assert option in result.stdout, option


@pytest.mark.parametrize("env_id, needle", [("Blackjack-v1", "unsupported space Tuple"),
                                            ("ALE/NoSuchGame-v5", "NoSuchGame")])
def test_unusable_env_is_one_error_line_and_exit_2(tmp_path, env_id, needle):
    """One line, not `ERROR error: ...`; and a start-up that failed leaves no run directory behind."""
    run_dir = tmp_path / "env"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--set", f"env.env_id={env_id}")
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        kill_group(proc)
    assert proc.returncode == 2, out[-2000:]
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and needle in errors[0], out[-2000:]
    assert "error:" not in errors[0], errors[0]
    assert "Traceback" not in out
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())
    assert_session_gone(proc.pid)


def test_a_busy_port_fails_start_up_and_leaves_no_run_directory(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"tcp://127.0.0.1:{busy.getsockname()[1]}"
        run_dir = tmp_path / "busy"
        result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir),
                            "--set", f"cluster.address='{address}'", timeout=90)
    assert result.returncode == 2, result.stdout[-2000:]
    errors = [line for line in result.stdout.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"cannot bind {address}" in errors[0] and "error:" not in errors[0], result.stdout
    assert not run_dir.exists()
    kept = tmp_path / "kept"  # a directory that was there before is left, with what it held
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(kept),
                            "--set", f"cluster.address='tcp://127.0.0.1:{busy.getsockname()[1]}'", timeout=90)
    assert result.returncode == 2 and (kept / "notes.txt").read_text() == "mine"


def test_an_existing_run_directory_is_refused_without_resume(tmp_path):
    run_dir = tmp_path / "cp"
    first = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), timeout=120)
    assert first.returncode == 0, first.stdout[-2000:]
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    again = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), timeout=60)
    assert again.returncode == 2
    lines = [line for line in again.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"--resume {run_dir}" in lines[0], lines
    assert f"--run-dir {run_dir}-2" in lines[0], lines
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before, "nothing may be written"


def test_two_default_config_runs_at_once_both_train(tmp_path):
    """configs/breakout.toml binds free ports: two runs side by side (two seeds, say) do not collide."""
    tiny = ("--actors", "1", "--envs-per-actor", "2", "--total-steps", "64", "--device", "cpu",
            "--set", "ppo.num_steps=16", "--set", "ppo.update_epochs=1", "--set", "ppo.num_minibatches=1",
            "--set", "run.torch_threads=1")
    dirs = [tmp_path / "seed1", tmp_path / "seed2"]
    procs = [launch("--run-dir", str(d), "--seed", str(i + 1), *tiny) for i, d in enumerate(dirs)]
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    for proc, out, run_dir in zip(procs, outs, dirs):
        assert proc.returncode == 0, out[-3000:]
        assert len(metrics(run_dir)) >= 2, out[-3000:]
    addresses = [json.loads((d / "endpoints.json").read_text())["address"] for d in dirs]
    assert addresses[0] != addresses[1] and not any(a.endswith((":5555", ":5556")) for a in addresses), addresses
    if sys.platform.startswith("linux"):  # cluster.address = 'local': the actors came over a Unix socket
        assert all(a.startswith("ipc:///") and "/ppo-cluster-" in a for a in addresses), addresses


def test_a_refused_actor_is_not_restarted_and_its_reason_is_logged_once(tmp_path):
    """The learner answers each handshake it refuses with the reason; launch.py logs it and restarts nothing.
    Its own up-front check is bypassed here so that the learner's refusal is what gets exercised."""
    run_dir, console = tmp_path / "refused", tmp_path / "console.txt"
    code = ("import sys; from launcher import cli; cli.check_groups = lambda cfg, groups: None; "
            "sys.exit(cli.main(sys.argv[1:]))")
    with open(console, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-c", code, "--config", "configs/smoke.toml", "--run-dir",
                                 str(run_dir), "--envs-per-actor", "1", "--groups", "2", "--total-steps", "10000000"],
                                cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_for(lambda: console.read_text().count("was refused") == 2, 90, "both actors' refusals logged", proc)
        os.kill(proc.pid, signal.SIGTERM)  # no actor left: the learner would wait for one
        proc.wait(timeout=60)
    finally:
        kill_group(proc)
    out = console.read_text()
    assert (run_dir / "actors.log").read_text().count("refused: handshake refused") == 2
    refusals = [line for line in out.splitlines() if "was refused" in line]
    assert len(refusals) == 2, out[-3000:]
    assert all("groups must be in [1, 8] and divide num_envs" in line and "not restarting" in line for line in refusals)
    assert "restarting actor" not in out
    assert proc.returncode == 0, out[-3000:]
    assert_no_stragglers(run_dir)


def test_processes_are_named_in_ps(tmp_path):
    """ps and top tell the run's processes apart (issue 25, item 11): `ppo-cluster learner`, `ppo-cluster
    actor-1`, `ppo-cluster eval`, not `python -c from multiprocessing.spawn import spawn_main ...`."""
    pytest.importorskip("setproctitle")
    run_dir = tmp_path / "named"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--total-steps", "10000000",
                  "--set", "eval.every=1")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 90, "the first update", proc)
        info = json.loads((run_dir / "processes.json").read_text())
        wait_for(lambda: info.get("evaluator") or json.loads((run_dir / "processes.json").read_text()).get("evaluator"),
                 30, "the evaluator", proc)
        info = json.loads((run_dir / "processes.json").read_text())
        expected = {info["learner"]: "ppo-cluster learner", info["actors"]["0"]: "ppo-cluster actor-0",
                    info["actors"]["1"]: "ppo-cluster actor-1", info["evaluator"]: "ppo-cluster eval"}
        # each sets its title first thing in its process function: wait for that, boundedly
        titles = wait_for(lambda: (t := {pid: cmdline(pid) for pid in expected}) == expected and t, 60,
                          "every process named", proc)
    finally:
        stop(proc)
    assert titles == expected


def cmdline(pid: int) -> str:
    return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
