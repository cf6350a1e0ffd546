"""What the network is to see of each step report: the frames as the actor sent them, or (learner-side frame
stacking, learner/collection/framestack.py) their stacks, with which of them started over (the rollout keeps
one frame per step and those flags: learner/rollout/frames.py); and each truncated env's last observation,
kept for its bootstrap (and with a recurrent core, the states the values of those observations read)."""
from __future__ import annotations

import numpy as np

from learner.collection.framestack import LearnerFrameStack
from learner.collection.inference import Inference
from learner.rollout.buffer import RolloutBuffer
from protocol import messages as m


class Observations:
    def __init__(self, frame_stack: int, states: Inference | None = None):
        """`states`: a recurrent policy, keeping each env slot's state (learner/collection/inference.py): the
        values of final and bootstrap observations are then computed from the states kept with them."""
        self.frames = LearnerFrameStack(frame_stack) if frame_stack > 1 else None
        self.states = states

    def observe(self, key, report: m.StepReport) -> tuple[np.ndarray, np.ndarray | None]:
        """The observation the network is to see, and which envs start over with it (their stacks, a recurrent
        core's state; None when neither is kept). Without frame stacking it is a view of the received frame
        (alive while referenced): copied once, into the rollout. With it, the group's stacks (its own array,
        alive until its push after next)."""
        restart = episode_starts(report) if self.frames is not None or self.states is not None else None
        if self.frames is None:
            return report.obs, restart
        return self.frames.push(key, report.obs, restart), restart

    def keep_finals(self, key, buf: RolloutBuffer, cols: list[int], report: m.StepReport,
                    slots: list[int] | None = None) -> None:
        """Each truncated env's last observation (stacked as the network would have seen it), for its bootstrap;
        with a recurrent core, the state after its last step too (once per truncation, not per message)."""
        t = buf.completed[cols[0]] - 1
        finals = [i for i in report.final_index.tolist() if report.truncated[i] and not report.terminated[i]]
        states = self.states.states_of(slots) if finals and self.states is not None else None
        for i, final in zip(report.final_index.tolist(), report.final_obs):
            if i in finals:
                if self.frames is not None:
                    final = self.frames.with_frame(key, i, final)
                buf.final_obs[(t, cols[i])] = np.array(final)  # a copy: the received frame goes away
                if states is not None:
                    buf.final_states[(t, cols[i])] = states[i]

    def keep_bootstrap(self, buf: RolloutBuffer, cols: list[int], obs: np.ndarray, restart: np.ndarray | None,
                       slots: list[int]) -> None:
        """The observation after a column's last step, which bootstraps its rollout; with a recurrent core, the
        state it is to be valued from: the slot's state after that step, zeros where a new episode starts."""
        for col, o in zip(cols, obs):
            buf.bootstrap_obs[col] = np.array(o)
        if self.states is not None:
            states = self.states.states_of(slots)
            states[restart] = 0
            for col, state in zip(cols, states):
                buf.bootstrap_states[col] = state

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
