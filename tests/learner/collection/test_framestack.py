"""Learner-side frame stacking: hand-made sequences, then equality with the actor's own FrameStack."""

import numpy as np

from actor.envs import make_env
from learner.collection.framestack import LearnerFrameStack
from protocol.settings import EnvSettings


def frames(*values):
    """One 1x2 frame per env, filled with the given value."""
    return np.array([np.full((1, 2), v, np.uint8) for v in values])


def test_first_push_repeats_the_frame():
    stack = LearnerFrameStack(3)
    out = stack.push("g", frames(7, 9), np.zeros(2, bool))  # a new key restarts every env
    assert out.shape == (2, 3, 1, 2)
    assert (out[0] == 7).all() and (out[1] == 9).all()


def test_push_shifts_oldest_first_and_restart_refills():
    stack = LearnerFrameStack(3)
    stack.push("g", frames(1, 1), np.zeros(2, bool))
    stack.push("g", frames(2, 2), np.zeros(2, bool))
    out = stack.push("g", frames(3, 5), np.array([False, True]))
    assert out[0, :, 0, 0].tolist() == [1, 2, 3]
    assert out[1, :, 0, 0].tolist() == [5, 5, 5]  # env 1 was reset: its stack starts over
    out = stack.push("g", frames(4, 6), np.zeros(2, bool))
    assert out[0, :, 0, 0].tolist() == [2, 3, 4]
    assert out[1, :, 0, 0].tolist() == [5, 5, 6]


def test_returned_stack_survives_the_next_push():
    stack = LearnerFrameStack(2)
    first = stack.push("g", frames(1), np.zeros(1, bool))
    kept = first.copy()
    stack.push("g", frames(2), np.zeros(1, bool))
    assert (first == kept).all()  # the buffers alternate: inference may still be reading `first`


def test_with_frame_is_the_stack_before_a_reset_and_changes_nothing():
    stack = LearnerFrameStack(3)
    stack.push("g", frames(1), np.zeros(1, bool))
    stack.push("g", frames(2), np.zeros(1, bool))
    final = stack.with_frame("g", 0, frames(3)[0])
    assert final[:, 0, 0].tolist() == [1, 2, 3]
    out = stack.push("g", frames(8), np.ones(1, bool))
    assert out[0, :, 0, 0].tolist() == [8, 8, 8]


def test_groups_are_independent_and_forget_restarts():
    stack = LearnerFrameStack(2)
    stack.push("a", frames(1), np.zeros(1, bool))
    stack.push("b", frames(5), np.zeros(1, bool))
    assert stack.push("a", frames(2), np.zeros(1, bool))[0, :, 0, 0].tolist() == [1, 2]
    stack.forget("a")
    assert stack.push("a", frames(3), np.zeros(1, bool))[0, :, 0, 0].tolist() == [3, 3]


def test_matches_the_actor_side_frame_stack_through_resets_and_truncations():
    """The same seeded Breakout with and without its FrameStack, driven like an actor drives it
    (reset after terminated or truncated): every observation and every truncation's final
    observation must be identical. A short time limit forces truncations; EpisodicLife forces
    life-loss resets."""
    settings = EnvSettings(env_id="ALE/Breakout-v5", max_episode_steps=60)
    stacked_env = make_env(settings, seed=3)
    frame_env = make_env(settings.model_copy(update={"frame_stack": 1}), seed=3)
    stack = LearnerFrameStack(settings.frame_stack)
    expected, _ = stacked_env.reset()
    frame, _ = frame_env.reset()
    got = stack.push("g", frame[None], np.ones(1, bool))[0]
    rng = np.random.default_rng(0)
    resets = truncations = 0
    for _ in range(400):
        assert np.array_equal(got, expected)
        action = int(rng.integers(stacked_env.action_space.n))
        expected, _, term, trunc, _ = stacked_env.step(action)
        frame, _, term2, trunc2, _ = frame_env.step(action)
        assert (term, trunc) == (term2, trunc2)
        if term or trunc:
            assert np.array_equal(stack.with_frame("g", 0, frame), expected)  # the final observation
            truncations += trunc and not term
            resets += 1
            expected, _ = stacked_env.reset()
            frame, _ = frame_env.reset()
        got = stack.push("g", frame[None], np.array([term or trunc]))[0]
    assert resets >= 3 and truncations >= 1
    stacked_env.close()
    frame_env.close()


def test_push_alternates_the_groups_two_arrays_and_goes_on_from_the_last():
    """The stacks handed out stay as they were until the push after next."""
    stack = LearnerFrameStack(3)
    a = stack.push("g", frames(1, 1), np.zeros(2, bool))
    b = stack.push("g", frames(2, 2), np.zeros(2, bool))
    assert not np.shares_memory(a, b) and a[0, :, 0, 0].tolist() == [1, 1, 1]
    c = stack.push("g", frames(3, 4), np.array([False, True]))
    assert np.shares_memory(a, c) and b[0, :, 0, 0].tolist() == [1, 1, 2]
    assert c[0, :, 0, 0].tolist() == [1, 2, 3] and c[1, :, 0, 0].tolist() == [4, 4, 4]
