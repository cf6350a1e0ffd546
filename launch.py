"""Start a local cluster, one learner plus N actor processes, and supervise it until training ends.

    python launch.py                                   # Breakout, 8 actors, 10M steps
    python launch.py --config configs/smoke.toml       # a tiny run
    python launch.py --resume runs/breakout-...        # continue from the newest checkpoint

Ctrl-C or SIGTERM: the learner writes a final checkpoint, every child stops, exit 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import re
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path

from actor import EXIT_REFUSED
from learner.config import Config, ConfigError, field_docs, from_dict, load, to_toml

log = logging.getLogger("launch")
ENDPOINT_TIMEOUT_S = 120.0


def build_parser() -> argparse.ArgumentParser:
    keys = "\n".join(f"  {key:<28} {default!r:<24} {doc}" for key, default, doc in field_docs())
    p = argparse.ArgumentParser(
        prog="python launch.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"config keys (set in the TOML file or with --set section.key=value):\n{keys}")
    p.add_argument("--config", default="configs/breakout.toml", help="run config TOML (default: %(default)s)")
    p.add_argument("--actors", type=int, default=None, help="actor processes (default: cluster.actors, 8)")
    p.add_argument("--envs-per-actor", type=int, default=None, help="envs per actor (default: cluster.envs_per_actor, 1)")
    p.add_argument("--groups", type=int, default=1, choices=(1, 2),
                   help="env groups per actor; 2 double-buffers stepping and inference (default: %(default)s)")
    p.add_argument("--total-steps", type=int, default=None, help="agent steps to train (default: run.total_steps)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="learner device (default: auto)")
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
    p.add_argument("--max-restarts", type=int, default=5, help="restarts per actor slot before giving up (default: %(default)s)")
    return p


def resolve_config(args) -> tuple[Config, Path]:
    overrides = list(args.set)
    flags = {"cluster.actors": args.actors, "cluster.envs_per_actor": args.envs_per_actor,
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
        return load(saved, overrides), run_dir
    cfg = load(args.config, overrides)
    if args.run_dir:
        return cfg, Path(args.run_dir)
    name = re.sub(r"[^A-Za-z0-9]+", "-", cfg.env.env_id.split("/")[-1]).strip("-").lower()
    return cfg, Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_groups(cfg: Config, groups: int) -> None:
    """Refuse up front what every actor's handshake would be refused for: its envs split into groups."""
    k = cfg.cluster.envs_per_actor
    if cfg.cluster.actors and k % groups:
        raise ConfigError(f"--groups {groups} splits each actor's envs into {groups} equal groups: "
                          f"--envs-per-actor (cluster.envs_per_actor, {k}) must be divisible by {groups}")


def learner_process(cfg_dict: dict, run_dir: str, resume: bool) -> None:
    from learner.main import run
    sys.exit(run(from_dict(cfg_dict), run_dir, resume=resume))


def actor_process(address: str, num_envs: int, groups: int, name: str, parent_pid: int, log_path: str,
                  keys: tuple[str, str] | None = None, refusals=None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops us in order
    logging.basicConfig(level=logging.INFO, filename=log_path, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from actor.runner import ActorOptions, run
    curve = None
    if keys:
        from protocol.security import ClientKeys
        curve = ClientKeys.load(*keys)
    tell = (lambda reason: refusals.put((name, reason))) if refusals is not None else None
    sys.exit(run(ActorOptions(learner=address, num_envs=num_envs, groups=groups, name=name, parent_pid=parent_pid,
                              curve=curve), on_refused=tell))


def eval_process(cfg_dict: dict, run_dir: str, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopped by the launcher (SIGTERM) once the learner is gone
    logging.basicConfig(level=logging.INFO, filename=str(Path(run_dir) / "eval.log"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from learner.eval_worker import run
    sys.exit(run(from_dict(cfg_dict), run_dir, parent_pid))


class Cluster:
    def __init__(self, cfg: Config, run_dir: Path, resume: bool, groups: int, max_restarts: int):
        self.cfg, self.run_dir, self.resume, self.groups = cfg, run_dir, resume, groups
        self.max_restarts = max_restarts
        self.ctx = mp.get_context("spawn")
        self.learner = None
        self.actors: dict[int, mp.Process] = {}
        self.evaluator = None  # the eval worker process, when cfg.eval.every > 0
        self.restarts: dict[int, int] = {}
        self.refusals = self.ctx.SimpleQueue()  # (actor name, reason) from actors the learner refused
        self.refused: dict[str, str] = {}
        self.stopping = False
        self.address = ""

    def start(self) -> None:
        (self.run_dir / "endpoints.json").unlink(missing_ok=True)
        self.learner = self.ctx.Process(target=learner_process, name="learner",
                                        args=(self.cfg.to_dict(), str(self.run_dir), self.resume))
        self.learner.start()
        self._record_pids()
        self.address = self._await_endpoint()
        self._record_pids()
        for i in range(self.cfg.cluster.actors):
            self._start_actor(i)
        if self.cfg.eval.every > 0:
            self.evaluator = self.ctx.Process(target=eval_process, name="evaluator", daemon=False,
                                              args=(self.cfg.to_dict(), str(self.run_dir), os.getpid()))
            self.evaluator.start()
            self._record_pids()

    def _record_pids(self) -> None:
        """RUN_DIR/processes.json: who is running, for users (and tests) looking for stragglers."""
        info = {"launch": os.getpid(), "learner": self.learner.pid,
                "actors": {str(i): p.pid for i, p in self.actors.items()}}
        if self.evaluator is not None:
            info["evaluator"] = self.evaluator.pid
        tmp = self.run_dir / ".processes.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.run_dir / "processes.json")

    def _await_endpoint(self) -> str:
        path, deadline = self.run_dir / "endpoints.json", time.monotonic() + ENDPOINT_TIMEOUT_S
        while time.monotonic() < deadline and self.learner.is_alive() and not self.stopping:
            if path.exists():
                return json.loads(path.read_text())["address"]
            wait([self.learner.sentinel], timeout=0.1)
        raise RuntimeError("the learner did not come up")

    def _start_actor(self, i: int) -> None:
        proc = self.ctx.Process(target=actor_process, name=f"actor-{i}", daemon=False, args=(
            self.address, self.cfg.cluster.envs_per_actor, self.groups, f"actor-{i}", os.getpid(),
            str(self.run_dir / "actors.log"), self._actor_keys(), self.refusals))
        proc.start()
        self.actors[i] = proc
        self._record_pids()

    def _actor_keys(self) -> tuple[str, str] | None:
        """Our own actors' CURVE keys: their secret key, and the learner's public key (read from its cert)."""
        c = self.cfg.cluster
        return (c.client_key, c.server_key) if c.client_key else None

    def supervise(self) -> int:
        backoff_until: dict[int, float] = {}
        while True:
            if self.stopping and self.learner.is_alive() and not getattr(self, "_signalled", False):
                self.learner.terminate()  # SIGTERM: the learner checkpoints and says goodbye to actors
                self._signalled = True
            wait([self.learner.sentinel, *[p.sentinel for p in self.actors.values()]], timeout=0.5)
            if not self.learner.is_alive():
                return self._shutdown()
            now = time.monotonic()
            for i, proc in list(self.actors.items()):
                if proc.is_alive() or self.stopping:
                    continue
                if proc.exitcode == 0:  # it left on the learner's goodbye: nothing to restart
                    del self.actors[i]
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

    def _shutdown(self) -> int:
        code = self.learner.exitcode
        if self.evaluator is not None:
            self.evaluator.terminate()
        if code not in (0, 2):
            log.error("the learner exited with code %s; stopping the actors", code)
        deadline = time.monotonic() + 10.0
        for proc in self.actors.values():  # actors leave on the learner's goodbye or when it is gone
            proc.join(max(deadline - time.monotonic(), 0.1))
        for proc in self.actors.values():
            if proc.is_alive():
                proc.kill()
                proc.join()
        if self.evaluator is not None:  # SIGTERMed on entry: mid-evaluation perhaps, it drops a half-written video
            self.evaluator.join(max(deadline - time.monotonic(), 2.0))
            if self.evaluator.is_alive():
                self.evaluator.kill()
                self.evaluator.join()
        return code if code in (0, 2) else 1  # 2: the learner refused to start (its log line says why)

    def request_stop(self, *_):
        self.stopping = True


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [launch] %(levelname)s %(message)s", datefmt="%H:%M:%S")
    args = build_parser().parse_args(argv)
    try:
        if args.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {args.max_restarts}")
        cfg, run_dir = resolve_config(args)
        check_groups(cfg, args.groups)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(to_toml(cfg))
    log.info("run directory %s: learner + %d actors x %d envs", run_dir, cfg.cluster.actors, cfg.cluster.envs_per_actor)
    cluster = Cluster(cfg, run_dir, resume=bool(args.resume), groups=args.groups, max_restarts=args.max_restarts)
    signal.signal(signal.SIGINT, cluster.request_stop)
    signal.signal(signal.SIGTERM, cluster.request_stop)
    try:
        cluster.start()
    except RuntimeError as exc:
        if cluster.learner.exitcode != 2:  # exit 2: the learner already said why, in one line
            log.error("%s", exc)
        cluster.request_stop()
    return cluster.supervise()


if __name__ == "__main__":
    sys.exit(main())
