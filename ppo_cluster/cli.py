"""ppo-cluster: PPO on Atari (and any gymnasium task) as a local actor-learner cluster.

    ppo-cluster train --config configs/smoke.toml        # what `python launch.py` does, the same options
    ppo-cluster actor --learner tcp://10.0.0.5:5555      # join a running learner (`python -m actor`)
    ppo-cluster evaluate runs/NAME --episodes 10         # play whole games with a trained policy
    ppo-cluster plot runs/NAME                           # learning curves -> runs/NAME/plot.png

`ppo-cluster COMMAND --help` lists a command's options. Without an install: `python -m ppo_cluster COMMAND`.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import NoReturn


def train(argv: list[str]) -> NoReturn:
    """launch.py itself, in this process (exec): its signal handling before its imports, and the children
    that re-import it, stay exactly those of `python launch.py`."""
    spec = importlib.util.find_spec("launch")  # found, not imported: launch.py runs as __main__
    if spec is None or spec.origin is None:
        sys.exit("error: launch.py not found: install ppo-cluster (pip install -e .) or run from the checkout")
    os.execv(sys.executable, [sys.executable, spec.origin, *argv])


def actor(argv: list[str]) -> int:
    from actor.__main__ import main  # here: an actor host has no torch; the other commands need it
    return main(argv)


def evaluate(argv: list[str]) -> int:
    from learner.evaluation.evaluate import main
    return main(argv)


def plot(argv: list[str]) -> int:
    from learner.report.plot import main
    return main(argv)


COMMANDS = {
    "train": (train, "train with a learner and actor processes on this machine (`python launch.py`)"),
    "actor": (actor, "join a running learner with K environments, from this machine or another"),
    "evaluate": (evaluate, "play whole games with a run's (or a checkpoint's) policy; optionally a video"),
    "plot": (plot, "draw run directories' learning curves and training statistics"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ppo-cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, text) in COMMANDS.items():
        commands.add_parser(name, help=text, add_help=False)  # its own --help: the command's parser
    return p


def main(argv: list[str] | None = None) -> int:
    """The command's name picks the command; everything after it is that command's, untouched."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = build_parser().parse_args(argv[:1]).command
    return COMMANDS[name][0](argv[1:])
