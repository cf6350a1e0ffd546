"""CurveZMQ: real ROUTER/DEALER sockets on 127.0.0.1; only allow-listed actor keys get through.

Each refused client is also checked to have reached the server (a HANDSHAKE_FAILED_* monitor event),
so "the server received nothing" cannot pass merely because the client never connected.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq
import zmq.auth
from zmq.utils.monitor import recv_monitor_message

from protocol import transport
from protocol.security import ClientKeys, ServerKeys, generate_keypair, is_loopback, main

REPO = Path(__file__).resolve().parents[2]
QUIET_MS = 1500  # a refused client's message must not arrive within this
DEADLINE_S = 5.0  # bound on every wait for something that should happen
FAILED = {zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
          zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL}


@pytest.fixture
def keys(tmp_path):
    allowed = tmp_path / "allowed"
    ns = SimpleNamespace(dir=tmp_path, allowed=allowed)
    ns.server_pub, ns.server_sec = generate_keypair(tmp_path, "learner")
    ns.actor_pub, ns.actor_sec = generate_keypair(allowed, "actor1")  # in the allow-list
    ns.intruder_pub, ns.intruder_sec = generate_keypair(tmp_path, "intruder")  # not in it
    ns.other_server_pub, _ = generate_keypair(tmp_path, "other-learner")
    ns.server_keys = ServerKeys.load(ns.server_sec, allowed)
    return ns


@pytest.fixture
def sockets():
    """Tracks sockets/contexts; closes them all, then stops authenticators, then terms contexts."""
    made = SimpleNamespace(socks=[], ctxs=[], keys=[])

    def ctx():
        c = zmq.Context()
        made.ctxs.append(c)
        return c

    def track(sock):
        sock.setsockopt(zmq.LINGER, 0)
        made.socks.append(sock)
        return sock

    made.ctx, made.track = ctx, track
    try:
        yield made
    finally:
        for s in reversed(made.socks):
            s.close(linger=0)
        for k in made.keys:
            k.stop()
        for c in made.ctxs:
            c.term()


def start_server(sockets, server_keys, authenticator=True):
    ctx = sockets.ctx()
    if authenticator:
        sockets.keys.append(server_keys)
        server_keys.start_authenticator(ctx)
    srv = sockets.track(ctx.socket(zmq.ROUTER))
    server_keys.apply_server(srv)
    mon = sockets.track(srv.get_monitor_socket())  # before bind: sees every connection attempt
    srv.bind("tcp://127.0.0.1:*")
    return srv, mon, srv.getsockopt_string(zmq.LAST_ENDPOINT)


def connect_client(sockets, endpoint, client_keys=None):
    cli = sockets.track(sockets.ctx().socket(zmq.DEALER))  # own context, like a separate actor process
    if client_keys is not None:
        client_keys.apply_client(cli)
    cli.connect(endpoint)
    return cli


def wait_handshake(mon) -> int:
    """The first handshake outcome the server's monitor reports (SUCCEEDED or one of FAILED)."""
    deadline = time.monotonic() + DEADLINE_S
    while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0:
        if mon.poll(left_ms):
            event = recv_monitor_message(mon)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED or event in FAILED:
                return event
    pytest.fail(f"no handshake outcome on the server within {DEADLINE_S} s")


def assert_refused(srv, mon, cli, expected_events=FAILED):
    cli.send(b"let me in")
    event = wait_handshake(mon)
    assert event in expected_events, f"server handshake event {zmq.Event(event).name}"
    assert srv.poll(QUIET_MS, zmq.POLLIN) == 0, "a refused client's message reached the server"


# ---------------------------------------------------------------- over the wire

@pytest.mark.integration
def test_allowed_client_round_trip(keys, sockets):
    srv, mon, endpoint = start_server(sockets, keys.server_keys)
    cli = connect_client(sockets, endpoint, ClientKeys.load(keys.actor_sec, keys.server_pub))
    cli.send(b"ping")
    assert srv.poll(DEADLINE_S * 1000, zmq.POLLIN), "allowed client's message never arrived"
    ident, body = srv.recv_multipart(copy=False)
    assert body.bytes == b"ping"
    # the ZAP handler tags each message with the client's public key
    assert body.get("User-Id") == zmq.auth.load_certificate(keys.actor_pub)[0].decode()
    srv.send_multipart([ident.bytes, b"pong"])
    assert cli.poll(DEADLINE_S * 1000, zmq.POLLIN), "reply never arrived"
    assert cli.recv() == b"pong"
    assert srv.getsockopt(zmq.CURVE_SERVER) == 1


@pytest.mark.integration
def test_round_trip_through_transport(keys, sockets):
    ctx = sockets.ctx()
    sockets.keys.append(keys.server_keys)
    keys.server_keys.start_authenticator(ctx)
    srv, endpoint = transport.bind_router(ctx, "tcp://127.0.0.1:0", max_bytes=1 << 20, curve=keys.server_keys)
    sockets.track(srv)
    cli = sockets.track(transport.connect_dealer(sockets.ctx(), endpoint, 1 << 20, identity=b"a1",
                                                 curve=ClientKeys.load(keys.actor_sec, keys.server_pub)))
    cli.send(b"hello")
    frames = transport.recv_frames(srv, timeout_ms=int(DEADLINE_S * 1000))
    assert frames is not None and [f.bytes for f in frames] == [b"a1", b"hello"]


@pytest.mark.integration
def test_client_not_in_allow_list_is_refused(keys, sockets):
    srv, mon, endpoint = start_server(sockets, keys.server_keys)
    cli = connect_client(sockets, endpoint, ClientKeys.load(keys.intruder_sec, keys.server_pub))
    assert_refused(srv, mon, cli, {zmq.EVENT_HANDSHAKE_FAILED_AUTH})


@pytest.mark.integration
def test_client_without_curve_is_refused(keys, sockets):
    srv, mon, endpoint = start_server(sockets, keys.server_keys)
    assert_refused(srv, mon, connect_client(sockets, endpoint, None))


@pytest.mark.integration
def test_client_with_wrong_server_key_is_refused(keys, sockets):
    srv, mon, endpoint = start_server(sockets, keys.server_keys)
    cli = connect_client(sockets, endpoint, ClientKeys.load(keys.actor_sec, keys.other_server_pub))
    assert_refused(srv, mon, cli)


@pytest.mark.integration
def test_forgotten_authenticator_fails_closed(keys, sockets):
    # libzmq admits any client that knows the server key when no ZAP handler runs;
    # apply_server's ZAP_ENFORCE_DOMAIN turns that into a refusal.
    srv, mon, endpoint = start_server(sockets, keys.server_keys, authenticator=False)
    assert srv.getsockopt(zmq.ZAP_ENFORCE_DOMAIN) == 1
    cli = connect_client(sockets, endpoint, ClientKeys.load(keys.actor_sec, keys.server_pub))
    assert_refused(srv, mon, cli)


def test_authenticator_is_once_per_context(keys, sockets):
    ctx = sockets.ctx()
    sockets.keys.append(keys.server_keys)
    first = keys.server_keys.start_authenticator(ctx)
    assert keys.server_keys.start_authenticator(ctx) is first
    other = ServerKeys.load(keys.server_sec, keys.allowed)
    sockets.keys.append(other)
    with pytest.raises(RuntimeError, match="one may run per zmq.Context"):
        other.start_authenticator(ctx)


# ---------------------------------------------------------------- binding policy

@pytest.mark.parametrize("address", [
    "tcp://127.0.0.1:5555", "tcp://127.3.2.1:*", "tcp://localhost:5555", "tcp://LOCALHOST:1",
    "tcp://[::1]:5555", "tcp://[::ffff:127.0.0.1]:5555", "ipc:///tmp/learner.sock", "inproc://learner",
])
def test_loopback_addresses(address):
    assert is_loopback(address)


@pytest.mark.parametrize("address", [
    "tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.5:5555", "tcp://[::]:5555", "tcp://[2001:db8::1]:1",
    "tcp://eth0:5555", "tcp://learner.example.com:5555", "tcp://128.0.0.1:5555",
    "tcp://127.0.0.1;10.0.0.5:5555", "udp://127.0.0.1:5555", "",
])
def test_non_loopback_addresses_are_not_loopback(address):
    # the refusal to bind these without keys is learner.config's (tests/integration/test_multihost.py)
    assert not is_loopback(address)


# ---------------------------------------------------------------- key files

def test_keygen_files(tmp_path):
    public_path, secret_path = generate_keypair(tmp_path / "new", "learner")
    assert (public_path.name, secret_path.name) == ("learner.key", "learner.key_secret")
    pub, sec = zmq.auth.load_certificate(public_path)
    assert len(pub) == 40 and sec is None
    pub2, sec2 = zmq.auth.load_certificate(secret_path)
    assert pub2 == pub and zmq.curve_public(sec2) == pub
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        generate_keypair(tmp_path / "new", "learner")
    generate_keypair(tmp_path / "new", "learner", overwrite=True)
    assert zmq.auth.load_certificate(public_path)[0] != pub
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    assert zmq.auth.load_certificates(tmp_path / "new") == {zmq.auth.load_certificate(public_path)[0]: True}


@pytest.mark.integration
def test_keygen_cli(tmp_path, capsys):
    assert main(["keygen", str(tmp_path), "actor7"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "actor7.key") in out and str(tmp_path / "actor7.key_secret") in out
    assert main(["keygen", str(tmp_path), "actor7"]) == 1  # will not clobber a key
    proc = subprocess.run([sys.executable, "-m", "protocol.security", "keygen", str(tmp_path), "actor8"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    ClientKeys.load(tmp_path / "actor8.key_secret", tmp_path / "actor7.key")


def test_missing_key_files_named(keys, tmp_path):
    missing = tmp_path / "nope.key_secret"
    with pytest.raises(ValueError, match="nope.key_secret"):
        ClientKeys.load(missing, keys.server_pub)
    with pytest.raises(ValueError, match="nope.key"):
        ClientKeys.load(keys.actor_sec, tmp_path / "nope.key")
    with pytest.raises(ValueError, match="nope.key_secret"):
        ServerKeys.load(missing, keys.allowed)
    with pytest.raises(ValueError, match="no_such_dir"):
        ServerKeys.load(keys.server_sec, tmp_path / "no_such_dir")


def test_malformed_key_files_named(keys, tmp_path):
    garbage = tmp_path / "garbage.key_secret"
    garbage.write_text("hello\n")
    with pytest.raises(ValueError, match="garbage.key_secret"):
        ClientKeys.load(garbage, keys.server_pub)
    short = tmp_path / "short.key"
    short.write_text('curve\n    public-key = "abc"\n')
    with pytest.raises(ValueError, match="short.key"):
        ClientKeys.load(keys.actor_sec, short)
    with pytest.raises(ValueError, match="learner.key.*no secret-key"):  # public file given as the secret
        ClientKeys.load(keys.server_pub, keys.server_pub)
    mismatched = tmp_path / "mismatched.key_secret"
    other_sec = zmq.auth.load_certificate(keys.intruder_sec)[1].decode()
    mismatched.write_text(keys.actor_sec.read_text().replace(
        zmq.auth.load_certificate(keys.actor_sec)[1].decode(), other_sec))
    with pytest.raises(ValueError, match="mismatched.key_secret.*does not belong"):
        ClientKeys.load(mismatched, keys.server_pub)


def test_allow_list_problems(keys, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty.*no \\*.key public keys"):
        ServerKeys.load(keys.server_sec, empty)
    (keys.allowed / "broken.key").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="broken.key"):
        ServerKeys.load(keys.server_sec, keys.allowed)


def test_secrets_stay_out_of_repr(keys):
    sec = zmq.auth.load_certificate(keys.server_sec)[1].decode()
    assert sec not in repr(keys.server_keys)
    client = ClientKeys.load(keys.actor_sec, keys.server_pub)
    assert zmq.auth.load_certificate(keys.actor_sec)[1].decode() not in repr(client)
