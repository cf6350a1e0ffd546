"""A recurrent core (model.core) wherever the feed-forward policy goes (issue 63, point 5), on real learner, actor and
collector processes and gloo groups: with run.policy_lag = 1, with two collector processes and with two learner
ranks, CartPole without velocities (configs/cartpole-positions.toml) trains for a few updates and every update's
exact replay (replay_logprob_max_diff, replay_value_max_diff) gives back what the acting policy gave, for every
sample the update's starting weights acted (replay_samples: all of them without lag)."""
from __future__ import annotations

import pytest

from learner.report.metrics import TIMING_FIELDS
from tests.integration.cluster import (ROOT, assert_breakdown, endpoints, launch,
                                       lose_and_replace_the_actor_of_collector_1, metrics, run_launch)

pytestmark = pytest.mark.integration
POSITIONS = ("--config", "configs/cartpole-positions.toml", "--set", "ppo.update_epochs=2")
STATS = ("--set", "normalize.obs=false")  # one set of observation statistics per process: refused with K processes
# Policy lag: rollouts that outlast the update, however loaded the machine, so that the update ends mid-rollout and
# each rollout holds steps acted both before and after it (CartPole with an LSTM, its steps 3 ms each of their
# actor's time: a rollout ~0.4 s against an update of ~0.1 s; a fast env's rollout is over before the update is)
SLOW_STEPS = ("--config", "configs/cartpole.toml", "--set", 'model.core="lstm"', "--set", "ppo.update_epochs=2",
              "--set", 'env.env_id="tests.integration.slow_env:SlowStepCartPole-v0"')


@pytest.fixture
def slow_steps(monkeypatch):
    monkeypatch.setenv("SLOW_STEP_S", "0.003")  # the actors inherit it (tests/integration/slow_env.py)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def replayed_run(run_dir, steps: int, *args: str, config: tuple[str, ...] = POSITIONS) -> list[dict]:
    """The run's metrics lines, once it ended by itself: its updates in order, each replay exact."""
    result = run_launch(*config, "--run-dir", str(run_dir), "--total-steps", str(steps), *args, timeout=90)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, len(rows) + 1)) and rows[-1]["env_steps"] >= steps, rows
    for r in rows:
        assert r["replay_logprob_max_diff"] < 1e-4 and r["replay_value_max_diff"] < 1e-3, r
    return rows


def samples(rows: list[dict]) -> list[int]:
    """Each update's samples (the job's, every rank's)."""
    return [r["env_steps"] - (rows[i - 1]["env_steps"] if i else 0) for i, r in enumerate(rows)]


def test_with_policy_lag_the_replay_is_exact_for_the_steps_the_starting_weights_acted(tmp_path, slow_steps):
    """The update runs while the next rollout fills: that rollout's first steps are acted by the weights one
    version behind, the rest (once the update is done) by those the next update starts from, the slots' states
    kept across the switch. Replayed by those starting weights from the stored states, the samples they acted
    since their sequence or episode began come back exactly; the lagged ones are left out of the metric."""
    rows = replayed_run(tmp_path / "lag", 2048, "--set", "run.policy_lag=1", config=SLOW_STEPS)
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


def test_policy_lag_with_two_collector_processes_keeps_each_slots_state_across_the_switch(tmp_path, slow_steps):
    """Lag and K processes together: each collector process serves the newer weights mid-rollout once the update
    publishes them, keeping its slots' states; the samples the starting weights acted replay exactly."""
    rows = replayed_run(tmp_path / "lag-two", 2048, "--set", "run.policy_lag=1", "--set", "cluster.collectors=2",
                        config=SLOW_STEPS)
    assert_breakdown(rows, collectors=2)
    assert all(r["policy_lag"] == 1 for r in rows) and rows[0]["replay_samples"] == samples(rows)[0]
    mixed = [r for r, n in zip(rows[1:], samples(rows)[1:]) if r["collection"]["lagged_share"] > 0
             and 0 < r["replay_samples"] < n]
    assert mixed, [(r["collection"]["lagged_share"], r["replay_samples"]) for r in rows]


def test_an_actor_lost_on_collector_1_is_retired_a_joiner_takes_its_slots_and_every_replay_stays_exact(tmp_path):
    """A retire inside a collector process with a core: the lost actor's columns are cut where its steps end
    (their bootstrap states sent with the shard), the joiner's episodes start on that collector's slots, and
    every update replays exactly what the acting policy gave (the unit tests of the collection show the slots'
    states zeroed at the retire and the rejoin)."""
    run_dir = tmp_path / "rejoin"
    proc = launch(*POSITIONS, *STATS, "--set", "cluster.collectors=2", "--run-dir", str(run_dir), "--actors", "0",
                  "--total-steps", "1000000", "--set", "cluster.min_envs=8", "--set", "cluster.actor_timeout_s=3")
    out = lose_and_replace_the_actor_of_collector_1(proc, run_dir, updates_after=2)
    assert proc.returncode == 0, out[-3000:]
    rows = metrics(run_dir)
    events = [e for r in rows for e in r["events"]]
    second = endpoints(run_dir)["collectors"][1]["address"]
    assert any("actor second left: " in e for e in events) and any(
        "third (4 envs) sent to " + second in e for e in events), events
    for r in rows:
        assert r["replay_logprob_max_diff"] < 1e-4 and r["replay_value_max_diff"] < 1e-3, r
    assert [r["replay_samples"] for r in rows] == samples(rows)


def test_deterministic_runs_with_a_core_are_identical_line_for_line(tmp_path):
    """--deterministic with model.core: the same seed gives the same metrics (losses, replay differences, returns)
    and episodes; another seed does not (else the comparison proves nothing)."""
    def run(name: str, seed: int):
        rows = replayed_run(tmp_path / name, 1024, "--deterministic", "--seed", str(seed))
        kept = [{k: v for k, v in r.items() if k not in TIMING_FIELDS and k != "events"} for r in rows]
        return kept, (tmp_path / name / "episodes.jsonl").read_text()
    a, b, c = run("a", 5), run("b", 5), run("c", 6)
    assert a == b and a[0][-1]["episodes"] > 0
    assert c[0] != a[0]
