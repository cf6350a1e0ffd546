"""benchmarks/pong_points.py: the share of points lost by the opponent's score."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pong_points import lose_rates, lose_rates_by_number, lose_rates_by_serve, points_of  # noqa: E402


def test_lose_rates_count_each_point_under_the_opponents_score_then():
    # a game lost 0-3 at once, then won 21-3: three points at 0, 1 and 2 lost, 21 won at 3
    points = [(0, False), (1, False), (2, False)] + [(3, True)] * 21
    assert lose_rates(points) == {"0": (1, 1), "1": (1, 1), "2": (1, 1), "3": (0, 21)}


def test_lose_rates_pool_the_top_scores():
    points = [(5, False), (6, False), (9, True), (12, False)]
    assert lose_rates(points, top=6) == {"5": (1, 1), "6+": (2, 3)}


def test_points_of_gives_each_point_the_opponents_score_before_it():
    assert points_of("-+-+") == [(0, False), (1, True), (1, False), (2, True)]
    assert points_of("") == []


def test_lose_rates_by_number_count_the_opening_serve_apart():
    # three games that lose only their first point, one that loses its second and third
    games = ["-" + "+" * 21] * 3 + ["+--" + "+" * 20]
    assert lose_rates_by_number(games, top=3) == {"1": (3, 4), "2": (1, 4), "3+": (1, 3 * 20 + 21)}


def test_lose_rates_by_number_order_the_numbers_as_numbers():
    assert list(lose_rates_by_number(["+" * 12], top=11)) == [str(i) for i in range(1, 11)] + ["11+"]


def test_lose_rates_by_serve_follow_the_last_points_winner():
    # the opening lost, then won after it; a game whose two lost points come after a won one, and one after a lost one
    games = ["-+++", "+-+--"]
    assert lose_rates_by_serve(games) == {"the opening": (1, 2), "after a lost point": (1, 3),
                                          "after a won point": (2, 4)}


def test_lose_rates_by_serve_leave_out_a_serve_never_played():
    assert lose_rates_by_serve(["+++"]) == {"the opening": (0, 1), "after a won point": (0, 2)}


def test_score_of_point_names_the_points_a_game_has(capsys):
    import pytest
    from pong_points import main
    with pytest.raises(SystemExit):
        main(["unused.pt", "--score-of-point", "22"])
    assert "--score-of-point must be 1-21" in capsys.readouterr().err
