"""launch.py restarts a learner that ended abnormally from its newest checkpoint, bounded (issue 43): real runs."""
from __future__ import annotations

import json
import os
import signal

import pytest

from tests.integration.cluster import launch, metrics, stop, wait_for

pytestmark = pytest.mark.integration
SMOKE = ("--config", "configs/smoke.toml", "--set", "run.checkpoint_every=2")


def learner_pid(run_dir) -> int | None:
    try:
        return json.loads((run_dir / "processes.json").read_text())["learner"]
    except (OSError, ValueError, KeyError):
        return None


# the learner collecting in its own process (smoke), or in 2 collector processes, which say goodbye to their actors
# when the learner dies (launch.py starts those again)
RUNS = {"in-process": (*SMOKE, "--total-steps", "1024"),  # 16 updates of 4 envs x 16 steps
        "collectors": ("--config", "configs/cartpole.toml", "--set", "cluster.collectors=2",
                       "--set", "run.checkpoint_every=2", "--total-steps", "4096")}  # 16 updates of 8 x 32


@pytest.mark.parametrize("kind", RUNS)
def test_kill_9_of_the_learner_mid_run_is_restarted_and_the_run_reaches_its_budget_as_one_run(tmp_path, kind):
    run_dir = tmp_path / "killed"
    args = RUNS[kind]
    total = int(args[-1])
    proc = launch(*args, "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 3, 180, "three updates", proc)
        first = learner_pid(run_dir)
        os.kill(first, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 0, out[-3000:]
    restarts = [line for line in out.splitlines() if "restart 1 of 3" in line]
    assert len(restarts) == 1 and "was killed by SIGKILL" in restarts[0], out[-3000:]
    assert learner_pid(run_dir) != first
    updates = [r["update"] for r in metrics(run_dir)]
    assert updates == list(range(1, len(updates) + 1)), updates  # strictly increasing, none twice, none missing
    assert metrics(run_dir)[-1]["env_steps"] >= total
    assert "learner said goodbye" in (run_dir / "actors.log").read_text()  # our actors left at the end
    assert "restarting actor" not in out, out[-3000:]  # none counted as an actor's failure
    width = metrics(run_dir)[0]["env_slots"]
    assert metrics(run_dir)[-1]["env_slots"] == width  # every actor back with the restarted learner


def test_a_stopped_learner_is_killed_past_its_watchdog_and_restarted_and_the_run_reaches_its_budget(tmp_path):
    """SIGSTOP: the learner's own watchdog cannot run; launch.py sees its heartbeat expire, kills it (one line),
    and the restart policy starts it again from its newest checkpoint."""
    run_dir = tmp_path / "stopped"
    proc = launch(*SMOKE, "--total-steps", "1024", "--set", "run.watchdog_s=4", "--set", "run.learner_silent_s=5",
                  "--set", "cluster.collective_timeout_s=1", "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 3, 180, "three updates", proc)
        first = learner_pid(run_dir)
        os.kill(first, signal.SIGSTOP)
        out, _ = proc.communicate(timeout=240)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 0, out[-3000:]
    silent = [line for line in out.splitlines() if "gave no sign of life" in line]
    assert len(silent) == 1 and "learner-0" in silent[0] and "killing it" in silent[0], out[-3000:]
    assert int(silent[0].split("no sign of life for ")[1].split("s")[0]) < 15, silent  # run.learner_silent_s 5, not 30
    restarts = [line for line in out.splitlines() if "restart 1 of 3" in line]
    assert len(restarts) == 1 and "was killed by SIGKILL" in restarts[0], out[-3000:]
    assert learner_pid(run_dir) != first
    updates = [r["update"] for r in metrics(run_dir)]
    assert updates == list(range(1, len(updates) + 1)), updates
    assert metrics(run_dir)[-1]["env_steps"] >= 1024


def test_a_stopped_collector_process_ends_its_learner_which_is_restarted_and_the_run_reaches_its_budget(tmp_path):
    """SIGSTOP of a collector process (a hung one): the learner names it and ends within its deadline
    (test_liveness.py), and launch.py starts the learner again from its newest checkpoint, with new collector
    processes: the run reaches its budget as one run, exit 0, nobody typing --resume."""
    run_dir = tmp_path / "stopped-collector"
    proc = launch(*RUNS["collectors"], "--set", "cluster.actor_timeout_s=2", "--run-dir", str(run_dir))
    victim = None
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 3, 180, "three updates", proc)
        first = learner_pid(run_dir)
        victim = json.loads((run_dir / "endpoints.json").read_text())["collectors"][1]["pid"]
        os.kill(victim, signal.SIGSTOP)
        out, _ = proc.communicate(timeout=240)
    finally:
        out = stop(proc) if proc.poll() is None else out
        if victim is not None:
            try:
                os.kill(victim, signal.SIGCONT)  # if it outlived its learner, let it see that and leave
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, out[-3000:]
    assert f"(pid {victim}) showed no sign of life" in out, out[-3000:]
    assert len([line for line in out.splitlines() if "restart 1 of 3" in line]) == 1, out[-3000:]
    assert learner_pid(run_dir) != first
    updates = [r["update"] for r in metrics(run_dir)]
    assert updates == list(range(1, len(updates) + 1)), updates
    assert metrics(run_dir)[-1]["env_steps"] >= int(RUNS["collectors"][-1])


def test_a_learner_that_keeps_dying_before_an_update_is_not_restarted_for_ever(tmp_path):
    """Each learner killed as soon as it appears: the start and one restart end before an update, then the run
    ends with an error naming the repeat."""
    run_dir = tmp_path / "repeats"
    proc = launch(*SMOKE, "--total-steps", "100000000", "--run-dir", str(run_dir))
    killed: list[int] = []
    try:
        for _ in range(2):
            pid = wait_for(lambda: (p := learner_pid(run_dir)) not in (None, *killed) and p, 120, "a new learner", proc)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        out, _ = proc.communicate(timeout=60)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 1, out[-3000:]
    assert "restart 1 of 3" in out and "restart 2 of 3" not in out, out[-3000:]
    assert "2 times in a row before completing an update" in out, out[-3000:]
    assert run_dir.is_dir()


def test_a_restart_refused_for_unusable_checkpoints_ends_the_run_with_an_error_and_keeps_it(tmp_path):
    run_dir = tmp_path / "corrupt"
    proc = launch(*SMOKE, "--total-steps", "100000000", "--run-dir", str(run_dir))
    try:
        wait_for(lambda: list((run_dir / "checkpoints").glob("ckpt_*.pt")), 180, "a checkpoint", proc)
        pid = learner_pid(run_dir)
        os.kill(pid, signal.SIGSTOP)  # no checkpoint written meanwhile
        for path in (run_dir / "checkpoints").glob("*.pt"):
            path.write_bytes(b"not a checkpoint")
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 1, out[-3000:]
    assert "restart 1 of 3" in out and "no checkpoint in" in out, out[-3000:]
    assert "refused to start" in out and "restart 2 of 3" not in out, out[-3000:]
    assert (run_dir / "config.toml").is_file()  # a refused restart removes nothing


def test_max_learner_restarts_0_ends_the_run_at_the_first_death(tmp_path):
    run_dir = tmp_path / "none"
    proc = launch(*SMOKE, "--total-steps", "100000000", "--run-dir", str(run_dir), "--max-learner-restarts", "0")
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 180, "an update", proc)
        os.kill(learner_pid(run_dir), signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 1, out[-3000:]
    assert "was killed by SIGKILL" in out and "restart limit reached (0" in out, out[-3000:]


@pytest.mark.parametrize("restarts", ["3", "0"])
def test_a_learner_stopped_before_its_first_heartbeat_is_killed_and_restarted_or_ends_the_run(tmp_path, restarts):
    """Issue 60, point 2: SIGSTOP of the learner as soon as processes.json names it (before its first beat). Its
    heartbeat counts from its spawn: killed past run.learner_silent_s, one line, then restarted under the policy
    (the run reaches its budget, exit 0) or, with no restart allowed, the run ends with exit 1 naming it. (It hung
    launch.py for ever, and after a SIGCONT exited 0 with no update done.)"""
    run_dir = tmp_path / "stopped-at-start"
    proc = launch(*SMOKE, "--total-steps", "256", "--set", "run.learner_silent_s=3", "--max-learner-restarts",
                  restarts, "--run-dir", str(run_dir))
    first = None
    try:
        first = wait_for(lambda: learner_pid(run_dir), 60, "processes.json naming the learner", proc)
        os.kill(first, signal.SIGSTOP)
        out, _ = proc.communicate(timeout=120)
    finally:
        out = stop(proc) if proc.poll() is None else out
        try:
            os.kill(first, signal.SIGCONT)  # if it outlived the test, let it see its launcher gone
        except (ProcessLookupError, TypeError):
            pass
    silent = [line for line in out.splitlines() if "gave no sign of life" in line]
    assert len(silent) == 1 and "learner-0" in silent[0] and "killing it" in silent[0], out[-3000:]
    if restarts == "0":
        assert proc.returncode == 1, out[-3000:]
        assert "was killed by SIGKILL after update 0; not restarting it" in out, out[-3000:]
        return
    assert proc.returncode == 0, out[-3000:]
    assert len([line for line in out.splitlines() if "restart 1 of 3" in line]) == 1, out[-3000:]
    assert learner_pid(run_dir) != first
    assert metrics(run_dir)[-1]["env_steps"] >= 256


def test_a_run_whose_actors_are_all_given_up_ends_loudly_with_a_final_checkpoint(tmp_path):
    """Issue 60, point 3: actors that keep dying past their restart limit left the run waiting for actors for
    ever (0 updates, no end). Now, with none left for cluster.no_actors_timeout_s after the first rollout, the
    learner writes its final checkpoint and the run ends with exit 1 naming the key; it is not restarted."""
    run_dir = tmp_path / "no-actors"
    proc = launch(*SMOKE, "--total-steps", "100000000", "--max-restarts", "0", "--set",
                  "cluster.no_actors_timeout_s=3", "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(metrics(run_dir)) >= 1, 120, "an update", proc)
        actors = json.loads((run_dir / "processes.json").read_text())["actors"]
        for pid in actors.values():
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        out = stop(proc) if proc.poll() is None else out
    assert proc.returncode == 1, out[-3000:]
    assert out.count("restart limit reached (0 within an hour") == 2, out[-3000:]
    assert "none of this run's actors is left" in out, out[-3000:]
    assert "after the first rollout (cluster.no_actors_timeout_s = 3; 0 waits for ever)" in out, out[-3000:]
    assert "not restarting it: it had no actor for cluster.no_actors_timeout_s" in out, out[-3000:]
    last = metrics(run_dir)[-1]["update"]
    assert (run_dir / "checkpoints" / f"ckpt_{last:08d}.pt").exists()
