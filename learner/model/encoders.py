"""Encoders: observations -> a feature vector [B, out_dim] that the policy and value heads share.

PixelEncoder does what every image network needs (uint8 pixels scaled to [0, 1] here, not on the wire; the
optional per-pixel input normalization; channels-last memory) around a conv body, so a new network is only
its body (the contract: learner/model/registry.py, where model.kind names it): nature_body (Mnih et al. 2015,
CleanRL's Atari network) or impala_body (Espeholt et al. 2018, the 15-layer residual network of IMPALA,
CleanRL's Machado-protocol script and Sample Factory).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from learner.model.heads import layer_init
from learner.model.normalize import PixelNormalizer

HIDDEN_GAIN = math.sqrt(2)
ACTIVATION_LAYERS = {"relu": nn.ReLU, "elu": nn.ELU}


def nature_body(in_channels: int, flat: int | None, activation: str) -> nn.Sequential:
    """Three convs (8x8/4, 4x4/2, 3x3/1), then 512 features. `flat` is the conv output size (None: measure)."""
    act = ACTIVATION_LAYERS[activation]  # elu cannot die at the high rates the adaptive schedule may reach
    convs = nn.Sequential(
        layer_init(nn.Conv2d(in_channels, 32, 8, stride=4), HIDDEN_GAIN), act(),
        layer_init(nn.Conv2d(32, 64, 4, stride=2), HIDDEN_GAIN), act(),
        layer_init(nn.Conv2d(64, 64, 3, stride=1), HIDDEN_GAIN), act(),
        nn.Flatten(),
    )
    return nn.Sequential(convs, layer_init(nn.Linear(flat, 512), HIDDEN_GAIN), act())


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, activation: str):
        super().__init__()
        act = ACTIVATION_LAYERS[activation]
        self.body = nn.Sequential(act(), layer_init(nn.Conv2d(channels, channels, 3, padding=1), HIDDEN_GAIN),
                                  act(), layer_init(nn.Conv2d(channels, channels, 3, padding=1), HIDDEN_GAIN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def impala_stage(in_channels: int, channels: int, activation: str) -> nn.Sequential:
    """A conv, a 3x3/2 max-pool (halving the resolution), two residual blocks."""
    return nn.Sequential(layer_init(nn.Conv2d(in_channels, channels, 3, padding=1), HIDDEN_GAIN),
                         nn.MaxPool2d(3, stride=2, padding=1),
                         ResidualBlock(channels, activation), ResidualBlock(channels, activation))


def impala_body(in_channels: int, flat: int | None, activation: str,
                channels: tuple[int, ...] = (16, 32, 32)) -> nn.Sequential:
    """Three stages of 16, 32, 32 channels (15 conv layers), then 256 features."""
    stages = [impala_stage(c_in, c_out, activation) for c_in, c_out in zip((in_channels, *channels), channels)]
    act = ACTIVATION_LAYERS[activation]
    convs = nn.Sequential(*stages, act(), nn.Flatten())
    return nn.Sequential(convs, layer_init(nn.Linear(flat, 256), HIDDEN_GAIN), act())


class PixelEncoder(nn.Module):
    """(C, H, W) images -> features: scale, normalize (optional), channels-last, then the conv body that
    `make_body` builds (a registry.py body: nature_body by default). (H, W) images (an Atari frame not stacked,
    env.frame_stack = 1) are one channel: each batch gets the channel axis as a view."""

    def __init__(self, obs_shape: tuple[int, ...], make_body=nature_body, scale: float = 1 / 255,
                 activation: str = "relu", normalize_input: bool = False):
        super().__init__()
        self.scale = scale
        self.add_channel = len(obs_shape) == 2
        obs_shape = (1, *obs_shape) if self.add_channel else tuple(obs_shape)
        self.input_norm = PixelNormalizer(tuple(obs_shape)) if normalize_input else None
        flat = _conv_output_size(make_body, obs_shape, activation)
        self.trunk = make_body(obs_shape[0], flat, activation)
        self.out_dim = self.trunk[-2].out_features
        # channels-last (NHWC) convs: the same function, and oneDNN's CPU kernels for these shapes run the
        # update ~1.5x faster than in NCHW (benchmarks/update_cost.py)
        self.to(memory_format=torch.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.trunk(body_input(self._channels(obs), self.scale, self.input_norm))

    def observe(self, obs: torch.Tensor, ranks=None) -> None:
        if self.input_norm is not None:
            self.input_norm.observe(self._channels(obs), self.scale, ranks)

    def _channels(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) as they are; (B, H, W) as (B, 1, H, W)."""
        return obs.unsqueeze(1) if self.add_channel else obs


CPU_CHUNK = 64  # samples per in-place pass on the CPU: ~7 MB of float32 pixels, which stay in cache between the passes


def body_input(obs: torch.Tensor, scale: float, norm: PixelNormalizer | None) -> torch.Tensor:
    """(B, C, H, W) pixels -> the conv body's input: float32 pixels x scale, standardized and clipped by `norm`
    (if any), in channels-last memory, as the autocast dtype when autocast is on (ppo.update_precision bf16),
    else float32.

    The arithmetic is that of one pass per op (obs.float() * scale, then norm(x)), in the same order, so the
    values are bit-identical to it; but the ops run in place, on the CPU a cache-sized chunk of samples at a
    time, in the pixels' own (C, H, W) order, where the statistics broadcast contiguously; one last pass per
    chunk writes it channels-last (rounding once to the autocast dtype). Pong-fast's minibatch of 2,048
    stacks took 432 ms as whole-tensor ops, and an inference batch of 24 takes ~1.5 ms instead of ~3.7 ms
    with the ops run channels-last against permuted statistics (benchmarks/update_cost.py)."""
    n, c, h, w = obs.shape
    device = obs.device
    dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else torch.float32
    out = torch.empty((n, h, w, c), dtype=dtype, device=device)  # NHWC: channels-last once permuted back
    stats = None if norm is None else norm.stats(device)
    step = max(min(CPU_CHUNK if device.type == "cpu" else n, n), 1)
    work = torch.empty((step, c, h, w), dtype=torch.float32, device=device)
    for start in range(0, n, step):
        x = work[:min(step, n - start)]
        x.copy_(obs[start:start + step])
        x.mul_(scale)
        if stats is not None:
            x.sub_(stats[0]).div_(stats[1]).clamp_(-norm.clip, norm.clip)
        out[start:start + step].copy_(x.permute(0, 2, 3, 1))  # to NHWC; float32 -> autocast's dtype: one rounding
    return out.permute(0, 3, 1, 2)


def _conv_output_size(make_body, obs_shape: tuple[int, int, int], activation: str) -> int:
    """The flattened conv output for this resolution, from a throwaway body whose init draws no random
    numbers (so the real body's initialization is the same as if the size had been known)."""
    state = torch.random.get_rng_state()
    try:
        convs = make_body(obs_shape[0], 1, activation)[0]
        with torch.no_grad():
            return convs(torch.zeros(1, *obs_shape)).shape[1]
    finally:
        torch.random.set_rng_state(state)


class FlatEncoder(nn.Module):
    """Vectors (or any box) -> float features, flattened; no parameters."""

    def __init__(self, obs_size: int):
        super().__init__()
        self.out_dim = obs_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float().flatten(1)

    def observe(self, obs: torch.Tensor, ranks=None) -> None:
        """Nothing to keep."""
