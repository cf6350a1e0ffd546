"""A finished rollout becomes a training batch: bootstrap values, reward scaling, GAE, then a flat batch.

This is the step between collection and the PPO update (CleanRL's "bootstrap value if not done" block),
kept out of the learner loop so that it can be tested with hand-made rollouts.

The scale of each quantity, with normalize.value (the critic learns standardized returns):
- rollout values: return units. Each step's value is the serving critic's output de-normalized by the
  serving policy with the statistics that critic's weights were trained against: with run.policy_lag = 1
  a snapshot taken with the weights (learner.collection.inference.served_modules), untouched by the update
  that folds its returns into the training statistics while this rollout is collected. Steps acted on by
  different versions (a group that ran ahead into the next rollout) are therefore in one scale too.
- next_values (bootstrap and final observations): return units, from the serving policy of this rollout's end.
- rewards: the env's, or scaled by normalize.reward: GAE and the returns are in these units.
- logprobs: the behaviour policy's (the version that acted), so the PPO ratio is exact under policy lag.
- with a recurrent core (model.core) the batch also keeps the rollout as sequences (Sequences): every step, its
  episode-start flag and the weights version that acted, and each sequence's first state (the acting policy's,
  whichever version it was), so that the update replays what the acting policy saw.
- with policy lag and ppo.lag_fresh_advantages, the batch also keeps its GAE inputs (GaeInputs), so that the
  update runs GAE again with the critic it starts from (GaeInputs.rerun): the acting critic's values are one version
  older, and in a game whose returns are mostly bootstrapped that delay halves how fast values propagate
  (docs/results/2026-11-27-lag-vs-sync-critic-pong-fast-2core-cpu.md).
- advantages and returns: return units. The update (PPOUpdater) folds the returns into the training
  statistics first, then normalizes returns and old values with those statistics for the value loss and its
  clipping (with policy lag the clip's old values are the outputs of the critic the update starts from, in
  return units, not the lagged ones stored); the advantages stay in return units (ppo.norm_adv standardizes
  them per minibatch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from learner.advantages.gae import compute_gae
from learner.model.normalize import RewardScaler
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.frames import StackedObs
from learner.rollout.layout import Layout


@dataclass
class TrainingBatch:
    data: dict[str, torch.Tensor]  # obs, actions, logprobs, values, advantages, returns: flat [n_valid, ...]
    n_valid: int                   # env steps this rollout contributes (masked steps excluded)
    dropped: int                   # steps planned minus n_valid: vanished actors' cut, or in flight at a close
    width: int                     # env slots with a column in the rollout
    nonfinite_slots: list[int] = field(default_factory=list)  # slots whose samples' values, advantages or
    # returns are not finite (GAE overflowed): the batch is not trained on, their actors are struck (issue 60)


@dataclass
class GaeInputs:
    """A rollout's GAE inputs on the device, kept with its batch (data["gae"]) so that GAE can run again with
    another critic's values (rerun): the update calls it, without importing this stage."""
    rewards: torch.Tensor           # (T, N), scaled as the batch's were
    terminated: torch.Tensor        # (T, N) bool
    dones: torch.Tensor             # (T, N) bool: terminated or truncated
    valid: torch.Tensor             # (T, N) bool: the steps that are the batch's samples, in step-major order
    values: torch.Tensor            # (T, N) the acting critic's, return units: kept where no sample is
    last_next_values: torch.Tensor  # (N,) V of what followed step T - 1, as the acting critic gave it
    # the bootstrap and final observations as the network sees them ((M, *obs), None: none), and the (rows, cols)
    # of next_values their values go to
    extras: tuple[torch.Tensor | None, tuple[torch.Tensor, torch.Tensor]]
    discount: tuple[float, float]   # gamma, GAE's lambda
    extra_states: torch.Tensor | None = None  # a recurrent core's: the states the extras are valued from

    def rerun(self, sample_values: torch.Tensor, extra_values: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(values, advantages, returns) of the batch's samples, flat, from another critic: sample_values (one
        per sample, return units) and extra_values (V of the extras' observations). next_values[t] is values[t + 1] as in the
        rollout, except at the bootstrap and final observations."""
        values = self.values.clone()
        values[self.valid] = sample_values.to(values.dtype)
        next_values = torch.cat([values[1:], self.last_next_values.unsqueeze(0)])
        if extra_values is not None:
            next_values[self.extras[1]] = extra_values.to(next_values.dtype)
        advantages, returns = compute_gae(self.rewards, values, next_values, self.terminated, self.dones,
                                          *self.discount)
        return values[self.valid], advantages[self.valid], returns[self.valid]


@dataclass
class Sequences:
    """A recurrent core's rollout as sequences (data["sequences"]): each env slot's T steps cut into T / length
    sequences, each replayed from the state the acting policy entered its first step with, resetting where
    episodes start. Sequence s is column s % width, steps (s // width) * length onwards. The update draws its
    minibatches as whole sequences (`part`) without importing this stage."""
    obs: torch.Tensor | StackedObs  # every step's observation, flat step-major (step t, column c: t * width + c)
    actions: torch.Tensor           # every step's action, flat step-major
    starts: torch.Tensor            # (T * width,) bool: the episode starts at this step (the state zeroed first)
    states: torch.Tensor            # (T / length, width, state_size): the state at each sequence's first step
    valid: torch.Tensor             # (T * width,) bool: the steps that are the batch's samples
    sample: torch.Tensor            # (T * width,) long: the step's row among the batch's samples (-1: none)
    length: int
    width: int
    versions: torch.Tensor | None = None  # (T * width,) int: the weights version that acted at the step

    def count(self) -> int:
        return self.states.shape[0] * self.width

    def acted_by(self, version: int) -> torch.Tensor:
        """Which of the batch's samples (in their order) the weights of `version` acted, together with every
        step of their sequence since it or their episode began: those the weights of `version` give back
        exactly, replaying from the stored state. With policy lag the steps acted before newer weights served
        are not, nor the steps after the switch whose state came through them (the ratio corrects both)."""
        steps = self.valid.numel() // self.width
        other = (self.versions != version).view(steps, self.width).long()
        t = torch.arange(steps, device=other.device).unsqueeze(1)
        begins = self.starts.view(steps, self.width) | (t % self.length == 0)
        seen = other.cumsum(0)  # steps of other versions so far, this one included
        begin = torch.where(begins, t, torch.zeros_like(t)).cummax(0).values  # where each step's chain began
        return (seen == (seen - other).gather(0, begin)).flatten()[self.valid]

    def part(self, seqs: torch.Tensor) -> "SequencePart":
        """Sequences `seqs` for evaluate: their steps time-major (step j of the b-th at j * B + b)."""
        first, column = seqs // self.width * self.length, seqs % self.width
        steps = ((first.unsqueeze(0) + torch.arange(self.length, device=seqs.device).unsqueeze(1)) * self.width
                 + column.unsqueeze(0)).flatten()
        keep = self.valid[steps]
        return SequencePart(self.obs[steps], self.actions[steps], self.states[seqs // self.width, column],
                            self.starts[steps], keep, self.sample[steps][keep])


@dataclass
class SequencePart:
    """Some sequences' steps, time-major, as evaluate takes them; `keep`: which are samples, `rows`: theirs."""
    obs: torch.Tensor
    actions: torch.Tensor
    state: torch.Tensor
    starts: torch.Tensor
    keep: torch.Tensor
    rows: torch.Tensor


def rollout_to_batch(buf: RolloutBuffer, value_fn, gamma: float, gae_lambda: float,
                     reward_scaler: RewardScaler | None = None,
                     keep_gae_inputs: Callable[[np.ndarray], torch.Tensor] | None = None) -> TrainingBatch | None:
    """None when the rollout holds no valid step (every actor vanished before its first outcome).

    Bootstrap values and reward scaling happen on the host rollout; then the rollout goes to the device
    in one copy per array (none on a CPU) and GAE runs there. keep_gae_inputs (policy lag with
    ppo.lag_fresh_advantages): the network's view of raw observations (Inference.prepare); the batch then keeps
    its GaeInputs as data["gae"]."""
    extra = buf.finish(value_fn)
    valid, dones = extra["valid"], extra["dones"]
    n_valid = int(valid.sum())
    if n_valid == 0:
        return None
    rewards = buf.rewards
    if reward_scaler is not None:
        reward_scaler.reset([buf.slots[c] for c in sorted(buf.fresh)])  # a new env's return starts at 0
        rewards = reward_scaler(rewards, dones, slots=buf.slots, valid=valid).float()
    d = buf.to_device()
    if reward_scaler is not None:
        d["rewards"] = buf.link.to_device(rewards)
    valid = buf.link.to_device(valid)
    advantages, returns = compute_gae(d["rewards"], d["values"], d["next_values"], d["terminated"],
                                      d["terminated"] | d["truncated"], gamma, gae_lambda)
    # all valid (the usual case): views, not a copy of the whole rollout
    take = (lambda x: x.flatten(0, 1)) if n_valid == valid.numel() else (lambda x: x[valid])
    bad = nonfinite_columns(advantages, returns, valid)
    data = {"obs": _observations(d, buf.layout.stack, None if n_valid == valid.numel() else valid),
            "actions": take(d["actions"]), "logprobs": take(d["logprobs"]),
            "values": take(d["values"]), "advantages": take(advantages), "returns": take(returns)}
    if keep_gae_inputs is not None:
        data["gae"] = _gae_inputs(d, valid, extra, keep_gae_inputs, buf, (gamma, gae_lambda))
    if buf.layout.state_size:
        data["sequences"] = _sequences(d, buf, valid, data["obs"] if n_valid == valid.numel() else None)
    return TrainingBatch(data, n_valid, buf.planned_steps() - n_valid, buf.env_slots(), [buf.slots[c] for c in bad])


def nonfinite_columns(advantages: torch.Tensor, returns: torch.Tensor, valid: torch.Tensor) -> list[int]:
    """The columns with a sample whose advantage or return (the value plus the advantage: a non-finite value
    shows there too) is not finite: one pass, one read, per rollout."""
    finite = (torch.isfinite(advantages) & torch.isfinite(returns)) | ~valid
    return (~finite).any(0).nonzero().flatten().tolist()


def _sequences(d: dict[str, torch.Tensor], buf: RolloutBuffer, valid: torch.Tensor,
               all_obs: torch.Tensor | StackedObs | None) -> Sequences:
    """The rollout's sequences (all_obs: every step's observations when they are the samples' already)."""
    flat = valid.flatten()
    sample = torch.full(flat.shape, -1, dtype=torch.long, device=flat.device)
    sample[flat] = torch.arange(int(flat.sum()), device=flat.device)
    obs = all_obs if all_obs is not None else _observations(d, buf.layout.stack, None)
    return Sequences(obs, d["actions"].flatten(0, 1), d["starts"].flatten(), d["states"], flat, sample,
                     buf.layout.sequence(buf.T), buf.N, d["versions"].flatten())


def _gae_inputs(d: dict[str, torch.Tensor], valid: torch.Tensor, extra: dict, prepare, buf: RolloutBuffer,
                discount: tuple[float, float]) -> GaeInputs:
    rows, cols = extra["extra_at"]
    to_device, states = buf.link.to_device, extra["extra_states"]
    return GaeInputs(d["rewards"], d["terminated"], d["terminated"] | d["truncated"], valid, d["values"],
                     d["next_values"][-1], (None if extra["extra_obs"] is None else prepare(extra["extra_obs"]),
                                            (to_device(rows), to_device(cols))), discount,
                     None if states is None else to_device(states))


def _observations(d: dict[str, torch.Tensor], stack: int, valid: torch.Tensor | None) -> torch.Tensor | StackedObs:
    """The samples' observations, flat: stored ones, or stacks rebuilt from one frame per step as the update
    reads them (valid: which steps are samples, None for all)."""
    if stack == 1:
        return d["obs"].flatten(0, 1) if valid is None else d["obs"][valid]
    samples = None if valid is None else valid.flatten().nonzero().squeeze(1)
    return StackedObs(d["frames"], d["restarts"], stack, samples)


def empty_batch(layout: Layout, device) -> dict[str, torch.Tensor]:
    """What a rank without actors brings to an update it must still take part in: no samples."""
    return {"obs": torch.empty((0, *layout.obs_shape), dtype=layout.obs_dtype, device=device),
            "actions": torch.empty((0, *layout.action_shape), dtype=layout.action_dtype, device=device),
            **{k: torch.empty(0, device=device) for k in ("logprobs", "values", "advantages", "returns")}}
