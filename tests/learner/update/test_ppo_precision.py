"""ppo.update_precision: bf16 autocast of the encoder in the update, fp32 master weights (issue 41)."""
import copy
import logging
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.update.loss import ppo_loss
from learner.update.ppo import PPOUpdater
from learner.update.precision import native_bf16, resolve_precision
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
DISCRETE = SpaceSpec(kind="discrete", n=6)


def _cpu_flags() -> set[str] | None:
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return None
    line = next((x for x in info.read_text().splitlines() if x.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


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


def test_the_default_is_fp32_and_only_fp32_bf16_or_auto_are_accepted():
    assert PPOConfig().update_precision == "fp32"
    assert PPOConfig(update_precision="bf16").update_precision == "bf16"
    assert PPOConfig(update_precision="auto").update_precision == "auto"
    with pytest.raises(ValidationError):
        PPOConfig(update_precision="fp16")


@pytest.mark.parametrize("requested,native,expected", [("auto", True, "bf16"), ("auto", False, "fp32"),
                                                       ("bf16", True, "bf16"), ("bf16", False, "bf16"),
                                                       ("fp32", True, "fp32"), ("fp32", False, "fp32")])
def test_auto_takes_bf16_only_where_the_device_does_it_at_speed(requested, native, expected):
    assert resolve_precision(requested, torch.device("cpu"), native) == expected


def test_bf16_where_it_is_slow_is_kept_with_a_warning_that_names_the_way_out(caplog):
    with caplog.at_level(logging.INFO, logger="learner"):
        resolve_precision("bf16", torch.device("cpu"), native=False)
        resolve_precision("bf16", torch.device("cpu"), native=True)
        resolve_precision("auto", torch.device("cpu"), native=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and 'ppo.update_precision = "auto"' in warnings[0]
    assert any("update precision fp32 (ppo.update_precision auto" in r.getMessage() for r in caplog.records)


def test_the_updater_runs_auto_as_this_machine_allows():
    """This CPU's answer from torch (oneDNN's bf16 check), and the updater's autocast following it."""
    updater = PPOUpdater(cnn(), PPOConfig(update_precision="auto"), "cpu")
    assert updater.precision == ("bf16" if native_bf16(torch.device("cpu")) else "fp32")
    with updater._autocast():
        assert torch.is_autocast_enabled("cpu") == (updater.precision == "bf16")


def test_a_cpu_without_avx512_has_no_fast_bf16():
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo")
    if not any(f.startswith("avx512") or f.startswith("amx") for f in flags):
        assert not native_bf16(torch.device("cpu"))


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
