"""Frame stacking on the learner, for actors that send only each env's newest frame.

An actor then sends a quarter of the bytes and does no stacking of its own. The learner rebuilds
exactly what the actor-side `FrameStack` wrapper would have given: the last k frames, oldest first,
and after a game or life ends (the actor reset that env) the new first frame repeated k times.
"""
from __future__ import annotations

import numpy as np


class LearnerFrameStack:
    """The last k frames of every env of every actor group, keyed by (actor identity, group)."""

    def __init__(self, k: int):
        self.k = k
        self._stacks: dict[object, tuple[np.ndarray, np.ndarray]] = {}  # key -> (current, spare)

    def push(self, key, frames: np.ndarray, restart: np.ndarray) -> np.ndarray:
        """Append one frame per env; envs with `restart` set start over from this frame.

        Returns (K, k, *frame) stacks. They stay valid until the group's push after next: the two
        buffers alternate, so the stacks handed out for inference are never rewritten in place."""
        if key not in self._stacks:
            shape = (len(frames), self.k, *frames.shape[1:])
            self._stacks[key] = (np.zeros(shape, frames.dtype), np.zeros(shape, frames.dtype))
            restart = np.ones(len(frames), bool)
        current, spare = self._stacks[key]
        spare[:, :-1] = current[:, 1:]
        spare[:, -1] = frames
        if restart.any():
            spare[restart] = frames[restart][:, None]
        self._stacks[key] = (spare, current)
        return spare

    def with_frame(self, key, env: int, frame: np.ndarray) -> np.ndarray:
        """The stack env `env` would show with `frame` appended, without changing any state.

        For the last observation before a truncation: the actor resets that env in the same step, so
        the report's frame for it is already the new game's first."""
        current = self._stacks[key][0]
        return np.concatenate((current[env, 1:], frame[None]))

    def forget(self, key) -> None:
        self._stacks.pop(key, None)
