"""The job-wide quota of run.segments on G learner ranks (learner/collection/ranks_quota.py: RanksQuota), two ranks'
rules on one real TCPStore in this process, no process group: each closes once their steps together make T x every
env slot of the job."""
import datetime
import gc

import pytest
import torch
import torch.distributed as dist

from learner.collection.ranks_quota import RanksQuota, RanksStore, RanksUnreachable
from learner.rollout.buffer import RolloutBuffer
from tests.learner.collection.processes.test_board import ENVS, LAYOUT, T, share, step


@pytest.fixture
def server():
    """Rank 0's store, as Ranks.store makes it (a short timeout: a read of a missing key would wait that long)."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=5))


def two_ranks(server, collectors: tuple[int, int] = (1, 1)) -> list[RanksQuota]:
    """Every collection's rule, each on a client of its own as on two hosts; each rank posts its empty rows first,
    as open_collection does before the ranks first meet. `collectors`: each rank's (K collector processes)."""
    rules = []
    for rank, k in enumerate(collectors):
        where = RanksStore("127.0.0.1", server.port, 5.0, rank, 2)
        where.of_collector(0, k).post_empty_rows(where.connect())
        rules += [RanksQuota(where.of_collector(i, k)) for i in range(k)]
    return rules


def test_a_fast_rank_fills_past_its_own_share_until_both_ranks_together_make_the_quota(server):
    fast, slow = two_ranks(server)
    a, b = share(), share()
    fast.begin(a)
    slow.begin(b)
    step(a, list(range(ENVS)), T)  # its own share: T steps per env slot
    assert a.is_full() and not fast.full(a)  # 16 of 32: the slow rank's share counts, none of its steps yet
    step(b, [0, 1], 1)  # 2 steps: 16 + 2 of 32
    step(a, [4, 5, 6, 7], 3)  # a second segment in each slot: 16 + 12 + 2 = 30
    assert not fast.full(a) and not slow.full(b)
    step(b, [2, 3], 1)  # 32: the slow rank's columns are far from full, the job's rollout is
    assert slow.full(b) and fast.full(a)


def test_a_rank_not_at_this_rollout_yet_counts_its_last_share_and_none_of_its_steps(server):
    fast, slow = two_ranks(server)
    a = share()
    fast.begin(a)  # the first rollout, before the slow rank has posted a share: its row is empty
    step(a, list(range(ENVS)), T)
    assert fast.full(a)  # 16 of 16: the first rollout closes at this rank's own share

    b = share()
    slow.begin(b)
    step(b, list(range(ENVS)), T)
    assert slow.full(b)  # rollout 1: 16 + 16 of 32

    following = share()  # groups flowed on into it (policy lag) before it began: its room alone bounds it
    step(following, list(range(ENVS)), T)
    assert not fast.full(following)
    fast.begin(following)  # rollout 2 with those 16 steps; the slow rank is still at rollout 1 (its 16 steps)
    assert not fast.full(following)  # 16 of 16 + the slow rank's last share, none of its old steps
    step(following, [4, 5, 6, 7], T)
    assert fast.full(following)  # 32 of 32


def test_a_rank_with_no_actors_neither_holds_the_others_back_nor_counts_a_share(server):
    fast, idle = two_ranks(server)
    empty = RolloutBuffer([], T, LAYOUT, torch.device("cpu"))
    idle.begin(empty)  # its empty rollout is complete at once (Routes.filled); its share on the store is 0
    a = share()
    fast.begin(a)
    step(a, list(range(ENVS)), T - 1)
    assert not fast.full(a)
    step(a, list(range(ENVS)), 1)
    assert fast.full(a)


def test_k_collector_processes_on_each_rank_close_at_the_quota_of_every_collection_of_every_rank(server):
    """2 ranks, rank 0 with 2 collector processes and rank 1 with one: three rows, three shares of T x 4."""
    first, second, other = two_ranks(server, collectors=(2, 1))
    a, b, c = share(), share(), share()
    for rule, buf in ((first, a), (second, b), (other, c)):
        rule.begin(buf)
    step(a, list(range(ENVS)), T)
    step(a, [4, 5, 6, 7], T)  # 32 of 48: one fast collector, twice its share
    assert not first.full(a)
    step(c, [0, 1, 2, 3], T - 2)  # 32 + 8 of 48
    assert not other.full(c)  # (each posts its count when it asks: once a pass)
    step(b, [0, 1, 2, 3], 2)  # 48: the second collector and rank 1 are cut short
    assert second.full(b) and first.full(a) and other.full(c)


def test_a_store_whose_host_is_gone_is_one_error_naming_the_ranks():
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=1))
    where = RanksStore("127.0.0.1", host.port, 1.0, 1, 2)
    where.post_empty_rows(where.connect())
    rule = RanksQuota(where)
    a = share()
    rule.begin(a)
    del host  # rank 0 is gone, and its store's server with it
    gc.collect()
    with pytest.raises(RanksUnreachable, match="ranks' store does not answer"):
        rule.full(a)
    with pytest.raises(RanksUnreachable, match="ranks' store does not answer"):
        where.connect()
