"""The live progress bar on a terminal: tqdm's, with the console log lines written above it by
tqdm.contrib.logging.logging_redirect_tqdm, so a log line is never torn by the bar. Never in learner.log."""
from __future__ import annotations

import contextlib
import logging
import threading

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


class ProgressBar:
    """Agent steps done out of run.total_steps, with the update and the mean return beside them.

    While it is open the root logger's console handlers are routed through tqdm.write (the file handlers
    are left as they are); close() puts them back."""

    def __init__(self, stream, total_steps: int):
        self.stream, self.total_steps = stream, total_steps
        self.bar: tqdm | None = None
        self.stack = contextlib.ExitStack()

    def update(self, record: dict) -> None:
        steps = int(record["env_steps"])
        if self.bar is None:  # opened at the first record: a resumed run's rate counts from there
            thread_lock_only()
            self.bar = self.stack.enter_context(tqdm(
                total=self.total_steps, initial=steps, file=self.stream, unit="step", unit_scale=True,
                dynamic_ncols=True, leave=False, mininterval=0))  # one refresh per update: they are seconds apart
            self.stack.enter_context(logging_redirect_tqdm(loggers=[logging.getLogger()]))
        ret = record.get("episode_return_mean")
        self.bar.set_postfix_str(f"update {record['update']}" + ("" if ret is None else f", return {ret:.2f}"),
                                 refresh=False)
        self.bar.update(steps - self.bar.n)

    def close(self) -> None:
        self.stack.close()  # the console handlers first, then the bar (cleared: leave=False)
        self.bar = None


def thread_lock_only() -> None:
    """tqdm's own lock pairs a thread lock with a multiprocessing RLock: a POSIX semaphore registered with the
    resource tracker, which a process ending with os._exit (exit_process) never unregisters, so at a Ctrl-C the
    tracker printed "1 leaked semaphore objects" on the terminal. One bar in one process needs a thread lock only."""
    tqdm.set_lock(threading.RLock())
