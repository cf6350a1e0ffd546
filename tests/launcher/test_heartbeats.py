"""launch.py kills a learner process whose heartbeat stopped (a SIGSTOP), and only that one."""
import logging
import time

from launcher.heartbeats import kill_silent


class Proc:
    def __init__(self, name: str, alive: bool = True):
        self.name, self.alive, self.killed = name, alive, False

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.killed, self.alive = True, False

    def join(self, timeout=None) -> None:
        pass


class Beat:
    def __init__(self, value: float):
        self.value = value


def test_only_a_live_learner_whose_beat_is_too_old_is_killed_with_one_line(caplog):
    now = time.monotonic()
    procs = [Proc("learner-0"), Proc("learner-1"), Proc("learner-2"), Proc("learner-3", alive=False)]
    beats = [Beat(now - 31.0), Beat(now - 1.0), Beat(0.0), Beat(now - 100.0)]  # silent, beating, not yet, gone
    with caplog.at_level(logging.ERROR, logger="launch"):
        kill_silent(procs, beats, silent_s=30.0)
    assert [p.killed for p in procs] == [True, False, False, False]
    assert len(caplog.records) == 1 and "learner-0" in caplog.records[0].getMessage()
    assert "gave no sign of life for 31s: stopped or frozen; killing it" in caplog.records[0].getMessage()
