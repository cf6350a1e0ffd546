import numpy as np
import pytest
import torch

from learner.advantages.gae import compute_gae


def brute_force_gae(rewards, values, next_values, terminated, dones, gamma, lam):
    """Direct sum: A_t = sum_{k >= t} (gamma*lam)^(k-t) * delta_k, stopping after the first done at or after t."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total = 0.0
            for k in range(t, T):
                delta = rewards[k, n] + gamma * next_values[k, n] * (1.0 - terminated[k, n]) - values[k, n]
                total += (gamma * lam) ** (k - t) * delta
                if dones[k, n]:
                    break
            adv[t, n] = total
    return adv, adv + values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_with_terminations_and_truncations(seed):
    rng = np.random.default_rng(seed)
    T, N, gamma, lam = 17, 5, 0.97, 0.9
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    next_values = np.empty((T, N))
    next_values[:-1] = values[1:]
    next_values[-1] = rng.normal(size=N)
    terminated = rng.random((T, N)) < 0.15
    truncated = (rng.random((T, N)) < 0.15) & ~terminated
    # On truncation the bootstrap value is V(final observation), not V of the reset observation.
    next_values[truncated] = rng.normal(size=truncated.sum())
    dones = terminated | truncated
    assert terminated[1:-1].any() and truncated[1:-1].any()

    expected_adv, expected_ret = brute_force_gae(rewards, values, next_values, terminated, dones, gamma, lam)
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)
    adv, ret = compute_gae(t(rewards), t(values), t(next_values), torch.as_tensor(terminated),
                           torch.as_tensor(dones), gamma, lam)
    np.testing.assert_allclose(adv.numpy(), expected_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=1e-5, atol=1e-5)
    # float flags give the same answer as bool flags
    adv_f, _ = compute_gae(t(rewards), t(values), t(next_values), t(terminated), t(dones), gamma, lam)
    torch.testing.assert_close(adv_f, adv)


def test_hand_computed_truncation_and_termination():
    # gamma = 0.9, lambda = 0.8, so gamma * lambda = 0.72.
    # step 0: ordinary step, next_values[0] = V(s1) = 1.0
    #   delta0 = 1 + 0.9 * 1.0 - 0.5 = 1.4
    # step 1: truncated; bootstraps from V(final obs) = 4.0 (not V of the reset obs), recursion cut
    #   delta1 = 2 + 0.9 * 4.0 - 1.0 = 4.6
    # step 2: terminated; no bootstrap (next_values[2] = 2.0 is ignored)
    #   delta2 = 3 - 1.5 = 1.5
    # A2 = 1.5; A1 = 4.6 (done at 1 cuts A2 off); A0 = 1.4 + 0.72 * 4.6 = 4.712
    # returns = A + V = [5.212, 5.6, 3.0]
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    next_values = torch.tensor([[1.0], [4.0], [2.0]])
    terminated = torch.tensor([[False], [False], [True]])
    dones = torch.tensor([[False], [True], [True]])
    adv, ret = compute_gae(rewards, values, next_values, terminated, dones, 0.9, 0.8)
    torch.testing.assert_close(adv, torch.tensor([[4.712], [4.6], [1.5]]))
    torch.testing.assert_close(ret, torch.tensor([[5.212], [5.6], [3.0]]))


def test_shape_mismatch_rejected():
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError):
        compute_gae(x, x, torch.zeros(3, 1), x, x, 0.99, 0.95)
