"""`python -m actor --learner ADDRESS`: join a running learner with K environments."""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from actor import name_process
from actor.stop_signals import leave_on_sigterm
from protocol.messages import MAX_ENV_SLOTS, MAX_GROUPS


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m actor", description=__doc__)
    p.add_argument("--learner", required=True, metavar="ADDRESS",
                   help="the learner's address (required), e.g. tcp://10.0.0.5:5555; a local run's is in "
                        "RUN_DIR/endpoints.json")
    p.add_argument("--envs", type=int, default=1, help="environments this actor hosts (default: %(default)s)")
    p.add_argument("--groups", default="1", metavar=f"1..{MAX_GROUPS}|auto",
                   help="env groups stepped in turn while the others wait for actions (2: halves); auto: timed as one "
                        "group first, then as many as the measured round trip calls for (default: %(default)s)")
    p.add_argument("--name", default="", help="name shown in the learner's log (default: HOSTNAME-PID)")
    p.add_argument("--reconnect-s", type=float, default=300.0,
                   help="once joined, keep trying to rejoin a learner that went away this long; 0 exits when it "
                        "goes away (default: %(default)g)")
    p.add_argument("--join-timeout-s", type=float, default=30.0,
                   help="give up when no learner answers the first handshake within this long: exit 1 "
                        "(default: %(default)g)")
    p.add_argument("--learner-timeout-s", type=float, default=300.0,
                   help="a learner that sends nothing this long while the actor waits for actions is taken as "
                        "gone (reconnect); keep it above the learner's longest update (default: %(default)g)")
    p.add_argument("--server-key", default=None, help="CURVE: the learner's public key file")
    p.add_argument("--key", default=None, help="CURVE: this actor's secret key file")
    args = p.parse_args(argv)
    if not args.learner.startswith(("tcp://", "ipc://")):
        p.error(f"--learner must start with tcp:// or ipc://, got {args.learner!r}")
    if args.envs < 1 or args.envs > MAX_ENV_SLOTS:
        p.error(f"--envs must be in [1, {MAX_ENV_SLOTS}], got {args.envs}")
    if args.groups != "auto":
        if not args.groups.isdigit() or not 1 <= int(args.groups) <= MAX_GROUPS:
            p.error(f"--groups must be in [1, {MAX_GROUPS}] or auto, got {args.groups!r}")
        args.groups = int(args.groups)
        if args.envs % args.groups:
            p.error(f"--envs ({args.envs}) must be divisible by --groups ({args.groups})")
    if not args.name.isprintable() or len(args.name) > 100:
        p.error(f"--name must be at most 100 printable characters (no newlines or other control characters), "
                f"got {args.name!r:.120}")
    if args.reconnect_s < 0:
        p.error(f"--reconnect-s must be >= 0, got {args.reconnect_s}")
    for key in ("join_timeout_s", "learner_timeout_s"):
        if getattr(args, key) <= 0:
            p.error(f"--{key.replace('_', '-')} must be > 0, got {getattr(args, key)}")
    curve = None
    if args.server_key or args.key:
        if not (args.server_key and args.key):
            p.error("CURVE needs both --server-key and --key")
        from protocol.security import ClientKeys  # here: imports under main's Ctrl-C guard (see main)
        try:
            curve = ClientKeys.load(args.key, args.server_key)
        except (OSError, ValueError) as exc:
            p.error(f"cannot read keys: {exc}")
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    from actor.runner import ActorOptions, Deadlines, Wire  # here: numpy, zmq, gymnasium under main's Ctrl-C guard
    return ActorOptions(learner=args.learner, num_envs=args.envs, groups=args.groups, name=name,
                        deadlines=Deadlines(args.reconnect_s, args.join_timeout_s, args.learner_timeout_s),
                        wire=Wire(curve=curve))


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:  # the imports too (numpy, zmq, gymnasium take a second): a Ctrl-C then leaves quietly as well
        leave_on_sigterm()
        opts = parse_args(argv)
        name_process(f"actor {opts.name}")
        from actor.runner import run_actor  # (see ActorOptions above)
        return run_actor(opts)  # Ctrl-C once joined: run_actor() says goodbye to the learner and returns 0
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
