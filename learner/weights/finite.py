"""Weights are published and checkpointed only when every number in them is finite (issue 60): the last of the
learner's guards against numbers that do not fit (the wire's bounds, the batch's check, the update's roll-back)."""
from __future__ import annotations

import torch
from torch import nn


class NonFiniteWeights(Exception):
    """The model (or its statistics) holds NaN or inf after an update: the run stops before publishing or
    checkpointing them (exit 1), and launch.py restarts it from its newest checkpoint."""


def check_finite(modules: list[nn.Module | None], version: int) -> None:
    """Raise NonFiniteWeights naming the tensors that are not finite; one read from the device when all are."""
    named = [(name, t) for module in modules if module is not None for name, t in module.state_dict().items()
             if t.is_floating_point()]
    if not named or bool(torch.stack([torch.isfinite(t).all() for _, t in named]).all()):
        return
    bad = [name for name, t in named if not bool(torch.isfinite(t).all())]
    raise NonFiniteWeights(f"the weights after update {version} are not finite ({', '.join(bad[:4])}"
                           f"{' ...' if len(bad) > 4 else ''}): not published nor checkpointed; the run stops "
                           f"(nothing lost beyond the newest checkpoint)")
