import copy
import math

import numpy as np
import pytest
import torch

from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.update.loss import ppo_loss
from learner.update.ppo import PPOUpdater, explained_variance
from learner.update.rates import kl_beta_update
from protocol.spaces import SpaceSpec

RATIO = np.array([1.0, 1.5, 0.5, 1.05])
ADV = np.array([1.0, 1.0, -1.0, -2.0])
OLD_V = np.zeros(4)
NEW_V = np.array([0.1, 0.5, -0.5, 1.0])
RET = np.array([0.0, 1.0, 0.0, 0.1])
ENT = np.array([1.0, 2.0, 3.0, 4.0])


def call(cfg, ratio=RATIO, adv=ADV, beta=None):
    t = lambda a: torch.tensor(a, dtype=torch.float64)
    return ppo_loss(t(np.log(ratio)), t(np.zeros_like(ratio)), t(adv), t(NEW_V), t(OLD_V), t(RET), t(ENT),
                    cfg, beta=beta)


def test_clip_variant_terms():
    cfg = PPOConfig(clip_coef=0.2, norm_adv=False, ent_coef=0.01, vf_coef=0.5, clip_vloss=True)
    loss, stats = call(cfg)
    # per sample max(-A r, -A clip(r, 0.8, 1.2)): max(-1,-1)=-1, max(-1.5,-1.2)=-1.2, max(0.5,0.8)=0.8,
    # max(2.1,2.1)=2.1 -> mean 0.175
    assert stats["policy_loss"] == pytest.approx(0.175)
    # clipped values old + clip(new - old, +-0.2) = [0.1, 0.2, -0.2, 0.2]
    # unclipped sq [0.01, 0.25, 0.25, 0.81], clipped sq [0.01, 0.64, 0.04, 0.01]
    # 0.5 * mean(max) = 0.5 * (0.01 + 0.64 + 0.25 + 0.81) / 4 = 0.21375
    assert stats["value_loss"] == pytest.approx(0.21375)
    assert stats["entropy"] == pytest.approx(2.5)
    assert loss.item() == pytest.approx(0.175 - 0.01 * 2.5 + 0.5 * 0.21375)
    assert stats["clip_fraction"] == pytest.approx(0.5)  # ratios 1.5 and 0.5 are outside 1 +- 0.2
    assert stats["approx_kl"] == pytest.approx(np.mean((RATIO - 1) - np.log(RATIO)))
    assert "kl_penalty" not in stats


def test_unclipped_value_loss():
    cfg = PPOConfig(clip_coef=0.2, norm_adv=False, clip_vloss=False)
    _, stats = call(cfg)
    assert stats["value_loss"] == pytest.approx(0.5 * (0.01 + 0.25 + 0.25 + 0.81) / 4)


def test_advantage_normalization():
    cfg = PPOConfig(clip_coef=0.2, norm_adv=True)
    _, stats = call(cfg)
    a = (ADV - ADV.mean()) / (ADV.std(ddof=1) + 1e-8)
    clipped = np.clip(RATIO, 0.8, 1.2)
    assert stats["policy_loss"] == pytest.approx(np.mean(np.maximum(-a * RATIO, -a * clipped)))
    # a single-sample minibatch is left as is (its std is undefined)
    _, one = ppo_loss(torch.tensor([math.log(1.5)]), torch.zeros(1), torch.tensor([2.0]), torch.zeros(1),
                      torch.zeros(1), torch.zeros(1), torch.zeros(1), cfg)
    assert one["policy_loss"] == pytest.approx(max(-2.0 * 1.5, -2.0 * 1.2))


def test_kl_variant_loss():
    cfg = PPOConfig(variant="kl", norm_adv=False, ent_coef=0.0, vf_coef=0.0, kl_beta=7.0)
    loss, stats = call(cfg, beta=2.0)
    kl = np.mean((RATIO - 1) - np.log(RATIO))
    assert stats["kl_penalty"] == pytest.approx(2.0 * kl)
    assert stats["policy_loss"] == pytest.approx(-np.mean(RATIO * ADV) + 2.0 * kl)
    assert loss.item() == pytest.approx(stats["policy_loss"])
    _, default_beta = call(cfg)  # beta defaults to cfg.kl_beta
    assert default_beta["kl_penalty"] == pytest.approx(7.0 * kl)


def test_kl_penalty_gradient_vanishes_at_ratio_one():
    # at ratio 1 the k3 penalty has zero gradient, so d loss / d logprob_i = -A_i / n
    cfg = PPOConfig(variant="kl", norm_adv=False, ent_coef=0.0, vf_coef=0.0)
    new_lp = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor(ADV)
    loss, _ = ppo_loss(new_lp, torch.zeros(4, dtype=torch.float64), adv, torch.zeros(4), torch.zeros(4),
                       torch.zeros(4), torch.zeros(4), cfg, beta=5.0)
    loss.backward()
    torch.testing.assert_close(new_lp.grad, -adv / 4)


@pytest.mark.parametrize("measured, expected", [
    (0.005, 0.5),    # below 0.01 / 1.5: halved
    (0.0, 0.5),
    (0.02, 2.0),     # above 1.5 * 0.01: doubled
    (0.01, 1.0),     # in between: kept
    (0.007, 1.0),
    (0.0149, 1.0),
])
def test_kl_beta_update(measured, expected):
    assert kl_beta_update(1.0, measured, 0.01) == pytest.approx(expected)


def test_explained_variance():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(r, r) == pytest.approx(1.0)
    assert explained_variance(torch.zeros(4), r) == pytest.approx(0.0)
    assert math.isnan(explained_variance(torch.zeros(3), torch.ones(3)))


def make_batch(model, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    actions, logprobs, values = model.act(obs, generator=g)
    advantages = torch.randn(n, generator=g)
    return {"obs": obs, "actions": actions, "logprobs": logprobs, "values": values,
            "advantages": advantages, "returns": advantages + values}


def make_model(action_space=SpaceSpec(kind="discrete", n=3), seed=0):
    torch.manual_seed(seed)
    return build_model(SpaceSpec(kind="box", shape=(4,), dtype="float32"), action_space, ModelConfig(hidden=16))


@pytest.mark.parametrize("action_space", [SpaceSpec(kind="discrete", n=3), SpaceSpec(kind="box", shape=(2,))])
def test_update_first_minibatch_ratio_is_one(action_space):
    model = make_model(action_space)
    cfg = PPOConfig(update_epochs=3, num_minibatches=4, learning_rate=1e-2)
    updater = PPOUpdater(model, cfg, device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    stats = updater.update(make_batch(model), progress=0.0, generator=torch.Generator().manual_seed(1))
    assert stats["first_minibatch_ratio_max_dev"] < 1e-6
    assert stats["first_minibatch_clip_fraction"] == 0.0
    assert stats["epochs_run"] == 3 and stats["minibatches"] == 12
    assert stats["learning_rate"] == pytest.approx(1e-2)
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance"):
        assert math.isfinite(stats[key]), key
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_learning_rate_annealing():
    updater = PPOUpdater(make_model(), PPOConfig(learning_rate=1e-3), device="cpu")
    assert updater.learning_rate(0.0) == pytest.approx(1e-3)
    assert updater.learning_rate(0.5) == pytest.approx(5e-4)
    assert updater.learning_rate(0.9) == pytest.approx(1e-4)
    assert updater.learning_rate(1.0) == 0.0
    assert updater.learning_rate(1.7) == 0.0  # more steps than configured (a resume past the end)
    const = PPOUpdater(make_model(), PPOConfig(learning_rate=1e-3, anneal_lr=False), device="cpu")
    assert const.learning_rate(0.9) == pytest.approx(1e-3)
    updater.update(make_batch(updater.model), progress=0.5)
    assert updater.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_grad_norm_clipped():
    model = make_model()
    updater = PPOUpdater(model, PPOConfig(max_grad_norm=1e-3, update_epochs=1), device="cpu")
    stats = updater.update(make_batch(model), progress=0.0)
    assert stats["grad_norm"] > 1e-3  # the raw norm was larger, so clipping did something
    # the gradients left from the last minibatch are the clipped ones the optimizer used
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm.item() <= 1e-3 * (1 + 1e-4)


def test_minibatch_remainder_spread():
    model = make_model()
    sizes = []
    evaluate = model.evaluate
    model.evaluate = lambda obs, act: (sizes.append(obs.shape[0]), evaluate(obs, act))[1]
    updater = PPOUpdater(model, PPOConfig(update_epochs=2, num_minibatches=4), device="cpu")
    updater.update(make_batch(model, n=10), progress=0.0)
    assert sizes == [3, 3, 2, 2, 3, 3, 2, 2]


def test_early_stop_on_target_kl():
    model = make_model()
    cfg = PPOConfig(update_epochs=4, learning_rate=0.05, target_kl=1e-9)
    stats = PPOUpdater(model, cfg, device="cpu").update(make_batch(model), progress=0.0)
    assert stats["epochs_run"] == 1


def _hand_kl(model, batch) -> float:
    """KL(pi_old || pi_new) over the batch, by hand: the mean of (r - 1) - log r, r = pi_new / pi_old."""
    with torch.no_grad():
        new = model.evaluate(batch["obs"], batch["actions"])[0].double().numpy()
    logratio = new - batch["logprobs"].double().numpy()
    return float(np.mean(np.exp(logratio) - 1 - logratio))


@pytest.mark.parametrize("scale, beta_after", [(3.0, 0.5), (1.0, 1.0), (1 / 3.0, 2.0)])
def test_kl_variant_adapts_beta_from_the_kl_of_the_whole_update(scale, beta_after):
    """beta follows the KL between the policy before and after the whole update, measured on its samples:
    a target 3x the measured KL halves beta, 1x keeps it, 1/3 doubles it."""
    probe = make_model()
    cfg = PPOConfig(variant="kl", kl_beta=1.0, update_epochs=2, learning_rate=0.02)
    PPOUpdater(probe, cfg, device="cpu").update(make_batch(make_model()), progress=0.0,
                                                generator=torch.Generator().manual_seed(3))
    measured = _hand_kl(probe, make_batch(make_model()))  # the same update, replayed below with a target
    assert measured > 1e-4, "the update must move the policy for the test to mean anything"
    model = make_model()
    batch = make_batch(model)
    cfg = cfg.model_copy(update={"kl_target": measured * scale})
    updater = PPOUpdater(model, cfg, device="cpu")
    stats = updater.update(batch, progress=0.0, generator=torch.Generator().manual_seed(3))
    assert stats["update_kl"] == pytest.approx(_hand_kl(model, batch), rel=1e-6)
    assert stats["update_kl"] == pytest.approx(measured, rel=1e-6)
    assert stats["kl_beta"] == pytest.approx(beta_after) and updater.beta == pytest.approx(beta_after)
    assert "kl_penalty" in stats


def test_kl_state_round_trip():
    model = make_model()
    cfg = PPOConfig(variant="kl", kl_target=0.01, kl_beta=1.0, update_epochs=1, learning_rate=1e-5)
    updater = PPOUpdater(model, cfg, device="cpu")
    stats = updater.update(make_batch(model), progress=0.0)
    assert stats["update_kl"] < 0.01 / 1.5  # a tiny step: the KL is far below the target's band
    assert stats["kl_beta"] == pytest.approx(0.5) and updater.beta == pytest.approx(0.5)
    other = PPOUpdater(make_model(), cfg, device="cpu")
    other.load_state_dict(updater.state_dict())
    assert other.beta == pytest.approx(0.5)
    assert other.optimizer.state_dict()["state"].keys() == updater.optimizer.state_dict()["state"].keys()


def test_batch_checksum_is_the_sum_of_the_observations_read():
    model = make_model()
    batch = make_batch(model)
    stats = PPOUpdater(model, PPOConfig(update_epochs=1), device="cpu", batch_checksum=True).update(batch, 0.0)
    assert stats["batch_checksum"] == pytest.approx(float(batch["obs"].double().numpy().sum()), rel=1e-12)
    assert "batch_checksum" not in PPOUpdater(model, PPOConfig(update_epochs=1), device="cpu").update(batch, 0.0)


def test_update_deterministic_with_generator():
    results = []
    for _ in range(2):
        model = make_model(seed=5)
        updater = PPOUpdater(model, PPOConfig(), device="cpu")
        stats = updater.update(make_batch(model), progress=0.0, generator=torch.Generator().manual_seed(9))
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


HOST_READS = ("item", "tolist", "__float__", "__bool__", "__int__", "cpu", "numpy")


@pytest.mark.parametrize("variant", ["clip", "kl"])
def test_update_reads_its_statistics_from_the_device_once(monkeypatch, variant):
    """On a GPU each read of a tensor's value waits for every queued kernel: the update's own code reads
    once, at the end, not per minibatch and statistic (torch's own internals are not counted)."""
    import sys
    reads = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            if sys._getframe(1).f_code.co_filename.endswith(tuple(f"learner/update/{m}.py" for m in ("ppo", "loss", "rates", "replay", "ranks"))):
                reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    model = make_model()
    cfg = PPOConfig(variant=variant, update_epochs=4, num_minibatches=4)
    stats = PPOUpdater(model, cfg, device="cpu").update(make_batch(model), progress=0.0)
    monkeypatch.undo()
    assert reads == ["tolist"]
    assert stats["minibatches"] == 16 and math.isfinite(stats["policy_loss"]) and math.isfinite(stats["grad_norm"])


@pytest.mark.parametrize("bad", ["advantages", "returns"])
def test_an_update_with_a_non_finite_step_is_dropped_and_leaves_every_state_as_it_was(bad):
    """Issue 60, point 1: a non-finite loss or gradient is never stepped on: the update goes back to where it
    started (weights, Adam's state, the value statistics), says so, and the next update trains as usual."""
    from learner.model.normalize import ValueNormalizer
    model = make_model()
    vn = ValueNormalizer()
    updater = PPOUpdater(model, PPOConfig(update_epochs=2, num_minibatches=4), device="cpu", value_norm=vn)
    updater.update(make_batch(model, seed=1), progress=0.0)  # Adam's state and the statistics exist
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    adam = copy.deepcopy(updater.optimizer.state_dict()["state"])
    moments = {k: v.clone() for k, v in vn.state_dict().items()}
    batch = make_batch(model, seed=2)
    batch[bad][5] = float("inf")
    stats = updater.update(batch, progress=0.0)
    assert stats["nonfinite_update"] == 1 and not math.isfinite(stats["grad_norm"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    for k, v in vn.state_dict().items():
        assert torch.equal(v, moments[k]), k
    for i, state in updater.optimizer.state_dict()["state"].items():
        assert all(torch.equal(v, adam[i][name]) for name, v in state.items()), i
    later = updater.update(make_batch(model, seed=3), progress=0.0)
    assert "nonfinite_update" not in later and math.isfinite(later["grad_norm"])
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("variant,lag", [("clip", False), ("kl", False), ("clip", True)])
def test_a_statistic_the_loss_adds_is_averaged_and_returned_unlisted(monkeypatch, variant, lag):
    """Adding a statistic is one line in ppo_loss: the update asks the loss what it reports (loss_statistics)
    and averages each over the minibatches like the others (here a constant 2, so its mean is 2)."""
    from learner.update import loss, ppo
    plain = loss.ppo_loss

    def with_one_more(*args, **kwargs):
        loss, stats = plain(*args, **kwargs)
        return loss, {**stats, "a_new_statistic": torch.tensor(2.0)}
    monkeypatch.setattr(loss, "ppo_loss", with_one_more)  # what loss_statistics asks
    monkeypatch.setattr(ppo, "ppo_loss", with_one_more)   # what the update calls
    model = make_model()
    updater = PPOUpdater(model, PPOConfig(variant=variant, update_epochs=2, num_minibatches=2), "cpu", policy_lag=lag)
    stats = updater.update(make_batch(model), progress=0.0)
    assert stats["a_new_statistic"] == pytest.approx(2.0)
    assert ("kl_penalty" in stats) == (variant == "kl") and ("behaviour_kl" in stats) == lag
