"""Checkpoint housekeeping: the newest N checkpoints plus best.pt, atomic writes, latest() never fooled."""
from __future__ import annotations

import os

import torch

from learner.weights import checkpoint
from learner.report.episodes import EpisodeStats


def _state(update: int, w: float | None = None) -> dict:
    return {"update": update, "env_steps": 128 * update, "config": {}, "updater": {"lr": 2.5e-4},
            "model": {"w": torch.full((3,), float(update if w is None else w))}}


def _names(run_dir) -> set[str]:
    return {p.name for p in (run_dir / "checkpoints").iterdir()}


def test_keeps_newest_n_plus_best(tmp_path):
    scores = [1.0, 5.0, 3.0, None, 4.0, 2.0, float("nan")]
    for update, score in enumerate(scores, 1):
        checkpoint.save(tmp_path, update, _state(update), keep=3, score=score)
    assert _names(tmp_path) == {"ckpt_00000005.pt", "ckpt_00000006.pt", "ckpt_00000007.pt", "best.pt", "best.json"}
    assert len(checkpoint.list_checkpoints(tmp_path / "checkpoints")) == 3
    best = checkpoint.load(checkpoint.best(tmp_path))
    assert best["update"] == 2 and torch.equal(best["model"]["w"], torch.full((3,), 2.0))
    assert checkpoint.best_info(tmp_path) == {"score": 5.0, "update": 2, "source": "ckpt_00000002.pt"}
    assert checkpoint.latest(tmp_path).name == "ckpt_00000007.pt"


def test_best_replaced_only_on_improvement(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), keep=1, score=2.0)
    first = os.stat(checkpoint.best(tmp_path)).st_ino
    checkpoint.save(tmp_path, 2, _state(2), keep=1, score=2.0)  # equal: not an improvement
    assert os.stat(checkpoint.best(tmp_path)).st_ino == first
    assert checkpoint.load(checkpoint.best(tmp_path))["update"] == 1
    checkpoint.save(tmp_path, 3, _state(3), keep=1, score=2.5)
    assert checkpoint.load(checkpoint.best(tmp_path))["update"] == 3
    assert checkpoint.best_score(tmp_path) == 2.5
    assert _names(tmp_path) == {"ckpt_00000003.pt", "best.pt", "best.json"}


def test_no_score_no_best(tmp_path):
    for update in (1, 2):
        checkpoint.save(tmp_path, update, _state(update), keep=5)
    assert checkpoint.best(tmp_path) is None and checkpoint.best_score(tmp_path) is None
    assert _names(tmp_path) == {"ckpt_00000001.pt", "ckpt_00000002.pt"}


def test_latest_ignores_best_and_torn_temp_files(tmp_path):
    checkpoint.save(tmp_path, 4, _state(4), keep=3, score=10.0)
    ckpt_dir = tmp_path / "checkpoints"
    # a writer killed mid-save leaves a temp file, here with a newer update number than any real checkpoint
    torn = ckpt_dir / ".tmp_ckpt_00000009.pt.999999"
    torn.write_bytes(b"\x80\x02half a pickle")
    (ckpt_dir / "ckpt_00000010.pt.partial").write_bytes(b"junk")
    assert checkpoint.latest(tmp_path).name == "ckpt_00000004.pt"
    assert checkpoint.load(checkpoint.latest(tmp_path))["update"] == 4
    # the next save (another pid's leftovers are stale) removes the torn temp file; best.pt stays
    checkpoint.save(tmp_path, 5, _state(5), keep=3, score=1.0)
    assert not torn.exists()
    assert checkpoint.latest(tmp_path).name == "ckpt_00000005.pt"
    assert checkpoint.load(checkpoint.best(tmp_path))["update"] == 4


def test_best_survives_pruning_of_its_source(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), keep=1, score=9.0)
    for update in (2, 3, 4):
        checkpoint.save(tmp_path, update, _state(update), keep=1, score=0.0)
    assert not (tmp_path / "checkpoints" / "ckpt_00000001.pt").exists()
    assert checkpoint.load(checkpoint.best(tmp_path))["update"] == 1


def test_load_newest_skips_damaged_checkpoints_saying_why_in_one_line(tmp_path):
    for update in (1, 2, 3, 4):
        checkpoint.save(tmp_path, update, _state(update), keep=10)
    ckpts = tmp_path / "checkpoints"
    newest = ckpts / "ckpt_00000004.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # cut short (a full disk)
    (ckpts / "ckpt_00000003.pt").write_bytes(b"not a checkpoint at all")
    path, state, skipped = checkpoint.load_newest(tmp_path)
    assert path.name == "ckpt_00000002.pt" and state["update"] == 2
    assert [p.name for p, _ in skipped] == ["ckpt_00000004.pt", "ckpt_00000003.pt"]
    for _, why in skipped:
        assert why and "\n" not in why and len(why) <= 200, why


def test_load_newest_of_nothing_that_loads(tmp_path):
    assert checkpoint.load_newest(tmp_path) == (None, None, [])
    checkpoint.save(tmp_path, 1, _state(1), keep=10)
    (tmp_path / "checkpoints" / "ckpt_00000001.pt").write_bytes(b"")
    path, state, skipped = checkpoint.load_newest(tmp_path)
    assert path is None and state is None and [p.name for p, _ in skipped] == ["ckpt_00000001.pt"]


def test_episode_stats_survive_a_checkpoint(tmp_path):
    stats = EpisodeStats()
    for i in range(130):
        stats.add(float(i), i + 1)
    checkpoint.save(tmp_path, 1, {"episodes": stats.state_dict()}, keep=1)
    again = EpisodeStats()
    again.load_state_dict(checkpoint.load(checkpoint.latest(tmp_path))["episodes"])  # weights_only=True
    assert again.count == 130 and list(again.returns) == [float(i) for i in range(30, 130)]
    assert list(again.lengths) == list(range(31, 131)) and again.take_new() == []
    again.add(1000.0, 5)
    assert again.count == 131 and len(again.returns) == 100 and again.returns[-1] == 1000.0
