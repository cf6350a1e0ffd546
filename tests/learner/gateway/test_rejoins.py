"""When a peer may hand-shake (issue 60, points 4 and 5): a bounded rate per identity, and a probation after a
retirement for silence that grows with repeats and is known by identity or name."""
from __future__ import annotations

from learner.gateway.rejoins import HANDSHAKE_BURST, MAX_TRACKED, PROBATION_MAX_S, HandshakeRate, Probation


def test_handshakes_come_in_a_burst_then_at_a_bounded_rate_per_identity():
    rate = HandshakeRate(burst=HANDSHAKE_BURST, every_s=2.0)
    assert [rate.allow(b"a", now=0.0) for _ in range(HANDSHAKE_BURST + 1)] == [True] * HANDSHAKE_BURST + [False]
    assert rate.allow(b"b", now=0.0), "the rate is each identity's own"
    assert not rate.allow(b"a", now=1.9)  # 0.95 of a handshake earned back: a refusal costs nothing more
    assert rate.allow(b"a", now=4.0) and rate.allow(b"a", now=4.1) and not rate.allow(b"a", now=4.2)
    assert [rate.allow(b"a", now=1000.0) for _ in range(HANDSHAKE_BURST + 1)][-2:] == [True, False], "refilled"


def test_an_actors_own_backoff_never_meets_the_rate():
    rate, t = HandshakeRate(), 0.0
    for wait in (0.5, 1, 2, 4, 8, 10, 10, 10, 10, 10):  # actor/runner.py: told 'full', it asks again so
        assert rate.allow(b"actor", now=t)
        t += wait


def test_the_table_stays_bounded():
    rate = HandshakeRate()
    for i in range(2 * MAX_TRACKED):
        rate.allow(i.to_bytes(4, "big"), now=0.0)
    assert len(rate.buckets) == MAX_TRACKED


def test_a_probation_grows_with_each_quick_repeat_and_starts_over_after_a_quiet_spell():
    probation = Probation(forget_s=60.0)
    assert probation.left(b"a", "ghost", now=0.0) == (0.0, 0)
    assert probation.retired_silent(b"a", "ghost", timeout_s=2.0, now=0.0) == 4.0
    assert probation.left(b"a", "ghost", now=1.0) == (3.0, 1)
    assert probation.left(b"other socket", "ghost", now=1.0) == (3.0, 1), "known by its name on a new socket"
    assert probation.left(b"a", "renamed", now=1.0) == (3.0, 1), "and by its identity under a new name"
    assert probation.left(b"b", "other", now=1.0) == (0.0, 0) and probation.left(b"a", "ghost", now=4.0)[0] == 0
    t, lengths = 0.0, [4.0]
    for _ in range(8):  # a client that falls silent each time it gets back in: the probation doubles
        t += lengths[-1] + 3.0
        lengths.append(probation.retired_silent(b"a", "ghost", timeout_s=2.0, now=t))
    assert lengths[1:5] == [8.0, 16.0, 32.0, 64.0] and lengths[-1] == PROBATION_MAX_S
    t += 4 * PROBATION_MAX_S - 1
    assert probation.retired_silent(b"a", "ghost", timeout_s=2.0, now=t) == PROBATION_MAX_S, "still a repeat"
    t += 4 * PROBATION_MAX_S + 1
    assert probation.retired_silent(b"a", "ghost", timeout_s=2.0, now=t) == 4.0, "forgotten after a quiet spell"
    assert probation.retired_silent(b"a", "ghost", timeout_s=2.0, now=t + 61.0) == 4.0, "an actor stopped now and then"


def test_an_unnamed_peer_is_known_by_its_identity_only():
    probation = Probation()
    probation.retired_silent(b"a", "", timeout_s=1.0, now=0.0)
    assert probation.left(b"b", "", now=0.5) == (0.0, 0) and probation.left(b"a", "", now=0.5)[0] > 0
