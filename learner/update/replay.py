"""The model's outputs over an update's batch: a minibatch's log-probs, entropies and values (a recurrent core's
by replaying each sequence from its stored state with its resets), every sample's in minibatch-sized chunks, and
the exact-replay check of those against what the acting policy gave."""
from __future__ import annotations

import torch
from torch import nn

from learner.model.normalize import ValueNormalizer
from learner.update.ranks import Ranks


def raw_values(value_norm: ValueNormalizer | None, value: torch.Tensor | None) -> torch.Tensor | None:
    """Critic outputs in return units: de-normalized with the statistics they were trained against."""
    return value if value is None or value_norm is None else value_norm.denormalize(value)


def evaluate(model: nn.Module, batch: dict[str, torch.Tensor], idx: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The model's log-probs, entropies and values for minibatch `idx`, and the rows of the batch's samples they
    are for: idx itself, or with a recurrent core (data["sequences"]) the samples among the steps of sequences
    `idx`, each replayed from its first state with its resets."""
    sequences = batch.get("sequences")
    if sequences is None:
        return (*model.evaluate(batch["obs"][idx], batch["actions"][idx]), idx)
    part = sequences.part(idx)
    logprob, entropy, value = model.evaluate(part.obs, part.actions, state=part.state, starts=part.starts)
    return logprob[part.keep], entropy[part.keep], value[part.keep], part.rows


def chunks(batch: dict[str, torch.Tensor], parts: int):
    """The batch's samples (a recurrent core's: its sequences) in `parts` minibatch-sized chunks, in order."""
    sequences = batch.get("sequences")
    n = batch["obs"].shape[0] if sequences is None else sequences.count()
    return torch.arange(n, device=batch["actions"].device).tensor_split(parts) if n else ()


@torch.no_grad()
def outputs_of(model: nn.Module, batch: dict[str, torch.Tensor], parts: int, autocast
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sample's log-prob and value (the critic's own units) under `model` as it is, in `parts`
    minibatch-sized chunks, each under `autocast()`; a recurrent core's by replaying each sequence from its
    stored state with its stored resets."""
    n = batch["logprobs"].shape[0]
    logprobs, values = (torch.empty(n, device=batch["logprobs"].device) for _ in range(2))
    for idx in chunks(batch, parts):
        with autocast():
            logprob, _, value, rows = evaluate(model, batch, idx)
        logprobs[rows], values[rows] = logprob.float(), value.float()
    return logprobs, values


def replay_differences(outputs: tuple[torch.Tensor, torch.Tensor], batch: dict[str, torch.Tensor],
                       value_norm: ValueNormalizer | None, version: int | None, ranks: Ranks) -> dict[str, torch.Tensor]:
    """Exact replay (a recurrent core), before the update's first step, the job's: the largest absolute
    differences on any rank between the log-probs and values of `outputs` (outputs_of; None: a rank without
    samples) and the acting policy's, over the samples the weights of `version` acted (Sequences.acted_by;
    None: all, as without policy lag), and how many those are on every rank (replay_samples). Values in return
    units, as stored: de-normalized with the statistics the acting critic used, not yet updated with this batch."""
    found = torch.zeros(3, dtype=torch.float64, device=batch["logprobs"].device)
    if outputs is not None:
        pairs = [(outputs[0], batch["logprobs"]), (raw_values(value_norm, outputs[1]), batch["values"])]
        if version is not None:
            exact = batch["sequences"].acted_by(version)
            pairs = [(ours[exact], stored[exact]) for ours, stored in pairs]
        if pairs[0][0].numel():
            found = torch.stack([*((ours - stored).abs().max() for ours, stored in pairs),
                                 found.new_tensor(float(pairs[0][0].numel()))]).double()
    worst, samples = ranks.max_tensor(found[:2]), ranks.sum_tensor(found[2:])
    return {"replay_logprob_max_diff": worst[0], "replay_value_max_diff": worst[1], "replay_samples": samples[0]}
