"""The policy heads: features -> an action distribution's parameters, and what PPO asks of that distribution
(sample, log-probability, entropy, the greedy action)."""
from __future__ import annotations

import math

import torch
from torch import nn

from protocol.spaces import SpaceSpec

POLICY_GAIN = 0.01  # near-uniform initial policy
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def layer_init(layer: nn.Module, gain: float, bias: float = 0.0) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def _sample_on(generator: torch.Generator | None, like: torch.Tensor) -> torch.device:
    """Draw random numbers where the generator lives, so a CPU generator also drives a CUDA model."""
    return generator.device if generator is not None else like.device


class CategoricalHead(nn.Module):
    def __init__(self, in_dim: int, n: int):
        super().__init__()
        self.linear = layer_init(nn.Linear(in_dim, n), POLICY_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.linear(x), dim=-1)

    def sample(self, logp: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        probs = logp.exp().to(_sample_on(generator, logp))
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(logp.device)

    def log_prob(self, logp: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, logp: torch.Tensor) -> torch.Tensor:
        return -(logp.exp() * logp).sum(-1)

    def mode(self, logp: torch.Tensor) -> torch.Tensor:
        return logp.argmax(-1)


class GaussianHead(nn.Module):
    """Diagonal Gaussian; the log-std is a free parameter, not a function of the state."""

    def __init__(self, in_dim: int, action_dim: int):
        super().__init__()
        self.linear = layer_init(nn.Linear(in_dim, action_dim), POLICY_GAIN)
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)  # the mean

    def sample(self, mean: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        noise = torch.randn(mean.shape, generator=generator, device=_sample_on(generator, mean))
        return mean + self.log_std.exp() * noise.to(mean.device)

    def log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        z = (action.float() - mean) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - _LOG_SQRT_2PI).sum(-1)

    def entropy(self, mean: torch.Tensor) -> torch.Tensor:
        per_dim = 0.5 + _LOG_SQRT_2PI + self.log_std
        return per_dim.sum(-1).expand(mean.shape[:-1])

    def mode(self, mean: torch.Tensor) -> torch.Tensor:
        return mean


def policy_head(in_dim: int, action_space: SpaceSpec) -> CategoricalHead | GaussianHead:
    """The head for an action space: categorical for discrete actions, Gaussian for 1-D boxes."""
    if action_space.kind == "discrete":
        return CategoricalHead(in_dim, action_space.n)
    if len(action_space.shape) != 1:
        raise ValueError(f"unsupported action space {action_space}: box actions must be 1-D")
    return GaussianHead(in_dim, action_space.shape[0])
