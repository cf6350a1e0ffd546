"""One frame per step (learner/rollout/frames.py): the stacks rebuilt from a rollout's frames are, sample for
sample, the stacks the network saw, as a rollout keeping every stack whole stores them. The stacks come from
the learner's own stacker (LearnerFrameStack) fed with random frames and resets, rollout after rollout: a
stack carried over a rollout's start, episodes ending anywhere (a noop or fire reset's one-step episodes
included, two restarts within one stack), a join, dead columns; for 4 frames, and for 1 (stored as is)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.advantages.batch import rollout_to_batch
from learner.collection.framestack import LearnerFrameStack
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.frames import StackedObs, frame_rows
from learner.rollout.layout import Layout

T, N, FRAME = 6, 4, (3, 2)


def layouts(k: int) -> tuple[Layout, Layout]:
    """(every stack whole, one frame per step) for k-frame stacks."""
    shape = (k, *FRAME)
    return Layout(shape, torch.uint8, (), torch.long), Layout(shape, torch.uint8, (), torch.long, stack=k)


def fill(bufs, stacker: LearnerFrameStack, rng, restarts_at: dict, first: bool) -> None:
    """T steps of random frames into every buffer, the stacks built by `stacker`; restarts_at[(t, col)]: that
    stack starts over (an episode ended the step before: a reset, or the rollout's first step of a join)."""
    for t in range(T):
        frames = rng.integers(0, 256, size=(N, *FRAME), dtype=np.uint8)
        restart = np.array([first and t == 0 or restarts_at.get((t, c), False) for c in range(N)])
        stacks = stacker.push("group", frames, restart)
        for buf in bufs:
            buf.record_actions(list(range(N)), stacks, np.zeros(N, np.int64), np.zeros(N, np.float32),
                               np.zeros(N, np.float32), restart)
            buf.record_outcome(list(range(N)), np.zeros(N, np.float32), np.zeros(N, bool), np.zeros(N, bool))


@pytest.mark.parametrize("k", [4, 2])
def test_rebuilt_stacks_equal_the_stored_ones_across_rollouts_and_resets(k):
    whole_layout, frame_layout = layouts(k)
    rng, stacker = np.random.default_rng(k), LearnerFrameStack(k)
    cases = [  # per rollout, the stacks that start over
        {},                                                    # a join only (the first rollout's step 0)
        {(0, 0): True, (3, 1): True, (5, 2): True},            # at a rollout's start, mid-way, at its last step
        {(1, 0): True, (2, 0): True, (3, 0): True, (2, 3): True},  # one-step episodes: restarts within a stack
        {},                                                    # stacks carried over the rollout's start
    ]
    older = None
    for r, restarts_at in enumerate(cases):
        whole = RolloutBuffer(list(range(N)), T, whole_layout, torch.device("cpu"))
        frames = RolloutBuffer(list(range(N)), T, frame_layout, torch.device("cpu"), reuse=older)
        fill([whole, frames], stacker, rng, restarts_at, first=r == 0)
        assert frames.frames.shape == (T + k - 1, N, *FRAME) and not hasattr(frames, "obs")
        rebuilt = StackedObs(frames.frames, frames.restarts, k)
        assert rebuilt.shape == (T * N, k, *FRAME) and len(rebuilt) == T * N
        stored = whole.obs.flatten(0, 1)
        assert torch.equal(rebuilt[torch.arange(T * N)], stored), r
        perm = torch.from_numpy(rng.permutation(T * N))
        assert torch.equal(rebuilt[perm], stored[perm])  # a minibatch in any order
        assert torch.equal(rebuilt[5:17], stored[5:17])
        assert rebuilt.sum(torch.float64, chunk=7) == stored.sum(dtype=torch.float64)
        older = frames  # the next rollout rewrites these frames: nothing stale may show through


def test_only_valid_samples_are_rebuilt_when_a_column_died():
    whole_layout, frame_layout = layouts(4)
    rng, stacker = np.random.default_rng(0), LearnerFrameStack(4)
    bufs = [RolloutBuffer(list(range(N)), T, layout, torch.device("cpu")) for layout in (whole_layout, frame_layout)]
    fill(bufs, stacker, rng, {(2, 1): True}, first=True)
    batches = []
    for buf in bufs:
        buf.completed[3] = 2  # column 3's actor vanished after 2 steps: its later steps are no samples
        buf.mark_dead(3)
        for c in range(3):
            buf.bootstrap_obs[c] = np.zeros((4, *FRAME), np.uint8)
        batches.append(rollout_to_batch(buf, lambda obs: torch.zeros(len(obs)), 0.99, 0.95))
    whole, frames = (b.data["obs"] for b in batches)
    assert isinstance(frames, StackedObs) and len(frames) == len(whole) == T * 3 + 2
    assert torch.equal(frames[torch.arange(len(whole))], whole)


def test_a_single_frame_and_non_image_observations_are_stored_as_they_are():
    """frame_stack 1 (or CartPole's vectors): no frames, no restarts; the batch's observations are the rollout's."""
    for shape, dtype in (((1, *FRAME), torch.uint8), ((4,), torch.float32)):
        layout = Layout(shape, dtype, (), torch.long)
        assert set(layout.rows(T, N)) == {"obs", "actions", "logprobs", "values", "rewards", "terminated", "truncated"}
        buf = RolloutBuffer(list(range(N)), T, layout, torch.device("cpu"))
        obs = torch.rand(T, N, *shape).mul(255).to(dtype)
        for t in range(T):
            buf.record_actions(list(range(N)), obs[t], np.zeros(N, np.int64), np.zeros(N, np.float32),
                               np.zeros(N, np.float32))
            buf.record_outcome(list(range(N)), np.zeros(N, np.float32), np.zeros(N, bool), np.zeros(N, bool))
        for c in range(N):
            buf.bootstrap_obs[c] = np.zeros(shape, np.float32)
        batch = rollout_to_batch(buf, lambda o: torch.zeros(len(o)), 0.99, 0.95)
        assert torch.equal(batch.data["obs"], obs.flatten(0, 1))


def test_frame_rows_follow_the_last_restart_within_the_window():
    restarts = torch.zeros(5, 1, dtype=torch.bool)
    restarts[2, 0] = True
    rows = frame_rows(restarts, 3)[:, 0].tolist()  # row 2 + t is step t's frame; rows 0, 1 the older ones
    assert rows == [[0, 1, 2], [1, 2, 3], [4, 4, 4], [4, 4, 5], [4, 5, 6]]
