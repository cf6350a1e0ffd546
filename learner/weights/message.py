"""The weights message's payload: what the learner publishes after each update (the model's floating
tensors, plus the observation normalizer's statistics under "obs_norm."), and how a subscriber (the
eval worker, remote tools) loads it back."""
from __future__ import annotations

import numpy as np
import torch


def state_arrays(model: torch.nn.Module) -> dict:
    return {name: t.detach().float().cpu().contiguous().numpy() for name, t in model.state_dict().items()
            if t.is_floating_point()}


class _BroadcastState:
    """What the learner publishes as its weights: the model's tensors under their own names, plus the
    observation normalizer's statistics under "obs_norm." when it has one (a subscriber needs both)."""

    def __init__(self, model: torch.nn.Module, obs_norm: torch.nn.Module | None):
        self.model, self.obs_norm = model, obs_norm

    def state_dict(self) -> dict:
        state = dict(self.model.state_dict())
        if self.obs_norm is not None:
            state.update({f"obs_norm.{k}": v for k, v in self.obs_norm.state_dict().items()})
        return state


def broadcast_state(model: torch.nn.Module, obs_norm: torch.nn.Module | None = None):
    """The object to hand WeightPublisher.publish: the model itself when there is no obs normalizer."""
    return model if obs_norm is None else _BroadcastState(model, obs_norm)


@torch.no_grad()
def load_broadcast(model: torch.nn.Module, obs_norm: torch.nn.Module | None, tensors: dict) -> None:
    """Copy a Weights message's arrays into model (and obs_norm); every floating tensor of the model must be there."""
    state = model.state_dict()
    missing = [k for k, t in state.items() if t.is_floating_point() and k not in tensors]
    if missing:
        raise ValueError(f"weights message lacks {missing[:4]}")
    for key, t in state.items():
        if key in tensors:
            t.copy_(_tensor(tensors[key]).reshape(t.shape))
    if obs_norm is not None:
        for key, t in obs_norm.state_dict().items():
            arr = tensors.get(f"obs_norm.{key}")
            if arr is not None:
                t.copy_(_tensor(arr).reshape(t.shape))


def _tensor(arr) -> torch.Tensor:
    """A received array is a read-only view of the message's frame: copy it (torch.from_numpy warns on
    a read-only array, and writing through the shared view would be undefined)."""
    return torch.tensor(np.asarray(arr))
