"""The PPO update: the loss (clipped surrogate or adaptive KL penalty) and the epoch/minibatch loop."""
from __future__ import annotations


import torch
from torch import nn

from learner.config import PPOConfig

BETA_BOUNDS = (1e-10, 1e10)  # keeps repeated halving/doubling from reaching 0 or inf, where it would stick


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, cfg: PPOConfig, beta: float | None = None
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss for one minibatch, to be minimized, and detached float statistics.

    KL variant: the penalty uses k3 = (ratio - 1) - log(ratio), the approx_kl estimator. With actions
    drawn from pi_old its mean is an unbiased estimate of KL(pi_old || pi), and so is its gradient;
    beta defaults to cfg.kl_beta.
    """
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    kl = (ratio - 1) - logratio

    if cfg.norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    stats: dict[str, float] = {}
    if cfg.variant == "kl":
        beta = cfg.kl_beta if beta is None else beta
        penalty = beta * kl.mean()
        pg_loss = -(ratio * advantages).mean() + penalty
        stats["kl_penalty"] = penalty.item()
    else:
        clipped = ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
        pg_loss = torch.max(-advantages * ratio, -advantages * clipped).mean()

    if cfg.clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns).pow(2), (v_clipped - returns).pow(2)).mean()
    else:
        v_loss = 0.5 * (new_values - returns).pow(2).mean()

    entropy_mean = entropy.mean()
    loss = pg_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * v_loss
    with torch.no_grad():
        stats.update(policy_loss=pg_loss.item(), value_loss=v_loss.item(), entropy=entropy_mean.item(),
                     approx_kl=kl.mean().item(),
                     clip_fraction=((ratio - 1).abs() > cfg.clip_coef).float().mean().item())
    return loss, stats


def kl_beta_update(beta: float, measured_kl: float, kl_target: float) -> float:
    """PPO paper, section 4: halve beta below d_targ/1.5, double it above 1.5 d_targ, else keep it."""
    if measured_kl < kl_target / 1.5:
        beta = beta / 2
    elif measured_kl > kl_target * 1.5:
        beta = beta * 2
    return min(max(beta, BETA_BOUNDS[0]), BETA_BOUNDS[1])


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R); nan when the returns do not vary (nothing to explain)."""
    var_r = returns.double().var(unbiased=False)
    if not torch.isfinite(var_r) or var_r.item() == 0:
        return float("nan")
    return float(1 - (returns.double() - values.double()).var(unbiased=False) / var_r)


class PPOUpdater:
    """Owns the optimizer (and the KL variant's beta); update() runs one PPO update on a flat batch.

    Minibatches: each epoch draws a fresh permutation and splits it into num_minibatches nearly equal
    parts (sizes differ by at most one), so every sample is used exactly once per epoch and none is
    dropped. Early stop (target_kl > 0): after each epoch, like CleanRL, stop when the last
    minibatch's approx_kl exceeds target_kl.
    """

    def __init__(self, model: nn.Module, cfg: PPOConfig, device: torch.device | str):
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.cfg = cfg
        self.beta = cfg.kl_beta
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)

    def learning_rate(self, progress: float) -> float:
        """progress: the run's env steps done before this update's rollout / run.total_steps.

        The rate falls linearly to 0 at the end of the run and never below. It follows env steps, not an
        update count derived from the configured width, so it ends at ~0 however many envs were live
        (joins, leaves, a resume with another actor count); CleanRL's schedule when the width is fixed."""
        if not self.cfg.anneal_lr:
            return self.cfg.learning_rate
        return self.cfg.learning_rate * min(max(1.0 - progress, 0.0), 1.0)

    def update(self, batch: dict[str, torch.Tensor], progress: float,
               generator: torch.Generator | None = None) -> dict[str, float]:
        cfg = self.cfg
        obs, actions = batch["obs"], batch["actions"]
        old_logprob, old_values = batch["logprobs"], batch["values"]
        advantages, returns = batch["advantages"], batch["returns"]
        n = obs.shape[0]
        if n == 0:
            raise ValueError("PPOUpdater.update: empty batch")

        lr = self.learning_rate(progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()

        totals: dict[str, float] = {}
        minibatches = 0
        epochs_run = 0
        first: dict[str, float] = {}
        for epoch in range(cfg.update_epochs):
            perm_device = generator.device if generator is not None else obs.device
            perm = torch.randperm(n, generator=generator, device=perm_device).to(obs.device)
            for idx in torch.tensor_split(perm, cfg.num_minibatches):
                if idx.numel() == 0:  # fewer samples than minibatches
                    continue
                new_logprob, entropy, new_values = self.model.evaluate(obs[idx], actions[idx])
                loss, stats = ppo_loss(new_logprob, old_logprob[idx], advantages[idx], new_values,
                                       old_values[idx], returns[idx], entropy, cfg, beta=self.beta)
                if not first:
                    # Sanity check: before any step the policy is the one that collected the data.
                    with torch.no_grad():
                        dev = (new_logprob - old_logprob[idx]).exp().sub(1).abs().max().item()
                    first = {"first_minibatch_ratio_max_dev": dev,
                             "first_minibatch_clip_fraction": stats["clip_fraction"]}
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                stats["grad_norm"] = float(nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                self.optimizer.step()
                stats["loss"] = loss.item()
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                minibatches += 1
            epochs_run = epoch + 1
            if cfg.target_kl > 0 and stats["approx_kl"] > cfg.target_kl:
                break

        out = {key: value / minibatches for key, value in totals.items()}
        out.update(first)
        out.update(learning_rate=lr, epochs_run=epochs_run, minibatches=minibatches,
                   explained_variance=explained_variance(old_values, returns))
        if cfg.variant == "kl":
            # Adjust beta from the mean measured KL of this update; reported value is the one for the next update.
            self.beta = kl_beta_update(self.beta, out["approx_kl"], cfg.kl_target)
            out["kl_beta"] = self.beta
        return out

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "kl_beta": self.beta}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.beta = float(state["kl_beta"])
