"""Batched inference for all actors: numpy observations in, numpy actions out, on the learner's device.

Owns what happens to an observation before the network sees it (observation normalization) so that
the rollout stores exactly what the policy saw: the update then reproduces the stored log-probs.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from learner.model.networks import ActorCritic
from learner.model.normalize import ObsNormalizer, ValueNormalizer
from protocol.spaces import SpaceSpec


@dataclass
class ActResult:
    """Tensors on the policy's device; numpy arrays where no tensor was needed (RolloutBuffer takes both)."""
    actions: np.ndarray  # what is sent to the actors
    obs: torch.Tensor | np.ndarray  # what the network saw (stored in the rollout)
    actions_t: torch.Tensor | np.ndarray
    logprobs: torch.Tensor | np.ndarray
    values: torch.Tensor | np.ndarray


class Inference:
    def __init__(self, model: ActorCritic, action_space: SpaceSpec, device: torch.device,
                 obs_norm: ObsNormalizer | None, seed: int, random_actions: bool = False,
                 value_norm: ValueNormalizer | None = None):
        self.model, self.action_space, self.device = model, action_space, device
        self.on_cpu = torch.device(device).type == "cpu"
        self.obs_norm = obs_norm
        self.value_norm = value_norm  # the critic speaks normalized units: values leave here de-normalized
        self.random_actions = random_actions
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.rng = np.random.default_rng(seed)

    def follow(self, model: torch.nn.Module) -> None:
        """Serve `model`'s current weights (policy lag: the served copy catches up after each update)."""
        self.model.load_state_dict(model.state_dict())

    def _to_device(self, obs: np.ndarray) -> torch.Tensor:
        with warnings.catch_warnings():  # obs may be a read-only view of a received frame; torch only reads it
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(obs)
        # one copy to the device; pinning a fresh tensor first would copy every batch twice
        return t.to(self.device)

    def prepare(self, obs: np.ndarray, update_stats: bool) -> torch.Tensor:
        t = self._to_device(obs)
        if self.obs_norm is None:
            return t
        if update_stats:
            self.obs_norm.update(t)
        return self.obs_norm(t)

    def act(self, obs: np.ndarray) -> ActResult:
        if self.random_actions:
            return self._random(obs)
        return self._act(obs)

    @torch.no_grad()
    def _act(self, obs: np.ndarray) -> ActResult:
        x = self.prepare(obs, update_stats=True)
        action, logprob, value = self.model.act(x, generator=self.generator)
        return ActResult(action.cpu().numpy(), x, action, logprob, self._raw(value))

    def _raw(self, values: torch.Tensor) -> torch.Tensor:
        return values if self.value_norm is None else self.value_norm.denormalize(values)

    @torch.no_grad()
    def value(self, obs: torch.Tensor | np.ndarray) -> torch.Tensor:
        """V of raw observations (bootstrap and final ones: normalized without updating the stats)."""
        if isinstance(obs, torch.Tensor):
            obs = obs.cpu().numpy()
        x = self.prepare(obs, update_stats=False)
        if self.random_actions:
            return torch.zeros(len(obs), device=self.device)
        return self._raw(self.model.value(x))

    def _random(self, obs: np.ndarray) -> ActResult:
        n, space = len(obs), self.action_space
        if space.kind == "discrete":
            actions = self.rng.integers(0, space.n, size=n, dtype=np.int64)
        else:
            low = np.asarray(space.low, np.float32).reshape(space.shape)
            high = np.asarray(space.high, np.float32).reshape(space.shape)
            actions = self.rng.uniform(low, high, size=(n, *space.shape)).astype(np.float32)
        if self.on_cpu and self.obs_norm is None:
            # nothing to compute: plain arrays, which a CPU rollout stores without torch's per-op overhead
            zeros = np.zeros(n, np.float32)
            return ActResult(actions, obs, actions, zeros, zeros)
        with torch.no_grad():
            x = self.prepare(obs, update_stats=True)
        zeros = torch.zeros(n, device=self.device)
        return ActResult(actions, x, torch.from_numpy(actions).to(self.device), zeros, zeros)
