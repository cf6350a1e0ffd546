"""What the training loop sees of collection, whichever form it takes: in the training process itself
(learner/collection/local.py) or in K collector processes (learner/collection/processes/pool.py)."""
from __future__ import annotations

from abc import ABC, abstractmethod

from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout


class Collection(ABC):
    endpoint: str    # where actors join (collector 0's address with several)
    layout: Layout   # of the rollouts `collect` returns
    rollouts: int    # collected so far

    @abstractmethod
    def collect(self, min_envs: int, should_stop, version: int) -> RolloutBuffer | None:
        """One rollout, started once `min_envs` env slots are ready (None: asked to stop first); its actions
        computed with weights `version`, and with policy lag by newer ones as soon as the update running
        meanwhile is done (the scheduler's PolicyVersions, given at construction; groups that finish then go
        on into the next rollout: learner/collection/collector.py)."""

    @abstractmethod
    def after_update(self, version: int, rank_slots: list[int] | None) -> None:
        """The update is done: serve its weights (`version`); `rank_slots`: every rank's live env slots (rank 0
        of several balances joiners with them)."""

    @abstractmethod
    def processes(self) -> list[dict]:
        """Where each collector listens, and its process (for endpoints.json)."""

    @abstractmethod
    def join_command(self, num_envs: int) -> str:
        """The command line that adds an actor of `num_envs` envs."""

    @abstractmethod
    def know_ranks(self, rank_addresses: list[str]) -> None:
        """Rank 0 of several: where the other ranks listen (it redirects joiners there)."""

    @abstractmethod
    def strike(self, slots: list[int], reason: str) -> None:
        """The actors holding these slots of the last rollout made it unusable (`reason`): each is struck (the
        gateway's strikes and bans) and retired."""

    @abstractmethod
    def take_episodes(self) -> list[tuple[float, int]]:
        """The (return, length) of every episode finished since the last call."""

    @abstractmethod
    def breakdown(self) -> dict | None:
        """Where the last rollout's time went (learner/collection/counters.py: summarize), for metrics.jsonl."""

    @abstractmethod
    def take_events(self) -> list[str]:
        """Joins and leaves since the last call."""

    @abstractmethod
    def actors(self) -> int:
        """Actors connected."""

    @abstractmethod
    def live_slots(self) -> int:
        """Env slots of the connected actors."""

    @abstractmethod
    def rejected(self) -> int:
        """Messages rejected so far."""

    @abstractmethod
    def close(self) -> None:
        """Goodbyes to the actors; sockets and processes released."""
