"""The console progress bar (learner/report/progress.py), as MetricsWriter opens it: on a terminal only, log lines
whole above it, never in learner.log."""
from __future__ import annotations

import io
import logging

from learner.config import Config, apply_overrides
from learner.report.metrics import MetricsWriter
from tests.learner.report.test_metrics import _record


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_off_when_not_a_terminal(tmp_path, monkeypatch):
    out = io.StringIO()  # not a terminal: a pipe, a file
    monkeypatch.setattr("sys.stdout", out)
    writer = MetricsWriter(tmp_path, apply_overrides(Config(), ["log.tensorboard=false"]))
    writer.write(_record(1))
    writer.close()
    assert writer.bar is None and out.getvalue() == ""  # no bar written to it


def test_progress_bar_on_a_terminal_never_tears_a_log_line_nor_reaches_the_log_file(tmp_path, monkeypatch):
    """The console handler setup_logging installs, a file handler beside it, and tqdm's bar on the same stdout:
    each log line comes out whole on a line of its own, the bar comes back below it, the file has no bar."""
    tty = FakeTTY()
    monkeypatch.setattr("sys.stdout", tty)
    console, logfile = logging.StreamHandler(tty), logging.FileHandler(tmp_path / "learner.log")
    root, logger = logging.getLogger(), logging.getLogger("learner")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    root.addHandler(console)
    root.addHandler(logfile)
    try:
        writer = MetricsWriter(tmp_path, apply_overrides(Config(), ["log.tensorboard=false", "run.total_steps=640"]))
        assert writer.bar is not None
        writer.write(_record(1))
        logger.info("an actor joined")
        writer.write(_record(2))
        writer.close()
        assert console in root.handlers and logfile in root.handlers  # the console handler is back after close
    finally:
        root.removeHandler(console)
        root.removeHandler(logfile)
        logfile.close()
        logger.setLevel(old_level)
    log_text = (tmp_path / "learner.log").read_text()
    assert "\r" not in log_text and "\x1b" not in log_text and "step/s" not in log_text
    assert log_text.count("\n") == 3 and "an actor joined" in log_text
    screen = tty.getvalue()
    assert "128/640" in screen and "update 2, return 2.00" in screen  # the bar: steps of total_steps, and more
    after_bar = screen[screen.index("/640"):]  # the log lines that came once the bar was up
    lines = [line.split("\r")[-1].strip() for line in after_bar.split("\n")]
    joined = [line for line in lines if "an actor joined" in line]
    assert len(joined) == 1 and joined[0] == "an actor joined", lines  # whole: no bar text before or after it
    assert any(line.startswith("update 2 | steps 128") for line in lines), lines
    last = screen.rsplit("\n", 1)[-1].split("\r")  # the bottom line, as overwritten segments
    assert screen.endswith("\r") and last[-2].strip() == "", repr(screen[-200:])  # the bar cleared on close


def test_the_bar_takes_no_multiprocessing_lock(tmp_path, monkeypatch):
    """Issue 43: tqdm's default lock holds a semaphore of the resource tracker's, left registered by a learner
    that ends with os._exit: the tracker then warned of a leaked semaphore on the terminal after a Ctrl-C."""
    import multiprocessing.synchronize
    from tqdm import tqdm
    from learner.report.progress import ProgressBar
    monkeypatch.delattr(tqdm, "_lock", raising=False)  # as in a fresh process: tqdm makes its lock at the first bar
    bar = ProgressBar(FakeTTY(), 100)
    bar.update(_record(1))
    lock = tqdm.get_lock()
    bar.close()
    assert not any(isinstance(part, multiprocessing.synchronize.SemLock) for part in getattr(lock, "locks", [lock]))
