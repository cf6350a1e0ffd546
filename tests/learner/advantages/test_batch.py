"""A finished rollout -> training batch: bootstraps, termination vs truncation, reward scaling per slot."""
import numpy as np
import torch

from learner.advantages.batch import rollout_to_batch
from learner.model.normalize import RewardScaler
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout

GAMMA, LAM = 0.9, 0.8


def filled_rollout(T=5, slots=(3, 7)):
    """Two columns; column 0 terminates at t=1, column 1 is truncated at t=2 (final obs value 50)."""
    buf = RolloutBuffer(list(slots), T, Layout((1,), torch.float32, (), torch.long), torch.device("cpu"))
    rng = np.random.default_rng(0)
    values = rng.normal(size=(T, 2)).astype(np.float32)
    rewards = rng.normal(size=(T, 2)).astype(np.float32)
    for t in range(T):
        cols = [0, 1]
        buf.record_actions(cols, torch.tensor(values[t])[:, None], torch.zeros(2, dtype=torch.long),
                           torch.zeros(2), torch.tensor(values[t]))
        buf.record_outcome(cols, rewards[t], np.array([t == 1, False]), np.array([False, t == 2]))
    buf.final_obs[(2, 1)] = torch.tensor([50.0])
    for col in (0, 1):
        buf.bootstrap_obs[col] = torch.tensor([100.0 + col])
    return buf, values, rewards


def reference_gae(rewards, values, next_values, terminated, truncated):
    """Written out step by step, independent of learner.advantages.gae."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            boot = 0.0 if terminated[t, n] else next_values[t, n]
            delta = rewards[t, n] + GAMMA * boot - values[t, n]
            running = delta + (0.0 if (terminated[t, n] or truncated[t, n]) else GAMMA * LAM * running)
            adv[t, n] = running
    return adv


def test_truncation_bootstraps_and_termination_does_not():
    buf, values, rewards = filled_rollout()
    value_fn = lambda obs: obs[:, 0]  # V(x) = x: bootstraps are recognisable
    batch = rollout_to_batch(buf, value_fn, GAMMA, LAM)
    T = 5
    next_values = np.vstack([values[1:], [[100.0, 101.0]]])
    next_values[2, 1] = 50.0  # truncated: V(final obs), not V(reset obs)
    terminated = np.zeros((T, 2), bool)
    terminated[1, 0] = True
    truncated = np.zeros((T, 2), bool)
    truncated[2, 1] = True
    expected = reference_gae(rewards, values, next_values, terminated, truncated)
    assert batch.n_valid == 10 and batch.dropped == 0 and batch.width == 2
    np.testing.assert_allclose(batch.data["advantages"].numpy(), expected.reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.data["returns"].numpy(), (expected + values).reshape(-1), rtol=1e-5, atol=1e-5)
    # the truncated step's advantage includes the final obs' value; had it been treated as a termination it would not
    assert abs(batch.data["advantages"].numpy().reshape(T, 2)[2, 1] - (rewards[2, 1] + GAMMA * 50.0 - values[2, 1])) < 1e-4


def test_masked_steps_leave_the_batch():
    buf, _, _ = filled_rollout()
    buf.completed[1] = 3  # column 1's actor vanished after step 2 (a truncation: kept as it is)
    buf.dead[1] = True
    del buf.bootstrap_obs[1]
    batch = rollout_to_batch(buf, lambda obs: obs[:, 0], GAMMA, LAM)
    assert batch.n_valid == 8 and batch.dropped == 2
    assert batch.data["obs"].shape == (8, 1)


def test_reward_scaling_follows_slots_not_columns():
    """A join or leave shifts columns; each env's running return stays with its slot, a new env starts at 0."""
    scaler = RewardScaler(0, gamma=0.5)
    ones = torch.ones(1, 2)
    no = torch.zeros(1, 2, dtype=torch.bool)
    scaler(ones, no, slots=[3, 7])
    scaler(ones, no, slots=[3, 7])
    assert scaler.returns[3] == 1.5 and scaler.returns[7] == 1.5
    # slot 3's actor left; slot 7 is now column 0 and a fresh env joined at slot 4
    scaler.reset([4])
    scaler(torch.tensor([[2.0, 1.0]]), no, slots=[7, 4])
    assert scaler.returns[7] == 1.5 * 0.5 + 2.0 and scaler.returns[4] == 1.0 and scaler.returns[3] == 1.5
    # masked steps (cut from the rollout) change nothing
    before = {k: v.clone() for k, v in scaler.state_dict().items()}
    scaler(torch.tensor([[9.0, 9.0]]), no, slots=[7, 4], valid=torch.zeros(1, 2, dtype=torch.bool))
    for key, value in scaler.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_batch_resets_the_return_of_fresh_columns():
    buf, _, _ = filled_rollout(slots=(3, 7))
    scaler = RewardScaler(0, gamma=0.5)
    scaler.reset([7])
    scaler.returns[7] = 1000.0  # a departed env's history on slot 7
    buf.fresh = {1}  # slot 7 was handed to a new actor for this rollout
    rollout_to_batch(buf, lambda obs: obs[:, 0], GAMMA, LAM, reward_scaler=scaler)
    # with the reset, slot 7's return is built from this rollout's rewards only (truncated at t=2)
    _, _, rewards = filled_rollout()
    expected = 0.0
    for t in (3, 4):
        expected = expected * 0.5 + rewards[t, 1]
    assert abs(scaler.returns[7].item() - expected) < 1e-5


def test_a_reward_that_overflows_gae_marks_its_slot_and_only_its_own():
    """Issue 60, point 1: a reward of 3.3e38 (within a bound raised that far) made float32 GAE overflow and the
    update NaN. The batch names the slot whose advantages or returns are not finite; the learner drops it."""
    buf, _, _ = filled_rollout(slots=(3, 7))
    buf.rewards[3, 1] = 3.3e38  # column 1 = slot 7; its return at t=3 and the discounted ones before overflow
    buf.rewards[4, 1] = 3.3e38
    batch = rollout_to_batch(buf, lambda obs: obs[:, 0], GAMMA, LAM)
    assert batch.nonfinite_slots == [7]
    clean = rollout_to_batch(filled_rollout(slots=(3, 7))[0], lambda obs: obs[:, 0], GAMMA, LAM)
    assert clean.nonfinite_slots == []
