"""The gateway's receive loop: one poll drains what is queued, in order, up to its bound, rejecting garbage."""
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
