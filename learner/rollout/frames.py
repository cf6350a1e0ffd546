"""One frame per step: how a rollout of learner-stacked observations keeps them, and rebuilds the stacks
where they are read.

With learner-side frame stacking (k frames), step t's stack is its newest frame and the k - 1 before it,
so storing every stack keeps each frame k times. The rollout keeps instead, per column:

  * `frames`, (T + k - 1, N, *frame): rows 0 .. k-2 the older frames of the stack at step 0 (as they were,
    repeats after a reset included), row k - 1 + t the newest frame of step t;
  * `restarts`, (T, N): the stack at step t started over (a join or a reset): frame t repeated k times.

The stack at step t is rows t .. t + k - 1, each older row than the last restart at or before t replaced by
that restart's row: exactly the stack the network saw (learner/collection/framestack.py built it).
"""
from __future__ import annotations

import numpy as np
import torch


def write_stacks(frames: np.ndarray, restarts: np.ndarray, t: int, cols: slice | list[int], stacks: np.ndarray,
                 restart: np.ndarray) -> None:
    """Keep `stacks` ((n, k, *frame), what the network saw at step t) of these columns: their newest frames,
    their restart flags, and at t = 0 their older frames too."""
    k = stacks.shape[1]
    frames[k - 1 + t, cols] = stacks[:, -1]
    restarts[t, cols] = restart
    if t == 0 and k > 1:
        frames[:k - 1, cols] = stacks[:, :-1].swapaxes(0, 1)


def frame_rows(restarts: torch.Tensor, k: int) -> torch.Tensor:
    """(T, N, k) long: for each step's stack, the rows of `frames` its k frames come from, oldest first."""
    T = restarts.shape[0]
    steps = torch.arange(T, device=restarts.device).unsqueeze(1)
    last = torch.where(restarts, steps, torch.full_like(steps, -k)).cummax(dim=0).values  # last restart at or before t
    window = steps.unsqueeze(2) - (k - 1) + torch.arange(k, device=restarts.device)  # (T, 1, k): steps t-k+1 .. t
    return torch.maximum(window, last.unsqueeze(2)) + (k - 1)


class StackedObs:
    """The stacked observations of a rollout's samples (flat, step-major: sample i is step i // N, column
    i % N, or the i-th of `samples` when given), rebuilt from `frames` as they are read. It answers what the
    update asks of its observations: shape, len, dtype, device, indexing (an index tensor or a slice) and
    sum."""

    def __init__(self, frames: torch.Tensor, restarts: torch.Tensor, k: int, samples: torch.Tensor | None = None):
        self.frames, self.k, self.N = frames, k, frames.shape[1]
        self.rows = frame_rows(restarts, k).flatten(0, 1)  # (T * N, k)
        self.samples = samples
        n = self.rows.shape[0] if samples is None else len(samples)
        self.shape = torch.Size((n, k, *frames.shape[2:]))
        self.dtype, self.device = frames.dtype, frames.device

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx: torch.Tensor | slice) -> torch.Tensor:
        if isinstance(idx, slice):
            idx = torch.arange(len(self), device=self.device)[idx]
        flat = idx if self.samples is None else self.samples[idx]
        return self.frames[self.rows[flat], (flat % self.N).unsqueeze(1)]

    def sum(self, dtype: torch.dtype, chunk: int = 1024) -> torch.Tensor:
        """The sum of every stack's pixels, one chunk of stacks at a time (exact in float64 for integers)."""
        total = torch.zeros((), dtype=dtype, device=self.device)
        for start in range(0, len(self), chunk):
            total += self[start:start + chunk].sum(dtype=dtype)
        return total
