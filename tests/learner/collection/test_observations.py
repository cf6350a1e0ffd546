"""What the network sees of each step report (learner/collection/observations.py), without sockets: the frames
as sent, or their stacks and which of them started over; each truncated env's last observation kept,
stacked, for its bootstrap; the episodes a report says finished."""
from __future__ import annotations

import numpy as np
import torch

from learner.collection.observations import Observations, episodes_of
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from protocol import messages as m

FRAME = (2, 2)
KEY = (b"actor", 0)


def report(value, first=False, terminated=(False, False), truncated=(False, False), final=None) -> m.StepReport:
    """Two envs whose frames are all `value` (or one value per env); `final`: {env: the final frame's value}."""
    values = np.broadcast_to(np.asarray(value, np.uint8), (2,))
    final = final or {}
    return m.StepReport(0, np.stack([np.full(FRAME, v, np.uint8) for v in values]), np.zeros(2, np.float32),
                        np.array(terminated), np.array(truncated), first=first,
                        final_index=np.array(sorted(final), np.int64),
                        final_obs=np.stack([np.full(FRAME, final[i], np.uint8) for i in sorted(final)])
                        if final else None)


def rollout(k: int) -> RolloutBuffer:
    shape = (k, *FRAME) if k > 1 else FRAME
    return RolloutBuffer([5, 6], 3, Layout(shape, torch.uint8, (), torch.long, stack=k), torch.device("cpu"))


def test_without_frame_stacking_the_network_sees_the_frame_as_sent():
    sent = report(3)
    obs, restart = Observations(1).observe(KEY, sent)
    assert obs is sent.obs and restart is None


def test_stacks_restart_where_an_env_ended_and_say_so():
    seen = Observations(3)
    obs, restart = seen.observe(KEY, report(1, first=True))
    assert obs[:, :, 0, 0].tolist() == [[1, 1, 1]] * 2 and restart.tolist() == [True, True]
    obs, restart = seen.observe(KEY, report([2, 7], terminated=(False, True)))
    assert obs[:, :, 0, 0].tolist() == [[1, 1, 2], [7, 7, 7]] and restart.tolist() == [False, True]  # a new game
    obs, restart = seen.observe(KEY, report([3, 5], truncated=(True, False)))
    assert obs[:, :, 0, 0].tolist() == [[3, 3, 3], [7, 7, 5]] and restart.tolist() == [True, False]  # a time limit too
    again, restart = seen.observe(KEY, report(6, first=True))  # the actor's first report again
    assert again[:, :, 0, 0].tolist() == [[6, 6, 6]] * 2 and restart.all()


def test_the_stacks_are_the_observations_own_and_no_rollout_row():
    buf = rollout(3)
    obs, _ = Observations(3).observe(KEY, report(4, first=True))
    assert not np.shares_memory(obs, buf.frames.numpy()) and buf.frames.sum() == 0
    assert obs[:, :, 0, 0].tolist() == [[4, 4, 4]] * 2


def test_only_an_env_cut_by_the_time_limit_keeps_its_final_observation_stacked():
    buf, seen = rollout(3), Observations(3)
    seen.observe(KEY, report(1, first=True))
    buf.record_outcome([0, 1], np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
    cut = report(0, terminated=(False, True), truncated=(True, True), final={0: 9, 1: 8})
    seen.keep_finals(KEY, buf, [0, 1], cut)
    assert list(buf.final_obs) == [(0, 0)]  # env 1 ended for real: nothing to bootstrap
    assert buf.final_obs[(0, 0)][:, 0, 0].tolist() == [1, 1, 9]  # the stack it would have shown


def test_episodes_of_pairs_returns_with_lengths():
    done = report(0)
    assert episodes_of(done) == []
    done.episode_returns, done.episode_lengths = np.array([1.5, -2.0]), np.array([10, 3], np.int64)
    assert episodes_of(done) == [(1.5, 10), (-2.0, 3)]
