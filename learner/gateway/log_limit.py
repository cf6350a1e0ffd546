"""Warnings that a flood cannot multiply: repeats of one kind from one peer are summarised, and the lines per window
are capped, so a peer that keeps sending garbage costs the log a few lines, not one line per message.

The first warning of a kind (the reason with its numbers blanked) from a peer is logged in full; the next ones
within `window_s` are counted and summarised in one line once the window has passed ("N messages rejected from
peer X in the last 10 s: the last reason"). At most `max_lines` lines are written per window whatever the number
of peers: what is held back beyond them is counted and told in one line at the window's end. The clock is injected
(tests drive it by hand)."""
from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

WINDOW_S = 10.0
MAX_LINES = 12  # per window, summaries included (and one more: what was held back)
MAX_KEYS = 4096  # (peer, kind) pairs remembered at once (oldest forgotten first)
_NUMBER = re.compile(r"\d+")


@dataclass
class _Repeats:
    since: float  # when this key's last line was written
    count: int = 0  # held back since
    reason: str = ""  # the newest held back


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, window_s: float = WINDOW_S, max_lines: int = MAX_LINES,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS, level: int = logging.WARNING,
                 noun: str = "warnings"):
        """`level`, `noun`: what its lines are (the gateway's joins and leaves: INFO "events")."""
        self.log, self.window_s, self.max_lines, self.clock, self.max_keys = logger, window_s, max_lines, clock, max_keys
        self.level, self.noun = level, noun
        self.repeats: OrderedDict[tuple, _Repeats] = OrderedDict()
        self.window_start, self.lines = clock(), 0
        self.held, self.held_peers = 0, set()  # warnings past max_lines in this window, and from whom
        self.next_flush = self.window_start + window_s

    def warn(self, who: str, what: str, reason: str, line: str) -> None:
        """A warning about `who`: `line` in full if it is the first of its kind in the window; otherwise counted
        and summarised later as "N {what} from {who} in the last W s: {reason}"."""
        now = self.clock()
        self._roll(now)
        key = (who, what, _NUMBER.sub("N", reason))
        repeats = self.repeats.get(key)
        if repeats is None:
            if self._write(now, who, line):
                self._remember(key, _Repeats(now))
            return
        repeats.count, repeats.reason = repeats.count + 1, reason
        if now - repeats.since >= self.window_s:
            self._summarise(now, key, repeats)

    def flush(self, everything: bool = False) -> None:
        """Write the summaries that are due (all of them with `everything`, e.g. at close). Cheap between windows:
        call it as often as convenient."""
        now = self.clock()
        if not everything and now < self.next_flush:
            return
        self.next_flush = now + self.window_s / 10
        if not everything:
            self._roll(now)  # a window that ended: its held-back count told, the summaries due go in the next
        for key, repeats in list(self.repeats.items()):
            if everything or now - repeats.since >= self.window_s:
                if repeats.count:
                    self._summarise(now, key, repeats)
                else:
                    del self.repeats[key]  # quiet for a window: the next one is shown in full again
        if everything:
            self._roll(now, everything)  # at the end: those over the window's lines are told as held back

    def _summarise(self, now: float, key: tuple, repeats: _Repeats) -> None:
        who, what, _ = key
        text = f"{repeats.count} {what} from {who} in the last {now - repeats.since:.0f} s: {repeats.reason}"
        self._write(now, who, text, repeats.count)
        repeats.since, repeats.count = now, 0

    def _write(self, now: float, who: str, text: str, times: int = 1) -> bool:
        """Log `text` unless this window's lines are used up (then count it as held back); whether it was logged."""
        if self.lines < self.max_lines:
            self.lines += 1
            self.log.log(self.level, "%s", text)
            return True
        self.held += times
        if len(self.held_peers) < self.max_keys:
            self.held_peers.add(who)
        return False

    def _roll(self, now: float, everything: bool = False) -> None:
        """At a window's end: say what was held back, and open the next window."""
        if not everything and now - self.window_start < self.window_s:
            return
        if self.held:
            peers = f"{len(self.held_peers)}{' or more' if len(self.held_peers) >= self.max_keys else ''}"
            self.log.log(self.level, "%d more %s from %s peers held back in the last %.0f s (at most %d lines per %g s)",
                         self.held, self.noun, peers, now - self.window_start, self.max_lines, self.window_s)
        self.window_start, self.lines, self.held, self.held_peers = now, 0, 0, set()

    def _remember(self, key: tuple, repeats: _Repeats) -> None:
        self.repeats[key] = repeats
        if len(self.repeats) > self.max_keys:
            self.repeats.popitem(last=False)
