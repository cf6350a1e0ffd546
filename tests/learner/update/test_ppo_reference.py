"""PPOUpdater.update against a PPO update written out by hand (issue 11, item 1).

The reference below shares nothing with learner/update/ppo.py: its own log-probs and entropies from the
network's raw outputs, its own clipped loss, its own global-norm clip and its own Adam step. Run on a
deep copy of the same model with the same minibatch indices (same generator seed), both must end at
the same parameters. Bugs this catches: gradients accumulated across minibatches (no zero_grad), a
clip that is not global, a wrong Adam bias correction, a loss term with the wrong sign or coefficient.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(4,), dtype="float32")
DISCRETE = SpaceSpec(kind="discrete", n=3)
BOX = SpaceSpec(kind="box", shape=(2,), dtype="float32", low=[-1.0, -1.0], high=[1.0, 1.0])
# ent_coef > 0 keeps the entropy path exercised; max_grad_norm small enough that the clip acts
CFG = PPOConfig(update_epochs=2, num_minibatches=2, learning_rate=3e-3, anneal_lr=False, clip_coef=0.2,
                norm_adv=True, clip_vloss=True, ent_coef=0.05, vf_coef=0.5, max_grad_norm=0.3, adam_eps=1e-5)
SEED = 11


def new_updater(model, cfg: PPOConfig) -> PPOUpdater:
    """The one place that knows PPOUpdater's constructor (the lr schedule's argument is changing)."""
    return PPOUpdater(model, cfg, device="cpu")


def run_update(updater: PPOUpdater, batch: dict, generator: torch.Generator) -> dict:
    """First update of a run: with anneal_lr off the learning rate is cfg.learning_rate either way."""
    return updater.update(batch, 0.0, generator)  # progress 0 (anneal_lr is off here anyway)


def make_model(action_space):
    torch.manual_seed(3)
    return build_model(OBS, action_space, ModelConfig(hidden=8))


def make_batch(model, n=24):
    g = torch.Generator().manual_seed(5)
    obs = torch.randn(n, 4, generator=g) * 2
    actions, logprobs, values = model.act(obs, generator=g)
    returns = values + torch.randn(n, generator=g) * 3
    advantages = torch.randn(n, generator=g) * 2 + 0.5
    logprobs = logprobs + torch.randn(n, generator=g) * 0.3  # stale log-probs: ratios away from 1, some clipped
    return {"obs": obs, "actions": actions, "logprobs": logprobs, "values": values,
            "advantages": advantages, "returns": returns}


def reference_logprob_entropy(model, obs, actions):
    value = model.critic(obs).squeeze(-1)
    if actions.dtype == torch.long:
        logits = model.head.linear(model.actor(obs))  # raw logits, normalized here
        logp_all = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = logp_all.exp()
        logprob = logp_all[torch.arange(len(actions)), actions]
        entropy = -(probs * logp_all).sum(-1)
    else:
        mean, log_std = model.head.linear(model.actor(obs)), model.head.log_std
        var = torch.exp(2 * log_std)
        logprob = (-(actions - mean) ** 2 / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        entropy = (0.5 * math.log(2 * math.pi * math.e) + log_std).sum(-1).expand(len(actions))
    return logprob, entropy, value


def reference_update(model, batch, cfg: PPOConfig, generator: torch.Generator) -> dict:
    """CleanRL's ppo.py update loop, spelled out: per minibatch fresh gradients, loss, global clip, Adam."""
    params = [p for p in model.parameters() if p.requires_grad]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    beta1, beta2 = 0.9, 0.999
    step, clipped_steps = 0, 0
    n = batch["obs"].shape[0]
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(n, generator=generator)
        for idx in torch.tensor_split(perm, cfg.num_minibatches):
            for p in params:
                p.grad = None
            logprob, entropy, value = reference_logprob_entropy(model, batch["obs"][idx], batch["actions"][idx])
            adv = batch["advantages"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ratio = torch.exp(logprob - batch["logprobs"][idx])
            pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            old_v, ret = batch["values"][idx], batch["returns"][idx]
            v_clip = old_v + torch.clamp(value - old_v, -cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((value - ret) ** 2, (v_clip - ret) ** 2).mean()
            loss = pg - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
            loss.backward()
            with torch.no_grad():
                total = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
                scale = min(1.0, cfg.max_grad_norm / (total + 1e-6))
                clipped_steps += scale < 1.0
                step += 1
                for i, p in enumerate(params):
                    g = p.grad * scale
                    m[i] = beta1 * m[i] + (1 - beta1) * g
                    v[i] = beta2 * v[i] + (1 - beta2) * g * g
                    m_hat = m[i] / (1 - beta1 ** step)
                    v_hat = v[i] / (1 - beta2 ** step)
                    p -= cfg.learning_rate * m_hat / (v_hat.sqrt() + cfg.adam_eps)
    return {"steps": step, "clipped_steps": clipped_steps}


@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["categorical", "gaussian"])
def test_update_matches_a_reference_written_out_by_hand(action_space):
    model = make_model(action_space)
    batch = make_batch(model)
    reference = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]

    run_update(new_updater(model, CFG), batch, torch.Generator().manual_seed(SEED))
    info = reference_update(reference, batch, CFG, torch.Generator().manual_seed(SEED))

    assert info["steps"] == 4
    assert info["clipped_steps"] >= 1, "the global clip never acted: the test would not see a wrong clip"
    moved = max((p - b).abs().max().item() for p, b in zip(model.parameters(), before))
    assert moved > 1e-3, "the update barely moved the parameters: the comparison would be vacuous"
    for (name, p), r in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.detach(), r.detach(), atol=1e-6, rtol=0, msg=lambda s: f"{name}: {s}")


def test_minibatches_are_a_fresh_permutation_every_epoch():
    n, epochs = 20, 3
    model = make_model(DISCRETE)
    batch = make_batch(model, n=n)
    batch["obs"][:, 0] = torch.arange(n, dtype=torch.float32) + 100  # row i is recognizable by obs[:, 0]
    seen = []
    evaluate = model.evaluate
    model.evaluate = lambda obs, act: (seen.append(obs[:, 0].long() - 100), evaluate(obs, act))[1]
    cfg = PPOConfig(update_epochs=epochs, num_minibatches=4, anneal_lr=False)
    run_update(new_updater(model, cfg), batch, torch.Generator().manual_seed(SEED))

    assert len(seen) == epochs * 4
    orders = [torch.cat(seen[e * 4:(e + 1) * 4]) for e in range(epochs)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(n)), "every sample exactly once per epoch"
        assert not torch.equal(order, torch.arange(n)), "shuffled, not in rollout order"
    assert len({tuple(o.tolist()) for o in orders}) == epochs, "a different order in every epoch"
