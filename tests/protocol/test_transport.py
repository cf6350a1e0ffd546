import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
import zmq

from protocol.transport import LOCAL, bind_router, connect_dealer, local_address, local_addresses


def test_addresses_other_than_local_are_kept_as_they_are():
    for address in ("tcp://127.0.0.1:0", "tcp://*:5555", "ipc:///tmp/learner.sock"):
        assert local_address(address) == address


NOBODY = 65534
CONNECT_AS_NOBODY = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\\0" + sys.argv[1][1:] if sys.argv[1].startswith("@") else sys.argv[1])
except PermissionError:
    print("refused")
else:
    print("connected")
"""


def _unix_path(address: str) -> str:
    """The socket's path in an ipc:// address (an abstract one, ipc://@name, keeps its @)."""
    return address[len("ipc://"):]


def _connect_as_nobody(path: str) -> str:
    """Try to connect to the Unix socket at `path` from a process of another user (uid 65534), with the
    system's Python (the venv's may lie in a directory that user cannot enter)."""
    out = subprocess.run([sys.executable if not os.path.exists("/usr/bin/python3") else "/usr/bin/python3",
                          "-I", "-c", CONNECT_AS_NOBODY, path], capture_output=True, text=True, timeout=30,
                         preexec_fn=lambda: (os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)))
    return out.stdout.strip() or out.stderr


@pytest.mark.integration
@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no Unix sockets: 'local' is a loopback TCP port")
def test_local_is_a_unix_socket_in_a_private_directory_that_actors_reach():
    first, second = local_address(LOCAL), local_address(LOCAL)
    assert first.startswith("ipc:///") and first != second
    folder = os.path.dirname(_unix_path(first))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()
    ctx = zmq.Context()
    try:
        router, endpoint = bind_router(ctx, first, 1 << 20)
        assert endpoint == first
        dealer = connect_dealer(ctx, endpoint, 1 << 20)
        dealer.send(b"hello")
        assert router.poll(5000) and router.recv_multipart()[1] == b"hello"
        assert os.path.dirname(_unix_path(second)) != folder  # each 'local' is a directory of its own
    finally:
        ctx.destroy(linger=0)


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="needs root, to run a process as another user (uid 65534)")
def test_another_user_cannot_connect_to_the_local_address():
    """Issue 32: the abstract socket 'local' used to be could be joined by any user of the machine."""
    ctx = zmq.Context()
    open_dir = tempfile.mkdtemp(prefix="ppo-cluster-test-")  # the control: a socket that user may reach
    try:
        router, endpoint = bind_router(ctx, local_address(LOCAL), 1 << 20)
        assert _connect_as_nobody(_unix_path(endpoint)) == "refused"
        os.chmod(open_dir, 0o777)
        kept = bind_router(ctx, f"ipc://{open_dir}/l.sock", 1 << 20)  # noqa: F841 (closed when collected)
        os.chmod(f"{open_dir}/l.sock", 0o777)  # its mode follows the umask: a private directory does not
        assert _connect_as_nobody(f"{open_dir}/l.sock") == "connected"
    finally:
        ctx.destroy(linger=0)
        shutil.rmtree(open_dir, ignore_errors=True)


@pytest.mark.integration
def test_the_private_directory_is_removed_when_the_process_exits(tmp_path):
    code = ("from protocol.transport import local_address, LOCAL; import os; "
            "print(os.path.dirname(local_address(LOCAL)[len('ipc://'):]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    folder = out.stdout.strip()
    assert folder and not os.path.exists(folder)


def _local_in_a_child(queue) -> None:
    queue.put(os.path.dirname(local_address(LOCAL)[len("ipc://"):]))


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork start method is Linux's default only")
def test_the_private_directory_is_removed_when_a_multiprocessing_child_exits():
    """A forked multiprocessing child ends with os._exit: atexit handlers do not run there (launch.py spawns its
    learner, whose children end with sys.exit, but a fork-started user of the protocol package must not leak)."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_local_in_a_child, args=(queue,))
    child.start()
    folder = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and folder and not os.path.exists(folder)


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no Unix sockets: 'local' is a loopback TCP port")
def test_local_request_and_weights_addresses_are_two_sockets_in_one_private_directory():
    """Issue 43: the weights went out on tcp://127.0.0.1:PORT, where any local user could subscribe."""
    requests, weights = local_addresses(LOCAL, LOCAL)
    assert requests.startswith("ipc:///") and requests.endswith("/learner.sock")
    assert weights.startswith("ipc:///") and weights.endswith("/weights.sock")
    folder = os.path.dirname(_unix_path(requests))
    assert os.path.dirname(_unix_path(weights)) == folder
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()


def test_only_the_local_ones_of_several_addresses_are_made_private():
    assert local_addresses("tcp://10.0.0.5:5555", "tcp://10.0.0.5:5556") == ("tcp://10.0.0.5:5555",
                                                                             "tcp://10.0.0.5:5556")
    requests, weights = local_addresses("tcp://*:5555", LOCAL)
    assert requests == "tcp://*:5555" and weights.startswith(("ipc:///", "tcp://127.0.0.1:"))
