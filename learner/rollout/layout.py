"""What one step of a rollout holds, per env slot: the observation's and the action's shape and dtype,
whether the observation is a stack of frames kept one frame per step (learner/rollout/frames.py), and with a
recurrent core (model.core) its state: where each step's episode starts, the state at each sequence's first
step (every `bptt` steps), and the weights version that acted (policy lag: which steps the update's first
replay reproduces exactly, learner/advantages/batch.py's Sequences.acted_by)."""
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
    stack: int = 1  # > 1: obs_shape is (stack, *frame), stacked on the learner; the rollout keeps one frame per step
    state_size: int = 0  # > 0: a recurrent core's floats of state per env slot
    bptt: int = 0  # with state_size: steps per sequence (0: the whole rollout)

    @classmethod
    def of(cls, obs_space, action_space, stack: int = 1, model=None, bptt: int = 0) -> "Layout":
        """From the env's spaces (protocol.spaces.SpaceSpec): float64 observations are kept as float32; `model`
        (an ActorCritic): its recurrent state's size, with sequences of `bptt` steps (ppo.bptt)."""
        return cls(tuple(obs_space.shape), TORCH_DTYPES.get(obs_space.dtype, torch.float32),
                   tuple(action_space.shape), torch.long if action_space.kind == "discrete" else torch.float32, stack,
                   model.state_size if model is not None else 0, bptt)

    def sequence(self, num_steps: int) -> int:
        """Steps per sequence of a rollout of num_steps (a recurrent core's)."""
        return self.bptt or num_steps

    def rows(self, num_steps: int, width: int) -> dict[str, tuple[tuple, torch.dtype]]:
        """The per-step arrays of a rollout of num_steps x width columns: name -> (shape, dtype). Stacked:
        `frames` and `restarts` in place of `obs` (learner/rollout/frames.py)."""
        T, N = num_steps, width
        obs = ({"frames": ((T + self.stack - 1, N, *self.obs_shape[1:]), self.obs_dtype), "restarts": ((T, N), torch.bool)}
               if self.stack > 1 else {"obs": ((T, N, *self.obs_shape), self.obs_dtype)})
        recurrent = ({"starts": ((T, N), torch.bool),  # the state was zeroed before this step
                      "states": ((T // self.sequence(T), N, self.state_size), torch.float32),  # at sequence starts
                      "versions": ((T, N), torch.int32)}  # of the weights that acted
                     if self.state_size else {})
        return {**obs, "actions": ((T, N, *self.action_shape), self.action_dtype), "logprobs": ((T, N), torch.float32),
                "values": ((T, N), torch.float32), "rewards": ((T, N), torch.float32),
                "terminated": ((T, N), torch.bool), "truncated": ((T, N), torch.bool), **recurrent}
