"""The learner's door: one ROUTER socket, handshakes, validation of everything that arrives.

Whatever bytes come in, the gateway either turns them into a validated message from a registered actor
or rejects it (counted in `rejected`), logged naming the peer and the reason: the first of a kind in full, repeats
summarised (log_limit.py), so a flood costs the log a few lines. It never raises on peer input.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import zmq

from protocol import compression
from protocol import messages as m
from protocol.errors import ProtocolError, VersionMismatch
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from protocol.transport import bind_router
from learner.gateway.admission import AdmissionRefused
from learner.gateway.events import Events
from learner.gateway.log_limit import RateLimitedLog
from learner.gateway.registry import BAN_S, ActorEntry, ActorRegistry
from learner.gateway.rejoins import HandshakeRate, Probation
from learner.seeds import slot_env_seed

log = logging.getLogger("learner")

MAX_BATCH_MESSAGES = 256  # drained per poll, so a flood cannot starve inference
MAX_REMEMBERED_RETIREMENTS = 1024  # retired identities whose reason is kept, to tell them why
GATEWAY_TYPES = frozenset(m.turns_for(frozenset({m.GATEWAY})))  # the types the gateway takes itself (the table's)
_NOBLOCK, _SNDMORE_NOBLOCK = int(zmq.NOBLOCK), int(zmq.SNDMORE | zmq.NOBLOCK)  # ints: enum flags cost Python calls


@dataclass
class Incoming:
    actor: ActorEntry
    msg: object


def join_command(endpoint: str, num_envs: int, curved: bool = False) -> str:
    """`python -m actor --learner ADDRESS --envs K` for the address bound (a wildcard host becomes this
    host's name), with the key options when the learner requires CURVE keys."""
    for wildcard in ("://*:", "://0.0.0.0:", "://[::]:"):
        endpoint = endpoint.replace(wildcard, f"://{socket.gethostname()}:")
    keys = " --server-key LEARNER.key --key YOUR.key_secret" if curved else ""
    return f"python -m actor --learner {endpoint} --envs {max(num_envs, 1)}{keys}"


@dataclass(frozen=True)
class Offer:
    """What a joining actor is welcomed to: the env it is to run and its spaces, and the run it joins (its env
    seeds derive from run_seed and generation, the update the run (re)started from)."""
    settings: EnvSettings
    obs_space: SpaceSpec
    action_space: SpaceSpec
    run_seed: int
    generation: int
    run_id: str
    codec: str = "auto"  # cluster.codec: how its frames travel, picked from those it offers (protocol/compression.py)
    bounds: tuple[float, float] = (m.FLOAT32_MAX, m.FLOAT32_MAX)  # its |rewards| and |float obs| (cluster.max_abs_*)


@dataclass(frozen=True)
class Listen:
    """Where and how the gateway's socket listens."""
    ctx: zmq.Context
    address: str             # where to bind (port 0: any free one)
    max_bytes: int           # the largest message a peer may send
    curve: object | None = None  # protocol.security.ServerKeys, or None
    wake: int | None = None  # a file descriptor whose input ends a poll's wait too (a collector process's pipe)
    max_queued: int = 1000   # messages held per peer until read (zmq RCVHWM; receive.py derives the run's)


def refusal(exc: ProtocolError) -> list:
    """The Error answering a refused handshake; to an actor of another protocol version (other code) in its
    version, which it can read, naming both."""
    if isinstance(exc, VersionMismatch) and type(exc.theirs) is int:
        return m.encode_error_for(exc.theirs, f"handshake refused: this actor speaks protocol version {exc.theirs}, "
                                              f"the learner {exc.ours}: run the same ppo-cluster code on both")
    return m.encode(m.Error(f"handshake refused: {exc}"))


class Gateway:
    def __init__(self, listen: Listen, offer: Offer, registry: ActorRegistry | None = None,
                 redirect: Callable[[int], str | None] | None = None, warnings: RateLimitedLog | None = None):
        """`registry` is shared with the collector (a fresh one by default); `redirect(num_envs)`, on rank 0
        of a multi-rank learner or collector 0 of several, names the address a joiner should go to instead
        (the least loaded rank or collector; None: stay here); `warnings`: where rejections are logged (by
        default the learner's log, rate-limited)."""
        max_bytes, curve = listen.max_bytes, listen.curve
        self.sock, self.endpoint = bind_router(listen.ctx, listen.address, max_bytes, curve=curve,
                                               rcvhwm=listen.max_queued)
        self._poller = zmq.Poller()
        self._poller.register(self.sock, zmq.POLLIN)
        if listen.wake is not None:
            self._poller.register(listen.wake, zmq.POLLIN)
        self.registry = registry if registry is not None else ActorRegistry()
        self.redirect = redirect
        self.warnings = warnings if warnings is not None else RateLimitedLog(log)
        self.departed: list[ActorEntry] = []  # retired since the collector last took them (take_departed)
        self.settings, self.obs_space, self.action_space = offer.settings, offer.obs_space, offer.action_space
        self.run_seed, self.generation, self.run_id, self.max_bytes = (offer.run_seed, offer.generation, offer.run_id,
                                                                       max_bytes)
        self.codec, self.bounds = offer.codec, offer.bounds
        self.rejected = 0
        self.curved = curve is not None
        self.events = Events()  # joins, leaves and redirects: logged (repeats summarised), kept for the metrics line
        self.retired: OrderedDict[bytes, str] = OrderedDict()  # identity -> why it was retired (bounded)
        self.rate, self.probation = HandshakeRate(), Probation()  # when a peer may hand-shake (rejoins.py)

    def close(self) -> None:
        self.warnings.flush(everything=True)
        self.events.flush(everything=True)
        for entry in list(self.registry.by_identity.values()):
            self._send(entry.identity, m.Goodbye("learner shutting down"))
        self.sock.close(linger=1000)  # let the goodbyes leave before the connection drops

    def join_command(self, num_envs: int) -> str:
        """The command that joins an actor with num_envs envs here, for the lines that wait for actors."""
        return join_command(self.endpoint, num_envs, self.curved)

    def poll(self, timeout_ms: int) -> list[Incoming]:
        """Everything that has arrived (waiting up to timeout_ms for the first message).

        A poll, then a receive per message while a poll(0) says another is queued: ending on a poll, not on a
        receive that raises zmq.Again, saves 2 us per wake-up when messages come one by one (real actors). A
        receive blocking under RCVTIMEO instead of the first poll measured no cheaper
        (benchmarks/learner_cpu_real_actors.py, 2026-11-23)."""
        out = []
        if not self._poller.poll(timeout_ms):  # kept: Socket.poll() would build a Poller per call
            return out
        for _ in range(MAX_BATCH_MESSAGES):
            frames = self._recv()
            if frames is None:
                break
            item = self._admit(frames)
            if item is not None:
                out.append(item)
            if not self._poller.poll(0):
                break
        return out

    def _recv(self) -> list | None:
        """One queued message as zmq.Frames (zero-copy), or None when none is left.

        Not recv_multipart(): pyzmq's getsockopt (RCVMORE, EVENTS) looks the option up as a Python enum
        on every call, several microseconds per message; Frame.more is a plain C read."""
        try:
            frame = self.sock.recv(_NOBLOCK, copy=False)
        except zmq.Again:
            return None
        frames = [frame]
        while frame.more:  # the rest of a multipart message is already queued: no NOBLOCK needed
            frame = self.sock.recv(copy=False)
            frames.append(frame)
        return frames

    def _admit(self, frames) -> Incoming | None:
        identity = bytes(frames[0])
        if self.registry.is_banned(identity):
            self.rejected += 1  # counted, not logged: the ban was logged once
            return None
        entry = self.registry.get(identity)
        try:
            msg = m.decode(frames[1:], expect=entry.expect if entry else None, max_bytes=self.max_bytes)
        except ProtocolError as exc:
            self._reject(identity, entry, str(exc))
            if exc.message_type == "handshake" and not self.registry.is_banned(identity):
                self._send_frames(identity, refusal(exc))  # a refused actor is told why, not left waiting
            return None
        except Exception as exc:  # a decoder bug must cost one message, never the learner
            return self._reject(identity, entry, f"undecodable message ({type(exc).__name__}: {exc})")
        # by protocol/messages.py's table; checked here, so a duplicate in one batch is refused too
        why = m.refusal_of(msg, m.LEARNER, m.UNREGISTERED) if entry is None else entry.turns.out_of_turn(msg)
        if why is not None:
            if entry is None:
                return self._unknown(identity, msg)
            return self._reject(identity, entry, f"out of turn: {why}")
        if type(msg) in GATEWAY_TYPES:
            return getattr(self, m.ROUTES[type(msg)].handler)(identity, entry, msg, frames)
        entry.turns.accept(msg)
        self.registry.heard(entry)
        return Incoming(entry, msg)  # the collector's (Collector.dispatch)

    def on_handshake(self, identity: bytes, entry: ActorEntry | None, msg: m.Handshake, frames) -> None:
        if not self.rate.allow(identity):  # a flood of well-formed handshakes: struck, then banned
            self._reject(identity, entry, f"handshake refused: {self.rate.describe()}")
            return self._answer(identity, m.Error("too many handshakes: wait, then hand-shake again", rejoin=True))
        if entry is not None:
            self.retire(entry, "handshook again (restarted)", tell=False)
        return self._handshake(identity, msg, self._remote(frames[1]))

    def on_starting(self, identity: bytes, entry: ActorEntry, msg: m.Starting, frames) -> None:
        """A sign of life while the actor builds its envs: where it stands, for the log; nothing to collect."""
        entry.turns.accept(msg)
        self.registry.heard(entry)

    def refuse(self, entry: ActorEntry, reason: str) -> None:
        """A message the collector cannot take, refused as the gateway refuses one (logged, counted, its sender
        retired)."""
        self._reject(entry.identity, entry, reason)

    def _reject(self, identity: bytes, entry: ActorEntry | None, reason: str) -> None:
        """Count and log a rejected message. A registered sender is retired at once (its last step is
        unusable, and waiting for it would hold up the rollout): the cost is its own env slots. It may
        rejoin; a peer that keeps sending what is rejected is banned for BAN_S."""
        self.rejected += 1
        who = entry.name if entry else f"peer {identity.hex()[:10]}"
        self.warnings.warn(who, "messages rejected", reason, f"rejected message from {who}: {reason}")
        banned = self.registry.strike(identity)
        if banned:
            self.warnings.warn(who, "bans", "too many rejected messages",
                               f"banning {who} for {BAN_S:g}s: too many rejected messages")
        if entry is not None:
            self.retire(entry, "too many rejected messages" if banned else f"sent a rejected message ({reason})")
        return None

    def strike(self, entry: ActorEntry, reason: str) -> None:
        """An actor whose data was found unusable after it was accepted (a rollout's non-finite advantages or
        returns in its env slots, issue 60): struck as a rejected message's sender is (banned past the limit),
        and retired; it may rejoin."""
        banned = self.registry.strike(entry.identity)
        self.warnings.warn(entry.name, "batches refused", reason, f"striking {entry.name}: {reason}")
        if banned:
            self.warnings.warn(entry.name, "bans", "too many strikes", f"banning {entry.name} for {BAN_S:g}s: too "
                                                                      "many strikes")
        self.retire(entry, "too many strikes" if banned else reason)

    def _unknown(self, identity: bytes, msg) -> None:
        """A valid message from an identity not registered: most likely an actor retired while still
        alive (stopped, swapped out, cut off), which is told so and rejoins. Only step reports are
        answered, one reply per message at most and none once the peer is banned, so a flood from
        strangers cannot make the learner send more than it receives."""
        why = self.retired.get(identity)
        self._reject(identity, None, f"{type(msg).__name__} from an unregistered peer ({why or 'never joined'})")
        if isinstance(msg, (m.StepReport, m.Starting)):
            self._answer(identity, m.Error(f"{why or 'not registered here'}; hand-shake again to rejoin", rejoin=True))
        return None

    def _answer(self, identity: bytes, msg) -> None:
        if not self.registry.is_banned(identity):
            self._send(identity, msg)

    def _remote(self, frame) -> bool:
        """Whether a peer's message came over TCP from beyond loopback (cluster.codec auto compresses then)."""
        if not self.endpoint.startswith("tcp://"):
            return False
        try:
            peer = frame.get("Peer-Address")  # zmq.Frame metadata: the sender's IP address over TCP
            return not ipaddress.ip_address(peer.strip("[]")).is_loopback
        except (AttributeError, ValueError, zmq.ZMQError):
            return False  # not a received zmq.Frame (a test's bytes), or no address: raw frames, as before

    def _handshake(self, identity: bytes, hs: m.Handshake, remote: bool = False) -> None:
        problem, later = None, False
        if hs.env_id is not None and hs.env_id != self.settings.env_id:
            problem = f"env {hs.env_id!r} does not match the learner's {self.settings.env_id!r}"
        elif hs.obs_space is not None and hs.obs_space.to_dict() != self.obs_space.to_dict():
            problem = "observation space does not match the learner's"
        elif hs.action_space is not None and hs.action_space.to_dict() != self.action_space.to_dict():
            problem = "action space does not match the learner's"
        if problem is None:  # a claim no collector could admit is refused here, not sent on to be refused there
            try:
                self.registry.check_claim(hs.num_envs)
            except AdmissionRefused as exc:
                problem = str(exc)
        if problem is None and (deferred := self.probation.why_deferred(identity, hs.name)) is not None:
            problem, later = deferred, True  # no redirect either: held back from every collector's next rollouts
        if problem is None and self.redirect is not None and (target := self.redirect(hs.num_envs)) is not None:
            self._answer(identity, m.Redirect(target, "the fewest live env slots are there"))
            who = hs.name or identity.hex()[:10]
            self.events.add(who, "redirects", f"actor {who} ({hs.num_envs} envs) sent to {target}")
            return None
        codec = compression.pick(self.codec, hs.codecs, remote)
        if problem is None:
            expect = m.Expect(group_size=hs.num_envs // hs.groups, groups=hs.groups,
                              obs_shape=self.obs_space.shape, obs_dtype=self.obs_space.dtype,
                              action_shape=self.action_space.shape, max_bytes=self.max_bytes,
                              frames=None if codec == compression.NONE else compression.Receiver(codec, hs.groups),
                              max_abs_reward=self.bounds[0], max_abs_obs=self.bounds[1])
            try:
                entry = self.registry.join(identity, hs.name, hs.num_envs, hs.groups, expect)
            except AdmissionRefused as exc:  # full for now (rejoin: the actor retries later), or too greedy
                problem, later = str(exc), exc.retry
        if later:  # no strike: asking again later is what it was told to do
            who = hs.name or f"peer {identity.hex()[:10]}"
            self.warnings.warn(who, "handshakes deferred", problem, f"handshake from {who} deferred: {problem}")
            self._answer(identity, m.Error(problem, rejoin=True))
            return None
        if problem is not None:
            self._reject(identity, None, f"handshake refused: {problem}")
            self._answer(identity, m.Error(problem))
            return None
        entry.turns.owes = set(range(hs.groups))
        seeds = [slot_env_seed(self.run_seed, s, self.generation, n) for s, n in zip(entry.slots, entry.reuses)]
        self._send(identity, m.Welcome(entry.actor_id, entry.slots, seeds, self.settings.to_dict(),
                                       self.obs_space, self.action_space, self.run_id, codec))
        frames = "raw frames" if codec == compression.NONE else f"{codec} frames"
        self.events.add(entry.name, "joins", f"actor {entry.name} joined with {len(entry.slots)} envs "
                                             f"(slots {entry.slots}), {frames}")
        return None

    def send_actions(self, entry: ActorEntry, group: int, actions, version: int) -> bool:
        owes = entry.turns.owes
        if not owes:  # its silence counts from now: time the learner spent inferring is not the actor's
            self.registry.heard(entry)
        owes.add(group)
        return self._send_frames(entry.identity, m.encode_actions(group, actions, version), entry)

    def _send(self, identity: bytes, msg, entry: ActorEntry | None = None) -> bool:
        return self._send_frames(identity, m.encode(msg), entry)

    def _send_frames(self, identity: bytes, frames: list, entry: ActorEntry | None = None) -> bool:
        try:  # frame by frame with int flags: send_multipart would OR enum flags in Python per call
            self.sock.send(identity, _SNDMORE_NOBLOCK)
            for frame in frames[:-1]:
                self.sock.send(frame, _SNDMORE_NOBLOCK)
            self.sock.send(frames[-1], _NOBLOCK)
            return True
        except zmq.ZMQError as exc:  # unroutable (peer gone) or its queue is full
            if entry is not None:
                self.retire(entry, f"unreachable ({exc.strerror})", tell=False)
            return False

    def retire(self, entry: ActorEntry, reason: str, tell: bool = True) -> None:
        """Drop an actor and free its slots. With `tell`, it is told why and to hand-shake again (an actor
        that was only stopped, or fell out of step, rejoins as soon as it reads this)."""
        if self.registry.leave(entry.identity) is not None:
            self.retired[entry.identity] = f"actor {entry.name} was retired: {reason}"
            if len(self.retired) > MAX_REMEMBERED_RETIREMENTS:
                self.retired.popitem(last=False)
            self.departed.append(entry)
            self.events.add(entry.name, "leaves", f"actor {entry.name} left: {reason}")
            if tell:
                self._answer(entry.identity, m.Error(f"{self.retired[entry.identity]}; hand-shake again to rejoin",
                                                     rejoin=True))

    def take_departed(self) -> list[ActorEntry]:
        """The actors retired since the last call, for the collector to cut their columns."""
        departed, self.departed = self.departed, []
        return departed

    def check_liveness(self, timeout_s: float) -> None:
        self.warnings.flush()  # the summaries of repeated warnings that are due
        self.events.flush()
        for entry in self.registry.overdue(timeout_s):
            self.retire(entry, f"silent for more than {timeout_s:g}s")
            self.probation.retired_silent(entry.identity, entry.name, timeout_s)  # held back from its next rollouts

    def describe(self, limit: int = 8) -> str:
        """The connected actors and where each stands, in one line (the first `limit` named)."""
        entries = sorted(self.registry.by_identity.values(), key=lambda e: e.actor_id)
        if not entries:
            return "no actor connected"
        named = [f"{e.name} ({len(e.slots)} envs): {e.turns.state()}" for e in entries[:limit]]
        more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
        return f"{len(entries)} connected: " + "; ".join(named) + more

    def take_events(self) -> list[str]:
        """The joins, leaves and redirects since the last call (at most events.MAX_EVENTS, then a count of the rest)."""
        return self.events.take()
