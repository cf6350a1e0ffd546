"""benchmarks/learner_capacity.py runs end to end: synthetic actors over the real protocol drive a real
learner, and the row reports steps/s and the learner's CPU per env step."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration


def test_one_row_measures_the_learner_fed_by_synthetic_actors(tmp_path):
    out = tmp_path / "capacity.json"
    cmd = [sys.executable, "benchmarks/learner_capacity.py", "--envs-per-message", "4", "--actors", "1",
           "--seconds", "2", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    ((label, row),) = json.loads(out.read_text())["rows"][0].items()
    assert label == "this"
    assert row["policy"] == "random" and row["envs_per_message"] == 4
    assert row["sps"] > 0 and 0 < row["learner_us_per_step"] < 10_000, row
    assert "| random | 4 |" in done.stdout


def test_sleeping_actors_show_where_a_training_rollouts_time_goes(tmp_path):
    """Sleeping actors (2 ms per step on average, no CPU; one actor at 1 ms, the other at 3 ms) over the real
    protocol feed the real training loop; the row measures its rollouts after the skipped ones and prints their
    breakdown. It skips at least --skip: the rollouts that came before the poll saw the first --skip are
    skipped too (CartPole's are quick)."""
    out = tmp_path / "capacity.json"
    cmd = [sys.executable, "benchmarks/learner_capacity.py", "--env-sleep-ms", "2", "--env-sleep-spread", "0.5",
           "--envs", "8",
           "--envs-per-message", "2", "--mode", "train", "--config", "configs/cartpole.toml", "--seconds", "0",
           "--rollouts", "3", "--skip", "1", "--row-timeout", "120", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    ((label, row),) = json.loads(out.read_text())["rows"][0].items()
    assert (row["envs"], row["actors"], row["mode"]) == (8, 2, "train")
    assert row["env_ceiling_sps"] == pytest.approx(4 * 1000 / 1 + 4 * 1000 / 3)
    assert row["rollouts"] >= 3 and row["skipped_rollouts"] >= 1 and 0 < row["sps"] <= row["env_ceiling_sps"], row
    b = row["breakdown"]
    assert b["env_slots"] == 8 and sum(b["shares"].values()) == pytest.approx(1.0, abs=0.02), b
    assert b["serial_s"]["update"] > 0 and len(b["messages_per_s"]) == 1, b
    for needle in ("parked at the rollout's end", "serial, every actor parked", "latency ms p50/p90/p99"):
        assert needle in done.stdout, done.stdout[-2000:]


def test_the_inference_delay_waits_after_each_batch_in_a_learner_process_and_only_with_its_variable():
    """benchmarks/inference_delay/sitecustomize.py (--inference-delay-ms): a process started with it on
    PYTHONPATH and the variable set waits after every Inference.act; without the variable nothing changes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    probe = ("import time, numpy as np, torch; from learner.collection.inference import Inference; "
             "from protocol.spaces import SpaceSpec; p = Inference(None, SpaceSpec(kind='discrete', n=2), "
             "torch.device('cpu'), None, seed=0, random_actions=True); t = time.monotonic(); "
             "[p.act([np.zeros((1, 4), np.float32)]) for _ in range(5)]; print(time.monotonic() - t)")
    took = {}
    for ms in ("40", ""):
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'benchmarks' / 'inference_delay'}",
               "PPO_BENCH_INFERENCE_DELAY_MS": ms}
        out = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        took[ms] = float(out.stdout.split()[-1])
    assert took["40"] >= 5 * 0.040 and took[""] < 5 * 0.040
