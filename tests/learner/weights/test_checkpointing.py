"""When a checkpoint is due: by updates, and by time since the last one, whatever an update's length."""
from learner.weights.checkpointing import SaveSchedule


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_checkpoint_is_due_every_n_updates():
    schedule = SaveSchedule(every_updates=5, every_s=0, clock=FakeClock())
    assert [u for u in range(1, 16) if schedule.due(u)] == [5, 10, 15]


def test_a_checkpoint_is_due_once_the_time_has_passed_since_the_last_one():
    clock = FakeClock()
    schedule = SaveSchedule(every_updates=50, every_s=600, clock=clock)
    clock.now += 599
    assert not schedule.due(1)
    clock.now += 1
    assert schedule.due(2)  # slow updates: ten minutes passed long before update 50
    schedule.saved()
    clock.now += 300
    assert not schedule.due(3)
    clock.now += 300
    assert schedule.due(4)


def test_a_save_by_update_restarts_the_time():
    clock = FakeClock()
    schedule = SaveSchedule(every_updates=10, every_s=600, clock=clock)
    clock.now += 500
    assert schedule.due(10)
    schedule.saved()
    clock.now += 500
    assert not schedule.due(11)


def test_no_time_limit_when_off():
    clock = FakeClock()
    schedule = SaveSchedule(every_updates=50, every_s=0, clock=clock)
    clock.now += 1e9
    assert not schedule.due(1)
