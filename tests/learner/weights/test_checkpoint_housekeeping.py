"""Checkpoint housekeeping: the newest N checkpoints plus best.pt, atomic writes, latest() never fooled."""
from __future__ import annotations

import os
import pickle

import pytest
import torch

from learner.weights import checkpoint
from learner.report.episodes import RecentEpisodes
from protocol.files import WriteFailed
from tests.fs_faults import full_disk, read_only


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
    killed = ckpt_dir / ".ckpt_00000009.pt.x1y2z3.tmp"  # atomic_write's temp file, its writer killed
    killed.write_bytes(b"half")
    in_flight = ckpt_dir / f".tmp_ckpt_00000011.pt.{os.getpid()}"  # this process's own write, not done yet
    in_flight.write_bytes(b"being written")
    # the next save (another pid's leftovers are stale) removes the torn temp files; best.pt stays
    checkpoint.save(tmp_path, 5, _state(5), keep=3, score=1.0)
    assert not torn.exists() and not killed.exists() and in_flight.exists()
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
    stats = RecentEpisodes()
    for i in range(130):
        stats.add(float(i), i + 1)
    checkpoint.save(tmp_path, 1, {"episodes": stats.state_dict()}, keep=1)
    again = RecentEpisodes()
    again.load_state_dict(checkpoint.load(checkpoint.latest(tmp_path))["episodes"])  # weights_only=True
    assert again.count == 130 and list(again.returns) == [float(i) for i in range(30, 130)]
    assert list(again.lengths) == list(range(31, 131)) and again.take_new() == []
    again.add(1000.0, 5)
    assert again.count == 131 and len(again.returns) == 100 and again.returns[-1] == 1000.0


@pytest.mark.parametrize("where, spoil", [
    ("model.w", lambda s: s["model"].update(w=torch.tensor([1.0, float("nan"), 0.0]))),
    ("updater.state.0.exp_avg", lambda s: s["updater"].update(state={0: {"exp_avg": torch.tensor([float("inf")])}})),
    ("updater.lr", lambda s: s["updater"].update(lr=float("nan"))),
])
def test_resume_skips_checkpoints_with_non_finite_numbers_to_the_previous_good_one(tmp_path, where, spoil):
    """issue 32: resume loaded a checkpoint whose weights were NaN."""
    checkpoint.save(tmp_path, 1, _state(1), keep=10)
    bad = _state(2)
    spoil(bad)
    checkpoint.save(tmp_path, 2, bad, keep=10)
    path, state, skipped = checkpoint.load_newest(tmp_path)
    assert path.name == "ckpt_00000001.pt" and state["update"] == 1
    assert skipped == [(tmp_path / "checkpoints" / "ckpt_00000002.pt", f"non-finite values in {where}")]


@pytest.mark.integration
def test_a_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temp_file(tmp_path):
    """issue 32: a full disk gave a traceback and left a temporary checkpoint behind."""
    with full_disk(tmp_path / "run" / "checkpoints", size_kb=256):
        run_dir = tmp_path / "run"
        checkpoint.save(run_dir, 1, _state(1), keep=1, score=1.0)
        before = _names(run_dir)
        big = _state(2)
        big["model"]["w"] = torch.zeros(1 << 18)  # 1 MiB: more than the disk holds
        with pytest.raises(WriteFailed, match="cannot write .*ckpt_00000002.pt"):
            checkpoint.save(run_dir, 2, big, keep=1, score=2.0)
        assert _names(run_dir) == before == {"ckpt_00000001.pt", "best.pt", "best.json"}
        assert checkpoint.load_newest(run_dir)[1]["update"] == 1


@pytest.mark.integration
def test_a_read_only_checkpoint_directory_keeps_the_previous_checkpoint(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), keep=3)
    with read_only(tmp_path / "checkpoints"):
        with pytest.raises(WriteFailed, match="cannot write"):
            checkpoint.save(tmp_path, 2, _state(2), keep=3)
        assert _names(tmp_path) == {"ckpt_00000001.pt"}


class Exploit:
    """A pickle that runs code when unpickled: it would create the file named."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


NOT_CHECKPOINTS = [b"", os.urandom(4096), pickle.dumps(RecentEpisodes()), "exploit", "list", "another model", "format"]


def write_not_a_checkpoint(path, content) -> None:
    if content == "exploit":
        torch.save({**_state(1), "x": Exploit(path.with_name("pwned"))}, path)
    elif content == "list":
        torch.save([1, 2, 3], path)
    elif content == "another model":
        torch.save(torch.nn.Linear(3, 2).state_dict(), path)
    elif content == "format":
        torch.save({**_state(1), "format": "someone-else/1"}, path)
    else:
        path.write_bytes(content)


@pytest.mark.parametrize("content", NOT_CHECKPOINTS)
def test_only_checkpoints_of_this_project_load_and_nothing_is_unpickled(tmp_path, content):
    path = tmp_path / "x.pt"
    write_not_a_checkpoint(path, content)
    with pytest.raises(checkpoint.NotACheckpoint, match="not a checkpoint of this project") as caught:
        checkpoint.load_checkpoint(path)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    assert not (tmp_path / "pwned").exists()
