"""Every seed a run derives from `run.seed`, in one place (torch-free: the gateway imports it).

| function              | feeds                                                   | where                                   |
|-----------------------|---------------------------------------------------------|-----------------------------------------|
| (run.seed itself)     | torch's global seed; the env that probes the spaces     | learner/main.py, evaluation/            |
| learner_policy_seed   | the training process's Inference (action sampling)      | learner/main.py                         |
| update_seed           | the update's torch.Generator (minibatch shuffles)       | learner/main.py                         |
| collector_policy_seed | a collector process's Inference                         | learner/collection/processes/process.py |
| collector_env_base    | the base a gateway derives its actors' env seeds from   | main.py, collection/processes/process.py|
| slot_env_seed         | one env slot's seed, sent to its actor in the Welcome   | learner/gateway/gateway.py              |
| eval_env_seed         | the evaluation worker's env and action sampling         | learner/evaluation/worker.py            |

`generation` is the update a run (re)started from (0 for a new run), so a resumed run does not replay
the random streams it had before. The formulas are those the runs have always had: changing one changes
every seeded run's numbers (tests/learner/test_seeds.py pins them).
"""
from __future__ import annotations

import numpy as np

RANK_STRIDE = 1_000_003  # between learner ranks' policy and update seeds
EVAL_SEED_OFFSET = 1_000_003  # evaluation envs never replay a training slot's seed
_SEED_MODULUS = 2**31 - 1  # env seeds stay positive 31-bit ints


def learner_policy_seed(seed: int, generation: int, rank: int) -> int:
    """The training process's Inference on learner rank `rank`."""
    return seed + generation + RANK_STRIDE * rank


def update_seed(seed: int, generation: int, rank: int) -> int:
    """The update's torch.Generator on learner rank `rank`."""
    return seed + 1 + generation + RANK_STRIDE * rank


def collector_policy_seed(seed: int, generation: int, rank: int, index: int) -> int:
    """Collector process `index`'s Inference on learner rank `rank`."""
    return seed + generation + RANK_STRIDE * rank + 7_919 * (index + 1)


def collector_env_base(seed: int, rank: int, index: int = 0) -> int:
    """The base of collector `index`'s env seeds on learner rank `rank`: distinct for each."""
    return seed + 100_003 * rank + 10_000_019 * index


def slot_env_seed(base: int, slot: int, generation: int, reuse: int = 0) -> int:
    """Each slot's env seed: distinct per slot, fresh after a resume (generation), and fresh each time a
    freed slot is handed to another actor (reuse), so a restarted actor does not replay the random streams
    of the one it replaces. `base`: the gateway's collector_env_base."""
    if reuse == 0:  # a slot's first use keeps the seeds runs have always had
        return (base * 1_000_003 + slot * 7919 + generation * 104_729) % _SEED_MODULUS
    # hashed, not linear: a linear mix of slot, generation and reuse could repeat another slot's seed
    return int(np.random.SeedSequence([base, slot, generation, reuse]).generate_state(1)[0]) % _SEED_MODULUS


def eval_env_seed(seed: int) -> int:
    """The evaluation worker's env (and its action sampling)."""
    return seed + EVAL_SEED_OFFSET
