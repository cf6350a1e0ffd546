"""benchmarks/learning.py: the target is held only on a full 100-game window, a run stops once it is held,
and the results entry says when, with the evaluation of best.pt; a cut-off run resumes to the same budget."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

import torch

from benchmarks.learning import cpu_vectors, first_hit, gzip_copy, launch_command, parse_args
from learner.update.precision import native_bf16
from tests.integration.cluster import ROOT


def rows(*pairs):
    return [{"update": i + 1, "env_steps": 100 * (i + 1), "elapsed_s": 10.0 * (i + 1), "episodes": n,
             "episode_return_mean": ret} for i, (n, ret) in enumerate(pairs)]


def test_the_target_counts_only_once_the_window_holds_100_games():
    history = rows((0, None), (40, 21.0), (99, 20.5), (100, 19.0), (130, 20.0), (150, 20.3))
    hit = first_hit(history, 20.0)
    assert (hit["update"], hit["env_steps"], hit["elapsed_s"]) == (5, 500, 50.0)
    assert first_hit(history, 20.4) is None


def test_the_machine_line_says_the_cpus_vector_level_and_whether_bf16_updates_run_there():
    """A recipe with update_precision auto runs bf16 on one VM and fp32 on another: its entry must say which
    (machine() puts this after the CPU's name)."""
    line = cpu_vectors()
    assert f"({torch.backends.cpu.get_cpu_capability()}, bf16 " in line
    assert ("bf16 fast" in line) == native_bf16(torch.device("cpu"))


def test_launch_arguments_after_the_separator_go_to_launch_and_resume_keeps_the_budget(tmp_path):
    args = parse_args(["configs/pong-fast.toml", "--target", "20", "--max-steps", "1000", "--seed", "2",
                       "--", "--device", "cpu", "--set", "ppo.num_steps=64"])
    cmd = launch_command(args, tmp_path)
    assert cmd[1:] == ["launch.py", "--config", "configs/pong-fast.toml", "--seed", "2", "--total-steps", "1000",
                       "--run-dir", str(tmp_path), "--set", "log.progress_bar=false",
                       "--device", "cpu", "--set", "ppo.num_steps=64"]
    resumed = parse_args(["configs/pong-fast.toml", "--target", "20", "--max-steps", "1000", "--resume", str(tmp_path)])
    assert launch_command(resumed, tmp_path)[1:] == ["launch.py", "--resume", str(tmp_path), "--total-steps", "1000"]


def test_a_log_published_again_gives_the_same_bytes_whenever_and_wherever_it_is_copied(tmp_path, monkeypatch):
    log = b"".join(json.dumps({"update": i, "episode_return_mean": i / 3}).encode() + b"\n" for i in range(500))
    (tmp_path / "metrics.jsonl").write_bytes(log)
    gzip_copy(tmp_path / "metrics.jsonl", tmp_path / "seed1-metrics.jsonl.gz")
    monkeypatch.setattr(gzip.time, "time", lambda: 2e9)  # published again, years later, under another name
    gzip_copy(tmp_path / "metrics.jsonl", tmp_path / "metrics.jsonl.gz")
    first, again = (tmp_path / "seed1-metrics.jsonl.gz").read_bytes(), (tmp_path / "metrics.jsonl.gz").read_bytes()
    assert first == again and gzip.decompress(first) == log


@pytest.mark.integration
def test_a_run_the_launcher_refuses_ends_with_one_line_and_no_results(tmp_path):
    cmd = [sys.executable, "benchmarks/learning.py", "configs/cartpole.toml", "--target", "30", "--max-steps", "1000",
           "--run-dir", str(tmp_path / "run"), "--results", str(tmp_path / "results"), "--",
           "--set", "ppo.num_steps=0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "the run did not start (launch.py exited with code 2)" in done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.integration
def test_cartpole_to_a_low_target_stops_evaluates_and_publishes(tmp_path):
    run_dir, results = tmp_path / "run", tmp_path / "results"
    cmd = [sys.executable, "benchmarks/learning.py", "configs/cartpole.toml", "--target", "30", "--max-steps",
           "150000", "--eval-episodes", "2", "--run-dir", str(run_dir), "--results", str(results),
           "--hardware", "test", "--", "--set", "run.checkpoint_every=1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (entry,) = results.iterdir()
    assert entry.name.endswith("-test-cartpole-seed1")
    summary = json.loads((entry / "summary.json").read_text())
    assert summary["reached"] and summary["target_env_steps"] < 150_000 and summary["target_wall_s"] > 0
    assert summary["runs"][0]["stopped_for"] == "target" and not summary["resumed"]
    assert summary["commit"] == summary["runs"][0]["commit"] and summary["published_at_commit"]  # the trained code
    assert len(summary["evaluation"]["returns"]) == 2 and summary["evaluation"]["mean"] > 0
    rows_kept = [json.loads(line) for line in gzip.open(entry / "metrics.jsonl.gz", "rt")]
    assert rows_kept[-1]["env_steps"] >= summary["target_env_steps"]
    assert (entry / "plot.png").stat().st_size > 0 and (entry / "config.toml").exists()
