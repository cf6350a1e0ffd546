"""A gateway on a real socket, DEALER peers connected to it, and everything it admitted so far: shared by the
gateway's tests (test_gateway.py, test_gateway_codec.py), which add how their peers join."""
from __future__ import annotations

import time

import zmq

from learner.gateway.gateway import Gateway, Listen, Offer


class GatewayOnSocket:
    def __init__(self, offer: Offer, address: str = "tcp://127.0.0.1:0", max_bytes: int = 1 << 20):
        self.ctx = zmq.Context()
        self.gateway = Gateway(Listen(self.ctx, address, max_bytes), offer)
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

    def close(self):
        self.gateway.sock.close(linger=0)
        self.ctx.destroy(linger=0)
