"""The recurrent core (model.core = "lstm" | "gru"): between the encoder and the heads, it carries a state from
one step of an env slot to the next.

The state of a batch of env slots is one float32 tensor [B, state_size] (an LSTM's h and c side by side, a
GRU's h), so that whoever keeps it (the collector's Inference per env slot, the update per sequence, evaluation
per game) gathers and scatters it by row. An episode's first step starts from zeros: `reset` zeroes the rows
whose `starts` flag is set, before the step, the same way when acting and when the update replays a sequence.
"""
from __future__ import annotations

import torch
from torch import nn

CELLS = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}


def reset(state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """The state with the rows of episodes that start at this step zeroed (starts: [B] bool)."""
    return torch.where(starts.unsqueeze(1), torch.zeros((), dtype=state.dtype, device=state.device), state)


class RecurrentCore(nn.Module):
    """features [B, in_dim] and a state [B, state_size] -> outputs [B, size] and the next state."""

    def __init__(self, kind: str, in_dim: int, size: int):
        super().__init__()
        self.kind, self.size = kind, size
        self.cell = CELLS[kind](in_dim, size)
        self.state_size = 2 * size if kind == "lstm" else size
        for name, param in self.cell.named_parameters():  # CleanRL's LSTM init: orthogonal weights, zero biases
            nn.init.orthogonal_(param) if name.startswith("weight") else nn.init.zeros_(param)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from `state` (already reset where episodes start): (outputs, next state)."""
        if self.kind == "lstm":
            h, c = self.cell(x, state.split(self.size, dim=1))
            return h, torch.cat([h, c], dim=1)
        h = self.cell(x, state)
        return h, h

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """x [L, B, in_dim] (L steps of B sequences), state [B, state_size] before step 0, starts [L, B]:
        the outputs [L, B, size], each step reset and taken as `step` took it when acting."""
        outs = []
        for t in range(x.shape[0]):
            out, state = self.step(x[t], reset(state, starts[t]))
            outs.append(out)
        return torch.stack(outs)
