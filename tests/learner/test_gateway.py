"""The gateway's receive loop: one poll drains what is queued, in order, up to its bound, rejecting garbage."""
import time
import uuid

import numpy as np
import pytest
import zmq

from learner.gateway import MAX_BATCH_MESSAGES, Gateway
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")  # large enough for a frame of its own


@pytest.fixture
def wire():
    """A gateway and a connected DEALER over inproc: a sent message is queued as soon as send returns."""
    ctx = zmq.Context()
    address = f"inproc://gateway-test-{uuid.uuid4().hex}"
    gateway = Gateway(ctx, address, EnvSettings(), OBS, SpaceSpec(kind="discrete", n=4), 1, 0, "run", 64 << 20)

    def peer():
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        return sock

    yield gateway, peer
    gateway.sock.close(linger=0)
    ctx.destroy(linger=0)


def step(group: int, value: int) -> list:
    return m.encode(m.StepReport(group, np.full((2, *OBS.shape), value, np.uint8), np.zeros(2, np.float32),
                                 np.zeros(2, bool), np.zeros(2, bool), first=True))


def test_one_poll_drains_queued_multiframe_messages_in_order(wire):
    gateway, peer = wire
    actor = peer()
    actor.send_multipart(m.encode(m.Handshake(4, "a", groups=2)))
    actor.send_multipart(step(0, 7))
    actor.send_multipart([b"garbage"])  # rejected, and the drain goes on past it
    actor.send_multipart(step(1, 9))
    items = gateway.poll(1000)
    assert [(i.msg.group, int(i.msg.obs[0, 0, 0, 0])) for i in items] == [(0, 7), (1, 9)]
    assert gateway.rejected == 1
    assert isinstance(m.decode(actor.recv_multipart()), m.Welcome)
    assert gateway.poll(0) == []


def test_a_flood_is_drained_in_bounded_batches(wire):
    gateway, peer = wire
    flooder = peer()
    for _ in range(MAX_BATCH_MESSAGES + 5):
        flooder.send_multipart([b"garbage"])
    assert gateway.poll(1000) == [] and gateway.rejected == MAX_BATCH_MESSAGES
    assert gateway.poll(1000) == [] and gateway.rejected == MAX_BATCH_MESSAGES + 5


# --- defences, over loopback TCP -------------------------------------------------------------------------

VEC = SpaceSpec(kind="box", shape=(3,), dtype="float32")


class Loopback:
    """A gateway on loopback TCP, connected DEALER peers, and everything the gateway admitted so far."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.gateway = Gateway(self.ctx, "tcp://127.0.0.1:0", EnvSettings(), VEC, SpaceSpec(kind="discrete", n=2),
                               1, 0, "run", 1 << 20)
        self.admitted = []

    def peer(self, identity: bytes | None = None):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(self.gateway.endpoint)
        return sock

    def drain(self, condition, what: str, timeout: float = 10.0) -> None:
        """Poll the gateway until condition() holds (messages over TCP may arrive in several batches)."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.admitted.extend(self.gateway.poll(50))

    def join(self, sock, groups: int = 1):
        sock.send_multipart(m.encode(m.Handshake(2 * groups, "a", groups=groups)))
        self.drain(lambda: len(self.gateway.registry) == 1, "the handshake")
        assert isinstance(m.decode(sock.recv_multipart()), m.Welcome)
        return next(iter(self.gateway.registry.by_identity.values()))

    def close(self):
        self.gateway.sock.close(linger=0)
        self.ctx.destroy(linger=0)


@pytest.fixture
def loopback():
    wire = Loopback()
    yield wire
    wire.close()


def report(group=0, first=False) -> list:
    return m.encode(m.StepReport(group, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                                 np.zeros(2, bool), first=first))


def test_a_second_report_before_new_actions_is_rejected_and_counted(loopback):
    gateway = loopback.gateway
    actor = loopback.peer()
    entry = loopback.join(actor)
    actor.send_multipart(report(first=True))
    actor.send_multipart(report())  # a duplicate nobody asked for, likely in the same poll batch
    loopback.drain(lambda: len(loopback.admitted) + gateway.rejected >= 2, "both reports")
    assert len(loopback.admitted) == 1 and loopback.admitted[0].msg.first
    assert gateway.rejected == 1
    actor.send_multipart(report())  # a later one, still unasked
    loopback.drain(lambda: gateway.rejected == 2, "the third report")
    gateway.send_actions(entry, 0, np.zeros(2, np.int64), 1)
    assert isinstance(m.decode(actor.recv_multipart()), m.Actions)
    actor.send_multipart(report())  # the answer to those actions is admitted
    loopback.drain(lambda: len(loopback.admitted) == 2, "the answer to the actions")
    assert gateway.rejected == 2 and entry.identity in gateway.registry


def test_a_peer_that_keeps_misbehaving_is_banned_and_its_handshake_gets_no_welcome(loopback):
    from learner.actors import MAX_STRIKES
    gateway = loopback.gateway
    rogue = loopback.peer(identity=b"rogue")
    loopback.join(rogue)
    rogue.send_multipart(report(first=True))
    for _ in range(MAX_STRIKES - 2):  # strikes below the limit: still registered
        rogue.send_multipart(report())
    loopback.drain(lambda: gateway.rejected == MAX_STRIKES - 2, "the first strikes")
    assert b"rogue" in gateway.registry
    rogue.send_multipart([b"garbage"])
    rogue.send_multipart(report())
    loopback.drain(lambda: gateway.rejected == MAX_STRIKES, "the last strike")
    assert b"rogue" not in gateway.registry, "dropped after MAX_STRIKES malformed or unasked messages"

    rogue.send_multipart(m.encode(m.Handshake(2, "again")))
    loopback.drain(lambda: gateway.rejected > MAX_STRIKES or len(gateway.registry) > 0, "the banned handshake")
    assert gateway.rejected == MAX_STRIKES + 1 and len(gateway.registry) == 0, "a banned peer cannot join again"
    assert rogue.poll(200) == 0, "a banned peer's handshake gets no welcome"

    other = loopback.peer(identity=b"other")  # the ban is the rogue's alone
    loopback.join(other)
    assert b"other" in gateway.registry
