"""`python -m actor` on its own, as a newcomer meets it (issue 25, item 6): it says whom it connects to and
for how long it will try, gives up plainly when nothing answers, and leaves quietly on Ctrl-C, saying goodbye
to a learner it had joined."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.cluster import (ROOT, endpoints, kill_group, launch, metrics, sigint_as_in_a_terminal,
                                       start_actor, stop, wait_for)

pytestmark = pytest.mark.integration


def closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening, closed: nothing answers there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_nothing_listening_is_said_at_once_and_given_up_on_in_the_time_stated():
    address = f"tcp://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    actor = start_actor(address, "--join-timeout-s", "3")
    try:
        out, _ = actor.communicate(timeout=60)
    finally:
        kill_group(actor)
    elapsed = time.monotonic() - started
    lines = out.splitlines()
    assert f"connecting to {address} (giving up if no learner answers within 3s)" in lines[0], out
    assert actor.returncode == 1 and elapsed < 20, (elapsed, out)
    assert f"no answer from {address} within 3s: is a learner running there?" in lines[-1], out
    assert "Traceback" not in out


def test_ctrl_c_while_connecting_leaves_quietly(tmp_path):
    console = tmp_path / "actor.txt"
    with open(console, "w") as sink:
        actor = subprocess.Popen([sys.executable, "-m", "actor", "--learner", f"tcp://127.0.0.1:{closed_port()}",
                                  "--join-timeout-s", "60"], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=sigint_as_in_a_terminal)
    try:
        wait_for(lambda: "connecting to" in console.read_text(), 30, "the connecting line", actor)
        os.killpg(actor.pid, signal.SIGINT)
        actor.wait(timeout=30)
    finally:
        kill_group(actor)
    out = console.read_text()
    assert actor.returncode == 0 and "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "interrupted (Ctrl-C); leaving" in out, out


def test_ctrl_c_once_joined_says_goodbye_and_the_learner_logs_a_departure(tmp_path):
    run_dir = tmp_path / "run"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--actors", "1",
                  "--total-steps", "10000000")
    actor = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        actor = start_actor(address, "--envs", "2", "--name", "visitor")
        wait_for(lambda: any(r["actors"] == 2 for r in metrics(run_dir)), 90, "the visitor in a rollout", proc)
        os.killpg(actor.pid, signal.SIGINT)  # a terminal's Ctrl-C
        out, _ = actor.communicate(timeout=30)
        assert actor.returncode == 0 and "Traceback" not in out, out
        wait_for(lambda: "actor visitor left" in (run_dir / "learner.log").read_text()
                 or any("visitor left" in e for r in metrics(run_dir) for e in r["events"]), 30, "the departure", proc)
    finally:
        if actor is not None:
            kill_group(actor)
        stop(proc)
    events = [e for r in metrics(run_dir) for e in r["events"] if "visitor left" in e]
    assert events and all("said goodbye: interrupted (Ctrl-C)" in e and "unreachable" not in e for e in events), events


def test_actors_0_prints_the_command_that_joins_and_says_when_every_actor_left(tmp_path):
    """Issue 25, item 7: the waiting line carries the exact `python -m actor` command; run as printed it
    joins; after it leaves, a one-learner run says so without talking about learner ranks."""
    run_dir = tmp_path / "run"
    proc = launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--actors", "0",
                  "--total-steps", "10000000", "--set", "cluster.actor_timeout_s=1")
    actor = None
    try:
        address = wait_for(lambda: endpoints(run_dir), 90, "endpoints", proc)["address"]
        command = f"python -m actor --learner {address} --envs 1"
        wait_for(lambda: f"to add one: {command}" in (run_dir / "learner.log").read_text(), 30, "the hint", proc)
        actor = subprocess.Popen([sys.executable, *command.split()[1:], "--name", "copied"], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                 preexec_fn=sigint_as_in_a_terminal)
        wait_for(lambda: any(r["actors"] == 1 for r in metrics(run_dir)), 90, "an update with the copied command", proc)
        said = (run_dir / "learner.log").read_text().count("waiting for actors")
        os.killpg(actor.pid, signal.SIGINT)
        actor.communicate(timeout=30)
        wait_for(lambda: (run_dir / "learner.log").read_text().count("waiting for actors") > said, 30,
                 "waiting again once the actor left", proc)
    finally:
        if actor is not None:
            kill_group(actor)
        stop(proc)
    text = (run_dir / "learner.log").read_text()
    assert "learner rank" not in text
    waits = [line for line in text.splitlines() if "waiting for actors" in line]
    assert all(f"to add one: python -m actor --learner {address} --envs" in line for line in waits), waits
