"""What each process the launcher starts runs (spawned: it imports torch or the envs itself, the launcher never
does): a learner rank, an actor, the evaluator."""
from __future__ import annotations

import logging
import math
import os
import signal
import sys
from pathlib import Path

from actor import name_process
from actor.stop_signals import leave_on_sigterm
from learner.config import from_dict
from learner.lifecycle.process import Heartbeat
from protocol.files import open_append


def learner_process(cfg_dict: dict, run_dir: str, resume: bool, rank_env: dict, parent_pid: int, heartbeat=None) -> None:
    """heartbeat: the launcher's shared double, beaten from here on, before the heavy imports (Heartbeat)."""
    if heartbeat is not None:
        Heartbeat(heartbeat)
    os.environ.update(rank_env)  # RANK, WORLD_SIZE, MASTER_*: read by torch.distributed in the learner
    rank = os.environ.get("RANK", "0")
    name_process("learner" if rank == "0" else f"learner-rank-{rank}")
    from learner.main import run_learner  # here, in the child: the launcher itself never imports torch
    from learner.report.metrics import exit_process
    exit_process(run_learner(from_dict(cfg_dict), run_dir, resume=resume, parent_pid=parent_pid))  # it stops when we die


def actor_process(address: str, endpoints: str, num_envs: int, groups: int | str, name: str, parent_pid: int, log_path: str,
                  keys: tuple[str, str] | None = None, refusals=None) -> None:
    """`endpoints`: the learner rank's endpoints file, read at every (re)join: a learner restarted by this
    launcher binds anew, and our actors keep rejoining while we live (we stop them at the end)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops us in order
    leave_on_sigterm()  # and SIGHUP: leave as on SIGTERM  # a SIGTERM to the whole group (a job's time limit): goodbye first, then exit 0
    name_process(name)
    logging.basicConfig(level=logging.INFO, stream=open_append(log_path, buffering=1),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from actor.runner import ActorOptions, Deadlines, Wire, run_actor  # here, in the child: the launcher never imports the envs
    curve = None
    if keys:
        from protocol.security import ClientKeys  # here: zmq's CURVE, only when keys are given
        curve = ClientKeys.load(*keys)
    tell = (lambda reason: refusals.put((name, reason))) if refusals is not None else None
    try:
        code = run_actor(ActorOptions(learner=address, num_envs=num_envs, groups=groups, name=name, parent_pid=parent_pid,
                                      deadlines=Deadlines(reconnect_s=math.inf), wire=Wire(curve=curve),
                                      endpoints=endpoints), on_refused=tell)
    except KeyboardInterrupt:  # a stop signal in the instant between run_actor's return and its leaving: stopped
        code = 0               # as asked (the process's end closes what the goodbye did not)
    sys.exit(code)


def eval_process(cfg_dict: dict, run_dir: str, parent_pid: int) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):  # stopped by the launcher (SIGTERM) once the learner is gone
        signal.signal(sig, signal.SIG_IGN)
    name_process("eval")
    logging.basicConfig(level=logging.INFO, stream=open_append(Path(run_dir) / "eval.log", buffering=1),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from learner.evaluation.worker import run_evaluator  # here, in the child: torch, gymnasium
    sys.exit(run_evaluator(from_dict(cfg_dict), run_dir, parent_pid))
