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


def test_random_discrete_actions_come_from_a_pool_drawn_ahead_in_order():
    """--random-policy: numpy's integers() is drawn RANDOM_POOL at a time (a call costs tens of microseconds),
    and each batch takes the next actions of the pool, across pool boundaries and for batches bigger than it."""
    from learner.collection.inference import RANDOM_POOL
    space = SpaceSpec(kind="discrete", n=6)
    policy = Inference(None, space, torch.device("cpu"), None, seed=3, random_actions=True)
    sizes = [16] * (RANDOM_POOL // 16 - 1) + [7, 20, RANDOM_POOL + 5, 3]
    results = [policy.act([np.zeros((n, 2), np.uint8)]) for n in sizes]
    assert [len(r.actions) for r in results] == sizes
    assert all(r.actions.dtype == np.int64 and not r.actions.flags.writeable for r in results)
    assert all((r.logprobs == 0).all() and (r.values == 0).all() and len(r.values) == len(r.actions) for r in results)
    rng = np.random.default_rng(3)
    pools = [rng.integers(0, 6, size=RANDOM_POOL, dtype=np.int64),  # the first pool: up to the batch of 20
             rng.integers(0, 6, size=RANDOM_POOL, dtype=np.int64),  # the second: from the batch of 20 on
             rng.integers(0, 6, size=RANDOM_POOL + 5, dtype=np.int64), rng.integers(0, 6, size=RANDOM_POOL, dtype=np.int64)]
    first = np.concatenate([r.actions for r in results[:-3]])
    np.testing.assert_array_equal(first, pools[0][:len(first)])
    np.testing.assert_array_equal(results[-3].actions, pools[1][:20])
    np.testing.assert_array_equal(results[-2].actions, pools[2])
    np.testing.assert_array_equal(results[-1].actions, pools[3][:3])


def test_random_actions_with_obs_normalization_still_count_and_return_the_normalized_observations():
    """--random-policy with normalize.obs: the observations the rollout keeps are the normalized ones, and the
    statistics learn from them as with the network acting (a later run from this one sees the same scale)."""
    policy = Inference(None, SpaceSpec(kind="discrete", n=3), torch.device("cpu"), ObsNormalizer((2,)), seed=0,
                       random_actions=True)
    obs = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)
    result = policy.act([obs])
    assert float(policy.obs_norm.rms.count) > 1  # the two observations were counted
    with torch.no_grad():
        expected = policy.obs_norm(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(result.obs, expected)
    assert len(result.actions) == 2 and (result.values == 0).all()
