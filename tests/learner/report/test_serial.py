"""learner/report/serial.py: the training loop's serial time by phase, on an injected clock."""
from __future__ import annotations

from learner.report.serial import SerialPhases


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_period_splits_into_its_marked_phases_and_the_rest():
    clock = Clock()
    serial = SerialPhases(clock)
    serial.close()  # before the first rollout: nothing to close
    assert serial.last is None
    serial.begin()
    clock.now = 0.5
    serial.mark("batch")
    clock.now = 2.0
    serial.mark("update")
    clock.now = 2.25
    serial.mark("batch")  # a phase met twice adds up
    clock.now = 3.0
    serial.close()
    assert serial.last == {"batch": 0.75, "update": 1.5, "other": 0.75, "total": 3.0}


def test_marks_outside_a_period_count_nowhere():
    clock = Clock()
    serial = SerialPhases(clock)
    serial.begin()
    clock.now = 1.0
    serial.close()
    clock.now = 5.0
    serial.mark("report")  # the last update's line, after the last rollout
    serial.close()
    assert serial.last == {"other": 1.0, "total": 1.0}
