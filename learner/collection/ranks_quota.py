"""run.segments on G learner ranks: one quota for the job's rollout, not one per rank (issue 62).

Each rank fills its own rollout from its own actors, and the ranks meet at every gradient step: with a quota per
rank the slower rank's actors pace the job (their rank's rollout is the last to fill, and the fast rank's actors
park). With `RanksQuota` every collection (the rank's one, or each of its K collector processes) posts how many
steps it has completed in the rollout under way, and each closes its part once the steps of every collection of
every rank together reach T x every env slot of the job: a rank whose actors are fast fills more than its own
slots' T steps, a slow one's rollout is cut short. The update already weights each rank's gradient by its share of
the samples (learner/update/ranks.py: average_gradients), so unequal batches train as one.

The counts travel through a key-value store every rank reaches (torch.distributed's TCPStore, hosted by rank 0:
learner/update/ranks.py, `Ranks.store`), one key per collection holding "rollout share done", and one per rank
saying how many collections it has. Reading them is one round trip (tens of microseconds on one host), made at most
once a pass of the collector's loop, not per message. A collection that has not begun the rollout yet counts with
its last rollout's share and none of its steps, so nobody closes early. (`OwnQuota` in learner/collection/routes.py
is the rule of one collector alone, and processes/board.py's `JobQuota` that of K collector processes of one rank.)
"""
from __future__ import annotations

import dataclasses
import datetime
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
    """Where the job's store is (learner/update/ranks.py: Ranks.store) and whose rows this collection posts:
    picklable (it crosses a collector process's spawn); each collection connects a client of its own."""
    host: str
    port: int
    timeout_s: float
    rank: int
    world: int
    collectors: int = 1  # this rank's collections (cluster.collectors = K: one row each)
    index: int = 0       # this collection's among them

    def of_collector(self, index: int, count: int) -> "RanksStore":
        """The same store, for collector `index` of this rank's `count` collector processes."""
        return dataclasses.replace(self, index=index, collectors=count)

    def connect(self) -> Store:
        import torch.distributed as dist  # here: the store is made only where it is used
        return _ask(dist.TCPStore, self.host, self.port, is_master=False,
                    timeout=datetime.timedelta(seconds=self.timeout_s))

    def post_empty_rows(self, store: Store) -> None:
        """This rank's rows before its first rollout, and how many it has: every rank posts its own before the ranks
        next meet (the gather of their addresses), so no read waits long for a missing key."""
        for i in range(self.collectors):
            _ask(store.set, row_key(self.rank, i), "0 0 0")
        _ask(store.set, count_key(self.rank), str(self.collectors))


def row_key(rank: int, index: int) -> str:
    return f"segments/rank{rank}/collector{index}"


def count_key(rank: int) -> str:
    return f"segments/rank{rank}/collectors"


class RanksQuota:
    pass_ms = RANKS_PASS_MS  # the other ranks' steps arrive on the store, not on this collector's socket

    def __init__(self, where: RanksStore, store: Store | None = None):
        """`where`: the store and this collection's row; `store`: a client already connected (else one of its
        own). Every rank's rows are read from the store at the first rollout (each rank posts how many it has)."""
        self.where, self.store = where, store if store is not None else where.connect()
        self.key = row_key(where.rank, where.index)
        self.keys: list[str] = []  # every collection's row, of every rank
        self.rollout = 0  # begun so far: the same count everywhere (every collection is sent every rollout, and
        self.current: RolloutBuffer | None = None  # every rank runs every update)

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
        _ask(self.store.set, self.key, f"{self.rollout} {buf.quota} {sum(buf.completed)}")

    def _read(self) -> list[bytes]:
        if not self.keys:
            counts = _ask(self.store.multi_get, [count_key(r) for r in range(self.where.world)])
            self.keys = [row_key(r, i) for r, n in enumerate(counts) for i in range(int(n))]
        return _ask(self.store.multi_get, self.keys)


def _ask(operation, *args, **kwargs):
    """One call on the store; its failure (DistNetworkError, or DistStoreError past the store's timeout) as one
    error naming what it means."""
    try:
        return operation(*args, **kwargs)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RanksUnreachable(f"the learner ranks' store does not answer (rank 0 died or hangs): {first}") from None
