"""The training loop's serial time: from the end of one rollout to the start of the next collect, when (without
run.collect_only) every actor is parked, split into named phases (issue 40: measure first).

`begin` when a rollout is complete, `mark(phase)` after each piece of work (the time since the last mark goes
to that phase), `close` when the next collect starts: the period becomes `last`, its phases in seconds and
`total`; what no mark named since the last one is `other`. A timestamp per phase, nothing per message.
"""
from __future__ import annotations

import time


class SerialPhases:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.last: dict | None = None   # the latest complete period (None before the first)
        self._phases: dict[str, float] | None = None
        self._began = self._mark = 0.0

    def begin(self) -> None:
        self._began = self._mark = self.clock()
        self._phases = {}

    def mark(self, phase: str) -> None:
        if self._phases is None:
            return  # not in a period (the update after the last rollout, on the way out)
        now = self.clock()
        self._phases[phase] = self._phases.get(phase, 0.0) + now - self._mark
        self._mark = now

    def close(self) -> None:
        if self._phases is None:
            return
        self.mark("other")
        total = self._mark - self._began
        self.last = {**{k: round(v, 4) for k, v in self._phases.items()}, "total": round(total, 4)}
        self._phases = None
