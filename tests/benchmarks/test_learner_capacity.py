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
