"""benchmarks/learning_spread.py: the spread over seeds on made-up curves: reached counts, the median steps to the
target with misses counted as later than every hit, the range, and the return at fixed marks."""
from __future__ import annotations

import pytest

from benchmarks.learning_spread import aggregate, last_games, markdown_table, median_with_misses, return_at


def curve(returns, step=100, games_per_update=50):
    """Rows as metrics.jsonl has them: one update every `step` agent steps, 50 games finished per update."""
    return [{"update": i + 1, "env_steps": step * (i + 1), "elapsed_s": 10.0 * (i + 1),
             "episodes": games_per_update * (i + 1), "episode_return_mean": r} for i, r in enumerate(returns)]


def test_median_counts_a_miss_as_later_than_every_hit():
    assert median_with_misses([300, 100, 200], 3) == 200
    assert median_with_misses([300, None, 100], 3) == 300  # sorted: 100, 300, miss
    assert median_with_misses([100, 200], 4) is None  # half reached: the median is between 200 and a miss
    assert median_with_misses([100, 200, 300], 4) == 250
    assert median_with_misses([100, 200, 300], 5) == 300  # two seeds not listed: both misses
    assert median_with_misses([], 3) is None


def test_return_at_a_mark_is_the_last_window_before_it():
    rows = curve([None, -5.0, 3.0, 10.0])
    assert return_at(rows, 50, False) is None  # no window yet
    assert return_at(rows, 250, False) == -5.0
    assert return_at(rows, 400, False) == 10.0
    assert return_at(rows, 1000, False) is None  # the run ended before the mark without the target
    assert return_at(rows, 1000, True) == 10.0  # it stopped at the target: it counts with its last window


def test_aggregate_counts_every_seed_and_its_spread():
    records = {
        1: curve([-20, 0, 15, 20.5]),        # reaches 20 at 400 (the window is full from update 2)
        2: curve([-20, -10, 5, 12, 18, 19]),  # never reaches it in 600
        3: curve([-20, 20.2]),               # at 200
        4: curve([21.0]),                    # 21 at 100 but only 50 games: the window is not full yet
    }
    agg = aggregate(records, 20.0, [200, 600], runs=5)  # seed 5 asked for, never logged
    assert (agg["runs"], agg["logged"], agg["reached"]) == (5, 4, 2)
    by_seed = {s["seed"]: s for s in agg["seeds"]}
    assert [by_seed[s]["steps_to_target"] for s in (1, 2, 3, 4)] == [400, None, 200, None]
    assert by_seed[1]["wall_s_to_target"] == 40.0
    assert agg["steps_to_target"] == {"median": None, "min": 200, "max": 400}  # 2 of 5: no median
    at200 = agg["return_at"]["200"]
    assert (at200["n"], at200["median"], at200["min"], at200["max"]) == (3, 0.0, -10, 20.2)  # seed 4 ended at 100
    at600 = agg["return_at"]["600"]  # seeds 1 and 3 stopped at the target: they count with their last window
    assert (at600["n"], at600["median"], at600["min"], at600["max"]) == (3, 20.2, 19, 20.5)
    assert (at600["q25"], at600["q75"]) == (pytest.approx(19.6), pytest.approx(20.35))
    table = markdown_table(agg)
    assert "**2 of 5 seeds reached 20**" in table and "| 3 | yes | 200 |" in table and "| 600 | 3 | 20.20 |" in table


def test_all_seeds_reached_gives_a_median():
    agg = aggregate({s: curve([0, 10, 20 + s]) if s < 3 else curve([0, 20, 21]) for s in (1, 2, 3)}, 20, [300])
    assert agg["reached"] == 3 and agg["steps_to_target"]["median"] == 300 and agg["steps_to_target"]["min"] == 200


def test_last_games_tell_a_tail_of_lost_games_from_a_near_miss_in_every_game():
    """Two seeds whose last 100 games both average 19.5: one loses a point in most games, the other wins nearly
    every game outright and loses 6 badly (issue 59's stalled Pong seeds). Without the worst tenth, the first
    stays under 20, the second stands at 21."""
    near_miss = [21.0] * 10 + [19.0] * 60 + [20.0] * 30
    tail = [21.0] * 47 + [-21.0, -15.0, -5.0, 0.0, 5.0, 10.0] + [21.0] * 47
    older = [-21.0] * 50  # before the last 100 games: not counted
    miss, lost = last_games(older + near_miss), last_games(older + tail)
    assert miss["n"] == lost["n"] == 100 and miss["mean"] == 19.5 and lost["mean"] == pytest.approx(19.48)
    assert miss["mean_without_worst_tenth"] == pytest.approx((210 + 50 * 19 + 600) / 90) and miss["worst"] == 19
    assert lost["mean_without_worst_tenth"] == 21.0 and lost["worst"] == -21.0
    assert last_games([3.0, -1.0, 5.0]) == {"n": 3, "mean": pytest.approx(7 / 3), "mean_without_worst_tenth": 4.0,
                                            "worst": -1.0}  # a few games: the worst one dropped
    assert last_games([2.0])["mean_without_worst_tenth"] == 2.0
    assert last_games([]) is None


def test_the_seed_table_gives_each_seeds_last_games_where_they_are_known():
    records = {1: curve([0, 10, 20.5]), 2: curve([0, 10, 15])}
    agg = aggregate(records, 20, [300], games={2: [21.0] * 95 + [-21.0] * 5})
    by_seed = {s["seed"]: s for s in agg["seeds"]}
    assert by_seed[1]["last_games"] is None
    assert by_seed[2]["last_games"]["worst"] == -21.0
    table = markdown_table(agg)
    assert "| last 100 games: mean without the worst tenth / worst |" in table
    assert "| 300 | - / - |" in table and "| 300 | 21.00 / -21 |" in table
