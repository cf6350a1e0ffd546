"""The job-wide quota of run.segments with K collector processes (learner/collection/processes/board.py: JobQuota),
two collectors on one board, no process: each closes once their steps together make T x every env slot."""
import numpy as np
import torch

from learner.collection.processes.board import BOARD_COLUMNS, DONE, ROLLOUT, SHARE, SLOTS, JobQuota
from learner.rollout.buffer import SEGMENT_ROOM, RolloutBuffer
from learner.rollout.layout import Layout

T, ENVS = 4, 4  # steps per segment, env slots of each collector
LAYOUT = Layout((2,), torch.float32, (), torch.long)


def share() -> RolloutBuffer:
    """One collector's rollout with run.segments: room for SEGMENT_ROOM columns per slot, a share of T per slot."""
    return RolloutBuffer(list(range(ENVS)), T, LAYOUT, torch.device("cpu"), capacity=SEGMENT_ROOM * ENVS,
                         quota=T * ENVS)


def step(buf: RolloutBuffer, cols: list[int], n: int = 1) -> None:
    """`n` steps acted and completed in each of `cols` (opened as needed)."""
    for _ in range(n):
        for c in cols:
            if c >= buf.opened:
                assert buf.open_columns([c - ENVS])
        buf.record_actions(cols, np.zeros((len(cols), 2), np.float32), np.zeros(len(cols), np.int64),
                           np.zeros(len(cols), np.float32), np.zeros(len(cols), np.float32))
        buf.record_outcome(cols, np.zeros(len(cols), np.float32), np.zeros(len(cols), bool), np.zeros(len(cols), bool))


def board_of_two() -> np.ndarray:
    board = np.zeros((2, BOARD_COLUMNS), np.int64)
    board[:, SLOTS] = ENVS
    return board


def test_a_fast_collector_fills_past_its_own_share_until_both_together_make_the_quota():
    board = board_of_two()
    fast, slow = JobQuota(board, 0, T), JobQuota(board, 1, T)
    board[1, DONE] = 1000  # the slow one's count of the last rollout: never counted in this one
    a = share()
    fast.begin(a)
    step(a, list(range(ENVS)), T)  # its own share: T steps per env slot
    assert a.is_full() and not fast.full(a)  # the slow one has not begun: its slots count, none of its steps

    b = share()
    slow.begin(b)
    step(b, [0, 1], 1)  # 2 steps: 16 + 2 of 32
    step(a, [4, 5, 6, 7], 3)  # a second segment in each slot: 16 + 12 + 2 = 30
    assert not fast.full(a) and not slow.full(b)
    step(b, [2, 3], 1)  # 32: the slow collector's columns are far from full, the job's rollout is
    assert slow.full(b) and fast.full(a)
    assert board[0, DONE] == 28 and board[1, DONE] == 4 and set(board[:, ROLLOUT]) == {1}


def test_the_next_rollout_counts_from_its_own_start_and_one_not_begun_is_never_full():
    board = board_of_two()
    fast, slow = JobQuota(board, 0, T), JobQuota(board, 1, T)
    a, b = share(), share()
    fast.begin(a)
    slow.begin(b)
    step(a, list(range(ENVS)), T)
    step(b, list(range(ENVS)), T)
    assert not fast.full(a)  # each posts its count when it asks (once a batch): the slow one's is not there yet
    assert slow.full(b) and fast.full(a)

    following = share()  # groups flowed on into it (policy lag) before it began: its room alone bounds it
    step(following, list(range(ENVS)), T)
    assert not fast.full(following)
    fast.begin(following)  # rollout 2, with those 16 steps; the slow one still shows rollout 1's 16
    assert board[0, ROLLOUT] == 2 and board[1, ROLLOUT] == 1
    assert not fast.full(following)  # 16 of 16 + 4 x 4 (the slow one's slots, none of its old steps)
    step(following, [4, 5, 6, 7], T)
    assert fast.full(following)  # 32 of 32


def test_a_collector_with_no_actors_neither_holds_the_others_back_nor_counts_a_share():
    board = board_of_two()
    board[1, SLOTS] = 0
    fast, idle = JobQuota(board, 0, T), JobQuota(board, 1, T)
    empty = RolloutBuffer([], T, LAYOUT, torch.device("cpu"))
    idle.begin(empty)  # its empty rollout is complete at once (Routes.filled), its share 0 on the board
    assert empty.is_complete() and board[1, ROLLOUT] == 1 and board[1, SHARE] == 0
    a = share()
    fast.begin(a)
    step(a, list(range(ENVS)), T - 1)
    assert not fast.full(a)
    step(a, list(range(ENVS)), 1)
    assert fast.full(a)
