"""When a peer may hand-shake (issue 60): at a bounded rate per identity, and not while on probation.

* `HandshakeRate`: a handshake is welcome HANDSHAKE_BURST times at once, then once per HANDSHAKE_EVERY_S (a token
  bucket per identity). The gateway refuses one past that as a rejected message: a strike, so a flood of
  well-formed handshakes is banned like a flood of malformed messages (20,000 of them from one identity were all
  welcomed, each a leave and a join). An actor asks again after 0.5 s, 1 s, 2 s ... when told to: never near it.
* `Probation`: a peer retired for silence may not rejoin for a while, twice its silence deadline at first and
  doubling with each repeat (at most PROBATION_MAX_S). A repeat is a retirement for silence within four times the
  last probation of the one before (at least PROBATION_FORGET_S): a client that falls silent each time it gets
  in keeps doubling its probation, an actor stopped or killed now and then starts from the first each time. It
  is known by its identity and by its name (an actor reconnects on a new socket, a new identity). A client that
  joins, sends its first report and falls silent each time held every rollout up for a whole
  cluster.actor_timeout_s; now its repeats cost its own slots.

Both tables are bounded (the oldest forgotten first); the clock is passed in (tests drive it by hand)."""
from __future__ import annotations

import time
from collections import OrderedDict

HANDSHAKE_BURST = 10  # handshakes one identity may send at once
HANDSHAKE_EVERY_S = 1.0  # then one more per this many seconds
PROBATION_MAX_S = 300.0  # the longest probation: well within an actor's 10 minutes of asking again
PROBATION_FORGET_S = 60.0  # at least this long without a retirement for silence: the next is no repeat
MAX_TRACKED = 4096  # identities (and names) each table remembers


def _put(table: OrderedDict, key, value, limit: int = MAX_TRACKED) -> None:
    table.pop(key, None)
    table[key] = value
    while len(table) > limit:
        table.popitem(last=False)


class HandshakeRate:
    def __init__(self, burst: int = HANDSHAKE_BURST, every_s: float = HANDSHAKE_EVERY_S):
        self.burst, self.every_s = burst, every_s
        self.buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()  # identity -> (tokens, when counted)

    def allow(self, identity: bytes, now: float | None = None) -> bool:
        """Whether `identity` may hand-shake now (counted when it may)."""
        now = time.monotonic() if now is None else now
        tokens, since = self.buckets.get(identity, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) / self.every_s)
        allowed = tokens >= 1.0
        _put(self.buckets, identity, (tokens - 1.0 if allowed else tokens, now))
        return allowed

    def describe(self) -> str:
        return f"more than {self.burst} handshakes at once, or one every {self.every_s:g} s after"


class Probation:
    def __init__(self, max_s: float = PROBATION_MAX_S, forget_s: float = PROBATION_FORGET_S):
        self.max_s, self.forget_s = max_s, forget_s
        self.held: OrderedDict[tuple, tuple[int, float, float]] = OrderedDict()  # key -> (repeats, since, until)

    @staticmethod
    def _keys(identity: bytes, name: str) -> list[tuple]:
        return [("identity", identity)] + ([("name", name)] if name else [])

    def retired_silent(self, identity: bytes, name: str, timeout_s: float, now: float | None = None) -> float:
        """Put a peer retired for silence on probation; returns its length (s)."""
        now = time.monotonic() if now is None else now
        keys = self._keys(identity, name)
        repeats = 1 + max((r for r, since, until in (self.held.get(k, (0, -1e18, 0.0)) for k in keys)
                           if now - since < max(self.forget_s, 4 * (until - since))), default=0)
        length = min(self.max_s, 2.0 * max(timeout_s, 0.5) * 2 ** (repeats - 1))
        for key in keys:
            _put(self.held, key, (repeats, now, now + length))
        return length

    def left(self, identity: bytes, name: str, now: float | None = None) -> tuple[float, int]:
        """(seconds of probation left, the peer's retirements for silence) for a handshake; (0, 0) when free."""
        now = time.monotonic() if now is None else now
        found = [self.held[k] for k in self._keys(identity, name) if k in self.held]
        waits = [(until - now, repeats) for repeats, _, until in found if until > now]
        return max(waits, default=(0.0, 0))

    def why_deferred(self, identity: bytes, name: str, now: float | None = None) -> str | None:
        """What a handshake on probation is answered (asked to come back later), or None: it may join."""
        wait, repeats = self.left(identity, name, now)
        if wait <= 0:
            return None
        return (f"on probation for {wait:.0f} s more (retired for silence {repeats} time{'s' if repeats > 1 else ''} "
                f"lately): ask again later")
