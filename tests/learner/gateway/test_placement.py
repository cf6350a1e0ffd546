"""Placement of actors on the learner's ranks (learner/gateway/placement.py): the address a redirect names,
and which rank a joining actor is sent to."""
from __future__ import annotations

from learner.gateway.placement import (RankBalancer, advertised_address, joiner_rank, local_slots_of_rank,
                                       min_envs_of_rank)


def test_a_rank_bound_to_every_interface_advertises_the_configured_host_never_0000():
    name = lambda: "node07.cluster"  # noqa: E731  (this node's host name, as socket.gethostname gives it)
    assert advertised_address("tcp://0.0.0.0:5557", "10.0.0.5", name) == "tcp://10.0.0.5:5557"
    assert advertised_address("tcp://0.0.0.0:5557", "", name) == "tcp://node07.cluster:5557"
    assert advertised_address("tcp://[::]:5557", "", name) == "tcp://node07.cluster:5557"
    assert advertised_address("tcp://[::]:5557", "fd00::5", name) == "tcp://[fd00::5]:5557"
    assert advertised_address("tcp://10.0.0.5:5557", "", name) == "tcp://10.0.0.5:5557"  # already reachable
    assert advertised_address("ipc:///tmp/l.sock-rank1", "10.0.0.5", name) == "ipc:///tmp/l.sock-rank1"
    assert "0.0.0.0" not in advertised_address("tcp://0.0.0.0:1234")  # the real host name


def test_before_the_first_update_joiners_fill_the_other_ranks_shares_of_min_envs_first():
    shares = [min_envs_of_rank(8, 0, 0, 0, 2, r) for r in range(2)]
    assert shares == [4, 4]
    loads = [local_slots_of_rank(0, 0, 2, r) for r in range(2)]  # --actors 0: nobody local
    # rank 0 starts its first rollout once its own share is met, and answers nobody until every rank has
    # done theirs: the others' shares are sent first
    assert joiner_rank(loads, shares) == 1
    assert joiner_rank([0, 4], shares) == 0
    assert joiner_rank([0, 2], shares) == 1 and joiner_rank([3, 3], [4, 4]) == 1
    assert joiner_rank([4, 4], shares) == 0  # every share met: the fewest over its share
    assert joiner_rank([0, 0, 1], [4, 2, 2]) == 1  # among the short ranks 1+, the most short
    # launch.py's own actors (actor i on rank i % 2) count on their rank before they arrive
    assert [local_slots_of_rank(3, 4, 2, r) for r in range(2)] == [8, 4]
    assert joiner_rank([8, 4], [8, 4]) == 0  # the local actors fill both shares: rank 0 keeps its own
    assert joiner_rank([8, 4], [0, 0]) == 1  # after the first update: the least loaded rank
    assert joiner_rank([4, 4], [0, 0]) == 0


def test_the_balancer_keeps_joiners_until_it_knows_the_ranks_then_sends_them_where_short():
    own = [0]  # rank 0's live env slots
    balancer = RankBalancer(lambda: own[0], targets=[4, 4], loads=[0, 0])
    assert balancer(4) is None  # the ranks' addresses not gathered yet: rank 0 keeps it
    balancer.know(["tcp://rank0:1", "tcp://rank1:2"])
    assert balancer(4) == "tcp://rank1:2" and balancer.loads == [0, 4]  # rank 1's share first, counted
    assert balancer(4) is None  # rank 1's share met: rank 0 fills its own last
    own[0] = 4
    balancer.after_update([4, 2])  # the job's count: rank 1 lost 2 slots; from now on the least loaded
    assert balancer(2) == "tcp://rank1:2"
    assert balancer(2) is None  # a tie goes to rank 0
