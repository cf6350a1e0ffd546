"""ZeroMQ sockets with the options every peer needs; knows frames, not message contents.

The learner binds (it is always there); actors and weight subscribers connect (they come and go).
"""
from __future__ import annotations

import os
import sys
import uuid

import zmq

LINGER_MS = 0  # never let close() hang on a peer that went away
LOCAL = "local"  # the learner's default address: reachable from this machine only


def local_address(address: str) -> str:
    """`local` as an address to bind: on Linux an abstract Unix socket named after this process (no file to
    clean up, refused if taken; about 1 us less learner CPU per env step than TCP over loopback, see
    benchmarks/learner_cpu_real_actors.py), elsewhere a free TCP port on 127.0.0.1. Any other address as it is."""
    if address != LOCAL:
        return address
    if sys.platform.startswith("linux"):
        return f"ipc://@ppo-cluster-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return "tcp://127.0.0.1:0"


def _tune(sock: zmq.Socket, max_bytes: int, hwm: int) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # oversized messages disconnect the sender
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    return sock


def _bind(sock: zmq.Socket, address: str) -> str:
    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"  # zmq's spelling of "any free port"
    sock.bind(address)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def bind_router(ctx: zmq.Context, address: str, max_bytes: int, hwm: int = 1000,
                curve=None) -> tuple[zmq.Socket, str]:
    sock = _tune(ctx.socket(zmq.ROUTER), max_bytes, hwm)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a vanished actor raises instead of vanishing
    if curve is not None:
        curve.apply_server(sock)
    return sock, _bind(sock, address)


def bind_pub(ctx: zmq.Context, address: str, hwm: int = 4, curve=None) -> tuple[zmq.Socket, str]:
    sock = _tune(ctx.socket(zmq.PUB), 1 << 40, hwm)
    if curve is not None:
        curve.apply_server(sock)
    return sock, _bind(sock, address)


def connect_dealer(ctx: zmq.Context, address: str, max_bytes: int, identity: bytes | None = None,
                   curve=None) -> zmq.Socket:
    sock = _tune(ctx.socket(zmq.DEALER), max_bytes, 1000)
    if identity:
        sock.setsockopt(zmq.IDENTITY, identity)
    if curve is not None:
        curve.apply_client(sock)
    sock.connect(address)
    return sock


def connect_sub(ctx: zmq.Context, address: str, max_bytes: int, curve=None) -> zmq.Socket:
    sock = _tune(ctx.socket(zmq.SUB), max_bytes, 4)
    if curve is not None:
        curve.apply_client(sock)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(address)
    return sock


def recv_frames(sock: zmq.Socket, timeout_ms: int | None = None) -> list | None:
    """One multipart message as zmq.Frames (zero-copy for large ones), or None on timeout."""
    if timeout_ms is not None and not sock.poll(timeout_ms, zmq.POLLIN):
        return None
    return sock.recv_multipart(copy=False)
