"""A recurrent core's state per env slot where inference runs (issue 63): gathered, reset and scattered by slot,
zeroed at an episode's start (a join, a reset) and when a slot is retired."""
import numpy as np
import pytest
import torch

from learner.collection.inference import Inference, served_modules
from learner.collection.observations import episode_starts
from learner.config import ModelConfig
from learner.model.networks import build_model
from protocol import messages as m
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=4)


def make_policy(core="lstm"):
    torch.manual_seed(0)
    model = build_model(OBS, ACT, ModelConfig(core=core, core_size=8))
    return Inference(model, ACT, torch.device("cpu"), None, seed=0), model


def replay(model, obs_by_step, starts_by_step):
    """What one slot's state is after these steps, stepped here alone from zeros."""
    h = model.initial_state(1)
    for obs, start in zip(obs_by_step, starts_by_step):
        if start:
            h.zero_()
        model.act(torch.from_numpy(obs[None]), state=h)
    return h[0]


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_each_slot_carries_its_own_state_in_any_batch_order(core):
    policy, model = make_policy(core)
    rng = np.random.default_rng(0)
    seen = {5: [], 1: [], 3: []}
    batches = [([5, 1], [True, True]), ([3], [True]), ([1, 3, 5], [False, False, False]),
               ([3, 1], [False, True]), ([5], [False])]  # slot 1 starts a new episode in the 4th batch
    for slots, starts in batches:
        obs = rng.normal(size=(len(slots), 3)).astype(np.float32)
        result = policy.act([obs], np.array(slots, np.int64), np.array(starts))
        assert result.states.shape == (len(slots), model.state_size)
        for i, (slot, start) in enumerate(zip(slots, starts)):
            seen[slot].append((obs[i], start))
            if start:  # the state each row entered with, as the rollout stores it: zeros at an episode's start
                assert not result.states[i].any()
    for slot, steps in seen.items():
        expected = replay(model, [o for o, _ in steps], [s for _, s in steps])
        torch.testing.assert_close(torch.from_numpy(policy.states_of([slot])[0]), expected, rtol=0, atol=1e-6)


def test_a_retired_slot_is_zeroed_and_the_others_kept():
    policy, _ = make_policy()
    policy.act([np.ones((3, 3), np.float32)], np.array([0, 1, 2]), np.ones(3, bool))
    before = policy.states_of([0, 2])
    policy.forget([1])
    assert not policy.states_of([1]).any()
    np.testing.assert_array_equal(policy.states_of([0, 2]), before)
    assert before.any()


def test_the_table_grows_to_any_slot_and_value_reads_without_stepping():
    policy, model = make_policy("gru")
    policy.act([np.ones((1, 3), np.float32)], np.array([700]), np.array([True]))
    assert len(policy.states) >= 701
    state = policy.states_of([700])
    obs = np.full((1, 3), 0.5, np.float32)
    v = policy.value(obs, state)
    with torch.no_grad():
        expected = model.value(torch.from_numpy(obs), torch.from_numpy(state))
    torch.testing.assert_close(v, expected)
    np.testing.assert_array_equal(policy.states_of([700]), state)


def test_a_recurrent_policy_refuses_a_batch_without_slots():
    policy, _ = make_policy()
    with pytest.raises(ValueError, match="env slot"):
        policy.act([np.ones((2, 3), np.float32)])


def test_an_episode_starts_at_a_join_and_after_a_termination_or_truncation():
    obs = np.zeros((3, 3), np.float32)
    first = m.StepReport(0, obs, np.zeros(3, np.float32), np.zeros(3, bool), np.zeros(3, bool), first=True)
    assert episode_starts(first).all()
    later = m.StepReport(0, obs, np.zeros(3, np.float32), np.array([True, False, False]), np.array([False, False, True]))
    assert episode_starts(later).tolist() == [True, False, True]


def test_newer_weights_serving_mid_episode_keep_every_slots_state():
    """Policy lag: when the finished update's weights start to serve (follow), the slots' episodes go on from the
    states the older weights left (not zeroed: as Sample Factory and IMPALA do); the next step enters with them."""
    policy, model = make_policy()
    lagged, _ = served_modules(model, None, policy_lag=True)
    policy = Inference(lagged, ACT, torch.device("cpu"), None, seed=0)
    policy.act([np.ones((2, 3), np.float32)], np.array([0, 4]), np.ones(2, bool))
    before = policy.states_of([0, 4])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)  # the update moved the training weights
    policy.follow(model)
    assert torch.equal(lagged.core.rnn.weight_ih_l0, model.core.rnn.weight_ih_l0)
    np.testing.assert_array_equal(policy.states_of([0, 4]), before)
    result = policy.act([np.ones((2, 3), np.float32)], np.array([0, 4]), np.zeros(2, bool))
    np.testing.assert_array_equal(result.states, before)
    assert before.any()
