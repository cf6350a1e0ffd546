"""Synthetic actors for the capacity benchmark (imported as a sibling module, like procfs): the join over the
real protocol (following a Redirect to another collector or rank), and sleeping actors.

A sleeping actor's env step is a sleep of `step_ms` (no CPU): each group's report leaves `step_ms` after its
actions arrived, whatever the group's size (its envs step side by side, as in a vector env with threads), and
an actor's groups step side by side too. So N env slots give at most N x 1000 / step_ms agent steps/s (the env
ceiling), whatever the message size, and the learner's queueing and parking show even on 2 cores. Its frames
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


def sleeping_actors(address: str, count: int, num_envs: int, groups: int, step_ms: float | list[float], name: str,
                    parent: int) -> None:
    """`count` actors of `num_envs` envs in `groups` groups, each on its own socket, in this process: every
    Actions message is answered step_ms later (actor i: step_ms[i] if a list) with the group's next report,
    until goodbye."""
    import zmq
    from protocol import messages as m
    from protocol.processes import parent_alive
    ctx = zmq.Context()
    socks, reports = [], []
    for i in range(count):
        sock, welcome = join(ctx, address, num_envs, groups, f"{name}-{i}", parent)
        if sock is None:
            return
        encoded = [_random_reports(welcome, num_envs // groups, g, 7919 * g + i) for g in range(groups)]
        for first, _ in encoded:
            sock.send_multipart(first)
        socks.append(sock)
        reports.append([e[1] for e in encoded])
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    index = {sock: i for i, sock in enumerate(socks)}
    due: list = []  # (when, order, actor, group): reports to send
    step_s = [ms / 1000 for ms in (step_ms if isinstance(step_ms, list) else [step_ms] * count)]
    turn, order, checked = {}, itertools.count(), time.monotonic()
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, i, g = heapq.heappop(due)
            t = turn.get((i, g), 0)
            socks[i].send_multipart(reports[i][g][t % RECORDED_REPORTS], copy=False)
            turn[(i, g)] = t + 1
        timeout = 1000 if not due else max(0.0, (due[0][0] - time.monotonic()) * 1000)
        for sock, _ in poller.poll(timeout):
            while True:
                try:
                    msg = m.decode(sock.recv_multipart(zmq.NOBLOCK, copy=False))
                except zmq.Again:
                    break
                if not isinstance(msg, m.Actions):
                    return  # Goodbye or Error: the run is over
                i = index[sock]
                heapq.heappush(due, (time.monotonic() + step_s[i], next(order), i, msg.group))
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if not parent_alive(parent):
                return
