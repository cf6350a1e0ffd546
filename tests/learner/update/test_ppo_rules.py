"""rl_games' update rules as switches: the KL-adaptive learning rate and value normalization, each checked
against a hand computation; the defaults stay CleanRL's."""
import math

import numpy as np
import pytest
import torch

from learner.config import ConfigError, PPOConfig, from_dict, lr_schedule
from learner.update.ranks import Ranks
from learner.model.normalize import RunningMeanStd, ValueNormalizer
from learner.collection.inference import Inference
from learner.update.loss import ppo_loss
from learner.update.ppo import PPOUpdater
from learner.update.rates import adaptive_lr
from protocol.spaces import SpaceSpec
from tests.learner.update.test_ppo_loss import make_batch, make_model


class OtherRankKL(Ranks):
    """One rank of a job whose other rank reports `extra` more weighted KL per minibatch (a [1] tensor is a
    minibatch KL; anything else is summed as one rank would)."""

    def __init__(self, extra: float):
        super().__init__()
        self.extra, self.kls = extra, []

    def sum_tensor(self, t):
        if t.shape == (1,):
            self.kls.append(float(t[0]) + self.extra)
            return t + self.extra
        return t


@pytest.mark.parametrize("lr,kl,expected", [
    (1e-3, 0.03, 1e-3 / 1.5),   # KL > 2 x 0.01: slow down
    (1e-3, 0.004, 1.5e-3),      # KL < 0.01 / 2: speed up
    (1e-3, 0.01, 1e-3),         # in between: keep
    (1e-3, 0.02, 1e-3),         # exactly 2 x threshold: keep (strictly greater slows down)
    (1e-3, 0.005, 1e-3),        # exactly half: keep
    (9e-3, 0.0, 1e-2),          # 1.35e-2 clamped to lr_max
    (1.2e-6, 1.0, 1e-6),        # 8e-7 clamped to lr_min
])
def test_adaptive_rule_by_hand(lr, kl, expected):
    assert adaptive_lr(lr, kl, 0.01, 1e-6, 1e-2) == pytest.approx(expected, rel=1e-12)


def test_default_schedule_is_cleanrls_linear_and_anneal_lr_still_switches_it_off():
    assert lr_schedule(PPOConfig()) == "linear"
    assert lr_schedule(PPOConfig(anneal_lr=False)) == "constant"
    assert lr_schedule(PPOConfig(lr_schedule="adaptive", anneal_lr=False)) == "adaptive"
    assert PPOUpdater(make_model(), PPOConfig(learning_rate=1e-3, lr_schedule="constant"), "cpu").learning_rate(0.9) == 1e-3


@pytest.mark.parametrize("table,match", [
    ({"lr_schedule": "cosine"}, "ppo.lr_schedule must be linear, constant or adaptive"),
    ({"lr_min": 1e-2, "lr_max": 1e-3}, "ppo.lr_min and ppo.lr_max"),
    ({"lr_kl_threshold": 0.0}, "ppo.lr_kl_threshold must be > 0"),
    ({"lr_adapt_every": "update"}, "ppo.lr_adapt_every must be epoch or minibatch"),
    ({"lr_schedule": "adaptive", "learning_rate": 0.5}, "must lie in"),
])
def test_schedule_keys_are_validated(table, match):
    with pytest.raises(ConfigError, match=match):
        from_dict({"ppo": table})


@pytest.mark.parametrize("every,steps", [("minibatch", 8), ("epoch", 2)])
def test_adaptive_lr_grows_by_1_5_per_step_of_the_rule_up_to_lr_max(every, steps):
    """Threshold 10 (the most ppo.lr_kl_threshold takes): every KL is far below half of it, so the rate goes
    x1.5 once per minibatch (8 of them) or once per epoch (2, rl_games' discrete PPO)."""
    model = make_model()
    cfg = PPOConfig(lr_schedule="adaptive", learning_rate=1e-4, lr_kl_threshold=10.0, lr_max=1.0,
                    update_epochs=2, num_minibatches=4, lr_adapt_every=every)
    updater = PPOUpdater(model, cfg, "cpu")
    stats = updater.update(make_batch(model), progress=0.7)  # progress plays no part
    assert updater.lr == pytest.approx(1e-4 * 1.5 ** steps, rel=1e-12)
    assert stats["learning_rate"] == pytest.approx(1e-4 * 1.5 ** steps, rel=1e-12)
    assert updater.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * 1.5 ** steps, rel=1e-12)
    capped = PPOUpdater(make_model(), PPOConfig(lr_schedule="adaptive", learning_rate=1e-3, lr_kl_threshold=10.0,
                                                lr_max=2e-3, update_epochs=2, num_minibatches=4,
                                                lr_adapt_every=every), "cpu")
    capped.update(make_batch(capped.model), progress=0.0)
    assert capped.lr == pytest.approx(2e-3)  # 1.5e-3, then 2.25e-3 clamped


def test_adaptive_lr_follows_the_job_wide_kl_of_each_minibatch():
    """Another rank with a large KL (summed in by the ranks' all-reduce) makes every step slow down, and the
    rate is the hand fold of the rule over the job's KLs, minibatch after minibatch."""
    model = make_model()
    ranks = OtherRankKL(extra=1.0)
    cfg = PPOConfig(lr_schedule="adaptive", learning_rate=1e-3, lr_kl_threshold=0.01, update_epochs=2, num_minibatches=4,
                    lr_adapt_every="minibatch")
    updater = PPOUpdater(model, cfg, "cpu", ranks)
    updater.update(make_batch(model), progress=0.0)
    assert len(ranks.kls) == 8 and all(kl > 0.02 for kl in ranks.kls)
    assert updater.lr == pytest.approx(1e-3 / 1.5 ** 8, rel=1e-12)
    # a mid-range KL: fold the rule over the KLs the job saw, by hand
    model = make_model()
    ranks = OtherRankKL(extra=0.0)
    updater = PPOUpdater(model, PPOConfig(lr_schedule="adaptive", learning_rate=0.05, lr_kl_threshold=0.004,
                                          update_epochs=3, num_minibatches=4, lr_adapt_every="minibatch"), "cpu", ranks)
    updater.update(make_batch(model), progress=0.0)
    lr = 0.05
    for kl in ranks.kls:
        lr = min(max(lr * 1.5 if kl < 0.002 else lr / 1.5 if kl > 0.008 else lr, 1e-6), 1e-2)
    assert updater.lr == pytest.approx(lr, rel=1e-12)


class EpochKLs(Ranks):
    """Records each epoch's summed KL as the ranks' all-reduce sees it (one [1] tensor per epoch)."""

    def __init__(self):
        super().__init__()
        self.sums = []

    def sum_tensor(self, t):
        if t.shape == (1,):
            self.sums.append(float(t[0]))
        return t


def test_adaptive_lr_per_epoch_folds_the_rule_over_each_epochs_mean_kl():
    """rl_games' discrete PPO: the rule runs once per epoch, on the mean of that epoch's minibatch KLs (each
    measured before its step, so an epoch's first KL of the update is 0)."""
    model = make_model()
    ranks = EpochKLs()
    updater = PPOUpdater(model, PPOConfig(lr_schedule="adaptive", learning_rate=0.05, lr_kl_threshold=0.004,
                                          update_epochs=3, num_minibatches=4), "cpu", ranks)
    stats = updater.update(make_batch(model), progress=0.0)
    assert len(ranks.sums) == 3
    lr = 0.05
    for total in ranks.sums:
        kl = total / 4
        lr = min(max(lr * 1.5 if kl < 0.002 else lr / 1.5 if kl > 0.008 else lr, 1e-6), 1e-2)
    assert updater.lr == pytest.approx(lr, rel=1e-12)
    # the three epochs' means average to the update's reported approx_kl (equal-sized minibatches)
    assert sum(ranks.sums) / 12 == pytest.approx(stats["approx_kl"], rel=1e-9)


def test_adaptive_lr_is_checkpointed():
    model = make_model()
    cfg = PPOConfig(lr_schedule="adaptive", learning_rate=1e-4, lr_kl_threshold=10.0, lr_max=1.0, update_epochs=1)
    updater = PPOUpdater(model, cfg, "cpu")
    updater.update(make_batch(model), progress=0.0)
    other = PPOUpdater(make_model(), cfg, "cpu")
    other.load_state_dict(updater.state_dict())
    assert other.lr == updater.lr == pytest.approx(1e-4 * 1.5)  # one epoch: one step of the rule
    assert other.learning_rate(0.0) == updater.lr
    old = updater.state_dict()
    del old["learning_rate"]  # a checkpoint from before the schedule existed: the configured rate
    other.load_state_dict(old)
    assert other.lr == 1e-4


def _hand_stats(returns: np.ndarray, prior_count=1e-4) -> tuple[float, float]:
    """Mean and variance after merging `returns` into the prior (mean 0, var 1, count 1e-4), by hand."""
    n, m, v = len(returns), float(np.mean(returns)), float(np.var(returns))
    total = prior_count + n
    mean = m * n / total
    var = (1.0 * prior_count + v * n + m * m * prior_count * n / total) / total
    return mean, var


def test_value_normalizer_by_hand():
    returns = torch.tensor([1.0, 2.0, 3.0, 10.0])
    vn = ValueNormalizer()
    vn.update_moments(vn.moments(returns))
    mean, var = _hand_stats(returns.numpy())
    assert float(vn.rms.mean) == pytest.approx(mean, rel=1e-12)
    assert float(vn.rms.var) == pytest.approx(var, rel=1e-12)
    x = torch.tensor([3.0, -1.0], dtype=torch.float64)
    std = math.sqrt(var + 1e-5)
    assert vn.normalize(x).tolist() == pytest.approx([(3 - mean) / std, (-1 - mean) / std], rel=1e-12)
    assert vn.denormalize(vn.normalize(x)).tolist() == pytest.approx([3.0, -1.0], rel=1e-12)
    assert vn.normalize(torch.tensor([1.0])).dtype == torch.float32


def test_value_normalizer_moments_of_two_ranks_equal_one_learner_seeing_both():
    a, b = torch.tensor([0.5, 4.0, -2.0]), torch.tensor([7.0, 1.0])
    vn = ValueNormalizer()
    vn.update_moments(vn.moments(a) + vn.moments(b))
    ref = RunningMeanStd(())
    ref.update(torch.cat([a, b]))
    assert float(vn.rms.mean) == pytest.approx(float(ref.mean), rel=1e-12)
    assert float(vn.rms.var) == pytest.approx(float(ref.var), rel=1e-12)
    vn.update_moments(vn.moments(torch.empty(0)))  # a rank without samples changes nothing
    assert float(vn.rms.count) == pytest.approx(5.0001)


def test_critic_trains_on_normalized_returns_and_explained_variance_stays_raw():
    model = make_model()
    batch = make_batch(model, n=32)
    batch["returns"] = batch["returns"] * 50 + 300  # far from unit scale
    obs = batch["obs"]
    with torch.no_grad():
        v_new = model.value(obs).double().numpy()
    returns = batch["returns"].double().numpy()
    values = batch["values"].double().numpy()
    vn = ValueNormalizer()
    cfg = PPOConfig(update_epochs=1, num_minibatches=1, clip_vloss=False)
    stats = PPOUpdater(model, cfg, "cpu", value_norm=vn).update(batch, progress=0.0)
    mean, var = _hand_stats(returns)
    target = (returns - mean) / math.sqrt(var + 1e-5)
    assert stats["value_loss"] == pytest.approx(0.5 * np.mean((v_new - target) ** 2), rel=1e-5)
    assert stats["explained_variance"] == pytest.approx(1 - np.var(returns - values) / np.var(returns), rel=1e-9)
    assert float(vn.rms.mean) == pytest.approx(mean, rel=1e-12)


def test_value_clipping_happens_in_normalized_units():
    model = make_model()
    batch = make_batch(model, n=16)
    batch["returns"] = batch["returns"] * 50 + 300
    with torch.no_grad():
        v_new = model.value(batch["obs"]).double().numpy()
    vn = ValueNormalizer()
    cfg = PPOConfig(update_epochs=1, num_minibatches=1, clip_vloss=True, clip_coef=0.1)
    stats = PPOUpdater(model, cfg, "cpu", value_norm=vn).update(batch, progress=0.0)
    mean, var = _hand_stats(batch["returns"].double().numpy())
    norm = lambda x: (x - mean) / math.sqrt(var + 1e-5)
    target, old = norm(batch["returns"].double().numpy()), norm(batch["values"].double().numpy())
    clipped = old + np.clip(v_new - old, -0.1, 0.1)
    expected = 0.5 * np.mean(np.maximum((v_new - target) ** 2, (clipped - target) ** 2))
    assert stats["value_loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("value_norm", [True, False])
def test_with_policy_lag_the_value_clip_is_anchored_at_the_critic_the_update_starts_from(value_norm):
    """Issue 40: the batch's values are the lagged critic's (one update older); the clip's anchor is this
    critic's output, de-normalized with the statistics before this batch's returns fold in, then normalized
    with those after, as the stored values of a synchronous learner would be."""
    model = make_model()
    batch = make_batch(model, n=16)
    with torch.no_grad():
        v_new = model.value(batch["obs"]).double().numpy()
    # returns near this critic (raw units) or far from the prior statistics (normalized): either way the loss
    # differs between the two anchors
    batch["returns"] = batch["returns"] * 50 + 300 if value_norm else torch.from_numpy(v_new).float() + 1.0
    batch["values"] = batch["values"] + 40.0  # the lagged critic's: far from this one's
    vn = ValueNormalizer() if value_norm else None
    cfg = PPOConfig(update_epochs=1, num_minibatches=1, clip_vloss=True, clip_coef=0.1)
    stats = PPOUpdater(model, cfg, "cpu", value_norm=vn, policy_lag=True).update(batch, progress=0.0)
    returns = batch["returns"].double().numpy()
    if value_norm:
        old_raw = v_new * math.sqrt(1.0 + 1e-5)  # de-normalized with the prior statistics: mean 0, var 1
        mean, var = _hand_stats(returns)
        norm = lambda x: (x - mean) / math.sqrt(var + 1e-5)
    else:
        old_raw, norm = v_new, lambda x: x
    target, old = norm(returns), norm(old_raw)
    clipped = old + np.clip(v_new - old, -0.1, 0.1)
    expected = 0.5 * np.mean(np.maximum((v_new - target) ** 2, (clipped - target) ** 2))
    assert stats["value_loss"] == pytest.approx(expected, rel=1e-5)
    values = batch["values"].double().numpy()  # explained variance stays the collected values'
    assert stats["explained_variance"] == pytest.approx(1 - np.var(returns - values) / np.var(returns), rel=1e-9)


def test_policy_reports_de_normalized_values():
    model = make_model()
    vn = ValueNormalizer()
    vn.update_moments(vn.moments(torch.tensor([8.0, 12.0])))  # mean ~10, var ~4
    mean, std = float(vn.rms.mean), math.sqrt(float(vn.rms.var) + 1e-5)
    policy = Inference(model, SpaceSpec(kind="discrete", n=3), torch.device("cpu"), None, seed=0, value_norm=vn)
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with torch.no_grad():
        raw = model.value(torch.from_numpy(obs)).double().numpy()
    assert policy.value(obs).double().numpy() == pytest.approx(raw * std + mean, rel=1e-5)
    assert np.asarray(policy.act([obs]).values, dtype=np.float64) == pytest.approx(raw * std + mean, rel=1e-5)
    plain = Inference(model, SpaceSpec(kind="discrete", n=3), torch.device("cpu"), None, seed=0)
    assert plain.value(obs).double().numpy() == pytest.approx(raw, rel=1e-6)


def test_with_policy_lag_the_adaptive_rate_reads_the_kl_of_the_updates_own_steps():
    """Issue 40: a lagged batch's log-probabilities are an older policy's. The ratio stays against them, but
    the KL the adaptive rate reads is against the policy the update starts from: before its first step that
    KL is 0, so the rate speeds up (against the behaviour policy, the lag's distance would slow it down), and
    the behaviour policy's KL is reported as behaviour_kl."""
    model = make_model()
    batch = make_batch(model, n=32)
    noise = 0.4 * torch.randn(32, generator=torch.Generator().manual_seed(2))
    batch["logprobs"] = batch["logprobs"] + noise  # as if collected by another policy, far from this one
    with torch.no_grad():
        logratio = (model.evaluate(batch["obs"], batch["actions"])[0] - batch["logprobs"]).double()
    lag_kl = float(((logratio.exp() - 1) - logratio).mean())
    assert lag_kl > 0.02  # the old rule would divide the rate by 1.5
    cfg = PPOConfig(lr_schedule="adaptive", learning_rate=1e-3, lr_kl_threshold=0.01, update_epochs=1,
                    num_minibatches=1, lr_adapt_every="minibatch")
    updater = PPOUpdater(model, cfg, "cpu", policy_lag=True)
    stats = updater.update(batch, progress=0.0)
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats["behaviour_kl"] == pytest.approx(lag_kl, rel=1e-5)
    assert updater.lr == pytest.approx(1.5e-3, rel=1e-12)
    assert "behaviour_kl" not in PPOUpdater(make_model(), cfg, "cpu").update(make_batch(make_model()), 0.0)


def test_with_policy_lag_the_policy_clip_is_centred_on_the_start_policy_and_weighted_back_to_the_behaviour():
    """Issue 40: the decoupled objective (Hilton et al. 2021) by hand: mean of w x max(-A r, -A clip(r)) with
    r = pi / pi_start and w = pi_start / pi_behaviour; with the start policy equal to the behaviour policy it
    is the usual clipped loss, to the bit."""
    g = torch.Generator().manual_seed(3)
    new, old, start, adv = (torch.randn(64, generator=g, dtype=torch.float64) * s for s in (0.3, 0.3, 0.3, 1.0))
    values = torch.zeros(64, dtype=torch.float64)
    cfg = PPOConfig(clip_coef=0.2, norm_adv=False, clip_vloss=False, ent_coef=0.0, vf_coef=0.0, lag_decoupled=True,
                    lag_weight_max=0.0)
    loss, stats = ppo_loss(new, old, adv, values, values, values, values, cfg, start_logprob=start)
    behaviour, _ = ppo_loss(new, old, adv, values, values, values, values, cfg.model_copy(update={"lag_decoupled": False}),
                            start_logprob=start)
    ratio = (new - old).exp().numpy()
    assert float(behaviour) == pytest.approx(np.mean(np.maximum(-adv.numpy() * ratio, -adv.numpy() * np.clip(ratio, 0.8, 1.2))), rel=1e-12)
    r, w, a = (new - start).exp().numpy(), (start - old).exp().numpy(), adv.numpy()
    expected = np.mean(w * np.maximum(-a * r, -a * np.clip(r, 0.8, 1.2)))
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert float(stats["clip_fraction"]) == pytest.approx(np.mean(np.abs(r - 1) > 0.2))
    assert float(stats["approx_kl"]) == pytest.approx(np.mean((r - 1) - np.log(r)), rel=1e-12)
    plain, plain_stats = ppo_loss(new, old, adv, values, values, values, values, cfg)
    same, same_stats = ppo_loss(new, old, adv, values, values, values, values, cfg, start_logprob=old)
    assert float(same) == float(plain) and float(same_stats["clip_fraction"]) == float(plain_stats["clip_fraction"])


def test_with_lag_weight_max_each_samples_weight_is_truncated_at_it():
    """ppo.lag_weight_max (V-trace's rho-bar): w = min(pi_start / pi_behaviour, max), by hand."""
    g = torch.Generator().manual_seed(4)
    new, old, start, adv = (torch.randn(64, generator=g, dtype=torch.float64) * s for s in (0.3, 0.3, 0.5, 1.0))
    values = torch.zeros(64, dtype=torch.float64)
    cfg = PPOConfig(clip_coef=0.2, norm_adv=False, clip_vloss=False, ent_coef=0.0, vf_coef=0.0, lag_decoupled=True,
                    lag_weight_max=1.0)
    loss, _ = ppo_loss(new, old, adv, values, values, values, values, cfg, start_logprob=start)
    r, w, a = (new - start).exp().numpy(), (start - old).exp().numpy(), adv.numpy()
    assert (w > 1.0).any() and (w < 1.0).any()
    expected = np.mean(np.minimum(w, 1.0) * np.maximum(-a * r, -a * np.clip(r, 0.8, 1.2)))
    assert float(loss) == pytest.approx(expected, rel=1e-12)


def test_with_fresh_advantages_the_critic_learns_the_returns_of_gae_run_again_with_its_own_values():
    """ppo.lag_fresh_advantages (issue 40): a lagged batch that keeps its GAE inputs is trained on the returns of
    GAE run again with the values of the critic the update starts from (every sample, the bootstrap
    observations), so that critic's first value loss is 0.5 x mean(A^2) of those fresh advantages (returns =
    A + V), checked against GAE written out by hand; the batch's own (stale) returns would give another loss."""
    from learner.advantages.batch import GaeInputs
    from tests.learner.advantages.test_batch import GAMMA, LAM, reference_gae
    T, N = 4, 2
    model = make_model()
    batch = make_batch(model, n=T * N, seed=3)
    g = torch.Generator().manual_seed(4)
    rewards = torch.randn(T, N, generator=g)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    terminated[1, 0] = True
    extra_obs = torch.randn(N, 4, generator=g)  # the observations after step T - 1
    gae = GaeInputs(rewards, terminated, terminated.clone(), torch.ones(T, N, dtype=torch.bool),
                    batch["values"].reshape(T, N) + 5.0, torch.full((N,), 9.0),
                    (extra_obs, (torch.full((N,), T - 1), torch.arange(N))), (GAMMA, LAM))
    batch["values"] = batch["values"] + 5.0  # the acting critic's, one version older: far from this one's
    cfg = PPOConfig(update_epochs=1, num_minibatches=1, clip_vloss=False, gamma=GAMMA, gae_lambda=LAM,
                    lag_fresh_advantages=True)
    with torch.no_grad():
        v = model.value(batch["obs"]).double().numpy().reshape(T, N)
        bootstrap = model.value(extra_obs).double().numpy()
    stats = PPOUpdater(model, cfg, "cpu", policy_lag=True).update({**batch, "gae": gae}, progress=0.0)
    next_values = np.vstack([v[1:], bootstrap[None]])
    adv = reference_gae(rewards.double().numpy(), v, next_values, terminated.numpy(), np.zeros((T, N), bool))
    assert stats["value_loss"] == pytest.approx(0.5 * np.mean(adv ** 2), rel=1e-5)
    stale = batch["returns"].double().numpy() - v.reshape(-1)
    assert 0.5 * np.mean(stale ** 2) != pytest.approx(stats["value_loss"], rel=1e-3)
