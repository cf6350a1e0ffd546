"""An actor retired while still alive (stopped past the timeout) is told so, rejoins, and training goes on."""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.integration.cluster import alive, launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration


def events_after(run_dir, update: int, text: str) -> list[dict]:
    return [r for r in metrics(run_dir) if r["update"] > update and any(text in e for e in r["events"])]


def test_an_actor_stopped_past_the_timeout_is_told_it_was_retired_and_rejoins(tmp_path):
    run_dir = tmp_path / "sigstop"
    # training goes on with the actor left running while the other one is stopped (min_envs gates only
    # the first rollout)
    proc = launch("--config", "configs/smoke.toml", "--total-steps", "10000000", "--run-dir", str(run_dir),
                  "--set", "cluster.actor_timeout_s=3")
    out = ""
    try:
        wait_for(lambda: any(r["env_slots"] == 4 for r in metrics(run_dir)), 90, "a rollout with both actors", proc)
        victim = json.loads((run_dir / "processes.json").read_text())["actors"]["0"]
        stopped_at = metrics(run_dir)[-1]["update"]
        os.kill(victim, signal.SIGSTOP)
        try:
            retired = wait_for(lambda: events_after(run_dir, stopped_at, "actor-0 left: silent for more than 3s"), 60,
                               "the stopped actor retired", proc)
        finally:
            os.kill(victim, signal.SIGCONT)
        back = wait_for(lambda: events_after(run_dir, retired[0]["update"], "actor-0 joined"), 60,
                        "the retired actor rejoined", proc)
        wait_for(lambda: [r for r in metrics(run_dir) if r["update"] > back[0]["update"] and r["env_slots"] == 4],
                 60, "updates with the rejoined actor's envs", proc)
        assert json.loads((run_dir / "processes.json").read_text())["actors"]["0"] == victim and alive(victim), \
            "the stopped process itself rejoined; it was not replaced"
        log = (run_dir / "actors.log").read_text()
        assert "actor-0 told by the learner: actor actor-0 was retired: silent for more than 3s" in log, log[-2000:]
    finally:
        out = stop(proc)
    assert "restarting actor-0" not in out
    assert proc.returncode == 0, out[-3000:]
