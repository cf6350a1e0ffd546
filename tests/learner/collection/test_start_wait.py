"""The wait before a rollout, shared by the in-process collector and the pool of collector processes."""
import logging

import pytest

from learner.collection.start_wait import StartWait
from learner.stalls import Stalled


class Slots:
    """Env slots that become ready one per pass of listening, up to `arriving`; each pass moves the clock on
    by `pass_s` (a poll's wait), no real time."""

    def __init__(self, arriving: int, pass_s: float = 0.0):
        self.ready, self.arriving, self.pass_s, self.passes = 0, arriving, pass_s, 0
        self.now = 1000.0

    def listen(self) -> None:
        self.passes += 1
        self.ready = min(self.arriving, self.ready + 1)
        self.now += self.pass_s

    def clock(self) -> float:
        return self.now


def wait_for(slots: Slots, actor_timeout_s: float = 60.0, startup_timeout_s: float = 0.0,
             no_actors_timeout_s: float = 0.0) -> StartWait:
    return StartWait(lambda: slots.ready, slots.listen, lambda need: f"{slots.ready} of {need} ready",
                     lambda n: f"join {n}", actor_timeout_s, startup_timeout_s, no_actors_timeout_s, clock=slots.clock)


def test_it_listens_until_the_slots_needed_are_ready():
    slots = Slots(arriving=8)
    assert wait_for(slots).until(3, should_stop=lambda: False, first=True)
    assert (slots.ready, slots.passes) == (3, 3)


def test_asked_to_stop_it_returns_false_without_listening_again():
    slots = Slots(arriving=0)
    assert not wait_for(slots).until(1, should_stop=lambda: slots.passes == 2, first=True)
    assert slots.passes == 2


def test_the_first_rollouts_wait_ends_the_run_past_the_startup_timeout_saying_where_it_stood():
    slots = Slots(arriving=1, pass_s=10.0)
    with pytest.raises(Stalled) as err:
        wait_for(slots, startup_timeout_s=35.0).until(4, should_stop=lambda: False, first=True)
    assert str(err.value) == "start-up did not complete within 35s (cluster.startup_timeout_s): 1 of 4 ready"
    assert slots.passes == 4  # 40 s > 35 s, not before


def test_a_later_rollouts_wait_ends_the_run_past_the_no_actors_timeout_saying_where_it_stood():
    """Issue 60, point 3: every actor gone after the first rollout waited for ever; past
    cluster.no_actors_timeout_s the run ends (NoActors: not restarted), naming the key."""
    from learner.collection.start_wait import NoActors
    slots = Slots(arriving=0, pass_s=10.0)
    with pytest.raises(NoActors) as err:
        wait_for(slots, startup_timeout_s=35.0, no_actors_timeout_s=300.0).until(1, lambda: False, first=False)
    assert str(err.value).startswith("no actor for 310s after the first rollout (cluster.no_actors_timeout_s = 300;")
    assert "0 of 1 ready" in str(err.value) and slots.passes == 31


def test_with_no_limit_a_later_rollouts_wait_has_no_deadline_and_says_what_it_waits_for(caplog):
    slots = Slots(arriving=1, pass_s=10.0)
    with caplog.at_level(logging.WARNING, logger="learner"):
        assert not wait_for(slots, actor_timeout_s=25.0, startup_timeout_s=35.0).until(
            4, should_stop=lambda: slots.passes == 20, first=False)
    lines = [r.getMessage() for r in caplog.records]
    # 200 s of waiting, a line each actor_timeout_s: at 30, 60, ..., 180 s
    assert lines == ["waiting for actors to start the next rollout: 1 of 4 ready; to add one: join 3"] * 6
