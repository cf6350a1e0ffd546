"""benchmarks/pong_points.py: the share of points lost by the opponent's score."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pong_points import lose_rates  # noqa: E402


def test_lose_rates_count_each_point_under_the_opponents_score_then():
    # a game lost 0-3 at once, then won 21-3: three points at 0, 1 and 2 lost, 21 won at 3
    points = [(0, False), (1, False), (2, False)] + [(3, True)] * 21
    assert lose_rates(points) == {"0": (1, 1), "1": (1, 1), "2": (1, 1), "3": (0, 21)}


def test_lose_rates_pool_the_top_scores():
    points = [(5, False), (6, False), (9, True), (12, False)]
    assert lose_rates(points, top=6) == {"5": (1, 1), "6+": (2, 3)}
