"""ZeroMQ sockets with the options every peer needs; knows frames, not message contents.

The learner binds (it is always there); actors and weight subscribers connect (they come and go).
"""
from __future__ import annotations

import sys

import zmq

from protocol.private_dirs import private_dir

LINGER_MS = 0  # never let close() hang on a peer that went away
LOCAL = "local"  # the learner's default address: reachable by this user on this machine only


def local_address(address: str) -> str:
    """`local` as an address to bind: a Unix socket file in a private directory of its own (mode 0700, under
    $XDG_RUNTIME_DIR when set, else the temporary directory), removed when this process exits; a free TCP port
    on 127.0.0.1 where there are no Unix sockets (Windows). Any other address as it is.

    Why a file in a 0700 directory: the kernel checks the directory's search permission on connect(), so only
    this user (and root) can reach the learner. An abstract socket (`ipc://@...`), used before, has no
    permissions at all: any user could find it in /proc/net/unix and connect. pyzmq does not expose a ROUTER
    connection's peer credentials (SO_PEERCRED), and libzmq's own check (ZMQ_IPC_FILTER_UID) is deprecated and
    build-dependent; the directory's permission needs nothing from ZeroMQ. A Unix socket also costs the learner about 1 us less CPU per env step than TCP over
    loopback (benchmarks/learner_cpu_real_actors.py)."""
    return local_addresses(address)[0]


def local_addresses(*addresses: str) -> tuple[str, ...]:
    """Several addresses of one process (the learner's requests, then its weights) as local_address makes
    them, each `local` one a socket file in one private directory: learner.sock, weights.sock, then
    socket-N.sock."""
    if LOCAL not in addresses:
        return addresses
    if sys.platform == "win32":
        return tuple("tcp://127.0.0.1:0" if a == LOCAL else a for a in addresses)
    folder = private_dir()
    return tuple(f"ipc://{folder}/{_socket_name(i)}" if a == LOCAL else a for i, a in enumerate(addresses))


def _socket_name(i: int) -> str:
    return ("learner.sock", "weights.sock")[i] if i < 2 else f"socket-{i}.sock"


def _tune(sock: zmq.Socket, max_bytes: int, hwm: int, rcvhwm: int | None = None) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, max_bytes)  # oversized messages disconnect the sender
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm if rcvhwm is None else rcvhwm)  # per peer: past it, zmq stops reading from it
    return sock


def _bind(sock: zmq.Socket, address: str) -> str:
    if address.startswith("tcp://") and address.endswith(":0"):
        address = address[:-2] + ":*"  # zmq's spelling of "any free port"
    sock.bind(address)
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def bind_router(ctx: zmq.Context, address: str, max_bytes: int, hwm: int = 1000,
                curve=None, rcvhwm: int | None = None) -> tuple[zmq.Socket, str]:
    """`rcvhwm`: messages held per peer until read (default `hwm`, as queued to send to each)."""
    sock = _tune(ctx.socket(zmq.ROUTER), max_bytes, hwm, rcvhwm)
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
