"""The learner as an OS process (learner/lifecycle/process.py): SIGTERM and SIGINT are stop requests, never an
exception in the middle of a rollout; the exit codes launch.py's restarts read."""
from __future__ import annotations

import signal

from learner.lifecycle.process import EXIT_DONE, EXIT_FAILED, EXIT_REFUSED, Stop
from launcher.restarts import RestartPolicy


def test_sigterm_and_sigint_set_the_stop_flag_instead_of_raising():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in saved:
            stop = Stop()
            assert not stop()
            signal.raise_signal(sig)
            assert stop()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_request_from_inside_stops_too():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = Stop()
        stop.request()
        assert stop()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_launcher_restarts_a_failed_learner_never_a_refused_one():
    assert len({EXIT_DONE, EXIT_FAILED, EXIT_REFUSED}) == 3 and EXIT_DONE == 0
    assert RestartPolicy(limit=3, clock=lambda: 0.0).decide(EXIT_FAILED, progressed=True).restart
    assert not RestartPolicy(limit=3, clock=lambda: 0.0).decide(EXIT_REFUSED, progressed=True).restart
