"""What the network is to see of each step report: the frames as the actor sent them, or (learner-side frame
stacking, learner/collection/framestack.py) their stacks, with which of them started over (the rollout keeps
one frame per step and those flags: learner/rollout/frames.py); and each truncated env's last observation,
kept for its bootstrap."""
from __future__ import annotations

import numpy as np

from learner.collection.framestack import LearnerFrameStack
from learner.rollout.buffer import RolloutBuffer
from protocol import messages as m


class Observations:
    def __init__(self, frame_stack: int):
        self.frames = LearnerFrameStack(frame_stack) if frame_stack > 1 else None

    def observe(self, key, report: m.StepReport) -> tuple[np.ndarray, np.ndarray | None]:
        """The observation the network is to see, and which of its stacks started over (None without frame
        stacking). Without frame stacking it is a view of the received frame (alive while referenced): copied
        once, into the rollout. With it, the group's stacks (its own array, alive until its push after next)."""
        if self.frames is None:
            return report.obs, None
        restart = episode_starts(report)
        return self.frames.push(key, report.obs, restart), restart

    def keep_finals(self, key, buf: RolloutBuffer, cols: list[int], report: m.StepReport) -> None:
        """Each truncated env's last observation (stacked as the network would have seen it), for its bootstrap."""
        t = buf.completed[cols[0]] - 1
        for i, final in zip(report.final_index.tolist(), report.final_obs):
            if report.truncated[i] and not report.terminated[i]:
                if self.frames is not None:
                    final = self.frames.with_frame(key, i, final)
                buf.final_obs[(t, cols[i])] = np.array(final)  # a copy: the received frame goes away

    def forget(self, actor_id: bytes, groups: int) -> None:
        """An actor left: its groups' stacks go."""
        if self.frames is not None:
            for group in range(groups):
                self.frames.forget((actor_id, group))


def episode_starts(report: m.StepReport) -> np.ndarray:
    """Which envs' observations in the report start an episode: all of a first report (a join), else those
    reset after a termination or truncation."""
    return np.ones(len(report.obs), bool) if report.first else report.terminated | report.truncated


def episodes_of(report: m.StepReport) -> list:
    """The (return, length) of each episode the report says finished."""
    if not len(report.episode_returns):
        return []
    return list(zip(report.episode_returns.tolist(), report.episode_lengths.tolist()))
