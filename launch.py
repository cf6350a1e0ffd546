"""Start a local cluster, one learner plus N actor processes, and supervise it until training ends.

    python launch.py --config configs/smoke.toml       # a tiny run (`python launch.py --help`: every option)

The entry point only: its first lines make a Ctrl-C during the imports a stop request, then launcher/ does the
rest (cli.py, its options; take_run_dir.py, the run directory it takes; cluster.py, the supervisor).
"""
from __future__ import annotations

import os
import signal

EARLY_SIGNALS: list[int] = []  # Ctrl-C / SIGTERM / SIGHUP that came while the imports below ran (StopRequests adopts them)


def _early_stop(signum, _frame) -> None:
    """Before main() runs, a Ctrl-C is a stop request like any other (nothing has started yet), never a
    KeyboardInterrupt traceback out of an import; a second one leaves at once."""
    EARLY_SIGNALS.append(signum)
    if len(EARLY_SIGNALS) > 1:
        os._exit(130)


if __name__ == "__main__":  # not in the spawned children, which re-import this file with SIGINT blocked
    for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
        signal.signal(_sig, _early_stop)
    # a Ctrl-C held blocked since before the interpreter started (a parent that blocked it) is handled now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

import sys  # noqa: E402 (the handlers above come first)

from launcher.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(early_signals=EARLY_SIGNALS))
