"""The seeds a run derives from run.seed, pinned: each value is what the formula gave before the
derivations moved into learner/seeds.py, so a changed formula (which changes every seeded run) fails here."""
from __future__ import annotations

import pytest

from learner import seeds


# each function: [(its arguments, the seed they gave before learner/seeds.py), ...]
PINNED = {
    seeds.learner_policy_seed: [((1, 0, 0), 1), ((1, 4, 1), 1_000_008), ((7, 10, 3), 3_000_026)],
    seeds.update_seed: [((1, 0, 0), 2), ((1, 4, 1), 1_000_009), ((7, 10, 3), 3_000_027)],
    seeds.collector_policy_seed: [((1, 0, 0, 0), 7_920), ((1, 4, 1, 2), 1_023_765)],
    seeds.collector_env_base: [((1, 0), 1), ((1, 1, 0), 100_004), ((7, 2, 3), 30_200_070)],
    seeds.slot_env_seed: [((1, 0, 0), 1_000_003), ((1, 5, 3), 1_353_785), ((100_010, 2, 9), 1_227_010_667),
                          ((1, 5, 3, 1), 2_057_908_689), ((1, 5, 3, 2), 986_151_659)],  # reuse > 0: hashed
    seeds.eval_env_seed: [((1,), 1_000_004), ((42,), 1_000_045)],
}


@pytest.mark.parametrize("fn", PINNED, ids=lambda fn: fn.__name__)
def test_each_seed_derivation_gives_the_values_runs_have_always_had(fn):
    assert [fn(*args) for args, _ in PINNED[fn]] == [seed for _, seed in PINNED[fn]]


def test_the_seeds_a_rank_and_its_collectors_use_are_distinct():
    """Ranks and collector processes never share a policy or env seed base (the point of the strides)."""
    policy = {seeds.learner_policy_seed(1, 0, rank) for rank in range(4)}
    policy |= {seeds.collector_policy_seed(1, 0, rank, i) for rank in range(4) for i in range(8)}
    bases = {seeds.collector_env_base(1, rank, i) for rank in range(4) for i in range(8)}
    assert len(policy) == 4 + 32 and len(bases) == 32
