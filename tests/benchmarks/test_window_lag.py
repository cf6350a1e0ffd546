"""benchmarks/window_lag.py: on made-up games, the first step each window's mean holds the target, where the
100-game window began, and the medians over seeds with a miss counted as later than every hit."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from benchmarks.window_lag import entry_rows, first_held, main


def test_a_short_window_holds_the_target_before_a_long_one():
    steps = np.arange(1, 201) * 10   # game i ends at step 10 * (i + 1)
    returns = np.r_[np.full(100, 10.0), np.full(100, 20.0)]  # the policy reaches 20 at game 100 (step 1,010)
    assert first_held(steps, returns, 20, 20) == (1200, 1010)   # the 20 games 101-120
    assert first_held(steps, returns, 100, 20) == (2000, 1010)  # all of the last 100 at 20: 990 steps later
    assert first_held(steps, returns, 300, 20) is None           # fewer games than the window
    assert first_held(steps, np.full(200, 19.99), 20, 20) is None


def test_the_window_is_the_last_games_ended_not_a_mean_of_the_best():
    steps = np.arange(1, 41)
    returns = np.r_[np.full(10, 21.0), np.full(10, 19.0), np.full(20, 20.0)]
    assert first_held(steps, returns, 20, 20) == (20, 1)  # games 1-20: 21 and 19 in equal parts, 20 exactly


def write_seed(entry, seed, returns, step=1000):
    with gzip.open(entry / f"seed{seed}-episodes.jsonl.gz", "wt") as f:
        for i, r in enumerate(returns):
            f.write(json.dumps({"update": i, "env_steps": step * (i + 1), "return": r, "length": 2000}) + "\n")


def test_entry_rows_and_the_medians_count_a_seed_that_missed(tmp_path, capsys):
    write_seed(tmp_path, 2, [20.0] * 150)                    # every window at 20 once full
    write_seed(tmp_path, 10, [0.0] * 50 + [21.0] * 100)       # 21s from game 51
    write_seed(tmp_path, 3, [19.0] * 150)                     # never
    rows = entry_rows(tmp_path, 20)
    assert [r["seed"] for r in rows] == [2, 3, 10]            # by seed number, not by file name
    assert rows[0] == {"seed": 2, 20: 20_000, 50: 50_000, 100: 100_000, "window_from": 1000}
    assert rows[1] == {"seed": 3, 20: None, 50: None, 100: None, "window_from": None}
    # the last 100 games hold 20 once 96 of them are 21s (2016; 95 make 1995): games 47-146
    assert rows[2][100] == 146_000 and rows[2]["window_from"] == 47_000
    assert (rows[2][20], rows[2][50]) == (70_000, 98_000)  # 20 of 20 at 21 (19 make 399), 48 of 50
    main([str(tmp_path), "--target", "20", "--mark", "100000"])
    out = capsys.readouterr().out
    assert "| median | 70,000 | 98,000 | 146,000 | |" in out  # the miss sorts last: the middle of 3
    assert "| by 100,000 | 2 of 3 | 2 of 3 | 1 of 3 | |" in out


def test_an_entry_without_games_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--target", "20"])
