"""Finished episodes: the last-100 window of returns and lengths the learner's log and metrics report
(CleanRL's and rl_games' score), the count, and those not yet written to episodes.jsonl."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RecentEpisodes:
    returns: deque = field(default_factory=lambda: deque(maxlen=100))
    lengths: deque = field(default_factory=lambda: deque(maxlen=100))
    count: int = 0
    new: list = field(default_factory=list)  # (return, length) finished since the last take_new()

    def add(self, ret: float, length: int) -> None:
        self.returns.append(ret)
        self.lengths.append(length)
        self.new.append((ret, length))
        self.count += 1

    def take_new(self) -> list:
        new, self.new = self.new, []
        return new

    def state_dict(self) -> dict:
        """The last-100 window and the count, for a checkpoint (plain types: torch.load(weights_only=True))."""
        return {"returns": [float(r) for r in self.returns], "lengths": [int(n) for n in self.lengths],
                "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.returns.clear()
        self.lengths.clear()
        self.returns.extend(float(r) for r in state["returns"])
        self.lengths.extend(int(n) for n in state["lengths"])
        self.count, self.new = int(state["count"]), []
