"""The weights message's payload (learner/weights/message.py): the model's floating tensors, the observation
normalizer's statistics beside them, and loading them back into another model."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from learner.config import ModelConfig
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer
from learner.weights.message import broadcast_state, load_broadcast, state_arrays
from protocol import messages as m
from protocol.spaces import SpaceSpec
from tests.integration.cluster import ROOT


def test_broadcast_carries_obs_norm_and_round_trips():
    obs = SpaceSpec(kind="box", shape=(3,), dtype="float32", low=[-1.0] * 3, high=[1.0] * 3)
    act = SpaceSpec(kind="box", shape=(1,), dtype="float32", low=[-2.0], high=[2.0])
    model, norm = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
    norm.update(torch.randn(64, 3) * 3 + 1)
    assert broadcast_state(model, None) is model  # no normalizer: exactly the model's tensors
    msg = m.decode(m.encode(m.Weights(5, state_arrays(broadcast_state(model, norm)))))
    model2, norm2 = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
    load_broadcast(model2, norm2, msg.tensors)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k
    np.testing.assert_allclose(norm2.rms.mean.numpy(), norm.rms.mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(float(norm2.rms.count), float(norm.rms.count), rtol=1e-6)
    with pytest.raises(ValueError, match="lacks"):
        load_broadcast(model2, None, {})


READ_ONLY_BROADCAST = """
import torch
from learner.config import ModelConfig
from learner.weights.message import broadcast_state, load_broadcast
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer
from learner.weights.message import state_arrays
from protocol.spaces import SpaceSpec
obs = SpaceSpec(kind="box", shape=(3,), dtype="float32", low=[-1.0] * 3, high=[1.0] * 3)
act = SpaceSpec(kind="discrete", n=2)
model, norm = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
tensors = {k: v.copy() for k, v in state_arrays(broadcast_state(model, norm)).items()}
for arr in tensors.values():
    arr.setflags(write=False)
model2, norm2 = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
load_broadcast(model2, norm2, tensors)
assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))
print("loaded")
"""


@pytest.mark.integration
def test_load_broadcast_takes_read_only_arrays_without_a_warning():
    """A Weights message's arrays are read-only views of the received frames (issue 25, item 10): torch's
    'The given NumPy array is not writable' warning reached the eval worker's console on every run. In a
    fresh process, since torch gives that warning once per process."""
    result = subprocess.run([sys.executable, "-W", "error", "-c", READ_ONLY_BROADCAST], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "loaded\n", result.stderr[-2000:]
    assert "not writable" not in result.stderr


class Mixed(torch.nn.Module):
    """A float64 weight, an integer buffer (no weight) and a non-contiguous float buffer."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(6, dtype=torch.float64).reshape(2, 3))
        self.register_buffer("steps", torch.tensor(7))
        self.register_buffer("transposed", torch.arange(6.0).reshape(2, 3).t())


def test_state_arrays_are_the_floating_tensors_as_contiguous_float32():
    arrays = state_arrays(Mixed())
    assert sorted(arrays) == ["transposed", "weight"]  # the integer buffer is not sent
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays.values())
    np.testing.assert_array_equal(arrays["weight"], [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(arrays["transposed"], [[0, 3], [1, 4], [2, 5]])


def test_a_message_without_obs_norm_statistics_leaves_the_normalizer_as_it_was():
    obs, act = SpaceSpec(kind="box", shape=(3,), dtype="float32"), SpaceSpec(kind="discrete", n=2)
    model, norm = build_model(obs, act, ModelConfig()), ObsNormalizer((3,))
    norm.update(torch.randn(16, 3) + 5)
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    load_broadcast(build_model(obs, act, ModelConfig()), norm, state_arrays(model))
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
