"""The PPO update: the epoch/minibatch loop around learner/update/loss.py's loss, the rate and beta steered by the
measured KL (rates.py), the value statistics, and the exact-replay check (replay.py).

With a recurrent core (the batch's data["sequences"], learner/advantages/batch.py) the minibatches are whole
sequences (num_minibatches parts of a fresh permutation of them each epoch), each replayed from the state the
acting policy entered its first step with and reset where its episodes start; the loss covers their steps that
are samples. Exact replay: before the first step, every sample's log-prob and value are recomputed that way and
the largest differences from the acting policy's are reported (replay_logprob_max_diff, replay_value_max_diff:
~1e-6 or 0 in fp32; a wrong reset or state shows as far more).
"""
from __future__ import annotations

import contextlib
import copy
import math

import torch
from torch import nn

from learner.config import PPOConfig, lr_schedule
from learner.model.normalize import ValueNormalizer
from learner.update.loss import loss_statistics, ppo_loss
from learner.update.precision import native_bf16, resolve_precision
from learner.update.ranks import Ranks
from learner.update.rates import adaptive_lr, kl_beta_update
from learner.update.replay import chunks, evaluate, outputs_of, raw_values, replay_differences


def _nan_unless_finite(loss: torch.Tensor) -> torch.Tensor:
    """1.0 for a finite loss, else NaN: the factor that turns a non-finite loss's gradients (an inf loss can have
    finite ones) into NaN, so that the job's averaged gradient norm shows it on every rank alike."""
    return torch.where(torch.isfinite(loss.detach()), 1.0, float("nan"))


class UpdateStart:
    """A PPOUpdater's state when an update starts (the weights and buffers, Adam's state, the value statistics,
    the rate and beta), copied on the device, to go back to if the update turns out not finite."""

    def __init__(self, updater: "PPOUpdater"):
        self.model = copy.deepcopy(updater.model.state_dict())
        self.optimizer = copy.deepcopy(updater.optimizer.state_dict())
        vn = updater.value_norm
        self.value_norm = None if vn is None else copy.deepcopy(vn.state_dict())
        self.lr, self.beta = updater.lr, updater.beta

    def restore(self, updater: "PPOUpdater") -> None:
        updater.model.load_state_dict(self.model)
        updater.optimizer.load_state_dict(self.optimizer)
        if self.value_norm is not None:
            updater.value_norm.load_state_dict(self.value_norm)
        updater.lr, updater.beta = self.lr, self.beta
        updater.optimizer.zero_grad(set_to_none=True)


def _split_sizes(n: int, parts: int) -> list[int]:
    """The sizes torch.tensor_split gives n items in `parts` parts."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def explained_variance(values: torch.Tensor, returns: torch.Tensor, ranks: Ranks | None = None) -> torch.Tensor:
    """1 - Var(R - V) / Var(R) over every rank's samples pooled (each sample counts once, as in the
    gradients), a 0-d float64 tensor on their device; nan when the returns do not vary (nothing to
    explain). Two passes (means, then centred sums), each one all-reduce, no host read."""
    ranks = ranks or Ranks.single()
    r, d = returns.double(), returns.double() - values.double()
    n, sum_r, sum_d = ranks.sum_tensor(torch.stack([r.new_tensor(float(r.numel())), r.sum(), d.sum()]))
    n = n.clamp(min=1)
    sq_r, sq_d = ranks.sum_tensor(torch.stack([(r - sum_r / n).pow(2).sum(), (d - sum_d / n).pow(2).sum()]))
    ev = 1 - sq_d / sq_r
    return torch.where(torch.isfinite(sq_r) & (sq_r > 0), ev, torch.full_like(ev, float("nan")))


class PPOUpdater:
    """Owns the optimizer (and the KL variant's beta); update() runs one PPO update on a flat batch.

    Minibatches: each epoch draws a fresh permutation and splits it into num_minibatches nearly equal
    parts (sizes differ by at most one), so every sample is used exactly once per epoch and none is
    dropped. Early stop (target_kl > 0): after each epoch, like CleanRL, stop when the last
    minibatch's approx_kl exceeds target_kl.

    KL variant: beta adapts to the KL of the whole update (`update_kl`), measured as the paper does after
    the epochs: one extra forward pass (no gradients) over the update's samples, on every rank, of the
    mean of k3 = (r - 1) - log r with r = pi_new / pi_old, pooled over the ranks by sample. (approx_kl,
    like CleanRL's, is the mean over minibatches of the KL before each step, and stays as reported.)

    policy_lag: each batch was collected by the weights one update older than those the update starts from.
    The objective stays exact against the stored behaviour log-probabilities. The value clip and the KL that the
    adaptive rate and target_kl read are centred on the policy the update starts from (_start_outputs), and so is
    the policy clip with ppo.lag_decoupled (see ppo_loss). Centred on the behaviour policy they count the lag's
    distance as a step the update took: the rate held down, a third of the samples clipped before any step
    (measured on pong-fast, docs/results/2026-11-26-2core-cpu-pong-fast-lag1-seed1-partial/).

    batch_checksum: also report the float64 sum of the observations the update read, taken after its
    last epoch (a debug hook: tests check that the update trained on the rollout that was collected).
    """

    def __init__(self, model: nn.Module, cfg: PPOConfig, device: torch.device | str, ranks: Ranks | None = None,
                 value_norm: ValueNormalizer | None = None, batch_checksum: bool = False, policy_lag: bool = False,
                 rate_horizon: int = 0):
        """rate_horizon: the agent steps `progress` counts in (config_rules.rate_horizon); needed only where the
        entropy bonus has a horizon of its own (ppo.ent_anneal_steps)."""
        if cfg.ent_anneal_steps and not rate_horizon:
            raise ValueError("PPOUpdater: ppo.ent_anneal_steps needs the rate's horizon (rate_horizon) to place "
                             "the entropy schedule's progress")
        self.ent_horizon_ratio = rate_horizon / cfg.ent_anneal_steps if cfg.ent_anneal_steps else 1.0
        self.ranks = ranks or Ranks.single()
        self.policy_lag = policy_lag  # batches come from the weights before the ones each update starts from
        self.batch_checksum = batch_checksum
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.cfg = cfg
        self.schedule = lr_schedule(cfg)
        self.precision = resolve_precision(cfg.update_precision, self.device, native_bf16(self.device))
        self.value_norm = value_norm  # shared with Inference, which de-normalizes the critic's outputs
        self.beta = cfg.kl_beta
        self.ent_coef = cfg.ent_coef  # the update under way's (ppo.ent_schedule)
        self.lr = cfg.learning_rate  # the adaptive schedule's current rate (checkpointed)
        self.loss_keys = loss_statistics(cfg, policy_lag)  # what ppo_loss reports
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)

    def _autocast(self):
        """The context the update's forward passes run in: bfloat16 autocast (ppo.update_precision bf16; the
        model keeps its heads in float32 under it), or nothing (fp32). Backward follows the forward's types."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def learning_rate(self, progress: float) -> float:
        """progress: the run's env steps before this update's rollout / ppo.lr_anneal_steps (or run.total_steps).

        The rate falls linearly to 0 at that horizon (the end of the run by default) and never below. It follows env steps, not an
        update count derived from the configured width, so it ends at ~0 however many envs were live
        (joins, leaves, a resume with another actor count); CleanRL's schedule when the width is fixed.
        Constant: lr0. Adaptive: the rate the last minibatch left."""
        if self.schedule == "adaptive":
            return self.lr
        if self.schedule == "constant":
            return self.cfg.learning_rate
        return self.cfg.learning_rate * min(max(1.0 - progress, 0.0), 1.0)

    def entropy_coef(self, progress: float) -> float:
        """The entropy bonus's weight for an update at `progress` (as learning_rate's): ppo.ent_coef, or with
        ppo.ent_schedule linear falling to 0 at its horizon (ppo.ent_anneal_steps, else the linear rate's), and
        never below."""
        if self.cfg.ent_schedule == "constant":
            return self.cfg.ent_coef
        return self.cfg.ent_coef * min(max(1.0 - progress * self.ent_horizon_ratio, 0.0), 1.0)

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _adapt_lr(self, weighted_kl: torch.Tensor, minibatches: int) -> None:
        """Adaptive schedule, after an epoch or a minibatch: the job's mean KL over those minibatches (this
        rank's weight x KL summed over them, then over the ranks, / minibatches)."""
        kl = float(self.ranks.sum_tensor(weighted_kl.double().reshape(1))[0]) / max(minibatches, 1)
        p = self.cfg
        self.lr = adaptive_lr(self.lr, kl, p.lr_kl_threshold, p.lr_min, p.lr_max)
        self._set_lr(self.lr)

    def _normalize_values(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Value normalization: fold the job's returns into the statistics, then give the critic its
        targets and old values in normalized units (the advantages stay raw)."""
        vn = self.value_norm
        vn.update_moments(self.ranks.sum_tensor(vn.moments(batch["returns"])))
        return {**batch, "values": vn.normalize(batch["values"]), "returns": vn.normalize(batch["returns"])}

    @torch.no_grad()
    def _start_outputs(self, batch: dict[str, torch.Tensor], logprobs: torch.Tensor, values: torch.Tensor
                       ) -> dict[str, torch.Tensor]:
        """Policy lag: the batch with what the policy this update starts from gives its samples (`logprobs`,
        `values`: outputs_of, in the update's precision; a recurrent core's replayed from the acting policy's
        stored states).
        - start_logprobs: the KL of the update's own steps is measured against them (see ppo_loss).
        - values (with value clipping): the clip's anchor is the critic this update starts from, as without
          lag (the batch's values are the lagged critic's, one update older: anchored there the critic could
          move only one clip range per two updates). In return units, like the batch's values: the outputs
          de-normalized with the statistics they were trained against (this batch's returns not yet folded in).
        - with the batch's GaeInputs (ppo.lag_fresh_advantages): values, advantages and returns from its rerun
          (a recurrent core values the bootstrap and final observations from the acting policy's states)."""
        out = {**batch, "start_logprobs": logprobs}
        if "gae" in batch:  # ppo.lag_fresh_advantages: GAE again, with this critic's values
            g, vn = out.pop("gae"), self.value_norm
            with self._autocast():  # the bootstrap and final observations
                extra = self.model.value(g.extras[0], g.extra_states).float() if g.extras[0] is not None else None
            out["values"], out["advantages"], out["returns"] = g.rerun(raw_values(vn, values), raw_values(vn, extra))
        elif self.cfg.clip_vloss:
            out["values"] = raw_values(self.value_norm, values)
        return out

    def update(self, batch: dict[str, torch.Tensor], progress: float,
               generator: torch.Generator | None = None, version: int | None = None) -> dict[str, float]:
        """One PPO update on this rank's flat batch (empty only on a rank with no actors in a G-rank job), from
        the weights of `version` (a recurrent core's exact replay covers the samples they acted; None: all).

        Not finite, it is dropped (issue 60): a step whose loss or gradient is not finite shows in the gradient
        norm's sum, read with the statistics at the end; the weights, Adam's state, the value statistics and
        the rate then go back to where the update started (`nonfinite_update` 1 in its statistics).

        The statistics stay on the device until the end, where one read brings them all to the host: on a
        GPU a read per statistic and minibatch would drain the queue of kernels about a hundred times per
        update (target_kl adds one read per epoch, which the early stop needs; the adaptive schedule one
        per minibatch, as it sets the next minibatch's rate)."""
        cfg, raw = self.cfg, batch  # return units: the explained variance's
        obs = batch["obs"]
        n = obs.shape[0]
        if n == 0 and not self.ranks.distributed:
            raise ValueError("PPOUpdater.update: empty batch")
        sequences = batch.get("sequences")  # a recurrent core's: the minibatches split its sequences
        counts = self.ranks.gather_ints(n if sequences is None else sequences.count())  # every rank's: the weights
        lr = self.learning_rate(progress)  # of its minibatch gradients
        self.ent_coef = self.entropy_coef(progress)
        start = UpdateStart(self)  # what a non-finite step makes the update go back to
        self._set_lr(lr)
        # before anything moves; without lag only the replay reads them: in fp32, as the acting policy computed them
        precision = self._autocast if self.policy_lag else contextlib.nullcontext
        outputs = (outputs_of(self.model, batch, cfg.num_minibatches, precision)
                   if n and (self.policy_lag or sequences is not None) else None)
        replay = replay_differences(outputs, batch, self.value_norm, version, self.ranks) if self.model.recurrent else {}
        if self.policy_lag and n:
            batch = self._start_outputs(batch, *outputs)
            raw = batch if "gae" in raw else raw  # GAE ran again: the values and returns it gave
        if self.value_norm is not None:
            batch = self._normalize_values(batch)
        self.model.train()

        keys = self.loss_keys + ("grad_norm",)
        totals, first, minibatches, epochs_run, epoch_kls = self._epochs(batch, counts, generator, keys)
        pooled = self.ranks.sum_tensor(totals) / max(minibatches, 1)
        extra = {"explained_variance": explained_variance(raw["values"], raw["returns"], self.ranks),
                 **self._pool_first(first), **replay}
        if cfg.variant == "kl":
            extra["update_kl"] = self._update_kl(batch)
        if self.batch_checksum:
            extra["batch_checksum"] = obs.sum(dtype=torch.float64)
        if self.value_norm is not None:  # the statistics this update trained the critic against
            extra.update(value_norm_mean=self.value_norm.rms.mean, value_norm_std=self.value_norm.std())
        tail = torch.stack([x.double().to(self.device) for x in extra.values()])
        kls = self.ranks.sum_tensor(torch.stack(epoch_kls)) if epoch_kls else tail.new_zeros(0)
        values = torch.cat([pooled, tail, kls.double()]).tolist()  # the update's one read from the device
        named = len(keys) + len(extra)
        out = dict(zip(keys + tuple(extra), values[:named]))
        if not math.isfinite(out["grad_norm"]):  # a step's loss or gradient was not finite, on some rank
            start.restore(self)
            return {**out, "nonfinite_update": 1}
        # adaptive: the rate the update ended with (the next one starts from it)
        out.update(learning_rate=self.lr if self.schedule == "adaptive" else lr, epochs_run=epochs_run,
                   minibatches=minibatches, epoch_kls=values[named:])
        if cfg.ent_schedule != "constant":
            out["ent_coef"] = self.ent_coef
        if cfg.variant == "kl":  # the reported beta is the one the next update uses
            self.beta = kl_beta_update(self.beta, out["update_kl"], cfg.kl_target)
            out["kl_beta"] = self.beta
        # the network's input statistics (rl_games' normalize_input) take in this batch after the epochs, so
        # each update starts from the very policy that collected its rollout
        self.model.observe(obs, self.ranks)
        return out

    def _epochs(self, batch: dict[str, torch.Tensor], counts: list[int], generator: torch.Generator | None,
                keys: tuple[str, ...]):
        """The update's epochs of minibatch steps, stopped early past target_kl. Returns the weighted sums of the
        `keys` statistics, the first minibatch's statistics, the minibatches and epochs run, and each epoch's
        mean approx_kl (this rank's weighted part)."""
        cfg, obs = self.cfg, batch["obs"]
        n = obs.shape[0] if "sequences" not in batch else batch["sequences"].count()  # what minibatches split
        totals = torch.zeros(len(keys), dtype=torch.float64, device=self.device)
        first: dict[str, torch.Tensor] = {}
        minibatches = epochs_run = 0
        epoch_kls = []  # each epoch's mean approx_kl, this rank's weighted part
        for epoch in range(cfg.update_epochs):
            perm_device = generator.device if generator is not None else obs.device
            perm = torch.randperm(n, generator=generator, device=perm_device).to(obs.device)
            last = epoch_kl = totals.new_zeros(())
            epoch_minibatches = 0
            for i, idx in enumerate(torch.tensor_split(perm, cfg.num_minibatches)):
                job_size = sum(_split_sizes(c, cfg.num_minibatches)[i] for c in counts)
                if job_size == 0:  # fewer samples than minibatches, on every rank
                    continue
                weight = idx.numel() / job_size
                stats = self._step(batch, idx, weight, first if minibatches == 0 else None)
                totals += weight * torch.stack([stats[k].double() for k in keys])
                last = weight * stats["approx_kl"]
                epoch_kl = epoch_kl + last
                minibatches += 1
                epoch_minibatches += 1
                if self.schedule == "adaptive" and cfg.lr_adapt_every == "minibatch":
                    self._adapt_lr(last, 1)
            epoch_kls.append(epoch_kl / max(epoch_minibatches, 1))
            if self.schedule == "adaptive" and cfg.lr_adapt_every == "epoch" and epoch_minibatches:
                self._adapt_lr(epoch_kl, epoch_minibatches)  # rl_games' discrete PPO: the epoch's mean KL
            epochs_run = epoch + 1
            if cfg.target_kl > 0 and self.ranks.sum([float(last)])[0] > cfg.target_kl:  # decided jointly
                break
        return totals, first, minibatches, epochs_run, epoch_kls

    def _pool_first(self, first: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The first minibatch's statistics for the job: the largest ratio deviation on any rank, and the
        clip fraction weighted by each rank's share of that minibatch (0 on a rank without samples)."""
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        return {"first_minibatch_ratio_max_dev": self.ranks.max_tensor(first.get("ratio_max_dev", zero).double()),
                "first_minibatch_clip_fraction": self.ranks.sum_tensor(first.get("clip_fraction", zero).double())}

    @torch.no_grad()
    def _update_kl(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """KL(pi_old || pi_new) over the update's samples, after all its steps: the mean of k3 = (r - 1) -
        log r over every rank's samples, evaluated in minibatch-sized chunks (bounded memory)."""
        n = batch["obs"].shape[0]
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for idx in chunks(batch, self.cfg.num_minibatches):
            with self._autocast():
                new_logprob, _, _, rows = evaluate(self.model, batch, idx)
            logratio = (new_logprob - batch["logprobs"][rows]).double()
            total += ((logratio.exp() - 1) - logratio).sum()
        kl_sum, count = self.ranks.sum_tensor(torch.stack([total, total.new_tensor(float(n))]))
        return kl_sum / count.clamp(min=1)

    def _step(self, batch: dict[str, torch.Tensor], idx: torch.Tensor, weight: float,
              first: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        """Loss, gradients averaged over the ranks, the global grad-norm clip, one Adam step. first: filled
        with this rank's part of the sanity check on the update's first minibatch."""
        cfg, params = self.cfg, [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer.zero_grad(set_to_none=True)
        if idx.numel():
            with self._autocast():
                new_logprob, entropy, new_values, idx = evaluate(self.model, batch, idx)
        if idx.numel():  # (sequences whose steps are none of them samples give none)
            old_logprob = batch["logprobs"][idx]
            start = batch["start_logprobs"][idx] if "start_logprobs" in batch else None
            loss, stats = ppo_loss(new_logprob, old_logprob, batch["advantages"][idx], new_values,
                                   batch["values"][idx], batch["returns"][idx], entropy, cfg, beta=self.beta,
                                   start_logprob=start, ent_coef=self.ent_coef)
            if first is not None:
                # Sanity check: before any step the policy is the one that collected the data.
                with torch.no_grad():
                    first.update(ratio_max_dev=(new_logprob - old_logprob).exp().sub(1).abs().max(),
                                 clip_fraction=weight * stats["clip_fraction"])
            (loss * _nan_unless_finite(loss)).backward()  # x 1.0 exactly, or NaN gradients everywhere
        else:  # a rank without samples still takes part in the gradient average, with zeros
            zero = torch.zeros((), device=self.device)
            stats = dict.fromkeys(self.loss_keys, zero)
        self.ranks.average_gradients(params, weight)
        stats["grad_norm"] = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        self.optimizer.step()
        return stats

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "kl_beta": self.beta, "learning_rate": self.lr}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.beta = float(state["kl_beta"])
        self.lr = float(state.get("learning_rate", self.cfg.learning_rate))  # checkpoints before the schedule
