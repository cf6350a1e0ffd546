"""The learner as an OS process (learner/lifecycle/process.py): SIGTERM and SIGINT are stop requests, never an
exception in the middle of a rollout; the exit codes launch.py's restarts read."""
from __future__ import annotations

import signal

from learner.lifecycle.process import EXIT_DONE, EXIT_FAILED, EXIT_REFUSED, Stop
from launcher.restarts import RestartPolicy


def test_sigterm_sigint_and_sighup_set_the_stop_flag_instead_of_raising():
    """SIGHUP (a closed terminal, issue 60) too: it ended the learner at once, no final checkpoint."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, lambda *_: None)  # a SIGHUP Stop does not take leaves the flag unset, not fatal here
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


class Shared:
    """Stands in for launch.py's shared double."""
    value = 0.0


def test_the_heartbeat_beats_at_once_and_then_on_its_own():
    """From its start, then every every_s: launch.py kills a learner whose beat stops (a SIGSTOP)."""
    import threading
    import time

    from learner.lifecycle.process import Heartbeat

    class Beats(Shared):
        def __init__(self):
            self.seen, self.twice = [], threading.Event()

        def __setattr__(self, name, v):
            object.__setattr__(self, name, v)
            if name == "value":
                self.seen.append(v)
                if len(self.seen) >= 3:
                    self.twice.set()

    beats = Beats()
    before = time.monotonic()
    Heartbeat(beats, every_s=0.05)
    assert beats.seen and beats.seen[0] >= before  # at once, not after the first interval
    assert beats.twice.wait(10)
    assert beats.seen == sorted(beats.seen) and beats.seen[-1] <= time.monotonic()
