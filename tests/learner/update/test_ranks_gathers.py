"""The ranks' small gathers (learner/update/ranks.py) on ranks simulated by threads (test_ranks_weighting's
ThreadGroup): every rank's values in rank order, in as few collectives as the metrics line needs."""
from __future__ import annotations

import torch

from learner.update.ranks import Ranks, checksum, checksum_from_int, checksum_to_int
from tests.learner.update.test_ranks_weighting import model, on_ranks


class Counting:
    """Wraps a rank's comm and counts its collectives."""

    def __init__(self, comm):
        self.comm, self.calls = comm, 0

    def __getattr__(self, name):
        self.calls += 1
        return getattr(self.comm, name)


def counted(work):
    """work(ranks) with each rank's collectives counted: (result, calls) per rank."""
    def run(ranks: Ranks):
        comm = Counting(ranks.comm)
        result = work(Ranks(ranks.rank, ranks.world, comm=comm))
        return result, comm.calls
    return run


def test_gather_pairs_with_the_counts_known_takes_one_collective_and_two_without():
    def work(r: Ranks):
        pairs = [(float(r.rank), float(i)) for i in range(r.rank)]  # rank 0: none, rank 1: one, rank 2: two
        return r.gather_pairs(pairs, counts=[0, 1, 2]), r.gather_pairs(pairs)
    results = on_ranks(3, counted(work))
    expected = [(1.0, 0.0), (2.0, 0.0), (2.0, 1.0)]
    assert all(known == asked == expected for (known, asked), _ in results)
    assert [calls for _, calls in results] == [3, 3, 3]


def test_one_rank_gathers_without_collectives():
    r = Ranks.single()
    assert r.gather_ints(3) == [3] and r.gather_pairs([(1.0, 2.0)]) == [(1.0, 2.0)]


def test_a_checksum_goes_through_an_int64_and_back_unchanged():
    net = model()
    digest = checksum(net)
    assert len(digest) == 16 and checksum_from_int(checksum_to_int(digest)) == digest
    for text in ("0" * 16, "f" * 16, "8000000000000000"):
        value = checksum_to_int(text)
        assert -2**63 <= value < 2**63 and checksum_from_int(value) == text


def test_the_checksum_changes_with_any_weight_and_not_without():
    a, b = model(), model()
    assert checksum(a) == checksum(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[-1] += 1e-6
    assert checksum(a) != checksum(b)


def test_rows_and_pairs_take_one_collective_while_the_pairs_fit_and_two_past_their_room():
    def work(r: Ranks, room: int):
        pairs = [(float(r.rank) + 0.25, -1.5 * i) for i in range(r.rank)]  # rank 0: none, rank 1: one, rank 2: two
        return r.gather_rows_and_pairs([r.rank, -2**62], pairs, room=room)
    expected = ([[0, -2**62], [1, -2**62], [2, -2**62]], [(1.25, -0.0), (2.25, -0.0), (2.25, -1.5)])
    for room, calls in ((2, 1), (1, 2)):  # rank 2's two pairs fit a room of 2, not of 1
        results = on_ranks(3, counted(lambda r: work(r, room)))
        assert all(result == expected for result, _ in results)
        assert [n for _, n in results] == [calls] * 3
    assert Ranks.single().gather_rows_and_pairs([4], [(1.0, 2.0)]) == ([[4]], [(1.0, 2.0)])
