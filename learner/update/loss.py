"""PPO's loss for one minibatch (the clipped surrogate, its decoupled form under policy lag, or the adaptive KL
penalty; the value and entropy terms) and the statistics it reports, which metrics.jsonl gets per update."""
from __future__ import annotations

import torch

from learner.config import PPOConfig


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, cfg: PPOConfig, beta: float | None = None,
             start_logprob: torch.Tensor | None = None, ent_coef: float | None = None
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss for one minibatch, to be minimized, and detached 0-d statistics on the loss's device (left
    there, so that reading them is one host sync per update, not one per statistic and minibatch).

    The statistics are the update's: whatever this returns is averaged over the minibatches and ranks and
    written to metrics.jsonl under its key (loss_statistics asks this function which there are), so a new
    statistic is one more entry in `stats`, whose presence may depend on the config and the lag, not the data.

    start_logprob (policy lag): the log-probabilities under the policy this update started from (the proximal
    policy). With ppo.lag_decoupled the clipped objective is PPO's decoupled form (Hilton et al. 2021, "Batch size-invariance for
    policy optimization"): the clip is centred on the start policy, r = pi / pi_start, and each sample is
    weighted by pi_start / pi_behaviour, so that the unclipped objective is still exactly pi / pi_behaviour x A.
    Clipped against the behaviour policy, a sample the lag had already moved past the clip range would give no
    gradient at all. approx_kl and approx_kl_sq, which the adaptive rate and target_kl read, measure this
    update's own steps; clip_fraction counts around whichever policy the clip is centred on; `behaviour_kl`
    reports the KL against the behaviour policy. Without lag
    (start_logprob None, or equal to old_logprob) this is PPO as CleanRL writes it.

    KL variant: the penalty uses k3 = (ratio - 1) - log(ratio), the approx_kl estimator. With actions
    drawn from pi_old its mean is an unbiased estimate of KL(pi_old || pi), and so is its gradient;
    beta defaults to cfg.kl_beta, ent_coef (the entropy bonus's weight: ppo.ent_schedule) to cfg.ent_coef.
    """
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    kl = (ratio - 1) - logratio

    if cfg.norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    stats: dict[str, torch.Tensor] = {}
    if cfg.variant == "kl":
        beta = cfg.kl_beta if beta is None else beta
        penalty = beta * kl.mean()
        pg_loss = -(ratio * advantages).mean() + penalty
        stats["kl_penalty"] = penalty.detach()
    else:
        pg_loss = _clipped_policy_loss(new_logprob, old_logprob, start_logprob, ratio, advantages, cfg)

    if cfg.clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-cfg.clip_coef, cfg.clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns).pow(2), (v_clipped - returns).pow(2)).mean()
    else:
        v_loss = 0.5 * (new_values - returns).pow(2).mean()

    entropy_mean = entropy.mean()
    loss = pg_loss - (cfg.ent_coef if ent_coef is None else ent_coef) * entropy_mean + cfg.vf_coef * v_loss
    with torch.no_grad():
        step_logratio = logratio if start_logprob is None else new_logprob - start_logprob
        step_ratio = step_logratio.exp()
        clip_ratio = step_ratio if cfg.lag_decoupled else ratio  # around what the clip is centred
        stats.update(policy_loss=pg_loss.detach(), value_loss=v_loss.detach(), entropy=entropy_mean.detach(),
                     approx_kl=((step_ratio - 1) - step_logratio).mean(), approx_kl_sq=0.5 * step_logratio.pow(2).mean(),
                     clip_fraction=((clip_ratio - 1).abs() > cfg.clip_coef).float().mean(), loss=loss.detach())
        if start_logprob is not None:
            stats["behaviour_kl"] = kl.mean()
    return loss, stats


def loss_statistics(cfg: PPOConfig, policy_lag: bool) -> tuple[str, ...]:
    """The statistics ppo_loss reports under this config, in its order: asked of ppo_loss itself on a
    two-sample batch, so that no list of them is kept anywhere else."""
    x = torch.zeros(2)
    return tuple(ppo_loss(x, x, x, x, x, x, x, cfg, start_logprob=x if policy_lag else None)[1])


def _clipped_policy_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, start_logprob: torch.Tensor | None,
                         ratio: torch.Tensor, advantages: torch.Tensor, cfg: PPOConfig) -> torch.Tensor:
    """PPO's clipped surrogate; with ppo.lag_decoupled and a start policy, its decoupled form: the clip
    around the start policy, each sample weighted by pi_start / pi_behaviour."""
    if start_logprob is None or not cfg.lag_decoupled:
        clipped = ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
        return torch.max(-advantages * ratio, -advantages * clipped).mean()
    step_ratio = (new_logprob - start_logprob).exp()
    clipped = step_ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)
    weight = (start_logprob - old_logprob).exp()
    if cfg.lag_weight_max > 0:  # V-trace's truncation (rho-bar)
        weight = weight.clamp(max=cfg.lag_weight_max)
    return (weight * torch.max(-advantages * step_ratio, -advantages * clipped)).mean()
