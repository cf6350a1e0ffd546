"""Versioned weight broadcast on a PUB socket: after each update, every subscriber gets the new policy.

A subscriber that joins late misses earlier versions (PUB/SUB's slow joiner) but receives every later
one in order; the high-water mark is small because each message is a whole model.
"""
from __future__ import annotations

import torch
import zmq

from protocol import messages as m
from learner.weights.message import state_arrays
from protocol.transport import bind_pub


class WeightPublisher:
    def __init__(self, ctx: zmq.Context, address: str, curve=None):
        self.sock, self.endpoint = bind_pub(ctx, address, hwm=8, curve=curve)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        try:
            self.sock.send_multipart(m.encode(m.Weights(version, state_arrays(model))), flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # no subscriber keeps up: PUB drops rather than stall training

    def close(self) -> None:
        self.sock.close()
