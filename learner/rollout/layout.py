"""What one step of a rollout holds, per env slot: the observation's and the action's shape and dtype."""
from __future__ import annotations

from dataclasses import dataclass

import torch

TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float64": torch.float32}


@dataclass(frozen=True)
class Layout:
    obs_shape: tuple
    obs_dtype: torch.dtype
    action_shape: tuple
    action_dtype: torch.dtype

    @classmethod
    def of(cls, obs_space, action_space) -> "Layout":
        """From the env's spaces (protocol.spaces.SpaceSpec): float64 observations are kept as float32."""
        return cls(tuple(obs_space.shape), TORCH_DTYPES.get(obs_space.dtype, torch.float32),
                   tuple(action_space.shape), torch.long if action_space.kind == "discrete" else torch.float32)
