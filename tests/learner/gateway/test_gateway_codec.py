"""The gateway's side of compressed frames (issue 34), over real TCP sockets: cluster.codec auto compresses for
actors beyond loopback only, a forced codec for actors that have it, raw frames for actors without; a corrupt
compressed frame costs its sender its slots and nobody else."""
from __future__ import annotations

import socket

import numpy as np
import pytest
import zmq

from actor import runner
from actor.env_groups import ActorEnvs
from actor.runner import ActorOptions, Refused, Session, _await_welcome
from learner.gateway.gateway import Offer
from protocol import compression
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.learner.gateway.loopback import GatewayOnSocket

OBS = SpaceSpec(kind="box", shape=(84, 84), dtype="uint8")


def _outward_ip() -> str | None:
    """An address of this machine beyond loopback (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outward interface
            ip = probe.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


class Wire(GatewayOnSocket):
    def __init__(self, address: str, codec: str):
        super().__init__(Offer(EnvSettings(), OBS, SpaceSpec(kind="discrete", n=4), 1, 0, "run", codec), address,
                         64 << 20)

    def join(self, sock, codecs) -> m.Welcome:
        before = len(self.gateway.registry)
        sock.send_multipart(m.encode(m.Handshake(2, f"a{before}", codecs=codecs)))
        self.drain(lambda: len(self.gateway.registry) == before + 1, "the handshake")
        welcome = m.decode(sock.recv_multipart())
        assert isinstance(welcome, m.Welcome), welcome
        return welcome


@pytest.fixture
def wires():
    made = []

    def make(address: str, codec: str = "auto") -> Wire:
        made.append(Wire(address, codec))
        return made[-1]
    yield make
    for wire in made:
        wire.close()


@pytest.mark.integration
def test_auto_compresses_for_an_actor_beyond_loopback_and_not_on_loopback(wires):
    ip = _outward_ip()
    if ip is None:
        pytest.skip("this machine has no address beyond loopback")
    remote, local = wires(f"tcp://{ip}:0"), wires("tcp://127.0.0.1:0")
    assert remote.join(remote.peer(), ["zstd"]).codec == "zstd"
    assert local.join(local.peer(), ["zstd"]).codec == "none"
    assert remote.join(remote.peer(), None).codec == "none"  # an actor from before codecs: raw frames


@pytest.mark.integration
def test_a_forced_codec_goes_to_actors_that_have_it_and_raw_frames_to_the_others(wires):
    wire = wires("tcp://127.0.0.1:0", codec="zstd")
    assert wire.join(wire.peer(), ["lz4", "zstd"]).codec == "zstd"
    assert wire.join(wire.peer(), None).codec == "none"
    assert wire.join(wire.peer(), ["brotli"]).codec == "none"
    events = wire.gateway.take_events()
    assert any("zstd frames" in e for e in events) and any("raw frames" in e for e in events)


def _first(obs: np.ndarray) -> m.StepReport:
    return m.StepReport(0, obs, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), first=True)


@pytest.mark.integration
def test_compressed_reports_arrive_exactly_and_a_corrupt_one_costs_only_its_sender(wires):
    wire = wires("tcp://127.0.0.1:0", codec="zstd")
    good, bad = wire.peer(), wire.peer()
    for sock in (good, bad):
        assert wire.join(sock, ["zstd"]).codec == "zstd"
    obs = np.random.default_rng(0).integers(0, 255, (2, 84, 84), dtype=np.uint8)
    good.send_multipart(m.encode(_first(obs), compression.Sender("zstd")))
    frames = m.encode(_first(obs), compression.Sender("zstd"))
    bad.send_multipart([frames[0], bytes(frames[1])[:-20]])  # cut short
    wire.drain(lambda: len(wire.gateway.registry) == 1, "the corrupt sender's retirement")
    wire.drain(lambda: wire.admitted, "the good report")
    (item,) = wire.admitted
    np.testing.assert_array_equal(item.msg.obs, obs)
    assert item.actor.name == "a0" and wire.gateway.rejected == 1
    assert [e.name for e in wire.gateway.registry.by_identity.values()] == ["a0"]
    told = m.decode(bad.recv_multipart())
    assert isinstance(told, m.Error) and "compressed frame" in told.reason and told.rejoin


def test_an_actor_refuses_a_codec_it_did_not_offer():
    ctx = zmq.Context()
    try:
        learner, actor = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        learner.bind("inproc://codec-refusal")
        actor.connect("inproc://codec-refusal")
        actor.send(b"hello")
        identity, _ = learner.recv_multipart()
        welcome = m.Welcome(0, [0, 1], [1, 2], {}, OBS, SpaceSpec(kind="discrete", n=4), codec="zstd")
        learner.send_multipart([identity, *m.encode(welcome)])
        with pytest.raises(Refused, match="did not offer"):
            opts = ActorOptions("inproc://codec-refusal", num_envs=2, wire=runner.Wire(codecs=[]))
            _await_welcome(actor, Session(actor, ActorEnvs(), opts, groups=1))
    finally:
        ctx.destroy(linger=0)
