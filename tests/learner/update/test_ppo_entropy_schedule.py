"""ppo.ent_schedule: the entropy bonus's weight constant (CleanRL's, the default) or falling linearly to 0 along the
learning rate's horizon or its own (ppo.ent_anneal_steps); each update trains with the weight its progress gives."""
from __future__ import annotations

import pytest
import torch

from learner.config import ConfigError, PPOConfig, from_dict
from learner.update.loss import ppo_loss
from learner.update.ppo import PPOUpdater
from tests.learner.update.test_ppo_loss import make_batch, make_model


@pytest.mark.parametrize("progress,expected", [(0.0, 0.02), (0.25, 0.015), (0.5, 0.01), (1.0, 0.0), (1.7, 0.0)])
def test_linear_falls_to_zero_at_the_horizon_and_stays_there(progress, expected):
    updater = PPOUpdater(make_model(), PPOConfig(ent_coef=0.02, ent_schedule="linear"), "cpu")
    assert updater.entropy_coef(progress) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("steps,expected", [(0, 0.02), (750_000, 0.01), (1_500_000, 0.0), (1_800_000, 0.0)])
def test_its_own_horizon_ends_the_bonus_while_the_rate_goes_on(steps, expected):
    cfg = PPOConfig(ent_coef=0.02, ent_schedule="linear", learning_rate=1e-3, lr_anneal_steps=2_000_000,
                    ent_anneal_steps=1_500_000)
    updater = PPOUpdater(make_model(), cfg, "cpu", rate_horizon=2_000_000)
    progress = steps / 2_000_000  # what the learner passes: the run's steps over the rate's horizon
    assert updater.entropy_coef(progress) == pytest.approx(expected, abs=1e-15)
    assert updater.learning_rate(progress) == pytest.approx(1e-3 * (1 - progress), abs=1e-15)


def test_its_own_horizon_without_the_rates_is_refused():
    cfg = PPOConfig(ent_coef=0.02, ent_schedule="linear", ent_anneal_steps=1_000)
    with pytest.raises(ValueError, match="ent_anneal_steps"):
        PPOUpdater(make_model(), cfg, "cpu")


def test_constant_is_the_default_and_keeps_ent_coef():
    assert PPOConfig().ent_schedule == "constant"
    assert PPOUpdater(make_model(), PPOConfig(ent_coef=0.02), "cpu").entropy_coef(0.9) == 0.02


def test_the_loss_weighs_the_entropy_with_the_coefficient_given():
    x = torch.tensor([0.1, -0.2, 0.3])
    entropy = torch.tensor([1.0, 1.5, 2.0])
    cfg = PPOConfig(ent_coef=0.05)
    default, _ = ppo_loss(x, x, x, x, x, x, entropy, cfg)
    none, _ = ppo_loss(x, x, x, x, x, x, entropy, cfg, ent_coef=0.0)
    assert float(none - default) == pytest.approx(0.05 * 1.5, rel=1e-6)


def _trained(cfg: PPOConfig, progress: float) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    model = make_model()
    batch = make_batch(model)
    stats = PPOUpdater(model, cfg, "cpu").update(batch, progress, torch.Generator().manual_seed(3))
    return [p.detach().clone() for p in model.parameters()], stats


def test_an_update_at_the_horizon_trains_as_without_the_bonus_and_reports_its_coefficient():
    common = dict(learning_rate=1e-3, lr_schedule="constant", update_epochs=2, num_minibatches=2)
    annealed, stats = _trained(PPOConfig(ent_coef=0.05, ent_schedule="linear", **common), progress=1.0)
    without, plain = _trained(PPOConfig(ent_coef=0.0, **common), progress=1.0)
    constant, _ = _trained(PPOConfig(ent_coef=0.05, **common), progress=1.0)
    assert all(torch.equal(a, b) for a, b in zip(annealed, without))
    assert not all(torch.equal(a, b) for a, b in zip(annealed, constant))
    assert stats["ent_coef"] == 0.0 and "ent_coef" not in plain


def test_an_unknown_schedule_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="ppo.ent_schedule"):
        from_dict({"ppo": {"ent_schedule": "cosine"}})


def test_a_horizon_for_a_constant_bonus_is_refused_naming_both_keys():
    with pytest.raises(ConfigError, match="ppo.ent_anneal_steps 1000 .* ppo.ent_schedule is constant"):
        from_dict({"ppo": {"ent_anneal_steps": 1000}})
