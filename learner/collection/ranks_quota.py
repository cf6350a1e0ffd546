"""run.segments on G learner ranks: one quota for the job's rollout, not one per rank (issue 62).

Each rank fills its own rollout from its own actors, and the ranks meet at every gradient step: with a quota per
rank the slower rank's actors pace the job (their rank's rollout is the last to fill, and the fast rank's actors
park). With `RanksQuota` every rank posts how many steps it has completed in the rollout under way, and every rank
closes its rollout once the ranks' steps together reach T x every env slot of the job: a rank whose actors are fast
fills more than its own slots' T steps, a slow one's rollout is cut short. The update already weights each rank's
gradient by its share of the samples (learner/update/ranks.py: average_gradients), so unequal batches train as one.

The counts travel through a key-value store every rank reaches (torch.distributed's TCPStore, hosted by rank 0:
learner/update/ranks.py, `job_store`), one key per rank holding "rollout share done". Reading them is one round trip
(tens of microseconds on one host), made at most once a pass of the collector's loop, not per message. A rank that
has not begun the rollout yet counts with its last rollout's share and none of its steps, so nobody closes early.
(`OwnQuota` in learner/collection/routes.py is the rule of one collector, and processes/board.py's `JobQuota` that of
K collector processes on one rank.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from learner.rollout.buffer import RolloutBuffer

RANKS_PASS_MS = 10  # a collector's longest wait for a message before it reads the other ranks' counts again


class Store(Protocol):
    """What RanksQuota needs of torch.distributed's Store."""
    def set(self, key: str, value: str) -> None: ...
    def multi_get(self, keys: list[str]) -> list[bytes]: ...


class RanksUnreachable(RuntimeError):
    """The store the ranks share failed or did not answer in time: rank 0 (its host) died or hangs."""


@dataclass(frozen=True)
class RanksStore:
    """The job's store (learner/update/ranks.py: Ranks.store) and this rank's place among the ranks."""
    store: Store
    rank: int
    world: int

    def keys(self) -> list[str]:
        return [f"segments/rank{r}" for r in range(self.world)]

    def post_empty_row(self) -> None:
        """This rank's row before its first rollout: every rank posts its own before the ranks next meet (the
        gather of their addresses), so no read ever waits for a missing key. A rank whose collection has no
        RanksQuota (K collector processes) keeps it: a share of 0, none of its steps counted."""
        self.store.set(self.keys()[self.rank], "0 0 0")


class RanksQuota:
    pass_ms = RANKS_PASS_MS  # the other ranks' steps arrive on the store, not on this collector's socket

    def __init__(self, ranks: RanksStore):
        self.store, self.keys = ranks.store, ranks.keys()
        self.key = self.keys[ranks.rank]
        self.rollout = 0  # begun so far: the same count on every rank (one rollout per update, every rank runs
        self.current: RolloutBuffer | None = None  # every update)

    def begin(self, buf: RolloutBuffer) -> None:
        """This rank's next rollout begins with `buf` (a rollout groups flowed on into has steps already)."""
        self.rollout += 1
        self.current = buf
        self._post(buf)

    def full(self, buf: RolloutBuffer) -> bool:
        """Whether the job's rollout holds its steps, `buf` being this rank's part of it (this rank's count posted
        first). A rollout not begun yet (groups flowing on into the next) is never full: only its room bounds it."""
        if buf is not self.current:
            return False
        self._post(buf)
        done = quota = 0
        for raw in self._read():
            rollout, share, steps = map(int, raw.split())
            quota += share  # a rank not at this rollout yet: its last share stands in for this one's
            done += steps if rollout == self.rollout else 0
        return done >= quota

    def _post(self, buf: RolloutBuffer) -> None:
        self._ask(self.store.set, self.key, f"{self.rollout} {buf.quota} {sum(buf.completed)}")

    def _read(self) -> list[bytes]:
        return self._ask(self.store.multi_get, self.keys)

    @staticmethod
    def _ask(operation, *args):
        """One call on the store; its failure (DistNetworkError, or DistStoreError past the store's timeout) as one
        error naming what it means."""
        try:
            return operation(*args)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RanksUnreachable(f"the learner ranks' store does not answer (rank 0 died or hangs): {first}"
                                   ) from None
