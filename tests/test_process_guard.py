"""The integration-marker guard (tests/process_guard.py): an unmarked test that starts a process or opens a
real endpoint fails naming it; a marked one, and an unmarked one on inproc://, pass."""
from __future__ import annotations

import pytest

from tests.process_guard import Guard

INNER = '''
import subprocess, sys
import pytest, zmq

def test_unmarked_process():
    assert subprocess.run([sys.executable, "-c", "pass"], timeout=60).returncode == 0

@pytest.mark.integration
def test_marked_process():
    assert subprocess.run([sys.executable, "-c", "pass"], timeout=60).returncode == 0

@pytest.mark.parametrize("address", ["inproc://guard-test", "tcp://127.0.0.1:*"])
def test_unmarked_zmq(address):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.bind(address)
    sock.close(linger=0)
    ctx.term()
'''


@pytest.mark.integration  # the inline session starts a process and binds a TCP socket, in this process
def test_an_unmarked_test_that_starts_a_process_or_binds_tcp_fails_naming_it(pytester):
    pytester.makeconftest('pytest_plugins = ["tests.process_guard"]')
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    outcomes = {r.nodeid.split("::")[1]: r.outcome for r in result.reprec.getreports("pytest_runtest_logreport")
                if r.when == "teardown"}
    assert outcomes == {"test_unmarked_process": "failed", "test_marked_process": "passed",
                        "test_unmarked_zmq[inproc://guard-test]": "passed",
                        "test_unmarked_zmq[tcp://127.0.0.1:*]": "failed"}
    result.stdout.fnmatch_lines([
        "*test_unmarked_process starts a process (subprocess.Popen python*) without @pytest.mark.integration*",
        "*test_unmarked_zmq?tcp://127.0.0.1:?? binds a zmq socket to tcp://127.0.0.1:* without*"])


def test_the_guard_notes_only_the_first_thing_and_only_while_armed():
    guard = Guard()
    guard.audit("subprocess.Popen", ())
    assert guard.seen == []
    guard.test = "t"
    guard.audit("open", ())
    guard.audit("socket.bind", ())
    guard.audit("os.fork", ())
    assert guard.seen == ["binds a socket (socket.bind)"]


def test_a_library_looking_something_up_is_not_the_tests_process():
    guard = Guard()
    guard.test = "t"
    guard.audit("subprocess.Popen", ("fc-list", ["fc-list", "--format=%{file}"], None, None))  # matplotlib's fonts
    guard.audit("subprocess.Popen", (None, ["/sbin/ldconfig", "-p"], None, None))  # ctypes.util.find_library
    assert guard.seen == []
    guard.audit("subprocess.Popen", (None, ["/usr/bin/python3", "-c", "pass"], None, None))
    assert guard.seen == ["starts a process (subprocess.Popen python3)"]
