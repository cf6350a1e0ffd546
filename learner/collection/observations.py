"""What the network is to see of each step report: the frames as the actor sent them, or (learner-side frame
stacking, learner/collection/framestack.py) their stacks, written straight into the rollout's row where they
can be; and each truncated env's last observation, kept for its bootstrap."""
from __future__ import annotations

import numpy as np

from learner.collection.framestack import LearnerFrameStack
from learner.rollout.buffer import RolloutBuffer
from protocol import messages as m


class Observations:
    def __init__(self, frame_stack: int, in_place: bool):
        """`in_place`: the rollout keeps the raw stacks (no observation normalization), so they can be written
        there."""
        self.frames = LearnerFrameStack(frame_stack) if frame_stack > 1 else None
        self.in_place = in_place

    def observe(self, key, report: m.StepReport, target: RolloutBuffer | None, slots) -> tuple[np.ndarray, bool]:
        """The observation the network is to see, and whether it was written into target's row already.
        Without frame stacking it is a view of the received frame (alive while referenced): copied once,
        into the rollout. With it, the stacks are written straight into target's row where there is one."""
        if self.frames is None:
            return report.obs, False
        restart = np.ones(len(report.obs), bool) if report.first else report.terminated | report.truncated
        row = target.obs_row(target.columns(slots)) if target is not None and self.in_place else None
        return self.frames.push(key, report.obs, restart, out=row), row is not None

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


def episodes_of(report: m.StepReport) -> list:
    """The (return, length) of each episode the report says finished."""
    if not len(report.episode_returns):
        return []
    return list(zip(report.episode_returns.tolist(), report.episode_lengths.tolist()))
