"""Policy lag with value normalization (issue 40): a rollout collected by the lagged policy while the update moves
the training network and value statistics gets the advantages and returns a synchronous learner computes from
the same weights and statistics snapshot, and those of an independent reference on raw values."""
import copy
import math

import numpy as np
import torch

from learner.advantages.batch import rollout_to_batch
from learner.collection.inference import Inference, served_modules
from learner.config import ModelConfig
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from protocol.spaces import SpaceSpec
from tests.learner.advantages.test_batch import GAMMA, LAM, reference_gae

OBS = SpaceSpec(kind="box", shape=(4,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=2)
T, N = 6, 2


def snapshot():
    """Weights and value statistics as an update left them (returns around 40)."""
    torch.manual_seed(0)
    model = build_model(OBS, ACT, ModelConfig(hidden=8))
    vn = ValueNormalizer()
    vn.update_moments(vn.moments(torch.from_numpy(np.random.default_rng(1).normal(40.0, 6.0, size=64))))
    return model, vn


def the_next_update_runs(model, vn) -> None:
    """What the update of the previous rollout does to the training modules while this rollout is collected."""
    vn.update_moments(vn.moments(torch.full((64,), 500.0)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)


def collect(policy: Inference, rng: np.random.Generator) -> tuple[RolloutBuffer, np.ndarray]:
    """T steps of N columns acted on by `policy`; column 0 terminates at t=2, column 1 is truncated at t=3.
    Returns the rollout and the observations acted on, [T, N, 4]."""
    buf = RolloutBuffer([0, 1], T, Layout((4,), torch.float32, (), torch.int64), torch.device("cpu"))
    seen = rng.standard_normal((T, N, 4)).astype(np.float32)
    for t, obs in enumerate(seen):
        result = policy.act([obs])
        buf.record_actions([0, 1], torch.from_numpy(obs), torch.from_numpy(result.actions),
                           torch.from_numpy(np.asarray(result.logprobs)), torch.from_numpy(np.asarray(result.values)))
        buf.record_outcome([0, 1], rng.normal(1.0, 0.5, size=N).astype(np.float32), np.array([t == 2, False]),
                           np.array([False, t == 3]))
    buf.final_obs[(3, 1)] = rng.standard_normal(4).astype(np.float32)
    for col in range(N):
        buf.bootstrap_obs[col] = rng.standard_normal(4).astype(np.float32)
    return buf, seen


def reference(buf: RolloutBuffer, obs: np.ndarray, model, vn) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns from raw values written out: the snapshot's critic times its std plus its mean."""
    mean, std = float(vn.rms.mean), math.sqrt(float(vn.rms.var) + 1e-5)

    def raw(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.value(torch.as_tensor(obs)).double().numpy() * std + mean

    values = np.stack([raw(obs[t]) for t in range(T)])
    next_values = np.vstack([values[1:], raw(np.stack([buf.bootstrap_obs[c] for c in range(N)]))[None]])
    next_values[3, 1] = raw(buf.final_obs[(3, 1)][None])[0]
    terminated, truncated = buf.terminated.numpy(), buf.truncated.numpy()
    adv = reference_gae(buf.rewards.numpy().astype(np.float64), values, next_values, terminated, truncated)
    return adv, adv + values


def test_a_lagged_rollout_gets_the_advantages_of_its_own_weights_and_statistics():
    model, vn = snapshot()
    frozen_model, frozen_vn = copy.deepcopy(model), copy.deepcopy(vn)  # the snapshot, for the reference
    served, served_vn = served_modules(model, vn, policy_lag=True)
    lagged = Inference(served, ACT, torch.device("cpu"), None, seed=0, value_norm=served_vn)
    synchronous = Inference(copy.deepcopy(model), ACT, torch.device("cpu"), None, seed=0,
                            value_norm=copy.deepcopy(vn))  # a learner without lag at the same version
    the_next_update_runs(model, vn)
    lag_buf, obs = collect(lagged, np.random.default_rng(5))  # while the update runs
    sync_buf, _ = collect(synchronous, np.random.default_rng(5))
    assert torch.equal(lag_buf.actions, sync_buf.actions) and torch.equal(lag_buf.logprobs, sync_buf.logprobs)

    with_lag = rollout_to_batch(lag_buf, lagged.value, GAMMA, LAM).data
    without = rollout_to_batch(sync_buf, synchronous.value, GAMMA, LAM).data
    for key in ("values", "advantages", "returns"):
        assert torch.equal(with_lag[key], without[key]), key
    adv, ret = reference(lag_buf, obs, frozen_model, frozen_vn)
    np.testing.assert_allclose(with_lag["advantages"].numpy(), adv.reshape(-1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(with_lag["returns"].numpy(), ret.reshape(-1), rtol=1e-4, atol=1e-3)


def test_gae_run_again_with_the_critic_an_update_starts_from_matches_that_critics_own_reference():
    """ppo.lag_fresh_advantages: a rollout acted on by the lagged critic, its GAE run again (GaeInputs.rerun) with the
    values of the critic the update starts from (every sample, the bootstrap and the final observation) gives
    that critic's reference advantages and returns, not the acting critic's."""
    model, vn = snapshot()
    served, served_vn = served_modules(model, vn, policy_lag=True)
    lagged = Inference(served, ACT, torch.device("cpu"), None, seed=0, value_norm=served_vn)
    the_next_update_runs(model, vn)  # the critic (and statistics) the next update starts from
    buf, obs = collect(lagged, np.random.default_rng(5))
    batch = rollout_to_batch(buf, lagged.value, GAMMA, LAM,
                             keep_gae_inputs=lambda o: lagged.prepare(o, update_stats=False)).data
    g = batch["gae"]
    assert g.extras[0].shape == (3, 4)  # two bootstrap observations and one final one

    def raw(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return vn.denormalize(model.value(x))

    values, adv, ret = g.rerun(raw(batch["obs"]), raw(g.extras[0]))
    ref_adv, ref_ret = reference(buf, obs, model, vn)
    np.testing.assert_allclose(adv.numpy(), ref_adv.reshape(-1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ret.numpy(), ref_ret.reshape(-1), rtol=1e-4, atol=1e-3)
    assert torch.equal(values, raw(batch["obs"]).float())
    stale, _ = reference(buf, obs, *snapshot())
    assert not np.allclose(adv.numpy(), stale.reshape(-1), rtol=1e-4, atol=1e-3), "the acting critic's"
