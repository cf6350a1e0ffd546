"""What the network sees of each step report (learner/collection/observations.py), without sockets: the frames
as sent, or their stacks written straight into the rollout's row; each truncated env's last observation kept,
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
    return RolloutBuffer([5, 6], 3, Layout(shape, torch.uint8, (), torch.long), torch.device("cpu"))


def test_without_frame_stacking_the_network_sees_the_frame_as_sent():
    sent = report(3)
    obs, written = Observations(1, in_place=True).observe(KEY, sent, rollout(1), [5, 6])
    assert obs is sent.obs and not written


def test_stacks_are_written_into_the_rollouts_row_and_restart_where_an_env_ended():
    buf, seen = rollout(3), Observations(3, in_place=True)
    obs, written = seen.observe(KEY, report(1, first=True), buf, [5, 6])
    assert written and np.shares_memory(obs, buf.obs.numpy()) and buf.obs[0, :, :, 0, 0].tolist() == [[1, 1, 1]] * 2
    buf.record_actions([0, 1], None, np.zeros(2, np.int64), np.zeros(2, np.float32), np.zeros(2, np.float32))
    seen.observe(KEY, report([2, 7], terminated=(False, True)), buf, [5, 6])
    assert buf.obs[1, :, :, 0, 0].tolist() == [[1, 1, 2], [7, 7, 7]]  # env 1 started a new game
    buf.record_actions([0, 1], None, np.zeros(2, np.int64), np.zeros(2, np.float32), np.zeros(2, np.float32))
    seen.observe(KEY, report([3, 5], truncated=(True, False)), buf, [5, 6])
    assert buf.obs[2, :, :, 0, 0].tolist() == [[3, 3, 3], [7, 7, 5]]  # a time limit restarts too
    again, _ = seen.observe(KEY, report(6, first=True), None, [5, 6])  # the actor's first report again
    assert again[:, :, 0, 0].tolist() == [[6, 6, 6]] * 2


def test_without_in_place_the_stacks_are_the_observations_own_and_the_row_is_left_alone():
    buf = rollout(3)
    obs, written = Observations(3, in_place=False).observe(KEY, report(4, first=True), buf, [5, 6])
    assert not written and not np.shares_memory(obs, buf.obs.numpy()) and buf.obs.sum() == 0
    assert obs[:, :, 0, 0].tolist() == [[4, 4, 4]] * 2


def test_only_an_env_cut_by_the_time_limit_keeps_its_final_observation_stacked():
    buf, seen = rollout(3), Observations(3, in_place=False)
    seen.observe(KEY, report(1, first=True), buf, [5, 6])
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
