"""The rules that steer an update by the KL it measured: the PPO paper's adaptive penalty coefficient and rl_games'
KL-adaptive learning rate."""
from __future__ import annotations

BETA_BOUNDS = (1e-10, 1e10)  # keeps repeated halving/doubling from reaching 0 or inf, where it would stick


def kl_beta_update(beta: float, measured_kl: float, kl_target: float) -> float:
    """PPO paper, section 4: halve beta below d_targ/1.5, double it above 1.5 d_targ, else keep it."""
    if measured_kl < kl_target / 1.5:
        beta = beta / 2
    elif measured_kl > kl_target * 1.5:
        beta = beta * 2
    return min(max(beta, BETA_BOUNDS[0]), BETA_BOUNDS[1])


def adaptive_lr(lr: float, kl: float, threshold: float, lr_min: float, lr_max: float) -> float:
    """rl_games' KL-adaptive rule (applied after every epoch or minibatch, ppo.lr_adapt_every): divide by 1.5 when the KL exceeds twice
    the threshold, multiply by 1.5 when it is under half of it, and stay within [lr_min, lr_max]."""
    if kl > 2.0 * threshold:
        lr = lr / 1.5
    elif kl < 0.5 * threshold:
        lr = lr * 1.5
    return min(max(lr, lr_min), lr_max)
