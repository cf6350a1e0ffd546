"""Rate-limited warnings: the first of a kind from a peer in full, repeats summarised once per window, and a cap
on the lines per window whatever the number of peers. A fake clock, no sleeps."""
import logging

import pytest

from learner.gateway.log_limit import RateLimitedLog


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def setup():
    logger = logging.getLogger("test-log-limit")
    logger.propagate = False
    lines = Lines()
    logger.addHandler(lines)
    clock = FakeClock()
    yield RateLimitedLog(logger, window_s=10, max_lines=5, clock=clock), clock, lines.lines
    logger.removeHandler(lines)


def reject(limited: RateLimitedLog, who: str, reason: str) -> None:
    limited.warn(who, "messages rejected", reason, f"rejected message from {who}: {reason}")


def test_the_first_in_full_then_one_summary_per_window(setup):
    limited, clock, lines = setup
    for i in range(1000):
        reject(limited, "peer a", f"protocol version {i + 2} does not match ours (1)")
        clock.now += 0.005  # 1000 in 5 s
    limited.flush()
    assert lines == ["rejected message from peer a: protocol version 2 does not match ours (1)"]
    clock.now = 110.0  # ten seconds after the first
    limited.flush()
    assert lines[1:] == ["999 messages rejected from peer a in the last 10 s: protocol version 1001 does not match "
                         "ours (1)"]
    clock.now += 10
    limited.flush()  # quiet for a window: nothing to say, and the next one is shown in full again
    reject(limited, "peer a", "protocol version 7 does not match ours (1)")
    assert len(lines) == 3 and lines[2].startswith("rejected message from peer a")


def test_kinds_and_peers_are_summarised_apart(setup):
    limited, clock, lines = setup
    for _ in range(3):
        reject(limited, "peer a", "header is not valid msgpack")
        reject(limited, "peer a", "unknown message type 'x'")
        reject(limited, "peer b", "header is not valid msgpack")
    assert len(lines) == 3
    clock.now += 10
    limited.flush()
    assert sorted(lines[3:]) == ["2 messages rejected from peer a in the last 10 s: header is not valid msgpack",
                                 "2 messages rejected from peer a in the last 10 s: unknown message type 'x'",
                                 "2 messages rejected from peer b in the last 10 s: header is not valid msgpack"]


def test_a_repeat_after_the_window_is_summarised_at_once(setup):
    limited, clock, lines = setup
    reject(limited, "peer a", "bad")
    reject(limited, "peer a", "bad")
    clock.now += 11
    reject(limited, "peer a", "bad")
    assert lines[1:] == ["2 messages rejected from peer a in the last 11 s: bad"]


def test_many_peers_are_capped_per_window_and_what_was_held_back_is_told(setup):
    limited, clock, lines = setup
    for p in range(5000):  # a fresh identity for every message (the peers counted up to max_keys)
        reject(limited, f"peer {p}", "bad")
    assert len(lines) == 5
    clock.now += 10
    limited.flush()
    assert lines[5] == "4995 more warnings from 4096 or more peers held back in the last 10 s (at most 5 lines per 10 s)"
    assert len(lines) <= 5 + 1 + 5  # and the summaries of the first five peers: none, they sent one each


def test_close_says_what_is_pending(setup):
    limited, clock, lines = setup
    for _ in range(4):
        reject(limited, "peer a", "bad")
    limited.flush(everything=True)
    assert lines == ["rejected message from peer a: bad", "3 messages rejected from peer a in the last 0 s: bad"]


def test_the_tables_stay_bounded(setup):
    logger = logging.getLogger("test-log-limit")
    clock = FakeClock()
    limited = RateLimitedLog(logger, window_s=10, max_lines=10_000, clock=clock, max_keys=100)
    for p in range(1000):
        reject(limited, f"peer {p}", "bad")
    assert len(limited.repeats) == 100
