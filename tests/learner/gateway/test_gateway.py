"""The gateway: one poll drains what is queued, in order, up to its bound, rejecting garbage; refusals and
retirements are answered with their reason; reused slots get fresh seeds; misbehaving peers are refused."""
import logging
import time
import uuid

import numpy as np
import pytest
import zmq

from learner.gateway.admission import Admission
from learner.gateway.log_limit import MAX_LINES
from learner.gateway.registry import MAX_STRIKES, ActorRegistry
from learner.gateway.gateway import MAX_BATCH_MESSAGES, Gateway, Listen, Offer
from learner.seeds import slot_env_seed
from protocol import codec
from protocol import messages as m
from protocol.transport import recv_frames
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.learner.gateway.loopback import GatewayOnSocket

OBS = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")  # large enough for a frame of its own


@pytest.fixture
def wire():
    """A gateway and a connected DEALER over inproc: a sent message is queued as soon as send returns."""
    ctx = zmq.Context()
    address = f"inproc://gateway-test-{uuid.uuid4().hex}"
    gateway = Gateway(Listen(ctx, address, 64 << 20), Offer(EnvSettings(), OBS, SpaceSpec(kind="discrete", n=4), 1, 0, "run"))

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
    actor, vandal = peer(), peer()
    actor.send_multipart(m.encode(m.Handshake(4, "a", groups=2)))
    actor.send_multipart(step(0, 7))
    vandal.send_multipart([b"garbage"])  # rejected, and the drain goes on past it
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


def reply(sock) -> object | None:
    """The gateway's answer to sock, or None when none comes within a second."""
    frames = recv_frames(sock, 1000)
    return None if frames is None else m.decode(frames)


def join(gateway, sock, num_envs: int = 2) -> m.Welcome:
    sock.send_multipart(m.encode(m.Handshake(num_envs, "a")))
    assert gateway.poll(1000) == []
    welcome = reply(sock)
    assert isinstance(welcome, m.Welcome), welcome
    return welcome


def test_an_actor_retired_while_alive_is_told_to_rejoin_and_why(wire):
    gateway, peer = wire
    actor = peer()
    join(gateway, actor)
    gateway.retire(gateway.registry.get(next(iter(gateway.registry.by_identity))), "silent for more than 2s")
    actor.send_multipart(step(0, 1))  # it wakes up and reports the step it owed
    assert gateway.poll(1000) == []
    err = reply(actor)
    assert isinstance(err, m.Error) and err.rejoin, err
    assert "retired: silent for more than 2s" in err.reason


def test_unknown_peers_get_at_most_one_reply_per_valid_report_and_none_for_garbage(wire):
    gateway, peer = wire
    stranger, vandal = peer(), peer()
    for _ in range(MAX_STRIKES + 5):
        stranger.send_multipart(step(0, 1))
        vandal.send_multipart([b"garbage"])
    while gateway.poll(200):
        pass
    replies = []
    while (msg := reply(stranger)) is not None:
        replies.append(msg)
    assert 1 <= len(replies) < MAX_STRIKES, "replies stop once the peer has used up its strikes"
    assert all(isinstance(r, m.Error) and r.rejoin and "not registered" in r.reason for r in replies)
    assert reply(vandal) is None


@pytest.mark.parametrize("handshake,reason", [
    (m.Handshake(1, "odd", groups=2), "groups must be in [1, 8] and divide num_envs"),
    (m.Handshake(5000, "huge"), "num_envs must be in [1, 4096]"),
    (m.Handshake(2, "wrong-game", env_id="CartPole-v1"), "does not match the learner's"),
])
def test_every_refused_handshake_is_answered_with_its_reason(wire, handshake, reason):
    gateway, peer = wire
    actor = peer()
    actor.send_multipart(m.encode(handshake))
    assert gateway.poll(1000) == [] and len(gateway.registry) == 0
    err = reply(actor)
    assert isinstance(err, m.Error) and not err.rejoin and reason in err.reason, err


def test_a_claim_no_collector_could_admit_is_refused_at_the_door_not_redirected():
    """Collector 0 of several redirects joiners to the least loaded one; a peer claiming more envs than any one
    actor may hold is refused there and then, with its reason, however the slots happen to be spread."""
    ctx = zmq.Context()
    address = f"inproc://gateway-test-{uuid.uuid4().hex}"
    registry = ActorRegistry(admission=Admission(1 << 30, 1 << 20, 512, 16))
    gateway = Gateway(Listen(ctx, address, 64 << 20), Offer(EnvSettings(), OBS, SpaceSpec(kind="discrete", n=4), 1, 0,
                                                           "run"), registry=registry, redirect=lambda n: "tcp://10.0.0.2:5555")
    try:
        for num_envs, expected in ((4092, m.Error), (8, m.Redirect)):
            actor = ctx.socket(zmq.DEALER)
            actor.setsockopt(zmq.LINGER, 0)
            actor.connect(address)
            actor.send_multipart(m.encode(m.Handshake(num_envs, "greedy" if num_envs > 16 else "fair")))
            assert gateway.poll(1000) == [] and len(registry) == 0
            answer = reply(actor)
            assert isinstance(answer, expected), answer
            if expected is m.Error:
                assert not answer.rejoin and "claims 4092 envs, more than the 16 one actor may hold" in answer.reason
            actor.close(linger=0)
    finally:
        gateway.sock.close(linger=0)
        ctx.destroy(linger=0)


@pytest.mark.parametrize("theirs", [m.PROTOCOL_VERSION - 1, m.PROTOCOL_VERSION + 1], ids=["older", "newer"])
def test_an_actor_of_another_protocol_version_is_refused_in_its_version_naming_both(wire, theirs):
    """Other code on the actor (an [env] key it lacks, say): told why in the header form every version reads."""
    gateway, peer = wire
    actor = peer()
    actor.send_multipart(codec.encode(theirs, "handshake", {"num_envs": 2, "name": "old"}))
    assert gateway.poll(1000) == [] and len(gateway.registry) == 0 and gateway.rejected == 1
    frames = recv_frames(actor, 1000)
    assert frames is not None, "an actor of another version is answered, not left waiting"
    msg_type, body, _ = codec.decode_header(frames[0], theirs)  # what the actor's own code decodes
    assert msg_type == "error" and body["rejoin"] is False
    assert body["reason"] == (f"handshake refused: this actor speaks protocol version {theirs}, the learner "
                              f"{m.PROTOCOL_VERSION}: run the same ppo-cluster code on both")


def test_a_reused_slot_gets_fresh_seeds_reproducibly(wire):
    gateway, peer = wire
    first = join(gateway, peer())
    gateway.retire(gateway.registry.get(next(iter(gateway.registry.by_identity))), "killed")
    second = join(gateway, peer())
    assert second.slots == first.slots
    assert not set(second.seeds) & set(first.seeds), "a restarted actor would replay the one it replaces"
    again = ActorRegistry()  # the same joins and leaves in another run give the same seeds
    a = again.join(b"x", "a", 2, 1, None)
    again.leave(b"x")
    b = again.join(b"y", "a", 2, 1, None)
    seeds = [[slot_env_seed(1, s, 0, n) for s, n in zip(e.slots, e.reuses)] for e in (a, b)]
    assert seeds == [first.seeds, second.seeds]


def test_a_type_not_in_the_message_table_is_refused_by_name_counted_and_logged_once(wire, caplog):
    """Never taken for a goodbye: the sender is retired for a rejected message and told to rejoin; logged in
    full once as the actor, once as the unregistered peer it then is, the third time not."""
    gateway, peer = wire
    actor = peer()
    join(gateway, actor)
    caplog.set_level("WARNING", logger="learner")
    for _ in range(3):
        actor.send_multipart(codec.encode(m.PROTOCOL_VERSION, "ping", {}))
    while gateway.rejected < 3:
        assert gateway.poll(1000) == []
    named = [r.getMessage() for r in caplog.records if "unknown message type 'ping'" in r.getMessage()]
    assert len(named) == 2 and named[0] == "rejected message from a: unknown message type 'ping'", named
    assert named[1].startswith("rejected message from peer "), named
    assert gateway.take_events()[-1] == "actor a left: sent a rejected message (unknown message type 'ping')"
    assert told_to_rejoin(actor)


def test_the_silence_clock_starts_when_an_actor_is_asked_not_when_it_last_reported(wire):
    """A learner busy for longer than the timeout (first inference, a loaded machine) between an actor's
    report and the actions it sends back must not retire that actor the moment the actions leave."""
    gateway, peer = wire
    actor = peer()
    join(gateway, actor, num_envs=2)
    actor.send_multipart(step(0, 1))
    (item,) = gateway.poll(1000)
    item.actor.turns.owes.discard(0)  # what the collector does with a report
    item.actor.last_seen -= 10  # the report arrived 10 s ago; the learner was busy since
    gateway.send_actions(item.actor, 0, np.zeros(2, np.int64), 0)
    gateway.check_liveness(2.0)
    assert item.actor.identity in gateway.registry, "retired for the learner's own delay"
    item.actor.last_seen -= 10  # and now it really has been silent since it was asked
    gateway.check_liveness(2.0)
    assert item.actor.identity not in gateway.registry
# --- defences: over inproc (unit tests) and loopback TCP (the same tests, integration) ---------------------

VEC = SpaceSpec(kind="box", shape=(3,), dtype="float32")


class Loopback(GatewayOnSocket):
    """A gateway on `address`, connected DEALER peers, and everything the gateway admitted so far."""

    def __init__(self, address: str):
        super().__init__(Offer(EnvSettings(), VEC, SpaceSpec(kind="discrete", n=2), 1, 0, "run"), address)

    def join(self, sock, groups: int = 1):
        sock.send_multipart(m.encode(m.Handshake(2 * groups, "a", groups=groups)))
        self.drain(lambda: len(self.gateway.registry) == 1, "the handshake")
        assert isinstance(m.decode(sock.recv_multipart()), m.Welcome)
        return next(iter(self.gateway.registry.by_identity.values()))


@pytest.fixture(params=["inproc", pytest.param("tcp", marks=pytest.mark.integration)])
def loopback(request):
    wire = Loopback(f"inproc://gateway-test-{uuid.uuid4().hex}" if request.param == "inproc" else "tcp://127.0.0.1:0")
    yield wire
    wire.close()


def report(group=0, first=False) -> list:
    return m.encode(m.StepReport(group, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                                 np.zeros(2, bool), first=first))


def told_to_rejoin(sock) -> m.Error:
    """The next message sock gets, which must be the gateway's 'retired: ...; hand-shake again'."""
    msg = m.decode(sock.recv_multipart())
    assert isinstance(msg, m.Error) and msg.rejoin and "retired" in msg.reason, msg
    return msg


def test_a_second_report_before_new_actions_is_rejected_counted_and_its_sender_retired(loopback):
    gateway = loopback.gateway
    actor = loopback.peer()
    loopback.join(actor)
    actor.send_multipart(report(first=True))
    actor.send_multipart(report())  # a duplicate nobody asked for, likely in the same poll batch
    loopback.drain(lambda: len(loopback.admitted) + gateway.rejected >= 2, "both reports")
    assert len(loopback.admitted) == 1 and loopback.admitted[0].msg.first
    assert gateway.rejected == 1 and len(gateway.registry) == 0, "out of step: retired, its slots freed"
    assert "not sent actions" in told_to_rejoin(actor).reason


@pytest.mark.parametrize("groups,first_sent,msg,why", [
    (1, True, m.StepReport(0, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                           np.zeros(2, bool), first=True), "a second first report for group 0"),
    (1, False, m.StepReport(0, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                            np.zeros(2, bool)), "a step report for group 0 before its first report"),
    (2, True, m.StepReport(1, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                           np.zeros(2, bool)), "a step report for group 1 before its first report"),
    (1, True, m.Starting(1, 2), "Starting while running (in turn while building)"),
    (1, True, m.Actions(0, np.zeros(2, np.int64)), "unexpected Actions: only the actor takes it"),
    (1, True, m.Handshake(2, "x"), None),  # a restart: retired, then welcomed again
], ids=["first-again", "outcome-before-first", "other-group", "starting-late", "actions", "handshake-again"])
def test_a_well_formed_message_out_of_turn_costs_the_sender_its_slots(loopback, groups, first_sent, msg, why):
    gateway = loopback.gateway
    actor = loopback.peer()
    entry = loopback.join(actor, groups=groups)
    if first_sent:
        actor.send_multipart(report(first=True))
        loopback.drain(lambda: loopback.admitted, "the first report")
        gateway.send_actions(entry, 0, np.zeros(2, np.int64), 1)  # group 0 now owes an outcome
        assert isinstance(m.decode(actor.recv_multipart()), m.Actions)
    actor.send_multipart(m.encode(msg))
    loopback.drain(lambda: entry.identity not in gateway.registry or gateway.registry.get(entry.identity) is not entry,
                   "the retirement")
    if why is None:
        assert isinstance(m.decode(actor.recv_multipart()), m.Welcome) and gateway.rejected == 0
        return
    assert gateway.rejected == 1 and len(gateway.registry) == 0
    assert why in told_to_rejoin(actor).reason


def test_starting_messages_are_signs_of_life_not_reports(loopback):
    gateway = loopback.gateway
    actor = loopback.peer()
    entry = loopback.join(actor, groups=2)
    entry.last_seen -= 100  # silent for long enough to be retired ...
    actor.send_multipart(m.encode(m.Starting(1, 4)))  # ... but it says it is building its envs
    loopback.drain(lambda: entry.turns.prepared == (1, 4), "the Starting message")
    gateway.check_liveness(10.0)
    assert entry.identity in gateway.registry and loopback.admitted == [] and gateway.rejected == 0
    assert "building its envs (1/4 built)" in gateway.describe()
    entry.last_seen -= 100  # and now it has been silent since
    gateway.check_liveness(10.0)
    assert len(gateway.registry) == 0, "a frozen actor is still retired while it builds"


def test_a_peer_that_keeps_misbehaving_is_banned_for_a_while(loopback):
    from learner.gateway.registry import BAN_S, MAX_STRIKES
    from learner.gateway.rejoins import HANDSHAKE_BURST
    gateway = loopback.gateway
    rogue = loopback.peer(identity=b"rogue")
    for strike in range(MAX_STRIKES):  # each time: join, misbehave, be retired; strikes add up across rejoins
        if strike < HANDSHAKE_BURST:
            loopback.join(rogue)
            rogue.send_multipart(report())  # an outcome before any first report
        else:  # past its handshakes at once (issue 60): each further one is refused, a strike of its own
            rogue.send_multipart(m.encode(m.Handshake(2, "a")))
        loopback.drain(lambda: gateway.rejected == strike + 1, f"strike {strike + 1}")
        assert len(gateway.registry) == 0
        if strike < HANDSHAKE_BURST:
            told_to_rejoin(rogue)
        elif strike < MAX_STRIKES - 1:
            assert "too many handshakes" in m.decode(rogue.recv_multipart()).reason
    assert gateway.registry.is_banned(b"rogue")
    rogue.send_multipart(m.encode(m.Handshake(2, "again")))
    loopback.drain(lambda: gateway.rejected > MAX_STRIKES or len(gateway.registry) > 0, "the banned handshake")
    assert gateway.rejected == MAX_STRIKES + 1 and len(gateway.registry) == 0, "a banned peer cannot join again"
    assert rogue.poll(200) == 0, "a banned peer gets no answer at all"

    other = loopback.peer(identity=b"other")  # the ban is the rogue's alone
    loopback.join(other)
    assert b"other" in gateway.registry
    assert not gateway.registry.is_banned(b"rogue", now=time.monotonic() + BAN_S + 1), "a ban ends"


def test_strike_and_ban_tables_stay_bounded_under_churn():
    from learner.gateway.registry import MAX_STRIKES, MAX_TRACKED_PEERS
    registry = ActorRegistry()
    for i in range(3 * MAX_TRACKED_PEERS):
        for _ in range(MAX_STRIKES if i % 2 else 1):
            registry.strike(i.to_bytes(4, "big"))
    assert len(registry.strikes) <= MAX_TRACKED_PEERS and len(registry.bans) <= MAX_TRACKED_PEERS
    assert registry.is_banned((3 * MAX_TRACKED_PEERS - 1).to_bytes(4, "big")), "the newest ban is kept"


def test_join_command_names_a_reachable_address_and_the_keys_when_needed():
    import socket as _socket
    from learner.gateway.gateway import join_command
    assert join_command("tcp://127.0.0.1:41234", 3) == "python -m actor --learner tcp://127.0.0.1:41234 --envs 3"
    host = _socket.gethostname()
    assert join_command("tcp://0.0.0.0:5555", 0) == f"python -m actor --learner tcp://{host}:5555 --envs 1"
    assert join_command("tcp://*:5555", 2, curved=True).endswith("--envs 2 --server-key LEARNER.key --key YOUR.key_secret")


@pytest.mark.integration
def test_a_flood_of_5000_malformed_messages_adds_a_few_dozen_log_lines(loopback, caplog):
    """Issue 43: 50 peers x 100 malformed messages (as benchmarks/chaos.py's flood), each peer banned after
    MAX_STRIKES; every message is counted, the log gets the first of each kind, summaries and the bans, capped."""
    gateway, rng = loopback.gateway, np.random.default_rng(0)
    caplog.set_level("WARNING", logger="learner")
    socks = []  # kept open until drained: a closed DEALER drops what it has not sent yet
    for p in range(50):
        socks.append(sock := loopback.peer())
        for j in range(100):
            garbage = [rng.bytes(16 if j % 10 else 1 << 16), b"\x00" * (j % 7)] if j % 3 else \
                [b"\x92\x01\xa4" + rng.bytes(int(rng.integers(0, 40)))]
            sock.send_multipart(garbage)
    loopback.drain(lambda: gateway.rejected == 5000, "5000 rejections counted", timeout=60)
    gateway.check_liveness(10.0)
    gateway.warnings.flush(everything=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "learner" and r.levelno >= logging.WARNING]
    assert len(lines) <= MAX_LINES + 1, "\n".join(lines)  # one window: a few dozen in all at most
    assert lines[0].startswith("rejected message from peer ")
    assert any("held back" in line for line in lines), "what was held back is told"


# --- issue 60, point 4: well-formed floods bounded like malformed ones -------------------------------------------

def test_a_flood_of_handshakes_from_one_peer_is_struck_and_banned_in_a_few_lines(wire, caplog):
    """Before: 20,000 handshakes from one identity were all welcomed (a leave and a join each: 40,046 log lines,
    one metrics line of 16,256 events). Here 2,000: a handful welcomed, the rest struck until the ban."""
    from learner.gateway.events import MAX_EVENTS
    from learner.gateway.rejoins import HANDSHAKE_BURST
    gateway, peer = wire
    flooder = peer()
    caplog.set_level(logging.INFO, logger="learner")
    for _ in range(2000):
        flooder.send_multipart(m.encode(m.Handshake(1, "flood")))
    deadline = time.monotonic() + 30
    while gateway.rejected < 2000 - HANDSHAKE_BURST:  # every handshake past the burst: struck, then dropped banned
        assert time.monotonic() < deadline, f"{gateway.rejected} rejected"
        gateway.poll(100)
    welcomes = 0
    while (frames := recv_frames(flooder, 0)) is not None:
        welcomes += isinstance(m.decode(frames), m.Welcome)
    assert welcomes == HANDSHAKE_BURST and len(gateway.registry) <= 1
    assert len(gateway.registry.bans) == 1, "banned"
    events = gateway.take_events()
    assert len(events) <= MAX_EVENTS + 1 and sum("joined" in e for e in events) == HANDSHAKE_BURST
    gateway.close()
    assert len(caplog.records) <= 2 * MAX_LINES + 4, [r.getMessage() for r in caplog.records]


def test_a_name_cannot_forge_a_log_line(wire, caplog):
    """Before: a name holding a newline wrote '... ERROR the learner (learner-0) was killed by SIGKILL' as a line
    of its own into learner.log and the console."""
    gateway, peer = wire
    caplog.set_level(logging.INFO, logger="learner")
    forger = peer()
    forger.send_multipart(m.encode(m.Handshake(2, "x\n02:00:00 ERROR the learner (learner-0) was killed by SIGKILL\x1b[2J")))
    assert gateway.poll(1000) == []
    (entry,) = gateway.registry.by_identity.values()
    assert entry.name == "x02:00:00 ERROR the learner (learner-0) was killed by SIGKILL[2J"
    assert all("\n" not in r.getMessage() and "\x1b" not in r.getMessage() for r in caplog.records)


# --- issue 60, point 5: a peer retired for silence is held back -------------------------------------------------

def test_a_peer_retired_for_silence_is_deferred_on_probation_under_its_identity_or_its_name(wire):
    """Before: a client that joined, sent its first report and fell silent rejoined at once, every time, and each
    rollout waited a whole actor_timeout_s for it again. Now it is told to ask again later; so is its name on a new
    socket; another peer is welcome."""
    gateway, peer = wire
    ghost = peer()
    join(gateway, ghost)
    (entry,) = gateway.registry.by_identity.values()
    entry.last_seen -= 10  # silent for 10 s, owing its first report
    gateway.check_liveness(5.0)
    assert len(gateway.registry) == 0 and told_to_rejoin(ghost)
    for sock in (ghost, peer()):  # the same socket, and the same name on a new one
        sock.send_multipart(m.encode(m.Handshake(2, "a")))
        assert gateway.poll(1000) == [] and len(gateway.registry) == 0
        answer = reply(sock)
        assert isinstance(answer, m.Error) and answer.rejoin and "on probation for 10 s more" in answer.reason, answer
    assert gateway.rejected == 0, "a deferral is no strike"
    other = peer()
    other.send_multipart(m.encode(m.Handshake(2, "b")))
    assert gateway.poll(1000) == [] and isinstance(reply(other), m.Welcome)
