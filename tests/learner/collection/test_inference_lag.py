"""Policy lag with value normalization (issue 40): the served policy de-normalizes its critic with a snapshot of
the statistics its weights were trained against, while the update running meanwhile folds its returns into the
training statistics; follow() then brings weights and statistics over together."""
import math

import numpy as np
import pytest
import torch

from learner.config import ModelConfig, PPOConfig
from learner.collection.inference import Inference, served_modules
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.update.ppo import PPOUpdater
from learner.update.runner import UpdateRunner
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(4,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=2)
EPS = 1e-5  # ValueNormalizer's


def merged(prior: tuple[float, float, float], xs: np.ndarray) -> tuple[float, float, float]:
    """(mean, var, count) after merging the batch xs into the prior, by hand (Chan et al.)."""
    mean_a, var_a, n_a = prior
    n_b, mean_b, var_b = len(xs), float(np.mean(xs)), float(np.var(xs))
    n = n_a + n_b
    delta = mean_b - mean_a
    return mean_a + delta * n_b / n, (var_a * n_a + var_b * n_b + delta * delta * n_a * n_b / n) / n, n


def trained_pair():
    """A network and value statistics that a first update left (returns around 30)."""
    torch.manual_seed(0)
    model = build_model(OBS, ACT, ModelConfig(hidden=8))
    vn = ValueNormalizer()
    first = np.random.default_rng(1).normal(30.0, 5.0, size=64)
    vn.update_moments(vn.moments(torch.tensor(first)))
    return model, vn, merged((0.0, 1.0, 1e-4), first)


def by_hand(model, stats, obs: np.ndarray) -> np.ndarray:
    """The critic's output de-normalized with the statistics (mean, var, count), written out."""
    mean, var, _ = stats
    with torch.no_grad():
        out = model.value(torch.from_numpy(obs)).double().numpy()
    return out * math.sqrt(var + EPS) + mean


def update_batch(model, n=32, seed=2) -> dict[str, torch.Tensor]:
    """A batch whose returns (around 200) are far from the first statistics: the update moves them."""
    rng = np.random.default_rng(seed)
    obs = torch.from_numpy(rng.standard_normal((n, 4)).astype(np.float32))
    actions = torch.from_numpy(rng.integers(0, 2, size=n))
    with torch.no_grad():
        logprobs = model.evaluate(obs, actions)[0]
    returns = torch.from_numpy(rng.normal(200.0, 20.0, size=n).astype(np.float32))
    return {"obs": obs, "actions": actions, "logprobs": logprobs, "values": torch.zeros(n),
            "advantages": torch.from_numpy(rng.standard_normal(n).astype(np.float32)), "returns": returns}


def test_without_lag_the_policy_serves_the_training_modules_themselves():
    model, vn, _ = trained_pair()
    assert served_modules(model, vn, policy_lag=False) == (model, vn)
    copies = served_modules(model, vn, policy_lag=True)
    assert copies[0] is not model and copies[1] is not vn and served_modules(model, None, True)[1] is None


def test_the_lagged_policy_keeps_its_snapshot_through_the_update_and_follows_weights_and_statistics_together():
    model, vn, before = trained_pair()
    served, served_vn = served_modules(model, vn, policy_lag=True)
    policy = Inference(served, ACT, torch.device("cpu"), None, seed=0, value_norm=served_vn)
    obs = np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)
    reference = by_hand(model, before, obs)
    np.testing.assert_allclose(policy.value(obs).double().numpy(), reference, rtol=1e-5)

    batch = update_batch(model)
    updater = PPOUpdater(model, PPOConfig(update_epochs=2, num_minibatches=2), "cpu", value_norm=vn)
    runner = UpdateRunner(updater, torch.Generator().manual_seed(0), 1, policy_lag=True)
    runner.start(batch, 0.0)  # the next rollout would be collected now
    stats = runner.result()
    after = merged(before, batch["returns"].double().numpy())
    # order: the update folded its own returns into the training statistics before training against them
    assert (float(vn.rms.mean), float(vn.rms.var)) == pytest.approx(after[:2], rel=1e-9)
    assert stats["value_norm_mean"] == pytest.approx(after[0], rel=1e-9)
    # the served policy still speaks its own weights' units: the update moved neither its weights nor its statistics
    assert (float(served_vn.rms.mean), float(served_vn.rms.var)) == pytest.approx(before[:2], rel=1e-12)
    np.testing.assert_allclose(policy.value(obs).double().numpy(), reference, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(policy.act([obs]).values, np.float64), reference, rtol=1e-5)

    policy.follow(model, vn)  # after the update's join: the new weights with the statistics they were trained on
    np.testing.assert_allclose(policy.value(obs).double().numpy(), by_hand(model, after, obs), rtol=1e-5)
    assert float(served_vn.rms.count) == pytest.approx(after[2], rel=1e-12)
