"""Start a local cluster, one learner plus N actor processes, and supervise it until training ends.

    python launch.py                                   # Breakout, CleanRL's recipe, 10M steps
    python launch.py --config configs/smoke.toml       # a tiny run
    python launch.py --resume runs/breakout-...        # continue from the newest checkpoint

The topology: --actors and --envs-per-actor (cluster.actors, cluster.envs_per_actor) when given; left
unset, cluster.envs (8, CleanRL's recipe) env slots are spread over one actor process per core (2 cores:
2 actors x 4 envs). The log's first line says what was picked.

Ctrl-C, SIGTERM or SIGHUP (the terminal closed): the learner writes a final checkpoint, every child stops, exit 0
(Ctrl-C again forces).
"""
from __future__ import annotations

import argparse
import os
import json
import logging
import sys
import typing
from pathlib import Path

from launcher.cluster import Cluster
from launcher.job import external_job, lock_rank, restarted_by_torchrun
from launcher.restarts import LearnerRestarts, RestartPolicy
from launcher.take_run_dir import check_fresh, default_run_dir, take_run_dir, undo_refused
from launcher.stops import StopRequests
from learner import config_docs
from learner.config import Config, ConfigError, Device, field_docs, load, with_topology
from learner.config_rules import check_resume
from learner.lifecycle.process import EXIT_REFUSED
from learner.lifecycle.run_lock import RUN_UMASK, RunDirForeign, RunDirHeld, check_owned, refuse_if_held
from protocol.files import WriteFailed

log = logging.getLogger("launch")


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
    p.add_argument("--groups", type=group_count, default=None,
                   help="env groups per actor, stepped in turn while the others wait for actions (2: halves), or auto: "
                        "from each actor's measured round trip (default: cluster.groups, 1)")
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
    p.add_argument("--max-restarts", type=int, default=5, help="restarts of each actor slot within any hour before it is given up (default: %(default)s)")
    p.add_argument("--max-learner-restarts", type=int, default=3,
                   help="restarts within any hour of a learner that ended abnormally (crash, kill -9, a hung collector), "
                        "each from its newest checkpoint, before the run ends with an error; 0: none (default: %(default)s)")
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
        check_owned(run_dir)  # before reading anything there
        saved = run_dir / "config.toml"
        if not saved.is_file():
            raise ConfigError(f"--resume {run_dir}: no config.toml there (not a run directory)")
        cfg = load(saved, overrides)
        check_resume(load(saved), cfg, f"--resume {run_dir}")
        return cfg, run_dir
    cfg = load(args.config, overrides)
    return cfg, Path(args.run_dir) if args.run_dir else default_run_dir(cfg.env.env_id)


def check_learners(cfg: Config) -> None:
    if external_job() and cfg.cluster.learners > 1:
        raise ConfigError("--learners (cluster.learners) starts ranks on this host; under torchrun or srun each "
                          "worker is already one rank: leave it at 1 and set --nproc-per-node instead")


def group_count(text: str) -> int | str:
    """--groups: a number, or the text as it is (auto; cluster.groups's rule names anything else)."""
    return int(text) if text.lstrip("-").isdigit() else text


def check_groups(cfg: Config, groups: int | str) -> None:
    """Refuse up front what every actor's handshake would be refused for: its envs split into groups (auto
    chooses among the counts that divide them)."""
    k = cfg.cluster.envs_per_actor
    if groups != "auto" and cfg.cluster.actors and k % groups:
        raise ConfigError(f"--groups {groups} splits each actor's envs into {groups} equal groups: "
                          f"--envs-per-actor (cluster.envs_per_actor, {k}) must be divisible by {groups}")


def main(argv=None, early_signals: list[int] = ()) -> int:
    """early_signals: Ctrl-C or SIGTERM that launch.py's first handler took while the imports ran."""
    os.umask(RUN_UMASK)  # what this run and its children create is this user's only (docs/reliability.md)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [launch] %(levelname)s %(message)s", datefmt="%H:%M:%S")
    stops = StopRequests(early_signals)  # first: a Ctrl-C from here on stops in order
    args = build_parser().parse_args(argv)
    try:
        cfg, run_dir, resume = prepare(args)
    except (ConfigError, RunDirHeld, RunDirForeign) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if stops():
        return 0
    try:
        lock, created, saved = take_run_dir(run_dir, cfg)
    except (RunDirHeld, RunDirForeign, WriteFailed) as exc:
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
    check_owned(run_dir)  # another user's directory, or one in a directory others may write: exit 2, untouched
    refuse_if_held(run_dir, lock_rank())  # before anything else looks at it: the holder's pid, exit 2
    resume = bool(args.resume) or restarted_by_torchrun(run_dir)
    if not resume and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0:
        check_fresh(run_dir)
    return cfg, run_dir, resume


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
    cluster.start()  # a learner that did not come up was killed there: supervise() decides on a restart
    code = cluster.supervise()
    if code == EXIT_REFUSED:
        undo_refused(run_dir, created, saved)
    return code
