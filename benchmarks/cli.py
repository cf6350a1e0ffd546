"""The command-line flags several benchmarks share, each written once (imported as a sibling module, like
procfs: `from cli import ...`)."""
from __future__ import annotations

import argparse


def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring, line breaks kept, is the --help text."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_cluster_flags(p: argparse.ArgumentParser, actors: str, codec: str, codec_help: str) -> None:
    """--actors (how many actor processes, `actors` says what they are) and --codec (cluster.codec, default
    `codec`)."""
    p.add_argument("--actors", type=int, default=2, help=f"{actors} (default: %(default)s)")
    p.add_argument("--codec", default=codec, help=f"{codec_help} (default: %(default)s)")


def add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="JSON output (default: none)")


def add_row_flags(p: argparse.ArgumentParser, torch_threads: int, row_timeout_s: float, row_timeout_help: str) -> None:
    """What a benchmark of rows of launch.py runs takes: --torch-threads (run.torch_threads), --row-timeout,
    --other (another checkout to run the same rows against) and --out."""
    p.add_argument("--torch-threads", type=int, default=torch_threads, help="run.torch_threads (default: %(default)s)")
    p.add_argument("--row-timeout", type=float, default=row_timeout_s, help=row_timeout_help)
    p.add_argument("--other", default=None, metavar="PATH", help="another checkout to run the same rows against")
    add_out(p)
