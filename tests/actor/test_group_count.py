"""actor/group_count.py: how many groups an actor's envs step in with groups "auto", from its timings."""
import pytest

from actor.group_count import PROBE_ROUND_TRIPS, PROBE_S, RoundTrips, busy_share, choose_groups


@pytest.mark.parametrize("num_envs,step_ms,round_trip_ms,groups", [
    (4, 3.3, 0.1, 1),    # a quick learner: one group keeps the core 97% busy
    (4, 3.3, 0.3, 2),    # ... 92%: halves
    (4, 3.3, 2.2, 2),    # the H200's env rate against a 2 ms inference: 1 group 60%, 2 75% (2 R), 4 no more
    (8, 6.6, 2.2, 2),    # 8 such envs: halves keep the core busy (6.6 >= 2 x 2.2 and >= 3.3 + 2.2)
    (32, 26.6, 2.2, 2),  # 32: halves are enough
    (16, 16.0, 3.0, 2),  # 16 / max(8 + 3, 6) >= 1
    (8, 8.0, 1.0, 2),    # never more than halves: once n s >= 2 R they keep the core busy, before no count can
    (6, 6.0, 30.0, 1),   # stepping all envs is shorter than a round trip: split, each waits two of them
    (7, 7.0, 3.0, 7),    # a prime: 1 (70%) or 7 (100%)
    (1, 1.0, 5.0, 1),    # one env: one group
])
def test_the_fewest_groups_that_keep_the_core_busy_are_chosen(num_envs, step_ms, round_trip_ms, groups):
    assert choose_groups(num_envs, step_ms / 1e3, round_trip_ms / 1e3) == groups


def test_the_busy_share_is_the_cores_work_over_a_groups_cycle_of_at_least_two_round_trips():
    assert busy_share(4, 1, 3.0, 1.0) == pytest.approx(0.75)     # 3 of every 3 + 1
    assert busy_share(4, 2, 3.0, 1.0) == pytest.approx(1.0)      # 2 x 1.5 >= 1.5 + 1
    assert busy_share(4, 2, 3.0, 3.0) == pytest.approx(3 / 6)    # a cycle of 1.5 + 3, but at least 2 x 3
    assert busy_share(4, 4, 3.0, 3.0) == pytest.approx(3 / 6)    # quarters do no better


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_round_trips_are_timed_from_a_report_sent_to_the_next_actions_after_the_first():
    """The first actions (after the first report, while the learner waits for its first rollout) are not a round
    trip; steps and round trips are their medians (an update's pause is one sample); the choice waits for
    enough of both, over long enough."""
    clock = Clock()
    probe = RoundTrips(4, clock)
    clock.now = 10.0  # the learner started its first rollout 10 s after the first report
    for i in range(PROBE_ROUND_TRIPS + 1):
        since = probe.received()
        clock.now += 0.0033  # the step of 4 envs and the report's send
        probe.sent(since)
        assert not probe.ready()
        clock.now += 0.0022 if i != 5 else 0.5  # the round trip; once an update's pause
    probe.received()
    assert len(probe.round_trips) == PROBE_ROUND_TRIPS + 1 and 10.0 not in probe.round_trips
    assert probe.medians() == pytest.approx((0.0033, 0.0022))
    assert not probe.ready()  # enough round trips, not yet PROBE_S
    clock.now = 10.0 + PROBE_S
    assert probe.ready() and probe.choice() == 2
