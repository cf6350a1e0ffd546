"""A real actor process against a hand-driven learner socket: told it was retired, it rejoins; refused, it
exits with the reason; facing a learner that has gone silent, it does not wait forever."""
from __future__ import annotations

import subprocess
import sys

import pytest
import zmq

from actor.envs import describe_spaces, make_env
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.transport import recv_frames
from tests.integration.cluster import ROOT, kill_group

pytestmark = pytest.mark.integration
SETTINGS = EnvSettings(env_id="CartPole-v1")


@pytest.fixture
def learner():
    """A ROUTER socket standing in for the learner, and an actor process started against it."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    procs = []

    def start(*extra: str) -> subprocess.Popen:
        procs.append(subprocess.Popen([sys.executable, "-m", "actor", "--learner", address, "--name", "probe", *extra],
                                      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
        return procs[-1]

    yield sock, start
    for proc in procs:
        kill_group(proc)
        proc.communicate()
    sock.close()
    ctx.term()


def receive(sock, kind, timeout_s: float = 60):
    frames = recv_frames(sock, int(timeout_s * 1000))
    assert frames is not None, f"no {kind.__name__} from the actor within {timeout_s}s"
    msg = m.decode(frames[1:])
    assert isinstance(msg, kind), msg
    return bytes(frames[0]), msg


def send(sock, identity: bytes, msg) -> None:
    sock.send_multipart([identity, *m.encode(msg)])


def welcome_and_first_report(sock) -> bytes:
    identity, _ = receive(sock, m.Handshake)
    obs_space, action_space = describe_spaces(make_env(SETTINGS, 0))
    send(sock, identity, m.Welcome(0, [0], [5], SETTINGS.to_dict(), obs_space, action_space, "run"))
    _, report = receive(sock, m.StepReport)
    assert report.first
    return identity


def finish(proc: subprocess.Popen, timeout_s: float = 60) -> str:
    out, _ = proc.communicate(timeout=timeout_s)
    return out


def test_a_retired_actor_rejoins_on_a_fresh_connection(learner):
    sock, start = learner
    proc = start("--reconnect-s", "0")  # rejoining after retirement spends no reconnection budget
    first = welcome_and_first_report(sock)
    send(sock, first, m.Error("actor probe was retired: silent for more than 2s", rejoin=True))
    second = welcome_and_first_report(sock)
    assert second != first
    send(sock, second, m.Goodbye("done"))
    out = finish(proc)
    assert proc.returncode == 0, out
    assert "retired: silent for more than 2s" in out and "rejoining" in out


def test_a_refused_actor_exits_with_the_reason(learner):
    sock, start = learner
    proc = start("--reconnect-s", "60")  # a refusal is final, whatever the reconnection budget
    identity, _ = receive(sock, m.Handshake)
    send(sock, identity, m.Error("handshake refused: groups must be 1 or 2 and divide num_envs, got 2"))
    out = finish(proc)
    assert proc.returncode == 3, out
    assert "refused: handshake refused: groups must be 1 or 2" in out


def test_an_actor_does_not_wait_forever_on_a_silent_learner(learner):
    sock, start = learner
    proc = start("--reconnect-s", "0", "--learner-timeout-s", "1")
    welcome_and_first_report(sock)  # then nothing: a learner stopped, or behind a network stall
    out = finish(proc, timeout_s=30)
    assert proc.returncode == 1, out
    assert "no message from the learner for 1s" in out
