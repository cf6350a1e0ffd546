"""The evaluation worker's schedule (learner/evaluation/worker.py)."""
from __future__ import annotations

from learner.evaluation.worker import _due


def test_due_tolerates_skipped_versions():
    assert not _due(0, 5, 0) and not _due(4, 5, 0) and _due(5, 5, 0) and _due(7, 5, 0)
    assert not _due(9, 5, 7) and _due(10, 5, 7) and _due(13, 5, 7)
    assert not _due(100, 0, 0)  # 0: never
    assert _due(1, 1, 0) and _due(2, 1, 1) and not _due(2, 1, 2)
