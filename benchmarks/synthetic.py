"""Synthetic actors for the capacity benchmark (imported as a sibling module, like procfs): the join over the
real protocol (following a Redirect to another collector or rank), and sleeping actors.

A sleeping actor's env step is a sleep of `step_ms` (no CPU): each group's report leaves `step_ms` after its
actions arrived, whatever the group's size (its envs step side by side, as in a vector env with threads), and
an actor's groups step side by side too. So N env slots give at most N x 1000 / step_ms agent steps/s (the env
ceiling), whatever the message size, and the learner's queueing and parking show even on 2 cores. With
`one_core` an actor's groups share one core instead, as a real actor's do: a group of k envs sleeps
k x step_ms once the actor's step before it is done, so an actor gives at most 1000 / step_ms steps/s, and
only if its groups hide the round trip; its groups may then be "auto" (SleepingActor). Its frames
are random pixels of the Welcome's observation space (made once, RECORDED_REPORTS per group, cycled): no env
is built, so many actors fit in one process, each with its own DEALER socket. Stragglers: `step_ms` may be a
list, one per actor (see `spread_step_ms`).
"""
from __future__ import annotations

import heapq
import itertools
import time

RECORDED_REPORTS = 8  # distinct step reports each synthetic group cycles through


def join(ctx, address: str, num_envs: int, groups: int, name: str, parent: int, codec: str = "none"):
    """(socket, Welcome) from the learner at `address` or the one it redirects to; (None, None) if the
    benchmark went away first."""
    from protocol import messages as m
    from protocol.processes import parent_alive
    from protocol.transport import connect_dealer, recv_frames
    while True:
        sock = connect_dealer(ctx, address, 64 << 20)
        offer = None if codec == "none" else [codec]  # none: a handshake as before codecs
        sock.send_multipart(m.encode(m.Handshake(num_envs, name, groups=groups, codecs=offer)))
        answer = None
        while answer is None:
            frames = recv_frames(sock, 1000)
            if not parent_alive(parent):
                return None, None
            if frames is not None:
                answer = m.decode(frames)
        if isinstance(answer, m.Welcome):
            return sock, answer
        if not isinstance(answer, m.Redirect):
            raise SystemExit(f"{name}: no welcome: {answer}")
        sock.close(linger=0)
        address = answer.address


def _random_reports(welcome, k: int, group: int, seed: int) -> tuple[list, list[list[bytes]]]:
    """(the first report, RECORDED_REPORTS step reports) of a group of k envs, random frames."""
    import numpy as np
    from protocol import messages as m
    space = welcome.obs_space
    rng = np.random.default_rng(seed)
    shape, dtype = (k, *space.shape), np.dtype(space.dtype)
    frames = [(rng.integers(0, 256, shape) if dtype == np.uint8 else rng.standard_normal(shape)).astype(dtype)
              for _ in range(RECORDED_REPORTS)]
    zeros, flags = np.zeros(k, np.float32), np.zeros(k, bool)
    first = m.encode(m.StepReport(group, frames[0], zeros, flags, flags, first=True))
    return first, [[bytes(f) for f in m.encode(m.StepReport(group, obs, zeros, flags, flags))] for obs in frames]


def spread_step_ms(step_ms: float, spread: float, actors: int) -> list[float]:
    """Each actor's env step in ms, spread evenly from step_ms x (1 - spread) to step_ms x (1 + spread): actors of
    unequal speed (stragglers), whose mean step is step_ms."""
    if actors == 1 or spread == 0:
        return [step_ms] * actors
    return [step_ms * (1 - spread + 2 * spread * j / (actors - 1)) for j in range(actors)]


class SleepingActor:
    """One sleeping actor on its own socket (see the module doc). `one_core`: its groups share one core, as a
    real actor's do: a group of k envs sleeps k x step_s, after the actor's step before it. Groups "auto": it
    joins as one group, times its first seconds with the actor's own RoundTrips (actor/group_count.py) and
    rejoins with their choice, as a real actor does."""

    def __init__(self, ctx, address: str, num_envs: int, groups, step_s: float, one_core: bool, name: str,
                 parent: int, chosen=None):
        """`chosen`: a queue told (name, groups) once an "auto" actor has chosen."""
        from actor.group_count import RoundTrips
        self.ctx, self.address, self.num_envs, self.step_s, self.one_core = ctx, address, num_envs, step_s, one_core
        self.name, self.parent, self.chosen = name, parent, chosen
        self.groups = 1 if groups == "auto" else groups
        self.probe = RoundTrips(num_envs) if groups == "auto" else None
        self.sock, self.session, self.core_free, self.turn, self.since = None, 0, 0.0, {}, 0.0

    def join(self) -> bool:
        """(Re)join in self.groups groups and send each group's first report; False: the benchmark went away."""
        sock, welcome = join(self.ctx, self.address, self.num_envs, self.groups, self.name, self.parent)
        if sock is None:
            return False
        k = self.num_envs // self.groups
        encoded = [_random_reports(welcome, k, g, 7919 * g + hash(self.name) % 1000) for g in range(self.groups)]
        self.sock, self.session, self.turn = sock, self.session + 1, {}
        self.reports = [e[1] for e in encoded]
        for first, _ in encoded:
            sock.send_multipart(first)
        return True

    def actions(self, group: int) -> float | None:
        """Actions for `group` arrived: when its report is due (None: it regrouped, or the benchmark went away)."""
        if self.probe is not None:
            self.since = self.probe.received()
            if self.probe.ready():
                return self._regroup()
        now = time.monotonic()
        if not self.one_core:
            return now + self.step_s
        self.core_free = max(now, self.core_free) + self.step_s * self.num_envs / self.groups
        return self.core_free

    def send(self, group: int, session: int) -> None:
        if session != self.session:
            return  # a report of the session before a regroup
        t = self.turn.get(group, 0)
        self.sock.send_multipart(self.reports[group][t % RECORDED_REPORTS], copy=False)
        self.turn[group] = t + 1
        if self.probe is not None:
            self.probe.sent(self.since)

    def _regroup(self) -> float | None:
        from protocol import messages as m
        groups, self.probe = self.probe.choice(), None
        if self.chosen is not None:
            self.chosen.put((self.name, groups))
        if groups == 1:
            return self.actions(0)
        self.sock.send_multipart(m.encode(m.Goodbye(f"regrouping into {groups} groups (groups auto)")))
        self.sock.close()
        self.groups, self.core_free = groups, 0.0
        if not self.join():
            raise SystemExit(0)  # the benchmark went away
        return None


def sleeping_actors(address: str, count: int, num_envs: int, groups, step_ms: float | list[float], name: str,
                    parent: int, one_core: bool = False, chosen=None) -> None:
    """`count` actors of `num_envs` envs in `groups` groups (or "auto"), each on its own socket, in this
    process: every Actions message is answered once its group has slept (actor i: step_ms[i] if a list; see
    SleepingActor), until goodbye."""
    import zmq
    from protocol import messages as m
    from protocol.processes import parent_alive
    ctx = zmq.Context()
    steps = step_ms if isinstance(step_ms, list) else [step_ms] * count
    actors = [SleepingActor(ctx, address, num_envs, groups, ms / 1000, one_core, f"{name}-{i}", parent, chosen)
              for i, ms in enumerate(steps)]
    if not all(a.join() for a in actors):
        return
    poller = zmq.Poller()
    for a in actors:
        poller.register(a.sock, zmq.POLLIN)
    index = {a.sock: i for i, a in enumerate(actors)}
    due: list = []  # (when, order, actor, group, session): reports to send
    order, checked = itertools.count(), time.monotonic()
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, i, g, session = heapq.heappop(due)
            actors[i].send(g, session)
        timeout = 1000 if not due else max(0.0, (due[0][0] - time.monotonic()) * 1000)
        if 0 < timeout < 1:  # zmq polls whole milliseconds: a shorter wait would spin through them
            time.sleep(timeout / 1000)
            timeout = 0
        for sock, _ in poller.poll(timeout):
            i, a = index[sock], actors[index[sock]]
            while a.sock is sock:
                try:
                    msg = m.decode(sock.recv_multipart(zmq.NOBLOCK, copy=False))
                except zmq.Again:
                    break
                if not isinstance(msg, m.Actions):
                    return  # Goodbye or Error: the run is over
                session, when = a.session, a.actions(msg.group)
                if when is not None:
                    heapq.heappush(due, (when, next(order), i, msg.group, session))
            if a.sock is not sock:  # regrouped: a new socket
                poller.unregister(sock)
                poller.register(a.sock, zmq.POLLIN)
                index[a.sock] = i
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if not parent_alive(parent):
                return
