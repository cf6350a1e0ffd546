"""When launch.py restarts a learner that ended abnormally, and when it stops trying (issue 43).

torchrun restarts a failed job from its checkpoint at most --max-restarts times; launch.py does the same for its
learner (a crash, kill -9, a collector that hung or died, the watchdog): at most `limit` restarts within any
`limit_window_s` (an hour; systemd's StartLimitBurst over StartLimitIntervalSec), so that a night's sporadic
faults never use the limit up while a learner that keeps dying still ends the run; each restart after a back-off
that doubles with every restart of the last `window_s` (1 s, 2 s, 4 s ... at most `cap_s`).
A fault that repeats at once does not loop: a learner that refused to start (exit 2: a bad config, no usable
checkpoint) is never restarted, and `repeats` ends in a row before a single new update (a corrupt state, a
fault in start-up) stop the restarts. A full disk is waited out before a restart (DiskSpace), not counted.
Torch-free: the launcher reads it before any heavy import.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from learner.lifecycle.process import EXIT_NO_ACTORS, EXIT_REFUSED

log = logging.getLogger("launch")
SPACE_POLL_S = 2.0  # a full disk: how often the free space is looked at again before a restart



@dataclass(frozen=True)
class Verdict:
    restart: bool
    delay_s: float = 0.0
    why: str = ""  # why not, when restart is False


def cause(exitcode: int | None) -> str:
    """How a process ended, in words: 'exited with code 1', 'was killed by SIGKILL' (multiprocessing's -N)."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def span(seconds: float) -> str:
    """A window in words: 'an hour', '10 min', '90 s'."""
    if seconds == 3600:
        return "an hour"
    return f"{seconds / 60:g} min" if seconds % 60 == 0 else f"{seconds:g} s"


class RestartPolicy:
    def __init__(self, limit: int, clock=time.monotonic, first_s: float = 1.0, cap_s: float = 60.0,
                 window_s: float = 600.0, repeats: int = 2, limit_window_s: float = 3600.0):
        self.limit, self.clock, self.first_s, self.cap_s = limit, clock, first_s, cap_s
        self.window_s, self.repeats, self.limit_window_s = window_s, repeats, limit_window_s
        self.used = 0  # restarts so far
        self.streak = 0  # abnormal ends in a row without a new update (the first start's included)
        self.times: list[float] = []  # when each restart was decided

    def decide(self, exitcode: int | None, progressed: bool) -> Verdict:
        """After the learner ended with `exitcode` (not 0); `progressed`: it completed an update of its own."""
        self.streak = 0 if progressed else self.streak + 1
        if exitcode == EXIT_REFUSED:
            return Verdict(False, why="it refused to start (its log line says why): a restart would be refused again")
        if exitcode == EXIT_NO_ACTORS:
            return Verdict(False, why="it had no actor for cluster.no_actors_timeout_s (its log line says so): a "
                                      "restart would wait for them again")
        if self.streak >= self.repeats:
            return Verdict(False, why=f"it ended {self.streak} times in a row before completing an update: "
                                      "the fault repeats at once")
        now = self.clock()
        if self.in_limit_window(now) >= self.limit:
            return Verdict(False, why=f"restart limit reached ({self.limit} within {span(self.limit_window_s)}, "
                                      "--max-learner-restarts)")
        recent = sum(1 for t in self.times if now - t < self.window_s)
        self.used += 1
        self.times.append(now)
        return Verdict(True, delay_s=min(self.first_s * 2 ** recent, self.cap_s))

    def in_limit_window(self, now: float | None = None) -> int:
        """The restarts decided within the last limit_window_s (the one deciding now not counted yet)."""
        now = self.clock() if now is None else now
        return sum(1 for t in self.times if now - t < self.limit_window_s)


class ActorRestarts:
    """When launch.py restarts an actor process that died (issue 60): at most `limit` restarts of each actor slot
    within any `window_s` (an hour, as the learner's: a night's sporadic deaths never use it up, while a slot
    that keeps dying is given up), each after a back-off that doubles with the slot's restarts in the window
    (0.5 s, 1 s, 2 s ... at most cap_s)."""

    def __init__(self, limit: int, window_s: float = 3600.0, first_s: float = 0.5, cap_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.limit, self.window_s, self.first_s, self.cap_s, self.clock = limit, window_s, first_s, cap_s, clock
        self.times: dict[int, list[float]] = {}  # each slot's restarts (when), those of the last window_s only

    def in_window(self, slot: int) -> int:
        """The slot's restarts within the last window_s."""
        now = self.clock()
        self.times[slot] = [t for t in self.times.get(slot, []) if now - t < self.window_s]
        return len(self.times[slot])

    def delay(self, slot: int) -> float | None:
        """The back-off before the slot's next restart; None: its limit is reached (it is given up)."""
        n = self.in_window(slot)
        return None if n >= self.limit else min(self.first_s * 2 ** n, self.cap_s)

    def restarted(self, slot: int) -> int:
        """Count a restart of the slot now; returns its restarts within the window, this one included."""
        self.times.setdefault(slot, []).append(self.clock())
        return self.in_window(slot)


def last_update(path: Path, chunk: int = 65536) -> int:
    """The update of the last complete line of a metrics.jsonl (0: none), however long the lines: the file is
    read backwards a chunk at a time, only as far as that line's start (a 904 KB line once hid every update
    from a reader of the last 64 KB)."""
    try:
        with open(path, "rb") as f:
            pos = f.seek(0, os.SEEK_END)
            pieces: deque[bytes] = deque()  # the line being read backwards, its pieces in file order
            while pos > 0:
                step = min(chunk, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step)
                while (cut := data.rfind(b"\n")) >= 0:
                    if (update := _update_of(data[cut + 1:] + b"".join(pieces))) is not None:
                        return update
                    data, pieces = data[:cut], deque()
                pieces.appendleft(data)
            update = _update_of(b"".join(pieces))  # the file's first line
    except OSError:
        return 0
    return 0 if update is None else update


def _update_of(line: bytes) -> int | None:
    try:
        update = json.loads(line).get("update")
    except (ValueError, AttributeError):
        return None  # a half-written last line, or an empty one
    return update if isinstance(update, int) else None


class DiskSpace:
    """Whether the run directory's disk has room for the learner to go on: its newest checkpoint twice (the temp
    file beside the one kept), the per-update logs a resume rewrites, and 1 MiB."""

    def __init__(self, run_dir: Path, usage=shutil.disk_usage):
        self.run_dir, self.usage = Path(run_dir), usage

    def needed(self) -> int:
        ckpts = sorted((self.run_dir / "checkpoints").glob("ckpt_*.pt"))
        logs = [self.run_dir / name for name in ("metrics.jsonl", "episodes.jsonl")]
        return 2 * _size(ckpts[-1] if ckpts else None) + sum(_size(p) for p in logs) + (1 << 20)

    def shortfall(self) -> str | None:
        """None when there is room; else '<free> free, <needed> needed' (MB)."""
        free, need = self.usage(self.run_dir).free, self.needed()
        return None if free >= need else f"{free / 1e6:.1f} MB free, {need / 1e6:.1f} MB needed"


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


class LearnerRestarts:
    """Whether launch.py starts its learner again after it ended abnormally (RestartPolicy: bounded,
    with a back-off, no loop on a fault that repeats at once), and the waits before: the back-off, and a full disk
    (one line, then polled until there is room; a stop request ends either). Under torchrun or srun their own
    --max-restarts restarts the job instead (`enabled` False)."""

    def __init__(self, policy: RestartPolicy, run_dir: Path, stops: Callable[[], bool], enabled: bool = True,
                 disk: DiskSpace | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        """disk, sleep, clock: the run directory's DiskSpace, time.sleep and time.monotonic (tests pass their own)."""
        self.policy, self.stops, self.enabled = policy, stops, enabled
        self.metrics, self.disk = run_dir / "metrics.jsonl", disk or DiskSpace(run_dir)
        self.sleep, self.clock = sleep, clock
        self.baseline = last_update(self.metrics)  # the last update before the learner now running

    @property
    def used(self) -> int:
        return self.policy.used

    def started(self) -> None:
        """The learner is up, its resume done (the logs cut back to its checkpoint): its progress counts from here."""
        self.baseline = last_update(self.metrics)

    def decide(self, name: str, exitcode: int | None) -> Verdict | None:
        """One line either way, naming the cause; None: not restarted (stopping, or not ours to restart)."""
        if not self.enabled or self.stops():
            return None
        reached = last_update(self.metrics)
        verdict = self.policy.decide(exitcode, reached > self.baseline)
        self.baseline = reached  # a learner that dies before its resume is done has made no progress
        if not verdict.restart:
            # a refusal's own ERROR line (the learner's) already says what is wrong: one error line, not two
            level = logging.INFO if exitcode == EXIT_REFUSED else logging.ERROR
            log.log(level, "the learner (%s) %s after update %d; not restarting it: %s", name, cause(exitcode),
                    reached, verdict.why)
            return None
        log.warning("the learner (%s) %s after update %d: restart %d of %d within %s (%d in all), from its "
                    "newest checkpoint, in %gs", name, cause(exitcode), reached, self.policy.in_limit_window(),
                    self.policy.limit, span(self.policy.limit_window_s), self.policy.used, verdict.delay_s)
        return verdict

    def wait(self, verdict: Verdict) -> bool:
        """The back-off, then room on the disk. False when a stop request came meanwhile."""
        until = self.clock() + verdict.delay_s
        while self.clock() < until and not self.stops():
            self.sleep(0.1)  # a back-off, not synchronization: a Ctrl-C ends it within 0.1 s
        short = self.disk.shortfall()
        full = short is not None
        if full:
            log.warning("the disk of %s is full (%s): waiting for space before the restart", self.disk.run_dir, short)
        while short is not None and not self.stops():
            self.sleep(SPACE_POLL_S)  # polling the free space, not synchronization
            short = self.disk.shortfall()
        if full and short is None:
            log.info("the disk of %s has room again: restarting the learner", self.disk.run_dir)
        return not self.stops()
