"""The user's toolkit on one real training run: evaluation during training, the evaluate and plot commands,
TensorBoard event files and checkpoint housekeeping.

One smoke run is shared by every test here (module fixture): Breakout with evaluation after every update
(one episode, games capped at 100 agent steps), a video every 3 updates, a checkpoint every update and
the newest 2 kept. It trains until an evaluation result has reached metrics.jsonl and a video exists,
then gets SIGTERM, like a user's Ctrl-C, and must exit 0.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.integration.cluster import ROOT, alive, kill_group, metrics, wait_for

pytestmark = pytest.mark.integration

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ATARI_FRAME = (210, 160, 3)
KEEP = 2


def _ready(run_dir) -> bool:
    records = metrics(run_dir)
    evaluated = any(r.get("eval_return_mean") is not None for r in records)
    video = any((run_dir / "videos").glob("update_*.mp4")) if (run_dir / "videos").is_dir() else False
    return evaluated and video and len(records) >= KEEP + 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("toolkit")
    run_dir = base / "run"
    log_path = base / "launch.out"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "launch.py", "--config", "configs/smoke.toml", "--run-dir", str(run_dir),
             "--total-steps", "1000000", "--set", "eval.every=1", "--set", "eval.episodes=1",
             "--set", "eval.video_every=3", "--set", "env.max_episode_steps=100",
             "--set", "run.checkpoint_every=1", "--set", f"log.keep_checkpoints={KEEP}"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            wait_for(lambda: _ready(run_dir), 150, "an evaluation in metrics.jsonl and a video", proc)
            proc.send_signal(signal.SIGTERM)  # the launcher stops everything in order and exits 0
            proc.wait(timeout=60)
        except BaseException:
            kill_group(proc)
            proc.wait()
            raise
    out = log_path.read_text()
    assert proc.returncode == 0, out[-3000:]
    processes = json.loads((run_dir / "processes.json").read_text())
    assert "evaluator" in processes
    wait_for(lambda: not alive(processes["evaluator"]), 10, "the eval worker to exit")
    return run_dir


def _frames(path):
    import imageio.v2 as imageio
    reader = imageio.get_reader(path)
    try:
        return [frame for frame in reader]
    finally:
        reader.close()


def test_evaluation_during_training_reaches_the_metrics(run):
    records = metrics(run)
    evaluated = [r for r in records if r.get("eval_return_mean") is not None]
    assert evaluated, "no metrics record carries an eval_return_mean"
    assert all(r["eval_update"] <= r["update"] for r in evaluated)
    results = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    assert results and all(r["eval_episodes"] == 1 and r["update"] >= 1 for r in results)
    assert {r["eval_return_mean"] for r in evaluated} <= {r["eval_return_mean"] for r in results}
    assert [r["update"] for r in results] == sorted({r["update"] for r in results})
    videos = sorted((run / "videos").glob("update_*.mp4"))
    assert videos and not list((run / "videos").glob(".*")), "a temp video was left behind"
    frames = _frames(videos[0])
    assert len(frames) >= 2 and frames[0].shape == ATARI_FRAME


def test_evaluate_command_prints_statistics_and_records_video(run):
    video = run / "eval_video.mp4"
    result = subprocess.run([sys.executable, "-m", "ppo_cluster", "evaluate", str(run), "--episodes", "2", "--video",
                             str(video), "--max-steps", "100"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"eval return: mean -?\d+\.\d+ std \d+\.\d+ min \S+ max \S+ over 2 episode", result.stdout)
    lengths = [int(n) for n in re.findall(r"^episode \d+: return \S+ \(length (\d+)\)$", result.stdout, re.M)]
    assert len(lengths) == 2 and all(1 <= n <= 100 for n in lengths)
    frames = _frames(video)
    assert len(frames) == sum(lengths) + 2  # each episode: its first frame, then one per agent step
    assert all(f.shape == ATARI_FRAME for f in frames)  # the full-colour screen, exact size (no padding)
    assert np.ptp(np.stack(frames[:10])) > 0  # not blank


def test_evaluate_best_checkpoint_greedy_with_sticky_actions(run, capsys):
    from learner.evaluation.evaluate import main
    best = run / "checkpoints" / "best.pt"
    assert main([str(best), "--episodes", "1", "--greedy", "--sticky-actions", "0.25", "--max-steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "best.pt" in out and "greedy" in out and "sticky actions 0.25" in out and "over 1 episode" in out


@pytest.mark.parametrize("args, message", [
    (["--episodes", "0"], "--episodes must be >= 1"),
    (["--sticky-actions", "1.5"], "--sticky-actions must be in [0, 1]"),
    (["--video", "x.gif"], "--video must name an .mp4 file"),
])
def test_evaluate_rejects_bad_arguments(run, capsys, args, message):
    from learner.evaluation.evaluate import main
    assert main([str(run), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_plot_command_writes_a_png(run, tmp_path):
    result = subprocess.run([sys.executable, "-m", "ppo_cluster", "plot", str(run)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    png = run / "plot.png"
    data = png.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    from learner.report.plot import main
    assert main([str(run), str(run), "-o", str(tmp_path / "two.png")]) == 0  # several runs, one figure
    assert (tmp_path / "two.png").read_bytes().startswith(PNG_SIGNATURE)
    assert main([str(run), str(tmp_path)]) == 2  # tmp_path has no metrics.jsonl


def test_tensorboard_holds_every_metric(run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    records = metrics(run)
    numeric = {k for r in records for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert {"policy_loss", "sps", "eval_return_mean"} <= numeric  # always there in this run
    # episode_return_mean too, once a training game has ended (the run may stop before one does)
    for key in sorted(numeric):
        expected = [(r["env_steps"], r[key]) for r in records if isinstance(r.get(key), (int, float))
                    and not isinstance(r.get(key), bool)]
        got = [(e.step, e.value) for e in acc.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in expected], key
        np.testing.assert_allclose([v for _, v in got], [v for _, v in expected], rtol=1e-6, err_msg=key)
    assert "config/text_summary" in acc.Tags()["tensors"]
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "[eval]" in text and "every = 1" in text


def test_checkpoint_housekeeping_keeps_newest_plus_best(run):
    from learner.weights import checkpoint
    ckpt_dir = run / "checkpoints"
    kept = checkpoint.list_checkpoints(ckpt_dir)
    assert len(kept) == KEEP
    assert (ckpt_dir / "best.pt").is_file() and not list(ckpt_dir.glob(".tmp_*"))
    last = metrics(run)[-1]
    assert checkpoint.latest(run).name == f"ckpt_{last['update']:08d}.pt"
    info = checkpoint.best_info(run)
    evals = [r["eval_return_mean"] for r in metrics(run) if r.get("eval_return_mean") is not None]
    assert info["score"] == max(evals)
    assert checkpoint.load(ckpt_dir / "best.pt")["update"] == info["update"]
