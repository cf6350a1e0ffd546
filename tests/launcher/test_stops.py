"""The launcher's StopRequests (launcher/stops.py): a Ctrl-C that lands while a child process starts is a stop request, never lost,
and the child itself starts with Ctrl-C blocked."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from launcher.stops import StopRequests


@pytest.fixture
def stops():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGHUP, lambda *_: None)  # a SIGHUP StopRequests does not take is lost, not fatal here
    try:
        yield StopRequests()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class CtrlCWhileStarting:
    """A process whose start a Ctrl-C interrupts. The SIGINT is sent to this process from another of its
    threads, where the kernel delivers it while the starting thread blocks it (as it does to numpy's BLAS
    threads in launch.py: the flake seen once in test_interrupt, 'actors starting', SIGINT to launch.py alone)."""
    pid = 0

    def start(self) -> None:
        other = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
        other.start()
        other.join()


def test_a_ctrl_c_while_a_child_starts_is_a_stop_request(stops):
    assert not stops()
    stops.started(CtrlCWhileStarting())
    deadline = time.monotonic() + 10  # another thread of the process (a BLAS or zmq thread) may take it, a moment later
    while not stops() and time.monotonic() < deadline:
        time.sleep(0.001)  # a signal that arrives ends the sleep at once
    assert stops(), "the Ctrl-C was lost"


def _say_if_ctrl_c_is_blocked(conn) -> None:
    conn.send(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
    conn.close()


@pytest.mark.integration
def test_a_child_starts_with_ctrl_c_blocked_and_the_launcher_does_not(stops):
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_say_if_ctrl_c_is_blocked, args=(theirs,))
    stops.started(child)
    try:
        assert ours.poll(60) and ours.recv() is True
    finally:
        child.join(10)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_hang_up_is_a_stop_request(stops):
    """Issue 60, point 8: the SIGHUP of a closed terminal stops the run in order, as SIGTERM does (it killed
    launch.py at once, exit 129)."""
    os.kill(os.getpid(), signal.SIGHUP)  # delivered before kill() returns: the handler runs at the next bytecode
    deadline = time.monotonic() + 10
    while not stops() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert stops(), "the SIGHUP was not taken as a stop request"
