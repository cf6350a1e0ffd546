"""Actor-critic networks: a Nature-CNN for stacked frames, separate tanh MLPs for vectors.

Every model exposes act / evaluate / value / greedy (see ActorCritic). act and greedy run without
gradients (they feed the env); evaluate and value are differentiable (they feed the update).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from learner.config import ModelConfig
from learner.model.normalize import PixelNormalizer
from protocol.spaces import SpaceSpec

HIDDEN_GAIN = math.sqrt(2)
POLICY_GAIN = 0.01  # near-uniform initial policy
VALUE_GAIN = 1.0
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
ACTIVATION_LAYERS = {"relu": nn.ReLU, "elu": nn.ELU}


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


class ActorCritic(nn.Module):
    """Subclasses implement forward(obs) -> (head output, value [B]) and may override value()."""

    head: CategoricalHead | GaussianHead

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)[1]

    def observe(self, obs: torch.Tensor, ranks=None) -> None:
        """Fold a training batch into statistics the network keeps about its inputs (none by default)."""

    @torch.no_grad()
    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, value = self(obs)
        action = self.head.sample(out, generator)
        return action, self.head.log_prob(out, action), value

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, value = self(obs)
        return self.head.log_prob(out, action), self.head.entropy(out), value

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head.mode(self(obs)[0])


def _make_head(in_dim: int, action_space: SpaceSpec) -> CategoricalHead | GaussianHead:
    if action_space.kind == "discrete":
        return CategoricalHead(in_dim, action_space.n)
    if len(action_space.shape) != 1:
        raise ValueError(f"unsupported action space {action_space}: box actions must be 1-D")
    return GaussianHead(in_dim, action_space.shape[0])


class NatureCNN(ActorCritic):
    """Shared conv trunk for (C, H, W) images; uint8 pixels are scaled to [0, 1] here, not on the wire."""

    def __init__(self, obs_shape: tuple[int, int, int], action_space: SpaceSpec, scale: float = 1 / 255,
                 activation: str = "relu", normalize_input: bool = False):
        super().__init__()
        self.scale = scale
        self.input_norm = PixelNormalizer(tuple(obs_shape)) if normalize_input else None
        act = ACTIVATION_LAYERS[activation]  # elu cannot die at the high rates the adaptive schedule may reach
        convs = nn.Sequential(
            layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4), HIDDEN_GAIN), act(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2), HIDDEN_GAIN), act(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1), HIDDEN_GAIN), act(),
            nn.Flatten(),
        )
        with torch.no_grad():  # flatten size depends on the resolution
            flat = convs(torch.zeros(1, *obs_shape)).shape[1]
        self.trunk = nn.Sequential(convs, layer_init(nn.Linear(flat, 512), HIDDEN_GAIN), act())
        self.head = _make_head(512, action_space)
        self.critic = layer_init(nn.Linear(512, 1), VALUE_GAIN)
        # channels-last (NHWC) convs: the same function, and oneDNN's CPU kernels for these shapes run the
        # update ~1.5x faster than in NCHW (benchmarks/update_cost.py)
        self.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs.float() * self.scale
        if self.input_norm is not None:
            x = self.input_norm(x)
        hidden = self.trunk(x.contiguous(memory_format=torch.channels_last))
        return self.head(hidden), self.critic(hidden).squeeze(-1)

    def observe(self, obs: torch.Tensor, ranks=None) -> None:
        if self.input_norm is not None:
            self.input_norm.observe(obs, self.scale, ranks)


def _mlp(in_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden), HIDDEN_GAIN), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden), HIDDEN_GAIN), nn.Tanh(),
    )


class MLPActorCritic(ActorCritic):
    """Separate policy and value MLPs (sharing hurts on vector tasks); multi-dim observations are flattened."""

    def __init__(self, obs_dim: int, action_space: SpaceSpec, hidden: int = 64):
        super().__init__()
        self.actor = _mlp(obs_dim, hidden)
        self.head = _make_head(hidden, action_space)
        self.critic = nn.Sequential(_mlp(obs_dim, hidden), layer_init(nn.Linear(hidden, 1), VALUE_GAIN))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs.float().flatten(1)
        return self.head(self.actor(x)), self.critic(x).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs.float().flatten(1)).squeeze(-1)  # skip the policy network


def build_model(obs_space: SpaceSpec, action_space: SpaceSpec, cfg: ModelConfig) -> ActorCritic:
    if not (action_space.kind == "discrete" or len(action_space.shape) == 1):
        raise ValueError(f"unsupported action space {action_space}: need discrete or 1-D box")
    if obs_space.kind != "box":
        raise ValueError(f"unsupported observation space {obs_space}: need a box")
    shape = obs_space.shape
    is_image = len(shape) == 3 and np.dtype(obs_space.dtype) == np.uint8
    kind = cfg.kind
    if kind == "auto":
        if is_image:
            kind = "cnn"
        elif len(shape) == 1:
            kind = "mlp"
        else:
            raise ValueError(f"unsupported observation space {obs_space} for model.kind='auto': "
                             "need (C, H, W) uint8 images or 1-D vectors (or force model.kind)")
    if kind == "cnn":
        if len(shape) != 3:
            raise ValueError(f"unsupported observation space {obs_space} for model.kind='cnn': need (C, H, W)")
        scale = 1 / 255 if np.dtype(obs_space.dtype) == np.uint8 else 1.0
        try:
            return NatureCNN(shape, action_space, scale=scale, activation=cfg.activation,
                             normalize_input=cfg.normalize_input)
        except RuntimeError as exc:  # a resolution too small for the 8x8/4, 4x4/2, 3x3/1 convs
            raise ValueError(f"unsupported observation space {obs_space} for the Nature CNN: {exc}") from None
    if kind == "mlp":
        if len(shape) == 0:
            raise ValueError(f"unsupported observation space {obs_space} for model.kind='mlp': scalar box")
        return MLPActorCritic(obs_space.size, action_space, hidden=cfg.hidden)
    raise ValueError(f"unknown model.kind {cfg.kind!r} for observation space {obs_space}")
