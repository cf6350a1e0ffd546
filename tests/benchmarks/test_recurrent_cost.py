"""benchmarks/recurrent_cost.py (issue 63) runs: every core's inference and update timed per agent step, the
table printed with each one's ratio to the feed-forward model."""
from __future__ import annotations

import sys

import pytest

from tests.integration.cluster import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import recurrent_cost  # noqa: E402


def test_one_round_prints_every_core_against_none(capsys):
    assert recurrent_cost.main(["--rounds", "1", "--envs", "2", "--batch", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in out[2:]}
    assert set(rows) == {"none", "lstm", "gru"}
    assert rows["none"][2] == rows["none"][4] == "1.00"
    assert all(float(rows[core][1]) > 0 and float(rows[core][3]) > 0 for core in rows)


def test_bad_arguments_are_one_usage_error():
    with pytest.raises(SystemExit) as exc:
        recurrent_cost.main(["--rounds", "0"])
    assert exc.value.code == 2
