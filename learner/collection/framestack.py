"""Frame stacking on the learner, for actors that send only each env's newest frame.

An actor then sends a quarter of the bytes and does no stacking of its own. The learner rebuilds
exactly what the actor-side `FrameStack` wrapper would have given: the last k frames, oldest first,
and after a game or life ends (the actor reset that env) the new first frame repeated k times.

The stacks live in two arrays per group, for inference; the rollout keeps only each step's newest frame
and whether the stack started over (learner/rollout/frames.py rebuilds the stacks from those).
"""
from __future__ import annotations

import numpy as np


class LearnerFrameStack:
    """The last k frames of every env of every actor group, keyed by (actor identity, group)."""

    def __init__(self, k: int):
        self.k = k
        self._current: dict[object, np.ndarray] = {}  # key -> the group's newest stacks (one of its two arrays)
        self._own: dict[object, tuple[np.ndarray, np.ndarray]] = {}  # key -> its two arrays

    def push(self, key, frames: np.ndarray, restart: np.ndarray) -> np.ndarray:
        """Append one frame per env; envs with `restart` set start over from this frame.

        Returns (K, k, *frame) stacks in one of the group's two own arrays: they alternate, so the stacks
        handed out for inference are never rewritten before the push after next."""
        current = self._current.get(key)
        out = self._spare(key, frames)
        if current is None:  # a new group: every env starts from this frame
            out[:] = frames[:, None]
        else:
            out[:, :-1] = current[:, 1:]
            out[:, -1] = frames
            if np.count_nonzero(restart):  # = restart.any(), in one C call
                out[restart] = frames[restart][:, None]
        self._current[key] = out
        return out

    def _spare(self, key, frames: np.ndarray) -> np.ndarray:
        """The group's own array that does not hold its newest stacks."""
        own = self._own.get(key)
        if own is None:
            shape = (len(frames), self.k, *frames.shape[1:])
            own = self._own[key] = (np.zeros(shape, frames.dtype), np.zeros(shape, frames.dtype))
        return own[1] if self._current.get(key) is own[0] else own[0]

    def newest(self, key) -> np.ndarray:
        """The group's stacks from its last push."""
        return self._current[key]

    def with_frame(self, key, env: int, frame: np.ndarray) -> np.ndarray:
        """The stack env `env` would show with `frame` appended, without changing any state.

        For the last observation before a truncation: the actor resets that env in the same step, so
        the report's frame for it is already the new game's first."""
        return np.concatenate((self.newest(key)[env, 1:], frame[None]))

    def forget(self, key) -> None:
        self._current.pop(key, None)
        self._own.pop(key, None)
