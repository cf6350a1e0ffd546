"""Generalized Advantage Estimation over a [T, N] rollout, with termination and truncation kept apart."""
from __future__ import annotations

import torch


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                terminated: torch.Tensor, dones: torch.Tensor, gamma: float, lam: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (advantages, returns), both [T, N] float32.

    rewards, values, next_values: [T, N]. next_values[t] is V of the observation that followed step t:
    the next step's observation, or on truncation the final observation before the reset, or at the
    end of the rollout the observation the next rollout starts from.
    terminated[t]: the episode really ended at t, so its delta does not bootstrap (delta = r - V).
    dones[t]: terminated or truncated at t; the recursion is cut so step t's advantage excludes t+1's
    (step t+1 belongs to a new episode).
    """
    if not (rewards.shape == values.shape == next_values.shape == terminated.shape == dones.shape):
        raise ValueError(f"compute_gae: shape mismatch rewards {tuple(rewards.shape)} values {tuple(values.shape)} "
                         f"next_values {tuple(next_values.shape)} terminated {tuple(terminated.shape)} "
                         f"dones {tuple(dones.shape)}")
    rewards = rewards.float()
    values = values.float()
    bootstrap = 1.0 - terminated.float()
    carry = 1.0 - dones.float()
    # All deltas at once; only the discounted accumulation needs the backward loop.
    deltas = rewards + gamma * next_values.float() * bootstrap - values
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * carry[t] * running
        advantages[t] = running
    return advantages, advantages + values
