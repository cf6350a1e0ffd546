"""The gateway's joins, leaves and redirects: each logged (repeats of one kind from one actor summarised, as
rejections are: log_limit.py) and kept for the next metrics line, at most MAX_EVENTS of them; the rest are counted
and told in one last entry ("N more events not listed"), so a peer that joins and leaves in a loop costs the log and
metrics.jsonl a bounded number of lines and bytes, however fast it loops (issue 60: 20,000 handshakes from one
peer were 40,046 log lines and one 904 KB metrics line)."""
from __future__ import annotations

import logging
import re

from learner.gateway.log_limit import RateLimitedLog

MAX_EVENTS = 64  # per metrics line (one update), and kept by one gateway between two takes
EVENT_LINES = 64  # log lines of events per log_limit window (10 s), summaries included
_MORE = re.compile(r"^(\d+) more events not listed")


def more_line(count: int) -> str:
    return f"{count} more events not listed (at most {MAX_EVENTS} per update)"


def cap_events(events: list[str], limit: int = MAX_EVENTS) -> list[str]:
    """At most `limit` events, then one entry counting the rest (those a "N more" entry counted included)."""
    kept, more = [], 0
    for event in events:
        counted = _MORE.match(event)
        if counted is not None:
            more += int(counted.group(1))
        elif len(kept) < limit:
            kept.append(event)
        else:
            more += 1
    return kept + [more_line(more)] if more else kept


class Events:
    """One gateway's events since the metrics line last took them (bounded), and their log lines (summarised)."""

    def __init__(self, log: RateLimitedLog | None = None):
        self.log = log if log is not None else RateLimitedLog(logging.getLogger("learner"), max_lines=EVENT_LINES,
                                                              level=logging.INFO, noun="events")
        self.kept: list[str] = []
        self.more = 0

    def add(self, who: str, what: str, text: str) -> None:
        """An event about actor `who`; `what` its kind in a summary's words ("joins", "leaves", "redirects")."""
        self.log.warn(who, what, text, text)
        if len(self.kept) < MAX_EVENTS:
            self.kept.append(text)
        else:
            self.more += 1

    def flush(self, everything: bool = False) -> None:
        self.log.flush(everything)

    def take(self) -> list[str]:
        """The events since the last call, at most MAX_EVENTS and one counting the rest (emptied: it stays bounded)."""
        events = self.kept + [more_line(self.more)] if self.more else self.kept
        self.kept, self.more = [], 0
        return events
