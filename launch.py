"""Start a local cluster, one learner plus N actor processes, and supervise it until training ends.

    python launch.py                                   # Breakout, CleanRL's recipe, 10M steps
    python launch.py --config configs/smoke.toml       # a tiny run
    python launch.py --resume runs/breakout-...        # continue from the newest checkpoint

The topology: --actors and --envs-per-actor (cluster.actors, cluster.envs_per_actor) when given; left
unset, cluster.envs (8, CleanRL's recipe) env slots are spread over one actor process per core (2 cores:
2 actors x 4 envs). The log's first line says what was picked.

Ctrl-C or SIGTERM: the learner writes a final checkpoint, every child stops, exit 0 (Ctrl-C again forces).
"""
from __future__ import annotations

import os
import signal

EARLY_SIGNALS: list[int] = []  # Ctrl-C / SIGTERM that came while the imports below ran (StopRequests adopts them)


def _early_stop(signum, _frame) -> None:
    """Before main() runs, a Ctrl-C is a stop request like any other (nothing has started yet), never a
    KeyboardInterrupt traceback out of an import; a second one leaves at once."""
    EARLY_SIGNALS.append(signum)
    if len(EARLY_SIGNALS) > 1:
        os._exit(130)


if __name__ == "__main__":  # not in the spawned children, which re-import this file with SIGINT blocked
    signal.signal(signal.SIGINT, _early_stop)
    signal.signal(signal.SIGTERM, _early_stop)
    # a Ctrl-C held blocked since before the interpreter started (a parent that blocked it) is handled now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

import argparse  # noqa: E402 (the handlers above come first)
import json
import logging
import math
import multiprocessing as mp
import re
import shutil
import socket
import sys
import time
import typing
from multiprocessing import resource_tracker
from multiprocessing.connection import wait
from pathlib import Path

from actor import EXIT_REFUSED, leave_on_sigterm, name_process
from learner import config_docs
from learner.config import (Config, ConfigError, Device, check_resume, field_docs, from_dict, load, to_toml,
                            with_topology)
from learner.restarts import DiskSpace, RestartPolicy, Verdict, cause, last_update
from learner.rundir import RUN_UMASK, RunDirHeld, RunLock, default_name, make_private, refuse_if_held
from protocol.files import WriteFailed, atomic_write

log = logging.getLogger("launch")
ENDPOINT_TIMEOUT_S = 120.0
ACTOR_GRACE_S = 10.0  # at the end of a run: the actors' time to leave on the learner's goodbye
ACTOR_GRACE_STOPPING_S = 2.0  # the same after Ctrl-C or SIGTERM (an actor still starting has no goodbye to hear)
EXIT_FORCED = 130  # a second Ctrl-C: 128 + SIGINT, as a shell reports an interrupted command
LEARNER_GRACE_S = 30.0  # the other ranks' time to stop after one learner rank ended
SPACE_POLL_S = 2.0  # a full disk: how often the free space is looked at again before a restart


class HelpConfig(argparse.Action):
    """--help-config: every config key with its type, allowed values, default and meaning (learner/config_docs.py),
    then exit 0."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(config_docs.text())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    keys = "\n".join(f"  {key:<28} {default!r:<24} {doc}" for key, default, doc in field_docs())
    p = argparse.ArgumentParser(
        prog="python launch.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"config keys (set in the TOML file or with --set section.key=value; their meanings in full: "
               f"--help-config):\n{keys}")
    p.add_argument("--help-config", action=HelpConfig,
                   help="print every config key with its type, allowed values, default and meaning, and exit")
    p.add_argument("--config", default="configs/breakout.toml", help="run config TOML (default: %(default)s)")
    p.add_argument("--actors", type=int, default=None, help="actor processes (default: cluster.actors; unset: from the cores, e.g. 2 on 2 cores)")
    p.add_argument("--envs-per-actor", type=int, default=None, help="envs per actor (default: cluster.envs_per_actor; unset: cluster.envs / actors)")
    p.add_argument("--groups", type=int, default=None,
                   help="env groups per actor; 2 double-buffers stepping and inference (default: cluster.groups, 1)")
    p.add_argument("--total-steps", type=int, default=None, help="agent steps to train (default: run.total_steps)")
    p.add_argument("--device", choices=typing.get_args(Device), default=None, help="learner device (default: auto)")
    p.add_argument("--seed", type=int, default=None, help="run seed (default: run.seed, 1)")
    p.add_argument("--run-dir", default=None, help="run directory (default: runs/<env>-<timestamp>)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override any config key; repeatable")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint")
    p.add_argument("--deterministic", action="store_true", help="reproducible metrics on CPU (run.deterministic)")
    p.add_argument("--collect-only", action="store_true", help="no gradient updates: measure collection")
    p.add_argument("--random-policy", action="store_true", help="uniform random actions instead of the network")
    p.add_argument("--track", action="store_true",
                   help="also log to Weights & Biases (log.track; project log.wandb_project; needs wandb)")
    p.add_argument("--learners", type=int, default=None,
                   help="learner ranks on this host, data-parallel over torch.distributed (default: cluster.learners, 1); "
                        "under torchrun or srun each worker is one rank instead")
    p.add_argument("--max-restarts", type=int, default=5, help="restarts per actor slot before giving up (default: %(default)s)")
    p.add_argument("--max-learner-restarts", type=int, default=3,
                   help="restarts of a learner that ended abnormally (crash, kill -9, a hung collector), each from its "
                        "newest checkpoint, before the run ends with an error; 0: none (default: %(default)s)")
    return p


def resolve_config(args) -> tuple[Config, Path]:
    overrides = list(args.set)
    flags = {"cluster.actors": args.actors, "cluster.envs_per_actor": args.envs_per_actor, "cluster.learners": args.learners,
             "cluster.groups": args.groups,
             "run.total_steps": args.total_steps, "run.device": args.device, "run.seed": args.seed}
    overrides += [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]
    overrides += [f"run.{k}=true" for k in ("deterministic", "collect_only", "random_policy") if getattr(args, k)]
    if args.track:
        overrides.append("log.track=true")
    if args.resume:
        run_dir = Path(args.resume)
        saved = run_dir / "config.toml"
        if not saved.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.toml there (not a run directory)")
        cfg = load(saved, overrides)
        check_resume(load(saved), cfg, f"--resume {run_dir}")
        return cfg, run_dir
    cfg = load(args.config, overrides)
    if args.run_dir:
        return cfg, Path(args.run_dir)
    # under torchrun or srun every worker (and a restarted job) must name the same directory
    job = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")
    if external_job() and job:
        name = re.sub(r"[^A-Za-z0-9]+", "-", cfg.env.env_id.split("/")[-1]).strip("-").lower()
        return cfg, Path("runs") / f"{name}-{re.sub(r'[^A-Za-z0-9]+', '-', job)}"
    return cfg, Path("runs") / default_name(cfg.env.env_id)


def external_job() -> dict | None:
    """The rank this worker is, when torchrun or srun started it as one rank of a job (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world} but {', '.join(missing)} not set: start the job with torchrun, "
                          "or export them in the srun script (see the SLURM example in docs/scaling.md)")
    return {"rank": int(os.environ["RANK"]), "world": world}


def check_learners(cfg: Config) -> None:
    if external_job() and cfg.cluster.learners > 1:
        raise ConfigError("--learners (cluster.learners) starts ranks on this host; under torchrun or srun each "
                          "worker is already one rank: leave it at 1 and set --nproc-per-node instead")


def restarted_by_torchrun(run_dir: Path) -> bool:
    """torchrun --max-restarts starts the whole job again: it goes on from the run's newest checkpoint."""
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0 and any((run_dir / "checkpoints").glob("ckpt_*.pt")):
        log.info("restart %s of this torchrun job: resuming from %s", os.environ["TORCHELASTIC_RESTART_COUNT"], run_dir)
        return True
    return False


def check_fresh(run_dir: Path) -> None:
    """A run directory that already holds a run is continued with --resume, never silently written over.
    (CleanRL names every run afresh; Sample Factory resumes by default. Here resuming is asked for.)"""
    metrics = run_dir / "metrics.jsonl"
    held = [what for what, there in (("metrics.jsonl", metrics.is_file() and metrics.stat().st_size > 0),
                                     ("checkpoints", any((run_dir / "checkpoints").glob("ckpt_*.pt")))) if there]
    if held:
        raise ConfigError(f"--run-dir {run_dir} already holds a run ({' and '.join(held)}): continue it with "
                          f"--resume {run_dir}, or pick a fresh name (e.g. --run-dir {fresh_name(run_dir)})")


def fresh_name(run_dir: Path) -> Path:
    n = 2
    while run_dir.with_name(f"{run_dir.name}-{n}").exists():
        n += 1
    return run_dir.with_name(f"{run_dir.name}-{n}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_groups(cfg: Config, groups: int) -> None:
    """Refuse up front what every actor's handshake would be refused for: its envs split into groups."""
    k = cfg.cluster.envs_per_actor
    if cfg.cluster.actors and k % groups:
        raise ConfigError(f"--groups {groups} splits each actor's envs into {groups} equal groups: "
                          f"--envs-per-actor (cluster.envs_per_actor, {k}) must be divisible by {groups}")


def learner_process(cfg_dict: dict, run_dir: str, resume: bool, rank_env: dict, parent_pid: int) -> None:
    os.environ.update(rank_env)  # RANK, WORLD_SIZE, MASTER_*: read by torch.distributed in the learner
    rank = os.environ.get("RANK", "0")
    name_process("learner" if rank == "0" else f"learner-rank-{rank}")
    from learner.main import run  # here, in the child: the launcher itself never imports torch
    from learner.report.metrics import exit_process
    exit_process(run(from_dict(cfg_dict), run_dir, resume=resume, parent_pid=parent_pid))  # it stops when we die


def actor_process(address: str, endpoints: str, num_envs: int, groups: int, name: str, parent_pid: int, log_path: str,
                  keys: tuple[str, str] | None = None, refusals=None) -> None:
    """`endpoints`: the learner rank's endpoints file, read at every (re)join: a learner restarted by this
    launcher binds anew, and our actors keep rejoining while we live (we stop them at the end)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops us in order
    leave_on_sigterm()  # a SIGTERM to the whole group (a job's time limit): goodbye first, then exit 0
    name_process(name)
    logging.basicConfig(level=logging.INFO, filename=log_path, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from actor.runner import ActorOptions, Deadlines, Wire, run  # here, in the child: the launcher never imports the envs
    curve = None
    if keys:
        from protocol.security import ClientKeys  # here: zmq's CURVE, only when keys are given
        curve = ClientKeys.load(*keys)
    tell = (lambda reason: refusals.put((name, reason))) if refusals is not None else None
    sys.exit(run(ActorOptions(learner=address, num_envs=num_envs, groups=groups, name=name, parent_pid=parent_pid,
                              deadlines=Deadlines(reconnect_s=math.inf), wire=Wire(curve=curve), endpoints=endpoints),
                 on_refused=tell))


def eval_process(cfg_dict: dict, run_dir: str, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by the launcher (SIGTERM) once the learner is gone
    name_process("eval")
    logging.basicConfig(level=logging.INFO, filename=str(Path(run_dir) / "eval.log"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from learner.evaluation.worker import run  # here, in the child: torch, gymnasium
    sys.exit(run(from_dict(cfg_dict), run_dir, parent_pid))


class StopRequests:
    """Ctrl-C and SIGTERM. The first asks every process to stop in order (the learner checkpoints, the actors
    leave on its goodbye) and says so at once; a second one kills every child and exits 130.

    Children are started with SIGINT blocked (`started`), so the Ctrl-C a terminal sends to the whole process
    group reaches only this process: no child prints a KeyboardInterrupt traceback, and the stop goes in
    order (SIGTERM to the learners, whose goodbyes stop the actors)."""

    def __init__(self):
        self.signals = len(EARLY_SIGNALS)  # a Ctrl-C during the imports counts as the first
        self.requested = self.signals > 0
        self._pids: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        if self.requested:
            log.warning("stopping (Ctrl-C again to force)")

    def __call__(self) -> bool:
        return self.requested

    def request(self) -> None:
        self.requested = True

    def started(self, proc: mp.Process) -> None:
        """proc.start() with SIGINT blocked in this thread. The child inherits the block through exec, so a
        Ctrl-C never reaches it from its first instruction on (the launcher stops it in order, with SIGTERM).
        The handler here stays in place meanwhile: a Ctrl-C that lands during the start is held for this
        thread, or taken at once by another thread of this process (numpy's BLAS threads do not block it),
        and handled either way. (Ignoring SIGINT here instead, as before, lost it: a pending signal is
        discarded when its action becomes SIG_IGN, and another thread drops it while the action is SIG_IGN.)"""
        resource_tracker.ensure_running()  # before the block: starting the tracker unblocks SIGINT here
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self._pids.append(proc.pid)

    def _on_signal(self, signum, _frame) -> None:
        self.signals += 1
        if self.signals > 1:
            self._force()
        self.requested = True
        log.warning("stopping (Ctrl-C again to force)")

    def _force(self) -> None:
        log.warning("forced: killing every process of the run (the last checkpoint stays)")
        for pid in self._pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(EXIT_FORCED)

class LearnerRestarts:
    """Whether launch.py starts its learner again after it ended abnormally (learner/restarts.py's policy: bounded,
    with a back-off, no loop on a fault that repeats at once), and the waits before: the back-off, and a full disk
    (one line, then polled until there is room; a stop request ends either). Under torchrun or srun their own
    --max-restarts restarts the job instead (`enabled` False)."""

    def __init__(self, policy: RestartPolicy, run_dir: Path, stops: StopRequests, enabled: bool = True):
        self.policy, self.stops, self.enabled = policy, stops, enabled
        self.metrics, self.disk = run_dir / "metrics.jsonl", DiskSpace(run_dir)
        self.baseline = last_update(self.metrics)  # the last update before the learner now running

    @property
    def used(self) -> int:
        return self.policy.used

    def started(self) -> None:
        """The learner is up, its resume done (the logs cut back to its checkpoint): its progress counts from here."""
        self.baseline = last_update(self.metrics)

    def decide(self, name: str, exitcode: int | None) -> Verdict | None:
        """One line either way, naming the cause; None: not restarted (stopping, or not ours to restart)."""
        if not self.enabled or self.stops():
            return None
        reached = last_update(self.metrics)
        verdict = self.policy.decide(exitcode, reached > self.baseline)
        self.baseline = reached  # a learner that dies before its resume is done has made no progress
        if not verdict.restart:
            log.error("the learner (%s) %s after update %d; not restarting it: %s", name, cause(exitcode),
                      reached, verdict.why)
            return None
        log.warning("the learner (%s) %s after update %d: restart %d of %d, from its newest checkpoint, "
                    "in %gs", name, cause(exitcode), reached, self.policy.used, self.policy.limit, verdict.delay_s)
        return verdict

    def wait(self, verdict: Verdict) -> bool:
        """The back-off, then room on the disk. False when a stop request came meanwhile."""
        until = time.monotonic() + verdict.delay_s
        while time.monotonic() < until and not self.stops():
            time.sleep(0.1)  # a back-off, not synchronization: a Ctrl-C ends it within 0.1 s
        short = self.disk.shortfall()
        if short is not None:
            log.warning("the disk of %s is full (%s): waiting for space before the restart", self.disk.run_dir, short)
        while short is not None and not self.stops():
            time.sleep(SPACE_POLL_S)  # polling the free space, not synchronization
            short = self.disk.shortfall()
        return not self.stops()


class Cluster:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool, groups: int, max_restarts: int, stops: StopRequests,
                 learner_restarts: LearnerRestarts):
        self.cfg, self.run_dir, self.resume, self.groups = cfg, run_dir, resume, groups
        self.max_restarts, self.stops, self.learner_restarts = max_restarts, stops, learner_restarts
        self.ctx = mp.get_context("spawn")
        self.learners: list[mp.Process] = []  # this host's learner ranks
        self.ranks = self._rank_envs()  # the environment of each (empty: one learner on its own)
        self.actors: dict[int, mp.Process] = {}
        self.evaluator = None  # the eval worker process, when cfg.eval.every > 0
        self.restarts: dict[int, int] = {}
        self.left: set[int] = set()  # actor slots whose actor left on a goodbye
        self.refusals = self.ctx.SimpleQueue()  # (actor name, reason) from actors the learner refused
        self.refused: dict[str, str] = {}
        self.learners_told = False  # the learners were sent SIGTERM after a stop request
        self.addresses: list[str] = []  # each local learner rank's address; actor i joins rank i % len

    @property
    def learner(self) -> mp.Process:
        return self.learners[0]

    def _rank_envs(self) -> list[dict]:
        """One environment per local learner: --learners G makes a G-rank job on this host; under torchrun or
        srun this worker is one rank of theirs (its environment is inherited as it is)."""
        job, g = external_job(), self.cfg.cluster.learners
        if job is not None:
            return [{"RANK": str(job["rank"])}]
        if g == 1:
            return [{}]
        port = str(free_port())
        return [{"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(g), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": port} for r in range(g)]

    def _endpoint_file(self, env: dict) -> Path:
        rank = int(env.get("RANK", "0"))
        return self.run_dir / (f"endpoints-rank-{rank}.json" if rank else "endpoints.json")

    def start(self) -> None:
        """The learners, then (once every one has written its endpoints) the actors and the evaluator. Returns
        early on a stop request or a learner that ended: supervise() then winds down whatever runs."""
        if not self._start_learners():
            return
        for i in range(self.cfg.cluster.actors):
            if self.stops():
                return
            self._start_actor(i)
        if self.cfg.eval.every > 0 and not self.stops():
            self.evaluator = self.ctx.Process(target=eval_process, name="evaluator", daemon=False,
                                              args=(self.cfg.to_dict(), str(self.run_dir), os.getpid()))
            self.stops.started(self.evaluator)
            self._record_pids()

    def _start_learners(self) -> bool:
        """Every local learner rank, then their addresses once written; False if a stop or an end came first."""
        self.learners, self.addresses = [], []
        for env in self.ranks:
            self._endpoint_file(env).unlink(missing_ok=True)
            proc = self.ctx.Process(target=learner_process, name=f"learner-{env.get('RANK', '0')}",
                                    args=(self.cfg.to_dict(), str(self.run_dir), self.resume, env, os.getpid()))
            self.stops.started(proc)
            self.learners.append(proc)
        self._record_pids()
        for env, proc in zip(self.ranks, self.learners):
            address = self._await_endpoint(env, proc)
            if address is None:
                return False
            self.addresses.append(address)
        self.learner_restarts.started()
        self._record_pids()
        return True

    def _restart_learners(self) -> bool:
        """A learner rank ended abnormally: the others are stopped, and (if the policy allows, after its waits)
        every rank starts again from the newest checkpoint, as --resume does. Our actors keep rejoining
        meanwhile (the new endpoints file tells them where). False: not restarted."""
        first = next(p for p in self.learners if not p.is_alive())
        verdict = None if first.exitcode == 0 else self.learner_restarts.decide(first.name, first.exitcode)
        if verdict is None:
            return False
        self._stop_learners()
        for env in self.ranks:  # no actor rejoins the dead address meanwhile
            self._endpoint_file(env).unlink(missing_ok=True)
        if not self.learner_restarts.wait(verdict):
            return False
        self.resume, self.ranks = True, self._rank_envs()  # a fresh MASTER_PORT for a multi-rank job
        try:
            if self._start_learners():
                self._start_actors_that_left()
        except RuntimeError as exc:  # it did not come up in time
            log.error("%s", exc)
            self.stops.request()
        return True

    def _start_actors_that_left(self) -> None:
        """Collector processes say goodbye to their actors when the learner dies (they exit 0): ours are started
        again for the restarted learner, not counted as restarts. The others rejoin by themselves."""
        for i in sorted(self.left | {i for i, p in self.actors.items() if p.exitcode == 0}):
            self._start_actor(i)
        self.left.clear()

    def _record_pids(self) -> None:
        """RUN_DIR/processes.json: who is running, for users (and tests) looking for stragglers."""
        info = {"launch": os.getpid(), "learner": self.learner.pid, "learners": [p.pid for p in self.learners],
                "actors": {str(i): p.pid for i, p in self.actors.items()}}
        if self.evaluator is not None:
            info["evaluator"] = self.evaluator.pid
        rank = int(self.ranks[0].get("RANK", "0")) if external_job() else 0
        name = f"processes-rank-{rank}.json" if rank else "processes.json"
        try:
            atomic_write(self.run_dir / name, json.dumps(info))
        except WriteFailed as exc:  # a full or read-only disk: the learner says so and stops; nothing to add
            log.warning("%s not updated (%s)", name, exc)

    def _await_endpoint(self, env: dict, learner: mp.Process) -> str | None:
        """The learner's address once it has bound it; None when a stop was asked for or a learner ended
        first (supervise() says how it ended)."""
        path, deadline = self._endpoint_file(env), time.monotonic() + ENDPOINT_TIMEOUT_S
        while all(p.is_alive() for p in self.learners) and not self.stops():
            if path.exists():
                return json.loads(path.read_text())["address"]
            if time.monotonic() > deadline:
                raise RuntimeError(f"the learner (rank {env.get('RANK', '0')}) did not come up within "
                                   f"{ENDPOINT_TIMEOUT_S:g}s")
            wait([learner.sentinel], timeout=0.1)
        return None

    def _start_actor(self, i: int) -> None:
        rank = i % len(self.addresses)
        proc = self.ctx.Process(target=actor_process, name=f"actor-{i}", daemon=False, args=(
            self.addresses[rank], str(self._endpoint_file(self.ranks[rank])), self.cfg.cluster.envs_per_actor, self.groups, f"actor-{i}", os.getpid(),
            str(self.run_dir / "actors.log"), self._actor_keys(), self.refusals))
        self.stops.started(proc)
        self.actors[i] = proc
        self._record_pids()

    def _actor_keys(self) -> tuple[str, str] | None:
        """Our own actors' CURVE keys: their secret key, and the learner's public key (read from its cert)."""
        c = self.cfg.cluster
        return (c.client_key, c.server_key) if c.client_key else None

    def supervise(self) -> int:
        backoff_until: dict[int, float] = {}
        while True:
            if self.stops() and not self.learners_told:
                for learner in self.learners:  # SIGTERM: rank 0 checkpoints, every rank says goodbye to its actors
                    if learner.is_alive():
                        learner.terminate()
                self.learners_told = True
            wait([*[p.sentinel for p in self.learners], *[p.sentinel for p in self.actors.values()]], timeout=0.5)
            if not all(p.is_alive() for p in self.learners):
                if not self._restart_learners():
                    return self._shutdown()
                continue
            now = time.monotonic()
            for i, proc in list(self.actors.items()):
                if proc.is_alive() or self.stops():
                    continue
                if proc.exitcode == 0:  # it left on the learner's goodbye: nothing to restart (but see _restart_learners)
                    del self.actors[i]
                    self.left.add(i)
                    continue
                if proc.exitcode == EXIT_REFUSED:  # a restart would be refused again
                    log.error("actor-%d was refused: %s; not restarting it", i, self._refusal(f"actor-{i}"))
                    del self.actors[i]
                    continue
                if i not in backoff_until:
                    n = self.restarts.get(i, 0)
                    log.warning("actor-%d exited with code %s", i, proc.exitcode)
                    if n >= self.max_restarts:
                        log.error("actor-%d: restart limit (%d) reached; training continues without it", i, n)
                        del self.actors[i]
                        continue
                    backoff_until[i] = now + min(0.5 * 2 ** n, 30.0)
                elif now >= backoff_until[i]:
                    del backoff_until[i]
                    self.restarts[i] = self.restarts.get(i, 0) + 1
                    log.warning("restarting actor-%d (restart %d of %d)", i, self.restarts[i], self.max_restarts)
                    self._start_actor(i)

    def _refusal(self, name: str) -> str:
        """The reason the actor gave before exiting (it put it on the queue before it exited)."""
        while not self.refusals.empty():
            who, reason = self.refusals.get()
            self.refused[who] = reason
        return self.refused.pop(name, "reason in actors.log")

    def _stop_learners(self) -> list[int]:
        """Once one learner rank has ended, the others follow: SIGTERM, then SIGKILL past a grace period (a
        rank blocked in a collective with a dead peer only notices at its collective timeout)."""
        first = next(p for p in self.learners if not p.is_alive())
        alive = [p for p in self.learners if p.is_alive()]
        if alive and first.exitcode != 0:
            log.error("learner %s exited with code %s; stopping the other learner ranks", first.name, first.exitcode)
            for proc in alive:
                proc.terminate()
        deadline = time.monotonic() + LEARNER_GRACE_S  # after a clean end the others are finishing too
        for proc in alive:
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                log.error("learner %s did not stop within %gs; killing it", proc.name, LEARNER_GRACE_S)
                proc.kill()
                proc.join()
        return [p.exitcode for p in self.learners]

    def _stop_actors(self, failed: bool) -> None:
        """Actors leave on the learner's goodbye. After a stop request one still starting (no goodbye to hear)
        is not waited for long; after a learner that failed (no goodbye comes, or only from some of its
        collectors) none is waited for: SIGTERM at once (each leaves as on Ctrl-C), SIGKILL past the grace."""
        if not failed:
            deadline = time.monotonic() + (ACTOR_GRACE_STOPPING_S if self.stops() else ACTOR_GRACE_S)
            for proc in self.actors.values():
                proc.join(max(deadline - time.monotonic(), 0.1))
        for proc in self.actors.values():
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + ACTOR_GRACE_STOPPING_S
        for proc in self.actors.values():
            proc.join(max(deadline - time.monotonic(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join()

    def _shutdown(self) -> int:
        codes = self._stop_learners()
        if self.stops():  # a learner SIGTERMed before its handler was in place (still starting) stopped as asked
            codes = [0 if c == -signal.SIGTERM else c for c in codes]
        failed = [c for c in codes if c != 0]
        code = 0 if not failed else 2 if codes[0] == 2 else failed[0]
        if code == 2 and self.learner_restarts.used:  # a restarted learner refused: the directory holds a run
            code = 1
        if self.evaluator is not None:
            self.evaluator.terminate()
        if code not in (0, 2):
            log.error("the learner exited with code %s; stopping the actors", code)
        self._stop_actors(failed=code not in (0, 2))
        if self.evaluator is not None:  # SIGTERMed on entry: mid-evaluation perhaps, it drops a half-written video
            self.evaluator.join(ACTOR_GRACE_STOPPING_S)
            if self.evaluator.is_alive():
                self.evaluator.kill()
                self.evaluator.join()
        return code if code in (0, 2) else 1  # 2: the learner refused to start (its log line says why)



def main(argv=None) -> int:
    os.umask(RUN_UMASK)  # what this run and its children create is this user's only (docs/reliability.md)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [launch] %(levelname)s %(message)s", datefmt="%H:%M:%S")
    stops = StopRequests()  # first: a Ctrl-C from here on stops in order
    args = build_parser().parse_args(argv)
    try:
        cfg, run_dir, resume = prepare(args)
    except (ConfigError, RunDirHeld) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if stops():
        return 0
    try:
        lock, created, saved = take_run_dir(run_dir, cfg)
    except (RunDirHeld, WriteFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return run_cluster(cfg, run_dir, resume, (args.max_restarts, args.max_learner_restarts), stops, created, saved)
    finally:
        lock.release()


def prepare(args) -> tuple[Config, Path, bool]:
    """The config, run directory and whether it resumes: everything checked, nothing written yet."""
    for flag in ("max_restarts", "max_learner_restarts"):
        if getattr(args, flag) < 0:
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    cfg, run_dir = resolve_config(args)
    cfg = with_topology(cfg)
    check_groups(cfg, cfg.cluster.groups)
    check_learners(cfg)
    refuse_if_held(run_dir, lock_rank())  # before anything else looks at it: the holder's pid, exit 2
    resume = bool(args.resume) or restarted_by_torchrun(run_dir)
    if not resume and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0:
        check_fresh(run_dir)
    return cfg, run_dir, resume


def lock_rank() -> int:
    job = external_job()
    return job["rank"] if job else 0


def take_run_dir(run_dir: Path, cfg: Config) -> tuple[RunLock, bool, bytes | None]:
    """Create (if new) and lock the run directory, then write config.toml. Returns the lock, whether the
    directory was created, and the config.toml it held before (restored if the learner refuses a resume)."""
    created = not run_dir.exists()
    try:
        if make_private(run_dir):
            log.info("run directory %s was open to other users: now 0700 (this user only)", run_dir)
        lock = RunLock(run_dir, lock_rank())
    except OSError as exc:
        raise WriteFailed(f"cannot use {run_dir}: {exc.strerror or exc}") from None
    except RunDirHeld:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    config = run_dir / "config.toml"
    saved = config.read_bytes() if config.is_file() else None
    try:
        atomic_write(config, to_toml(cfg))  # several workers of one job may write it at once
    except WriteFailed:
        lock.release()
        raise
    return lock, created, saved


def run_cluster(cfg: Config, run_dir: Path, resume: bool, restart_limits: tuple[int, int], stops: StopRequests,
                created: bool, saved: bytes | None) -> int:
    """restart_limits: --max-restarts (per actor slot) and --max-learner-restarts."""
    max_restarts, max_learner_restarts = restart_limits
    learners = f"{cfg.cluster.learners} learner ranks" if cfg.cluster.learners > 1 else "learner"
    log.info("run directory %s: %s + %d actors x %d envs", run_dir, learners, cfg.cluster.actors,
             cfg.cluster.envs_per_actor)
    restarts = LearnerRestarts(RestartPolicy(max_learner_restarts), run_dir, stops, enabled=external_job() is None)
    cluster = Cluster(cfg, run_dir, resume=resume, groups=cfg.cluster.groups, max_restarts=max_restarts, stops=stops,
                      learner_restarts=restarts)
    try:
        cluster.start()
    except RuntimeError as exc:  # the learner did not come up in time
        log.error("%s", exc)
        stops.request()
    code = cluster.supervise()
    if code == 2 and created:  # the learner refused to start (its log line said why): leave nothing behind
        shutil.rmtree(run_dir, ignore_errors=True)
        log.info("nothing started: removed %s", run_dir)
    elif code == 2 and saved is not None:  # a refused resume: the run's own config stays
        atomic_write(run_dir / "config.toml", saved)
    return code


if __name__ == "__main__":
    sys.exit(main())
