"""launch.py's restarts of its learner (issue 43): bounded, with a back-off, and no loop on a fault that repeats."""
from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from launcher.restarts import DiskSpace, RestartPolicy, cause, last_update


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restarts_are_bounded_by_the_limit_and_the_last_says_why():
    policy = RestartPolicy(limit=3, clock=Clock())
    verdicts = [policy.decide(1, progressed=True) for _ in range(4)]
    assert [v.restart for v in verdicts] == [True, True, True, False]
    assert "restart limit reached (3" in verdicts[-1].why
    assert policy.used == 3


def test_no_restart_when_the_limit_is_0():
    verdict = RestartPolicy(limit=0, clock=Clock()).decide(-signal.SIGKILL, progressed=True)
    assert not verdict.restart and "limit" in verdict.why


def test_the_back_off_doubles_with_each_recent_restart_and_is_capped():
    clock = Clock()
    policy = RestartPolicy(limit=10, clock=clock, first_s=1.0, cap_s=5.0, window_s=600.0)
    delays = []
    for _ in range(5):
        delays.append(policy.decide(1, progressed=True).delay_s)
        clock.now += 10
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_the_back_off_falls_back_once_the_restarts_are_older_than_the_window():
    clock = Clock()
    policy = RestartPolicy(limit=10, clock=clock, first_s=1.0, window_s=600.0)
    assert policy.decide(1, progressed=True).delay_s == 1.0
    clock.now += 10
    assert policy.decide(1, progressed=True).delay_s == 2.0
    clock.now += 595
    assert policy.decide(1, progressed=True).delay_s == 2.0  # the first is out of the window, the second not
    clock.now += 601
    assert policy.decide(1, progressed=True).delay_s == 1.0


def test_a_learner_that_ends_twice_in_a_row_before_an_update_is_not_restarted_again():
    policy = RestartPolicy(limit=10, clock=Clock(), repeats=2)
    assert policy.decide(1, progressed=False).restart  # the first start died at once: one more try
    verdict = policy.decide(1, progressed=False)
    assert not verdict.restart and "2 times in a row before completing an update" in verdict.why
    assert policy.used == 1


def test_progress_between_two_ends_resets_the_repeat_count():
    policy = RestartPolicy(limit=10, clock=Clock(), repeats=2)
    assert policy.decide(1, progressed=False).restart
    assert policy.decide(1, progressed=True).restart
    assert policy.decide(1, progressed=False).restart


def test_a_learner_that_refused_to_start_is_never_restarted():
    verdict = RestartPolicy(limit=3, clock=Clock()).decide(2, progressed=True)
    assert not verdict.restart and "refused to start" in verdict.why


@pytest.mark.parametrize("code, words", [(1, "exited with code 1"), (-signal.SIGKILL, "was killed by SIGKILL"),
                                         (-signal.SIGABRT, "was killed by SIGABRT")])
def test_the_cause_names_the_exit_code_or_the_signal(code, words):
    assert cause(code) == words


def test_last_update_is_the_last_complete_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert last_update(path) == 0
    path.write_text(json.dumps({"update": 1}) + "\n" + json.dumps({"update": 2}) + "\n" + '{"upda')
    assert last_update(path) == 2


def test_last_update_reads_only_the_tail_of_a_long_log(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"update": u, "pad": "x" * 200}) + "\n" for u in range(1, 2001)))
    assert last_update(path) == 2000


def usage_with(free: int):
    return lambda path: shutil._ntuple_diskusage(1 << 40, (1 << 40) - free, free)


def test_the_disk_has_room_for_two_of_the_newest_checkpoint_and_the_logs(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "ckpt_00000002.pt").write_bytes(b"x" * 1000)
    (tmp_path / "checkpoints" / "ckpt_00000004.pt").write_bytes(b"x" * 3000)
    (tmp_path / "metrics.jsonl").write_bytes(b"x" * 500)
    need = 2 * 3000 + 500 + (1 << 20)
    assert DiskSpace(tmp_path, usage_with(need)).shortfall() is None
    short = DiskSpace(tmp_path, usage_with(need - 1)).shortfall()
    assert short is not None and "MB free" in short and "MB needed" in short


def test_an_empty_run_directory_needs_1_mib(tmp_path):
    assert DiskSpace(tmp_path, usage_with(1 << 20)).shortfall() is None
    assert DiskSpace(tmp_path, usage_with((1 << 20) - 1)).shortfall() is not None
    assert DiskSpace(tmp_path).shortfall() is None or os.statvfs(tmp_path).f_bavail == 0  # the real disk


class FillingDisk:
    """A DiskSpace whose disk is full for the first `full_polls` looks, then has room."""

    def __init__(self, full_polls: int, run_dir="/runs/x"):
        self.looks, self.full_polls, self.run_dir = 0, full_polls, run_dir

    def shortfall(self):
        self.looks += 1
        return "0.0 MB free, 1.0 MB needed" if self.looks <= self.full_polls else None


def restarts_with(disk, stops=lambda: False):
    from launcher.restarts import LearnerRestarts, Verdict
    clock, slept = Clock(), []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s
    restarts = LearnerRestarts(RestartPolicy(limit=3, clock=clock), __import__("pathlib").Path("/runs/x"), stops,
                               disk=disk, sleep=sleep, clock=clock)
    return restarts, Verdict(restart=True, delay_s=1.0), slept


def test_a_full_disk_is_waited_out_with_one_line_then_the_restart_goes_ahead(caplog):
    from launcher.restarts import SPACE_POLL_S
    disk = FillingDisk(full_polls=4)
    restarts, verdict, slept = restarts_with(disk)
    with caplog.at_level("INFO", logger="launch"):
        assert restarts.wait(verdict)
    backoff, polls = slept[:-4], slept[-4:]
    assert polls == [SPACE_POLL_S] * 4 and set(backoff) == {0.1} and 1.0 - 1e-9 <= sum(backoff) < 1.1 + 1e-9
    assert disk.looks == 4 + 1  # the first look, then one per poll until there is room
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["the disk of /runs/x is full (0.0 MB free, 1.0 MB needed): waiting for space before the restart",
                     "the disk of /runs/x has room again: restarting the learner"]


def test_a_stop_request_ends_the_wait_for_space_and_there_is_no_restart():
    disk = FillingDisk(full_polls=10**9)
    stop_after = iter(range(1000))
    restarts, verdict, slept = restarts_with(disk, stops=lambda: next(stop_after) >= 30)
    assert not restarts.wait(verdict)
    assert disk.looks < 30


def test_room_on_the_disk_means_no_wait_beyond_the_back_off(caplog):
    restarts, verdict, slept = restarts_with(FillingDisk(full_polls=0))
    with caplog.at_level("INFO", logger="launch"):
        assert restarts.wait(verdict)
    assert set(slept) == {0.1} and 1.0 - 1e-9 <= sum(slept) < 1.1 + 1e-9 and not caplog.records


def test_the_limit_counts_the_restarts_of_the_last_hour_so_a_nights_sporadic_faults_never_use_it_up():
    clock = Clock()
    policy = RestartPolicy(limit=3, clock=clock)
    for _ in range(10):  # one fault every 25 minutes for over four hours: each restarted
        assert policy.decide(1, progressed=True).restart
        clock.now += 1500
    assert policy.used == 10
    clock.now += 3600
    for _ in range(3):  # then three within minutes: the limit's three
        assert policy.decide(1, progressed=True).restart
        clock.now += 60
    verdict = policy.decide(1, progressed=True)
    assert not verdict.restart and "restart limit reached (3 within an hour" in verdict.why
    clock.now += 3600  # an hour later the limit has room again
    assert policy.decide(1, progressed=True).restart


def test_an_actor_slots_restarts_are_counted_per_hour_like_the_learners():
    """Issue 60, point 3: the actors' limit counted over the whole run, so sporadic deaths used it up; now
    --max-restarts is per slot within any hour, each restart after a back-off that doubles (0.5 s ... 30 s)."""
    from launcher.restarts import ActorRestarts
    clock = Clock()
    restarts = ActorRestarts(limit=3, clock=clock)
    delays = []
    while (delay := restarts.delay(0)) is not None:
        delays.append(delay)
        restarts.restarted(0)
        clock.now += 60.0
    assert delays == [0.5, 1.0, 2.0]  # then the limit: 3 within the hour
    assert restarts.delay(1) == 0.5, "each slot counts its own"
    clock.now += 3600.0 - 3 * 60.0 + 1.0  # the first restart is now over an hour old
    assert restarts.delay(0) == 2.0 and restarts.in_window(0) == 2


def test_a_learner_that_had_no_actor_for_the_limit_is_not_restarted():
    from learner.lifecycle.process import EXIT_NO_ACTORS
    verdict = RestartPolicy(limit=3, clock=Clock()).decide(EXIT_NO_ACTORS, progressed=True)
    assert not verdict.restart and "cluster.no_actors_timeout_s" in verdict.why


def test_last_update_finds_the_last_complete_line_whatever_its_length(tmp_path):
    """Issue 60, point 4: after a 904 KB metrics line (16,256 events) last_update(), which read the last 64 KB,
    returned 0, and launch.py took every restart for one before any update."""
    path = tmp_path / "metrics.jsonl"
    events = [f"actor flood joined with 1 envs (slots [{i}])" for i in range(20000)]
    path.write_text(json.dumps({"update": 7}) + "\n" + json.dumps({"update": 8, "events": events}) + "\n" + '{"upd')
    assert path.stat().st_size > 900_000
    assert last_update(path) == 8
    assert last_update(path, chunk=7) == 8  # lines and newlines cut anywhere by the chunks
    path.write_text(json.dumps({"update": 3, "events": events}))  # the file's only line, no newline yet
    assert last_update(path, chunk=4096) == 3
    path.write_text("\n\n")
    assert last_update(path) == 0
