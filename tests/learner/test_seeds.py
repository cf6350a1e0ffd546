"""The seeds a run derives from run.seed, pinned: each value is what the formula gave before the
derivations moved into learner/seeds.py, so a changed formula (which changes every seeded run) fails here."""
from __future__ import annotations

import pytest

from learner import seeds


@pytest.mark.parametrize("fn, args, expected", [
    (seeds.learner_policy_seed, (1, 0, 0), 1),
    (seeds.learner_policy_seed, (1, 4, 1), 1_000_008),
    (seeds.learner_policy_seed, (7, 10, 3), 3_000_026),
    (seeds.update_seed, (1, 0, 0), 2),
    (seeds.update_seed, (1, 4, 1), 1_000_009),
    (seeds.update_seed, (7, 10, 3), 3_000_027),
    (seeds.collector_policy_seed, (1, 0, 0, 0), 7_920),
    (seeds.collector_policy_seed, (1, 4, 1, 2), 1_023_765),
    (seeds.collector_env_base, (1, 0), 1),
    (seeds.collector_env_base, (1, 1, 0), 100_004),
    (seeds.collector_env_base, (7, 2, 3), 30_200_070),
    (seeds.slot_env_seed, (1, 0, 0), 1_000_003),
    (seeds.slot_env_seed, (1, 5, 3), 1_353_785),
    (seeds.slot_env_seed, (100_010, 2, 9), 1_227_010_667),
    (seeds.slot_env_seed, (1, 5, 3, 1), 2_057_908_689),
    (seeds.slot_env_seed, (1, 5, 3, 2), 986_151_659),
    (seeds.eval_env_seed, (1,), 1_000_004),
    (seeds.eval_env_seed, (42,), 1_000_045),
])
def test_each_seed_derivation_gives_the_values_runs_have_always_had(fn, args, expected):
    assert fn(*args) == expected


def test_the_seeds_a_rank_and_its_collectors_use_are_distinct():
    """Ranks and collector processes never share a policy or env seed base (the point of the strides)."""
    policy = {seeds.learner_policy_seed(1, 0, rank) for rank in range(4)}
    policy |= {seeds.collector_policy_seed(1, 0, rank, i) for rank in range(4) for i in range(8)}
    bases = {seeds.collector_env_base(1, rank, i) for rank in range(4) for i in range(8)}
    assert len(policy) == 4 + 32 and len(bases) == 32
