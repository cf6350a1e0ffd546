"""A recurrent core (model.core) wherever the feed-forward policy goes (issue 63, point 5), on real learner, actor and
collector processes and gloo groups: with run.policy_lag = 1, with two collector processes and with two learner
ranks, CartPole without velocities (configs/cartpole-positions.toml) trains for a few updates and every update's
exact replay (replay_logprob_max_diff, replay_value_max_diff) gives back what the acting policy gave, for every
sample the update's starting weights acted (replay_samples: all of them without lag)."""
from __future__ import annotations

import pytest

from tests.integration.cluster import assert_breakdown, metrics, run_launch

pytestmark = pytest.mark.integration
POSITIONS = ("--config", "configs/cartpole-positions.toml", "--set", "ppo.update_epochs=2")
STATS = ("--set", "normalize.obs=false")  # one set of observation statistics per process: refused with K processes


def replayed_run(run_dir, steps: int, *args: str) -> list[dict]:
    """The run's metrics lines, once it ended by itself: its updates in order, each replay exact."""
    result = run_launch(*POSITIONS, "--run-dir", str(run_dir), "--total-steps", str(steps), *args, timeout=90)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, len(rows) + 1)) and rows[-1]["env_steps"] >= steps, rows
    for r in rows:
        assert r["replay_logprob_max_diff"] < 1e-4 and r["replay_value_max_diff"] < 1e-3, r
    return rows


def samples(rows: list[dict]) -> list[int]:
    """Each update's samples (the job's, every rank's)."""
    return [r["env_steps"] - (rows[i - 1]["env_steps"] if i else 0) for i, r in enumerate(rows)]


def test_with_policy_lag_the_replay_is_exact_for_the_steps_the_starting_weights_acted(tmp_path):
    """The update runs while the next rollout fills: that rollout's first steps are acted by the weights one
    version behind, the rest (once the update is done) by those the next update starts from, the slots' states
    kept across the switch. Replayed by those starting weights from the stored states, the samples they acted
    since their sequence or episode began come back exactly; the lagged ones are left out of the metric."""
    rows = replayed_run(tmp_path / "lag", 2048, "--set", "run.policy_lag=1")
    assert all(r["policy_lag"] == 1 for r in rows) and rows[0]["replay_samples"] == samples(rows)[0]
    mixed = [r for r, n in zip(rows[1:], samples(rows)[1:]) if r["collection"]["lagged_share"] > 0
             and 0 < r["replay_samples"] < n]  # some steps acted behind, some by the starting weights
    assert mixed, [(r["collection"]["lagged_share"], r["replay_samples"]) for r in rows]


def test_two_collector_processes_each_keep_their_slots_states(tmp_path):
    """Each collector process infers for its own actor with its own copy of the model and its own slots'
    states, writes start flags, versions and first states into the shared rollout and sends the states of its
    bootstrap and final observations with its shard."""
    rows = replayed_run(tmp_path / "two", 1536, "--set", "cluster.collectors=2", *STATS, "--actors", "2",
                        "--envs-per-actor", "4")
    assert_breakdown(rows, collectors=2)  # both collectors served steps
    assert rows[-1]["actors"] == 2 and [r["replay_samples"] for r in rows] == samples(rows)


def test_two_learner_ranks_each_collect_with_their_own_states_and_stay_identical(tmp_path):
    """Each rank collects its own actors with its own states and replays its own sequences; the gradients are
    averaged, so the weights stay identical; the replay's differences and samples are the job's."""
    rows = replayed_run(tmp_path / "ranks", 1536, "--learners", "2", *STATS, "--actors", "2", "--envs-per-actor", "4")
    assert all(r["learners"] == 2 and len(set(r["rank_weights_checksums"])) == 1 for r in rows)
    assert all(min(r["rank_env_slots"]) > 0 for r in rows[1:])  # both ranks trained on their own actors' steps
    assert [r["replay_samples"] for r in rows] == samples(rows)


def test_resumed_with_two_collector_processes_the_first_rollout_is_acted_by_the_resumed_weights_version(tmp_path):
    """After a resume the collectors serve the checkpoint's weights under the checkpoint's version from the first
    rollout on: the shared weights said version 0 until the first update's publish, so that rollout's steps were
    labelled 0, and its update found none acted by the weights it starts from (replay_samples 0)."""
    run_dir = tmp_path / "resumed"
    first = replayed_run(run_dir, 768, "--set", "cluster.collectors=2", *STATS, "--actors", "2", "--envs-per-actor", "4")
    result = run_launch("--resume", str(run_dir), "--total-steps", "1536", timeout=90)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    resumed = rows[len(first):]
    assert resumed and [r["replay_samples"] for r in resumed] == samples(rows)[len(first):], resumed
