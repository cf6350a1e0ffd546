"""Who is connected (learner/gateway/registry.py), without sockets: slots handed out and reused, what each actor
may send next, strikes and bans, and the silence clock that forgives only the learner's own pauses."""
from __future__ import annotations

import numpy as np

from learner.gateway.registry import BAN_S, MAX_STRIKES, ActorRegistry
from protocol import messages as m


def report(group: int, first: bool = False) -> m.StepReport:
    return m.StepReport(group, np.zeros((2, 3), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                        np.zeros(2, bool), first=first)


def test_only_silence_while_the_learner_listens_counts():
    registry = ActorRegistry()
    ghost = registry.join(b"ghost", "ghost", 2, 1, None)
    ghost.turns.owes = {0}  # its first report
    now = ghost.last_seen
    registry.deaf(100.0)  # an update of 100 s: nobody's silence
    assert registry.overdue(2.0, now + 101.0) == []
    assert registry.overdue(2.0, now + 103.0) == [ghost]  # 3 s of listening: its own silence


def test_slots_of_a_departed_actor_are_reused_lowest_first_and_counted():
    registry = ActorRegistry(max_envs=8)
    a, b = registry.join(b"a", "", 3, 1, None), registry.join(b"b", "bee", 2, 1, None)
    assert (a.slots, b.slots, a.name, b.name) == ([0, 1, 2], [3, 4], "actor-0", "bee")
    registry.leave(b"b")
    registry.leave(b"a")
    c = registry.join(b"c", "", 6, 1, None)
    assert c.slots == [0, 1, 2, 3, 4, 5] and c.reuses == [1, 1, 1, 1, 1, 0]  # a reused slot's seeds move on
    assert registry.num_slots() == 6 and b"a" not in registry and len(registry) == 1


def test_each_group_sends_one_first_report_then_one_outcome_per_actions():
    entry = ActorRegistry().join(b"a", "a", 4, 2, None)
    assert entry.group_slots(1) == [2, 3] and entry.turns.state() == "building its envs"
    assert entry.turns.out_of_turn(report(0)) == "a step report for group 0 before its first report"
    assert entry.turns.out_of_turn(m.Starting(built=1, total=4)) is None
    entry.turns.accept(m.Starting(built=1, total=4))
    assert entry.turns.state() == "building its envs (1/4 built)"
    for group in (0, 1):
        assert entry.turns.out_of_turn(report(group, first=True)) is None
        entry.turns.accept(report(group, first=True))
    assert entry.turns.state() == "ready"
    assert entry.turns.out_of_turn(report(0, first=True)) == "a second first report for group 0"
    assert entry.turns.out_of_turn(report(1)) == "a step report for group 1 that was not sent actions"
    entry.turns.owes.add(1)  # the gateway sent group 1 its actions
    assert entry.turns.out_of_turn(report(1)) is None
    entry.turns.accept(report(1))
    assert entry.turns.out_of_turn(report(1)) == "a step report for group 1 that was not sent actions"
    assert entry.turns.out_of_turn(m.Starting(built=4, total=4)) == "Starting while running (in turn while building)"
    assert entry.turns.out_of_turn(m.Goodbye("bye")) is None
    assert entry.turns.out_of_turn(m.Handshake(num_envs=1)) is None  # a restarted actor: the gateway welcomes it anew
    assert entry.turns.out_of_turn(m.Actions(0, np.zeros(2))) == "unexpected Actions: only the actor takes it"


def test_a_peer_is_banned_at_its_last_strike_until_the_ban_ends():
    registry = ActorRegistry()
    assert not any(registry.strike(b"x", now=0.0) for _ in range(MAX_STRIKES - 1))
    assert not registry.is_banned(b"x", now=0.0)
    assert registry.strike(b"x", now=10.0)
    assert registry.is_banned(b"x", now=10.0 + BAN_S - 1) and not registry.is_banned(b"y", now=10.0)
    assert not registry.is_banned(b"x", now=10.0 + BAN_S)
    assert not registry.strike(b"x", now=10.0 + BAN_S)  # its strikes start again from 0
