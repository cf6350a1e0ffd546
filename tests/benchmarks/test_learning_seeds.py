"""benchmarks/learning_seeds.py: seeds parsed, and each seed run once: fresh, resumed when cut off, skipped when
ended; the entry it publishes from the seeds' runs."""
from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.learning_seeds import parse_args, publish, seed_command, seed_list


def test_seed_lists():
    assert seed_list("1-5") == [1, 2, 3, 4, 5]
    assert seed_list("1,3,7") == [1, 3, 7]
    assert seed_list("2-3,9") == [2, 3, 9]
    for bad in ("", "a", "1-", "1,1", "3-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            seed_list(bad)


def test_each_seed_runs_fresh_then_resumes_then_is_done(tmp_path):
    args = parse_args(["configs/pong-fast.toml", "--seeds", "1-2", "--target", "20", "--max-steps", "1000",
                       "--runs", str(tmp_path), "--", "--set", "ppo.ent_coef=0.01"])
    assert args.marks == [200, 400, 600, 800, 1000]
    fresh = seed_command(args, 2)
    assert fresh[fresh.index("--seed") + 1] == "2"
    assert fresh[-5:] == ["--run-dir", str(tmp_path / "pong-fast" / "seed2"), "--", "--set", "ppo.ent_coef=0.01"]
    run = tmp_path / "pong-fast" / "seed2"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    resumed = seed_command(args, 2)
    assert resumed[-2:] == ["--resume", str(run)] and "ppo.ent_coef=0.01" not in resumed
    published = tmp_path / "pong-fast" / "published" / "2026-11-29-2core-cpu-pong-fast-seed2"
    published.mkdir(parents=True)
    summary = {"reached": False, "final": {"env_steps": 500}, "runs": [{"stopped_for": "budget"}]}
    (published / "summary.json").write_text(json.dumps(summary))
    assert seed_command(args, 2)[-2:] == ["--resume", str(run)]  # stopped by hand at 500 of 1000: resumed
    for ended in ({"reached": True}, {"final": {"env_steps": 1000}}, {"runs": [{"stopped_for": "max-hours"}]}):
        (published / "summary.json").write_text(json.dumps({**summary, **ended}))
        assert seed_command(args, 2) is None


@pytest.mark.integration  # git and uname name the commit and the machine
def test_publish_counts_the_seeds_that_ended_and_names_the_others(tmp_path):
    """Seeds 1 and 2 ended (published at the budget), seed 3 is still running, seed 4 has not started: the entry
    counts 1 of 2, names 3 and 4 as not counted yet, and keeps the ended seeds' metrics and games only (seed 2
    logged no game: its tail is not known)."""
    args = parse_args(["configs/cartpole.toml", "--seeds", "1-4", "--target", "100", "--max-steps", "300",
                       "--marks", "100,300", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    for seed, returns in ((1, [10, 120, 150]), (2, [10, 50, 90]), (3, [10])):
        run = tmp_path / "runs" / "cartpole" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "config.toml").write_text("[run]\n")
        rows = [{"update": i + 1, "env_steps": 100 * (i + 1), "elapsed_s": 5.0 * (i + 1), "episodes": 100 * (i + 1),
                 "episode_return_mean": r} for i, r in enumerate(returns)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if seed != 2:
            games = [{"update": 3, "env_steps": 300, "return": r, "length": 9} for r in [150.0] * 19 + [7.0]]
            (run / "episodes.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
        if seed < 3:
            published = tmp_path / "runs" / "cartpole" / "published" / f"2026-11-29-test-cartpole-seed{seed}"
            published.mkdir(parents=True)
            (published / "summary.json").write_text(json.dumps(
                {"reached": seed == 1, "final": {"env_steps": 300}, "runs": [{"stopped_for": "budget"}]}))
    entry = publish(args)
    summary = json.loads((entry / "summary.json").read_text())
    assert (summary["runs"], summary["logged"], summary["reached"], summary["pending"]) == (2, 2, 1, [3, 4])
    assert {p.name for p in entry.iterdir()} == {"summary.json", "README.md", "plot.png", "config.toml",
                                                 "seed1-metrics.jsonl.gz", "seed2-metrics.jsonl.gz",
                                                 "seed1-episodes.jsonl.gz"}
    tails = {s["seed"]: s["last_games"] for s in summary["seeds"]}
    assert tails == {1: {"n": 20, "mean": 142.85, "mean_without_worst_tenth": 150.0, "worst": 7.0}, 2: None}
    readme = (entry / "README.md").read_text()
    assert "**1 of 2 seeds reached 100**" in readme
    assert "seed 3 (100 agent steps so far), seed 4 (not started)" in readme
    assert "| 150.00 / 7 |" in readme


def test_publish_before_any_seed_ended_says_so(tmp_path):
    args = parse_args(["configs/cartpole.toml", "--seeds", "1", "--target", "100", "--max-steps", "300",
                       "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    run = tmp_path / "runs" / "cartpole" / "seed1"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"update": 1, "env_steps": 100, "elapsed_s": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="no seed of cartpole has ended yet"):
        publish(args)
