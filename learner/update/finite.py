"""Numbers that do not fit, past the wire's bounds (issue 60): a rollout whose GAE is not finite is dropped on
every rank and the actors of its env slots struck; an update that went back to its start (PPOUpdater: a step's
loss or gradient not finite) is said; both are counted for metrics.jsonl (nonfinite_batches); and the weights
are checked finite before they are published or checkpointed (else the run stops, exit 1, and launch.py
restarts it from its newest checkpoint)."""
from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import nn

log = logging.getLogger("learner")


class NonFiniteWeights(Exception):
    """The model (or its statistics) holds NaN or inf after an update: the run stops before publishing or
    checkpointing them."""


def check_finite(modules: list[nn.Module | None], version: int) -> None:
    """Raise NonFiniteWeights naming the tensors that are not finite; one read from the device when all are.

    Each tensor's sum first: a NaN or an infinity carries through it, and it is one pass, where isfinite(t).all()
    is two and a bool tensor (the Nature CNN's weights after every update: 0.1 ms instead of 3.8 on one CPU thread).
    Only a sum that is not finite (or finite elements whose sum overflowed) has its elements checked one by one."""
    named = [(name, t) for module in modules if module is not None for name, t in module.state_dict().items()
             if t.is_floating_point()]
    if not named or bool(torch.isfinite(torch.stack([t.sum().float() for _, t in named])).all()):
        return
    bad = [name for name, t in named if not bool(torch.isfinite(t).all())]
    if not bad:
        return  # finite elements whose sum overflowed
    raise NonFiniteWeights(f"the weights after update {version} are not finite ({', '.join(bad[:4])}"
                           f"{' ...' if len(bad) > 4 else ''}): not published nor checkpointed; the run stops "
                           f"(nothing lost beyond the newest checkpoint)")


class NonFinite:
    """This process's rollouts dropped and updates gone back for numbers that are not finite."""

    def __init__(self, strike: Callable[[list[int], str], None]):
        """`strike(slots, reason)`: the collection's, which strikes the actors holding those env slots."""
        self.strike, self.count = strike, 0

    def drop(self, slots: list[int], update: int) -> None:
        """A rollout not finite on some rank, after `update`: no rank trains on it; said, and the actors whose
        env slots (`slots`, this rank's) made it struck."""
        self.count += 1
        log.warning("a rollout dropped after update %d: %s", update,
                    f"non-finite advantages or returns in env slots {slots[:8]}; their actors are struck" if slots
                    else "non-finite advantages or returns on another rank")
        if slots:
            self.strike(slots, f"its env slots {slots[:8]} made non-finite advantages or returns")

    def after_update(self, stats: dict, update: int) -> None:
        """The update's statistics, with the count so far (an update gone back counted and said: the same on
        every rank, whose gradient norm is the job's)."""
        if stats.get("nonfinite_update"):
            self.count += 1
            log.warning("update %d dropped: a step's loss or gradient was not finite; the weights are those "
                        "before it", update)
        stats["nonfinite_batches"] = self.count
