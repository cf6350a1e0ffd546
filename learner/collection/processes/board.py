"""The board: a shared int64 array of one row per collector process (learner/collection/processes/), which each
collector writes its own row of and anyone reads. What each column holds:

    READY     env slots ready for the next rollout (posted between rollouts)
    SLOTS     env slots of the connected actors (posted when a join or a leave changed them)
    ADMITTED  env slots ever handed out (joins so far, counted in envs)
    BEAT      the last sign of life (CLOCK_MONOTONIC in ms, system-wide: the training process compares it
              with its own)
    ROLLOUT   run.segments: the number of the rollout the next two columns are of (1, 2, ... in every
              collector alike: each is sent every Collect)
    SHARE     its share of that rollout's quota: T x its env slots
    DONE      the steps it has completed in that rollout

`JobQuota` is the close rule of run.segments with K collectors, read from the last three.
"""
from __future__ import annotations

import numpy as np

from learner.rollout.buffer import RolloutBuffer

READY, SLOTS, ADMITTED, BEAT, ROLLOUT, SHARE, DONE = range(7)
BOARD_COLUMNS = 7
JOB_PASS_MS = 10  # a collector's longest wait for a message before it reads the board again


class JobQuota:
    """run.segments with K collector processes: one quota for the job's rollout, not one per collector. Every
    collector posts how many steps it has completed in the rollout under way (`DONE`, at most once per batch
    and per finished segment) and closes its share once the K collectors' together reach T x every env slot of
    the job, so a collector whose actors are fast fills more than its own slots' T steps and a slow one's share
    is cut short, as with one collector. A collector that has not begun this rollout yet counts with its
    connected env slots (`SLOTS`) and none of its steps: the last rollout's are never counted.
    (Learner/collection/routes.py's `OwnQuota` is the rule of one collector.)"""

    pass_ms = JOB_PASS_MS  # the others' steps arrive on the board, not on this collector's socket: look often

    def __init__(self, board: np.ndarray, index: int, num_steps: int):
        """`board`: the shared board (K rows, BOARD_COLUMNS columns); `index`: this collector's row."""
        self.board, self.index, self.T = board, index, num_steps
        self.rollout = 0  # begun so far
        self.current: RolloutBuffer | None = None

    def begin(self, buf: RolloutBuffer) -> None:
        """This collector's next rollout begins with `buf` (a rollout groups flowed on into has steps already)."""
        self.rollout += 1
        self.current = buf
        row = self.board[self.index]
        row[SHARE], row[DONE] = buf.quota, sum(buf.completed)
        row[ROLLOUT] = self.rollout  # last: whoever reads this number reads the two counts of this rollout

    def full(self, buf: RolloutBuffer) -> bool:
        """Whether the job's rollout holds its steps, `buf` being this collector's share of it (this collector's
        count posted first). A rollout not begun yet (groups flowing on into the next) is never full: only its
        room bounds it."""
        if buf is not self.current:
            return False
        self.board[self.index, DONE] = sum(buf.completed)
        board = self.board
        begun = board[:, ROLLOUT] == self.rollout
        quota = int(np.where(begun, board[:, SHARE], self.T * board[:, SLOTS]).sum())
        return int(board[begun, DONE].sum()) >= quota
