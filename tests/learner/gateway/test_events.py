"""The gateway's joins, leaves and redirects (issue 60, point 4): repeats from one actor summarised in the log,
a bounded number on each metrics line with the rest counted."""
from __future__ import annotations

import logging

from learner.gateway.events import MAX_EVENTS, Events, cap_events
from learner.gateway.log_limit import RateLimitedLog


def test_joins_and_leaves_of_one_peer_are_summarised_and_a_metrics_line_holds_a_bounded_number():
    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    clock, lines = Clock(), []

    class Sink:
        def log(self, level, fmt, *args):
            lines.append(fmt % args)

    events = Events(RateLimitedLog(Sink(), clock=clock, level=logging.INFO, noun="events"))
    for i in range(3 * MAX_EVENTS):
        events.add("flood", "joins", f"actor flood joined with 1 envs (slots [{i}]), raw frames")
        events.add("flood", "leaves", "actor flood left: handshook again (restarted)")
    clock.now = 11.0
    events.flush()
    assert lines == ["actor flood joined with 1 envs (slots [0]), raw frames",
                     "actor flood left: handshook again (restarted)",
                     f"{3 * MAX_EVENTS - 1} joins from flood in the last 11 s: actor flood joined with 1 envs "
                     f"(slots [{3 * MAX_EVENTS - 1}]), raw frames",
                     f"{3 * MAX_EVENTS - 1} leaves from flood in the last 11 s: actor flood left: handshook again "
                     f"(restarted)"]
    taken = events.take()
    assert len(taken) == MAX_EVENTS + 1 and taken[-1].startswith(f"{5 * MAX_EVENTS} more events not listed")
    assert events.take() == []
    pooled = cap_events(taken + taken)  # two collectors' events on one metrics line
    assert len(pooled) == MAX_EVENTS + 1 and pooled[-1].startswith(f"{11 * MAX_EVENTS} more events not listed")
