"""An actor process: handshake, then step envs on the learner's actions until told goodbye.

Central inference: the actor only steps environments, so it never imports torch. Its envs may be split
into groups stepped in turn: while the learner infers one group's actions, another steps. With groups "auto"
the actor times its first seconds as one group, then rejoins with the count those timings call for
(actor/group_count.py).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from actor import EXIT_REFUSED
from actor.stop_signals import leave_quietly
from actor.env_groups import ActorEnvs, SpacesDiffer
from actor.group_count import RoundTrips
from protocol import compression
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.processes import parent_alive, pid_alive
from protocol.transport import connect_dealer, recv_frames

log = logging.getLogger("actor")
HEARTBEAT_S = 1.0  # while building its envs, an actor tells the learner it is alive this often
GOODBYE_GRACE_S = 1.0  # Ctrl-C: connected this long after the goodbye, for actions already on their way
BUSY_GIVE_UP_S = 600.0  # a learner that keeps saying it is full for this long: the actor gives up
ACTOR_PARTS = frozenset({m.ACTOR})  # what protocol/messages.py's table calls this side


class LearnerGone(Exception):
    """The learner closed the connection, said goodbye, or stayed silent past the timeout."""


class Refused(Exception):
    """The learner refused this actor (error reply); retrying would not help."""


class Busy(Exception):
    """The learner is full for now (its env slots or memory budget are taken): ask again later."""


class Retired(Exception):
    """The learner retired this actor (it was silent too long, e.g. stopped); it should hand-shake again."""


class Regroup(Exception):
    """Groups "auto": the first seconds' timings call for `groups` groups; the actor said goodbye to rejoin so."""

    def __init__(self, groups: int):
        super().__init__(f"regrouping into {groups} groups")
        self.groups = groups


class Redirected(Exception):
    """Learner rank 0 sent this actor to another rank of a multi-rank job: hand-shake there."""

    def __init__(self, address: str, reason: str):
        super().__init__(f"sent to {address}: {reason}")
        self.address = address



@dataclass(frozen=True)
class Deadlines:
    """How long an actor waits on its learner."""
    reconnect_s: float = 0.0  # keep trying to (re)join a learner this long; 0: exit when it goes away
    welcome_timeout_s: float = 30.0
    learner_timeout_s: float = 300.0  # no message from the learner this long while waiting for actions: it is gone


@dataclass(frozen=True)
class Wire:
    """How an actor's messages travel: their size limit, CURVE keys, and the codecs it offers."""
    max_message_mb: int = 64
    curve: object = None  # protocol.security.ClientKeys, or None
    codecs: list[str] = field(default_factory=compression.available)  # offered; the learner picks (or none)


@dataclass
class ActorOptions:
    learner: str
    num_envs: int = 1
    groups: int | str = 1  # or "auto": chosen from the first seconds' timings (actor/group_count.py)
    name: str = ""
    parent_pid: int = 0  # exit when this process (launch.py) is gone
    deadlines: Deadlines = field(default_factory=Deadlines)
    wire: Wire = field(default_factory=Wire)
    endpoints: str = ""  # a run's endpoints file: when set, every (re)join goes to the address written there


def learner_address(opts: ActorOptions) -> str:
    """Where to (re)join: opts.learner, or the address in opts.endpoints while the learner that wrote it lives
    (launch.py's own actors: a learner it restarted binds anew); LearnerGone while there is none."""
    if not opts.endpoints:
        return opts.learner
    try:
        info = json.loads(Path(opts.endpoints).read_text())
        address, pid = info["address"], int(info.get("pid", 0))
    except (OSError, ValueError, KeyError, TypeError):
        raise LearnerGone(f"no learner in {opts.endpoints} (restarting?)") from None
    if pid > 0 and not pid_alive(pid):
        raise LearnerGone(f"the learner in {opts.endpoints} (pid {pid}) is gone")
    return address



def _signal_name(exc: KeyboardInterrupt) -> str:
    return str(exc.args[0]) if exc.args else "Ctrl-C"  # see actor.stop_signals


def run_session(opts: ActorOptions, ctx: zmq.Context, joined: list, envs: ActorEnvs, address: str | None = None,
                groups: int = 1, probe: RoundTrips | None = None) -> str:
    """One connection to a learner (opts.learner, or the rank it redirected us to), from handshake to
    goodbye, with the envs in `groups` groups. Returns the goodbye reason. `envs` outlives the session.
    `probe` (groups "auto", one group): times the first seconds, then Regroup if they call for more."""
    sock = connect_dealer(ctx, address or opts.learner, opts.wire.max_message_mb << 20, curve=opts.wire.curve)
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    session = Session(sock, envs, opts, groups, probe)
    try:
        sock.send_multipart(m.encode(m.Handshake(opts.num_envs, opts.name, groups=groups, codecs=opts.wire.codecs)))
        welcome = _await_welcome(sock, session)
        joined.append(welcome.run_id)
        early = _prepare(sock, envs, welcome, opts, groups)
        if early is not None:  # the learner spoke while the envs were being built
            if (reason := session.dispatch(early, m.PREPARING)) is not None:
                return reason
        k = opts.num_envs // groups
        space = envs.groups[0].space
        expect = m.Expect(group_size=k, groups=groups, obs_shape=welcome.obs_space.shape,
                          obs_dtype=welcome.obs_space.dtype, action_shape=space.shape,
                          action_dtype="int64" if space.kind == "discrete" else "float32",
                          max_bytes=opts.wire.max_message_mb << 20)
        log.info("actor %s joined as id %d with slots %s (frames: %s)", opts.name, welcome.actor_id, welcome.slots,
                 welcome.codec)
        for g, group in enumerate(envs.groups):
            sock.send_multipart(m.encode(group.first_report(g), session.senders[g]))
        return _serve(sock, monitor, session, expect, opts)
    except KeyboardInterrupt as exc:
        if joined:  # the learner knows us: it logs a departure, not a peer lost
            _say_goodbye(sock, f"interrupted ({_signal_name(exc)})")
        raise
    finally:
        sock.disable_monitor()
        monitor.close()
        sock.close()


class Session:
    """One connection's handlers of the learner's messages, which protocol/messages.py's table names (its
    rows taken by ACTOR): dispatch(msg, state) calls the row's handler, which returns what ends the wait (the
    Welcome, a goodbye's reason), None to go on, or raises (refused, retired, full, redirected). A message the
    table does not give an actor in `state` is dropped, never acted on, but not silently: logged by name (the
    first of each type and state in full) and counted in `unexpected`."""

    def __init__(self, sock, envs: ActorEnvs, opts: ActorOptions, groups: int, probe: RoundTrips | None = None):
        self.sock, self.envs, self.opts, self.groups, self.probe = sock, envs, opts, groups, probe
        self.senders: list = []  # per group: its frames' compressor (None: raw), as the Welcome agreed
        self.unexpected = 0
        self._told: set[tuple[type, str]] = set()

    def dispatch(self, msg, state: str):
        if (why := m.refusal_of(msg, ACTOR_PARTS, state)) is not None:
            self.unexpected += 1
            if (type(msg), state) not in self._told:
                self._told.add((type(msg), state))
                log.warning("actor %s: ignoring a message from the learner: %s", self.opts.name, why)
            return None
        return getattr(self, m.ROUTES[type(msg)].handler)(msg, state)

    def on_welcome(self, msg: m.Welcome, state: str) -> m.Welcome:
        if len(msg.slots) != self.opts.num_envs:
            raise ProtocolError(f"welcome assigns {len(msg.slots)} slots for {self.opts.num_envs} envs")
        if msg.codec != compression.NONE and msg.codec not in self.opts.wire.codecs:
            raise Refused(f"the learner picked frame codec {msg.codec!r:.20}, which this actor did not offer "
                          f"({self.opts.wire.codecs})")
        self.senders = [None if msg.codec == compression.NONE else compression.Sender(msg.codec)
                        for _ in range(self.groups)]
        return msg

    def on_redirect(self, msg: m.Redirect, state: str):
        raise Redirected(msg.address, msg.reason)

    def on_error(self, msg: m.Error, state: str):
        """rejoin: before a welcome, the learner is full for now (ask again later); after it, this actor was
        retired (hand-shake again). Else a refusal that retrying would not change."""
        if not msg.rejoin:
            raise Refused(msg.reason)
        raise Busy(msg.reason) if state == m.JOINING else Retired(msg.reason)

    def on_goodbye(self, msg: m.Goodbye, state: str) -> str:
        return msg.reason

    def on_actions(self, msg: m.Actions, state: str) -> None:
        """Step the group the actions are for (while the others' actions are on their way). With a probe
        (groups "auto", one group), time the round trip, and once it is done maybe Regroup."""
        since = self.probe.received() if self.probe is not None else 0.0
        if self.probe is not None and self.probe.ready():
            _regroup_if_called_for(self.sock, self.probe, self.opts.name)
            self.probe = None
        # copied sends: the group's obs buffer is rewritten by the next step, and zmq's zero-copy bookkeeping
        # costs more than copying a few hundred KB
        report = self.envs.groups[msg.group].step(msg.group, msg.actions)
        self.sock.send_multipart(m.encode(report, self.senders[msg.group]))
        if self.probe is not None:
            self.probe.sent(since)


def _prepare(sock, envs: ActorEnvs, welcome: m.Welcome, opts: ActorOptions, groups: int):
    """Have the envs the welcome describes: the ones kept from the last session if the settings are the
    same, else built in a worker thread while this one sends a Starting message every HEARTBEAT_S (so the
    learner never takes start-up time for silence). Returns the first message the learner sent meanwhile
    (a Goodbye, or an Error), or None."""
    key = (json.dumps(welcome.env, sort_keys=True), opts.num_envs)
    if envs.reusable(key, groups):
        log.info("actor %s: keeping its %d envs from the last session", opts.name, opts.num_envs)
        return None
    failure: list[BaseException] = []

    def build():
        try:
            envs.build(key, welcome, groups)
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)

    worker = threading.Thread(target=build, name="build-envs", daemon=True)
    worker.start()
    early = None
    while worker.is_alive():
        worker.join(HEARTBEAT_S)
        if not worker.is_alive():
            break
        if not parent_alive(opts.parent_pid):
            raise LearnerGone("launcher gone while building the envs")
        if early is None and (frames := recv_frames(sock, 0)) is not None:
            early = m.decode(frames)  # answered once the envs are built; no more heartbeats to a learner that spoke
        if early is None:
            sock.send_multipart(m.encode(m.Starting(envs.built, opts.num_envs)))
    if failure:
        if isinstance(failure[0], SpacesDiffer):
            sock.send_multipart(m.encode(m.Error(f"my env's spaces differ from the learner's: {failure[0]}")))
            raise Refused(str(failure[0])) from failure[0]
        raise failure[0]
    return early


def _say_goodbye(sock, reason: str) -> None:
    """Send a goodbye, then stay connected for up to GOODBYE_GRACE_S, dropping what arrives: actions the
    learner sent before it read the goodbye must find us there, or it logs a peer lost ('unreachable')."""
    try:
        sock.send_multipart(m.encode(m.Goodbye(reason)), flags=zmq.NOBLOCK)
    except zmq.ZMQError:
        return  # its queue is full or the learner is gone: nobody to tell
    deadline = time.monotonic() + GOODBYE_GRACE_S
    while (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000) + 1):
            sock.recv_multipart()


def _serve(sock, monitor, session: Session, expect: m.Expect, opts: ActorOptions) -> str:
    """Step on every Actions message until goodbye. Every report owed has been sent whenever this
    waits, so a learner silent past learner_timeout_s is stalled or gone, never merely waiting on us."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(monitor, zmq.POLLIN)
    last_heard = time.monotonic()
    while True:
        events = dict(poller.poll(1000))
        if not parent_alive(opts.parent_pid):
            return "launcher gone"
        if sock not in events:  # messages first: a goodbye and the disconnect can arrive together
            if monitor in events:
                raise LearnerGone("connection to the learner lost")
            if time.monotonic() - last_heard > opts.deadlines.learner_timeout_s:
                raise LearnerGone(f"no message from the learner for {opts.deadlines.learner_timeout_s:g}s")
            continue
        last_heard = time.monotonic()
        msg = m.decode(sock.recv_multipart(copy=False), expect=expect, max_bytes=expect.max_bytes)
        if (reason := session.dispatch(msg, m.SERVING)) is not None:
            return reason


def _regroup_if_called_for(sock, probe: RoundTrips, name: str) -> None:
    """Groups "auto", the probe done: say so, and with another count than one say goodbye (the learner cuts
    this actor's columns where they stand; nothing is in flight, as the actions just received are not stepped)
    and raise Regroup."""
    step_s, round_trip_s = probe.medians()
    groups = probe.choice()
    log.info("actor %s: env step %.2f ms for %d envs, round trip %.2f ms (medians of %d): %d group%s",
             name, 1e3 * step_s, probe.num_envs, 1e3 * round_trip_s, len(probe.round_trips), groups,
             "" if groups == 1 else "s, rejoining")
    if groups != 1:
        sock.send_multipart(m.encode(m.Goodbye(f"regrouping into {groups} groups (groups auto)")))
        raise Regroup(groups)


def _await_welcome(sock, session: Session) -> m.Welcome:
    opts = session.opts
    deadline = time.monotonic() + opts.deadlines.welcome_timeout_s
    while time.monotonic() < deadline:
        if not parent_alive(opts.parent_pid):
            raise LearnerGone("launcher gone before the learner answered")
        frames = recv_frames(sock, 500)
        if frames is not None and (welcome := session.dispatch(m.decode(frames), m.JOINING)) is not None:
            return welcome
    raise LearnerGone(f"no answer from {sock.getsockopt_string(zmq.LAST_ENDPOINT) or opts.learner} within "
                      f"{opts.deadlines.welcome_timeout_s:g}s")


def _ask_again_later(opts: ActorOptions, exc: Busy, busy_since: float, backoff: float) -> bool:
    """The learner is full: wait `backoff` and say so (True), or give up past BUSY_GIVE_UP_S (False)."""
    if time.monotonic() - busy_since > BUSY_GIVE_UP_S or not parent_alive(opts.parent_pid):
        log.error("actor %s: the learner stayed full for %gs (%s); exiting", opts.name, BUSY_GIVE_UP_S, exc)
        return False
    log.warning("actor %s: the learner is full (%s); asking again in %.1fs", opts.name, exc, backoff)
    time.sleep(backoff)  # backoff between attempts, not synchronization
    return True


def run_actor(opts: ActorOptions, on_refused=None) -> int:
    """Join, and rejoin with backoff while reconnect_s allows; rejoin at once when retired.

    An actor that never heard from a learner gives up after one welcome_timeout_s (nothing is there to
    rejoin); reconnect_s is for a learner that answered once and went away.

    Exit code: 0 on goodbye or Ctrl-C, EXIT_REFUSED when refused (after on_refused(reason), if given), 1 when
    the learner is gone or never answered."""
    ctx = zmq.Context()
    envs = ActorEnvs()  # built once, kept across rejoins
    backoff, gone_since, address, answered, busy_since = 0.5, None, None, False, None
    auto = opts.groups == "auto"
    groups = 1 if auto else opts.groups
    log.info("actor %s: connecting to %s (giving up if no learner answers within %gs)", opts.name, opts.learner,
             opts.deadlines.welcome_timeout_s)
    try:
        while True:
            joined = []
            try:
                probe = RoundTrips(opts.num_envs) if auto else None
                reason = run_session(opts, ctx, joined, envs, address or learner_address(opts), groups, probe)
                log.info("actor %s: learner said goodbye (%s)", opts.name, reason)
                return 0
            except Refused as exc:
                log.error("actor %s refused: %s", opts.name, exc)
                if on_refused is not None:
                    on_refused(str(exc))
                return EXIT_REFUSED
            except Retired as exc:  # the learner is there and wants us back: no reconnect budget spent
                log.warning("actor %s told by the learner: %s; rejoining", opts.name, exc)
                backoff, gone_since, busy_since = 0.5, None, None
                continue
            except Busy as exc:
                busy_since, answered = busy_since or time.monotonic(), True
                if not _ask_again_later(opts, exc, busy_since, backoff):
                    return EXIT_REFUSED
                backoff = min(backoff * 2, 10.0)
                continue
            except Regroup as exc:  # once: the same learner at once, the envs as they are (their games go on)
                groups, auto = exc.groups, False
                envs.regroup(groups)
                continue
            except Redirected as exc:  # once: if that rank goes away, rank 0 decides again
                log.info("actor %s %s", opts.name, exc)
                address, answered = exc.address, True
                continue
            except (LearnerGone, ProtocolError) as exc:
                address = None  # back to the address the user named
                if joined:  # a session that worked restarts the reconnection clock
                    backoff, gone_since, answered = 0.5, None, True
                if not answered:
                    log.error("actor %s: %s: is a learner running there? (a local run's address is in "
                              "RUN_DIR/endpoints.json); exiting", opts.name, exc)
                    return 1
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > opts.deadlines.reconnect_s or not parent_alive(opts.parent_pid):
                    log.error("actor %s: %s; exiting", opts.name, exc)
                    return 1
                log.warning("actor %s: %s; reconnecting in %.1fs", opts.name, exc, backoff)
                time.sleep(backoff)  # backoff between reconnection attempts, not synchronization
                backoff = min(backoff * 2, 10.0)
    except KeyboardInterrupt as exc:
        log.info("actor %s: interrupted (%s); leaving", opts.name, _signal_name(exc))
        return 0
    finally:
        _leave(envs, ctx)


def _leave(envs, ctx) -> None:
    """Close the envs and the sockets deaf to the stop signals (actor.stop_signals): leaving anyway (a supervisor's
    SIGTERM after the learner died once arrived during ctx.term(), or as the goodbye did, and printed a traceback)."""
    leave_quietly()
    envs.close()
    ctx.term()
