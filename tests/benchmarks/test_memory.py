"""benchmarks/memory.py runs end to end: two small rows of a real learner fed by synthetic actors, each with
its PSS sampled, and the MB per slot printed; its slope and PSS reading on their own."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from memory import slope  # noqa: E402
from procfs import read_pss_mb, read_rss_mb  # noqa: E402


def test_slope_is_the_least_squares_mb_per_slot():
    rows = [{"slots": 32, "mb": 100.0}, {"slots": 64, "mb": 132.0}, {"slots": 128, "mb": 196.0}]
    assert slope(rows, "mb") == pytest.approx(1.0)


def test_pss_of_this_process_is_resident_and_not_more_than_its_rss():
    pss, rss = read_pss_mb(os.getpid()), read_rss_mb(os.getpid())
    assert pss is not None and 0 < pss <= rss + 1
    assert read_pss_mb(2**22 + 1) is None  # no such process


@pytest.mark.integration
def test_two_rows_give_mb_per_slot(tmp_path):
    out = tmp_path / "memory.json"
    cmd = [sys.executable, "benchmarks/memory.py", "--config", "configs/smoke.toml", "--slots", "4,8",
           "--num-steps", "8", "--updates", "2", "--torch-threads", "1", "--row-timeout", "240", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "MB per slot" in done.stdout
    rows = json.loads(out.read_text())["rows"]["this"]
    assert [r["slots"] for r in rows] == [4, 8] and all(0 < r["resident_mb"] <= r["peak_mb"] for r in rows)
