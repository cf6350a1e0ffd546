"""Integration tests are marked (issue 33): a test that is not marked `integration` and starts a process, or
opens a socket on a real endpoint, fails naming what it did, so `pytest -m "not integration"` stays a unit run.

Watched while the test runs (its fixtures included), not guessed from its source: a child process (subprocess,
os.fork/exec/spawn/system, any multiprocessing or torch.multiprocessing Process), a zmq socket bound or
connected anywhere but inproc://, a plain socket bound, a torch.distributed group. The test is let run to its
end (cutting it short could leave its sockets open and hang), then its report turns failed naming the first
thing it did. What a marked test does is not looked at."""
from __future__ import annotations

import multiprocessing.process
import os
import sys

import pytest
import zmq

AUDITED = {"subprocess.Popen": "starts a process", "os.fork": "starts a process", "os.forkpty": "starts a process",
           "os.posix_spawn": "starts a process", "os.spawn": "starts a process", "os.exec": "starts a process",
           "os.system": "starts a process", "socket.bind": "binds a socket"}
# commands libraries run to look something up, not a process of the test's: matplotlib's font list (fc-list,
# when its cache is cold), ctypes.util.find_library (ldconfig)
LIBRARY_LOOKUPS = {"fc-list", "ldconfig"}


class Guard:
    """Armed for the length of an unmarked test; the audit hook (which cannot be removed) and the gated
    functions tell it what they were asked to do."""

    def __init__(self) -> None:
        self.test, self.seen = "", []

    def saw(self, what: str) -> None:
        if self.test and not self.seen:
            self.seen.append(what)

    def audit(self, event: str, args: tuple) -> None:
        if not self.test or event not in AUDITED:
            return
        if event == "subprocess.Popen":
            command = os.path.basename(str(args[0] or args[1][0]))  # (executable, args, cwd, env)
            if command not in LIBRARY_LOOKUPS:
                self.saw(f"{AUDITED[event]} ({event} {command})")
            return
        self.saw(f"{AUDITED[event]} ({event})")


GUARD = Guard()
sys.addaudithook(GUARD.audit)


def _watched(original, what: str):
    """`original`, told to the guard when called (the zmq ones only for an endpoint other than inproc://)."""
    def watched(*args, **kwargs):
        address = str(args[1]) if "zmq" in what and len(args) > 1 else ""
        if not address.startswith("inproc://"):
            GUARD.saw(f"{what} {address}".rstrip())
        return original(*args, **kwargs)
    watched.watched = True
    return watched


def _install() -> None:
    """The watches, once per process (torch.distributed's once it has been imported)."""
    gates = [(multiprocessing.process.BaseProcess, "start", "starts a process (Process.start)"),
             (zmq.Socket, "bind", "binds a zmq socket to"), (zmq.Socket, "connect", "connects a zmq socket to")]
    if "torch.distributed" in sys.modules:
        gates.append((sys.modules["torch.distributed"], "init_process_group", "starts a torch.distributed group"))
    for owner, name, what in gates:
        if not getattr(getattr(owner, name), "watched", False):
            setattr(owner, name, _watched(getattr(owner, name), what))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Armed through the setup, call and teardown of a test without the `integration` marker (in every run,
    the full one too, so a forgotten marker shows wherever the test runs)."""
    if item.get_closest_marker("integration") is None:
        _install()
        GUARD.test, GUARD.seen = item.nodeid, []
    try:
        yield
    finally:
        GUARD.test = ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The teardown's report of an unmarked test that did any of it turns failed, with one line saying what."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and GUARD.test == item.nodeid and GUARD.seen:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} {GUARD.seen[0]} without @pytest.mark.integration "
                           f"(see tests/process_guard.py)")
