"""The policy wrapper: what reaches the network, and which observations count in the normalizer's statistics."""
import numpy as np
import torch

from learner.config import ModelConfig
from learner.model.networks import build_model
from learner.model.normalize import ObsNormalizer
from learner.collection.inference import Inference
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="box", shape=(1,), dtype="float32", low=[-2.0], high=[2.0])


def make_policy():
    torch.manual_seed(0)
    model = build_model(OBS, ACT, ModelConfig(hidden=8))
    return Inference(model, ACT, torch.device("cpu"), ObsNormalizer((3,)), seed=0), model


def norm_state(policy):
    return {k: v.clone() for k, v in policy.obs_norm.state_dict().items()}


def test_act_counts_observations_value_does_not():
    policy, model = make_policy()
    rng = np.random.default_rng(0)
    fresh = rng.normal(5.0, 2.0, size=(6, 3)).astype(np.float32)
    result = policy.act([fresh[:4], fresh[4:]])  # two groups, one batch
    after_act = norm_state(policy)
    assert after_act["rms.count"].item() > 6 - 1e-3, "act() counts the fresh observations"
    np.testing.assert_allclose(after_act["rms.mean"].numpy(), fresh.mean(0), rtol=1e-3)
    # what the rollout stores is what the network saw: normalized with the stats including this batch
    expected = np.clip((fresh - fresh.mean(0)) / np.sqrt(fresh.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(np.asarray(result.obs), expected, rtol=1e-3, atol=1e-3)

    bootstrap = rng.normal(-50.0, 9.0, size=(4, 3)).astype(np.float32)  # far from the fresh data
    values = policy.value(bootstrap)
    values_t = policy.value(torch.from_numpy(bootstrap))
    for key, before in after_act.items():
        assert torch.equal(policy.obs_norm.state_dict()[key], before), f"value() changed the normalizer's {key}"
    with torch.no_grad():
        ref = model.value(policy.obs_norm(torch.from_numpy(bootstrap)))
    torch.testing.assert_close(values, ref)
    torch.testing.assert_close(values_t, ref)
