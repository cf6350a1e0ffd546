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

RNNS = {"lstm": nn.LSTM, "gru": nn.GRU}


def reset(state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """The state with the rows of episodes that start at this step zeroed (starts: [B] bool)."""
    return torch.where(starts.unsqueeze(1), torch.zeros((), dtype=state.dtype, device=state.device), state)


class RecurrentCore(nn.Module):
    """features [B, in_dim] and a state [B, state_size] -> outputs [B, size] and the next state: one layer of
    torch's LSTM or GRU, whose fused kernels also replay whole sequences (unroll)."""

    def __init__(self, kind: str, in_dim: int, size: int):
        super().__init__()
        self.kind, self.size = kind, size
        self.rnn = RNNS[kind](in_dim, size)
        self.state_size = 2 * size if kind == "lstm" else size
        for name, param in self.rnn.named_parameters():  # CleanRL's LSTM init: orthogonal weights, zero biases
            nn.init.orthogonal_(param) if name.startswith("weight") else nn.init.zeros_(param)

    def _hidden(self, state: torch.Tensor):
        """Our [B, state_size] state as torch's RNN takes it ([1, B, size] h, and c for an LSTM)."""
        if self.kind == "lstm":
            h, c = state.unsqueeze(0).split(self.size, dim=2)
            return h.contiguous(), c.contiguous()
        return state.unsqueeze(0).contiguous()

    def _state(self, hidden) -> torch.Tensor:
        return torch.cat(hidden, dim=2)[0] if self.kind == "lstm" else hidden[0]

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from `state` (already reset where episodes start): (outputs, next state)."""
        out, hidden = self.rnn(x.unsqueeze(0), self._hidden(state))
        return out[0], self._state(hidden)

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """x [L, B, in_dim] (L steps of B sequences), state [B, state_size] before step 0, starts [L, B]:
        the outputs [L, B, size], each step reset and taken as `step` took it when acting.

        In one call of the fused kernel: each sequence is cut where its episodes start, into pieces that begin
        from its state (the first, unless it starts an episode itself) or from zeros, run together as one
        packed batch of variable lengths, and put back in place."""
        L, B = starts.shape
        device = x.device
        begins = starts.t().clone()  # (B, L): sequence-major
        begins[:, 0] = True
        begins = begins.flatten()
        where = torch.arange(L * B, device=device)
        piece = begins.cumsum(0) - 1  # each step's piece
        offset = where - torch.where(begins, where, torch.zeros_like(where)).cummax(0).values  # its step in it
        pieces = int(piece[-1]) + 1
        lengths = torch.bincount(piece, minlength=pieces)
        padded = x.new_zeros((int(lengths.max()), pieces, x.shape[2]))
        padded[offset, piece] = x.transpose(0, 1).flatten(0, 1)
        carried = begins & ~starts.t().flatten()  # pieces that go on from the sequence's state (first step, no reset)
        first = torch.zeros((pieces, self.state_size), dtype=state.dtype, device=device)
        first[piece[carried]] = state[where[carried] // L]
        packed = nn.utils.rnn.pack_padded_sequence(padded, lengths.cpu(), enforce_sorted=False)
        out = nn.utils.rnn.pad_packed_sequence(self.rnn(packed, self._hidden(first))[0])[0]
        return out[offset, piece].reshape(B, L, self.size).transpose(0, 1)
