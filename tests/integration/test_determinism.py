"""--deterministic: the same seed and config on CPU give the same metrics, line for line."""
from __future__ import annotations

import json

import pytest

from learner.report.metrics import TIMING_FIELDS
from tests.integration.cluster import assert_no_stragglers, run_launch
from tests.learner.report.test_reporter import documented_fields

pytestmark = pytest.mark.integration


def _run(run_dir, seed):
    result = run_launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--deterministic",
                        "--seed", str(seed), "--total-steps", "6000", "--set", "normalize.obs=true",
                        "--set", "normalize.reward=true", "--set", "ppo.update_epochs=4", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_no_stragglers(run_dir)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    episodes = (run_dir / "episodes.jsonl").read_text()
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS and k != "events"} for r in lines], episodes


def test_same_seed_same_metrics(tmp_path):
    a, ep_a = _run(tmp_path / "a", seed=3)
    b, ep_b = _run(tmp_path / "b", seed=3)
    assert len(a) >= 20 and a[-1]["episodes"] > 10
    assert a == b
    assert ep_a == ep_b
    undocumented = set().union(*a) - documented_fields()
    assert not undocumented, f"a real run wrote metrics.jsonl fields docs/running.md lacks: {sorted(undocumented)}"
    c, _ = _run(tmp_path / "c", seed=4)
    assert c != a, "a different seed must give different metrics (else the comparison proves nothing)"


def _breakout(run_dir, *sets):
    result = run_launch("--config", "configs/smoke.toml", "--run-dir", str(run_dir), "--deterministic",
                        "--total-steps", "1024", "--set", "env.max_episode_steps=40", *sets, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    assert_no_stragglers(run_dir)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS and k != "events"} for r in lines]


@pytest.fixture(scope="module")
def newest_frames_raw(tmp_path_factory):
    """The run both comparisons below hold against: the learner stacks (the default), raw frames. Returns
    (its metrics, its run dir)."""
    run_dir = tmp_path_factory.mktemp("determinism") / "newest-frames-raw"
    rows = _breakout(run_dir, "--set", "cluster.stack_on_learner=true", "--set", "cluster.codec=none")
    assert len(rows) == 16 and rows[-1]["episodes"] >= 4  # 40-step games: truncations
    return rows, run_dir


def test_learner_side_frame_stacking_trains_exactly_like_actor_side(tmp_path, newest_frames_raw):
    """Actors sending newest frames only (the learner stacks them) must give the very same training as
    actors sending whole stacks: same losses, KL and returns, through life losses and truncations."""
    learner_side, learner_dir = newest_frames_raw
    actor_side = _breakout(tmp_path / "actor", "--set", "cluster.stack_on_learner=false", "--set", "cluster.codec=none")
    stacking = "the learner stacks the last 4"
    assert stacking in (learner_dir / "learner.log").read_text()
    assert stacking not in (tmp_path / "actor" / "learner.log").read_text()
    assert learner_side == actor_side


def test_compressed_frames_train_exactly_like_raw_frames(tmp_path, newest_frames_raw):
    """cluster.codec = zstd (forced: the local socket would get raw frames) must not change learning: same
    losses, KL and returns as raw frames, through life losses, resets and truncations (the delta's edges)."""
    raw, raw_dir = newest_frames_raw
    zstd = _breakout(tmp_path / "zstd", "--set", "cluster.stack_on_learner=true", "--set", "cluster.codec=zstd")
    assert "zstd frames" in (tmp_path / "zstd" / "learner.log").read_text()
    assert "zstd frames" not in (raw_dir / "learner.log").read_text()
    assert raw == zstd
