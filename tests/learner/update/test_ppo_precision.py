"""ppo.update_precision: bf16 autocast of the encoder in the update, fp32 master weights (issue 41)."""
import copy

import pytest
import torch
from pydantic import ValidationError

from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.update.loss import ppo_loss
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
DISCRETE = SpaceSpec(kind="discrete", n=6)


def cnn():
    torch.manual_seed(0)
    model = build_model(IMAGE, DISCRETE, ModelConfig(activation="elu", normalize_input=True))
    return model


def image_batch(model, n=32):
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g)
    model.observe(obs)  # input statistics that are not the identity
    actions, logprobs, values = model.act(obs, generator=g)
    advantages = torch.randn(n, generator=g)
    return {"obs": obs, "actions": actions, "logprobs": logprobs, "values": values,
            "advantages": advantages, "returns": advantages + values}


def loss_and_grads(precision: str):
    """One minibatch's loss and gradients through the updater's own autocast context."""
    model = cnn()
    batch = image_batch(model)
    cfg = PPOConfig(update_precision=precision)
    updater = PPOUpdater(model, cfg, "cpu")
    with updater._autocast():
        logprob, entropy, values = model.evaluate(batch["obs"], batch["actions"])
    assert logprob.dtype == entropy.dtype == values.dtype == torch.float32  # the heads stay fp32
    loss, _ = ppo_loss(logprob, batch["logprobs"], batch["advantages"], values, batch["values"],
                       batch["returns"], entropy, cfg)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_default_is_fp32_and_only_fp32_or_bf16_are_accepted():
    assert PPOConfig().update_precision == "fp32"
    assert PPOConfig(update_precision="bf16").update_precision == "bf16"
    with pytest.raises(ValidationError):
        PPOConfig(update_precision="fp16")


def test_fp32_runs_without_autocast():
    updater = PPOUpdater(cnn(), PPOConfig(), "cpu")
    with updater._autocast():
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_loss_and_gradients_are_close_to_fp32():
    loss32, grads32 = loss_and_grads("fp32")
    loss16, grads16 = loss_and_grads("bf16")
    assert abs(loss16 - loss32) < 0.02 * abs(loss32) + 1e-3
    for name, g32 in grads32.items():
        g16 = grads16[name]
        assert g16.dtype == torch.float32, name  # gradients of fp32 master weights
        cos = torch.nn.functional.cosine_similarity(g16.flatten(), g32.flatten(), dim=0)
        assert cos > 0.99, f"{name}: cosine {cos:.4f}"
        assert (g16.norm() - g32.norm()).abs() < 0.05 * g32.norm() + 1e-6, name
    assert not all(torch.equal(grads16[k], grads32[k]) for k in grads32)  # bf16 really ran


def test_bf16_update_keeps_master_weights_and_adam_state_fp32_and_moves_them():
    model = cnn()
    batch = image_batch(model, n=64)
    before = copy.deepcopy(model.state_dict())
    updater = PPOUpdater(model, PPOConfig(update_precision="bf16", update_epochs=2, num_minibatches=2), "cpu")
    stats = updater.update(batch, 0.0, torch.Generator().manual_seed(1))
    assert stats["first_minibatch_ratio_max_dev"] < 0.05  # the bf16 trunk's log-probs are near the collector's
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, name
        state = updater.optimizer.state[p]
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32, name
    assert any(not torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert not torch.is_autocast_enabled("cpu")  # the context ended with the update
