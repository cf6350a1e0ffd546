"""MetricsWriter without a training run: eval.jsonl followed, the score, rows past a checkpoint, library threads
failing on the disk (the sinks and the progress bar: test_sinks.py, test_progress.py)."""
from __future__ import annotations

import json

from learner.config import Config, apply_overrides
from learner.report.metrics import EvalReader, MetricsWriter


def _record(update: int, **extra) -> dict:
    return {"update": update, "env_steps": 64 * update, "sps": 100.0, "episode_return_mean": float(update),
            "episodes": update, "policy_loss": 0.1, "value_loss": 0.2, "entropy": 1.0, "approx_kl": 0.01,
            "clip_fraction": 0.0, "explained_variance": 0.5, "learning_rate": 1e-4, "actors": 2,
            "progress": update / 10, "eta_s": 5.0, "events": [], **extra}


def test_eval_reader_reads_whole_lines_only(tmp_path):
    path = tmp_path / "eval.jsonl"
    reader = EvalReader(path)
    assert reader.poll() is None  # no file yet
    with open(path, "w") as f:
        f.write(json.dumps({"update": 2, "eval_return_mean": 1.5}) + "\n")
        f.write('{"update": 4, "eval_ret')  # half a line: the writer is mid-write
        f.flush()
        assert reader.poll() == {"update": 2, "eval_return_mean": 1.5}
        f.write('urn_mean": 3.0}\n')
        f.write("not json\n")
    assert reader.poll() == {"update": 4, "eval_return_mean": 3.0}
    assert reader.poll() == {"update": 4, "eval_return_mean": 3.0}  # nothing new: still the newest


def test_writer_merges_eval_and_scores(tmp_path):
    cfg = apply_overrides(Config(), ["eval.every=1", "log.tensorboard=false"])
    writer = MetricsWriter(tmp_path, cfg)
    writer.write(_record(1))
    assert writer.score() is None  # evaluation runs: the eval mean is the score, none yet
    (tmp_path / "eval.jsonl").write_text(json.dumps({"update": 1, "eval_return_mean": 7.0, "eval_return_std": 1.0}) + "\n")
    writer.write(_record(2))
    writer.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["eval_return_mean"] is None and lines[1]["eval_return_mean"] == 7.0
    assert lines[1]["eval_update"] == 1 and writer.score() == 7.0

    (tmp_path / "plain").mkdir()
    plain = MetricsWriter(tmp_path / "plain", apply_overrides(Config(), ["log.tensorboard=false"]))
    plain.write(_record(3))
    plain.close()
    assert plain.score() == 3.0 and "eval_return_mean" not in plain.last


def test_rows_past_the_checkpoint_are_moved_aside_on_resume(tmp_path):
    from learner.report.metrics import drop_rows_after
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"update": u, "x": u}) + "\n" for u in (1, 2, 3, 4)) + '{"update": 5, "x"')
    assert drop_rows_after(path, 2) == 3  # 3, 4 and the half-written line of the crash
    assert [json.loads(line)["update"] for line in path.read_text().splitlines()] == [1, 2]
    assert len((tmp_path / "metrics.jsonl.dropped").read_text().splitlines()) == 3
    assert drop_rows_after(tmp_path / "absent.jsonl", 2) == 0


def test_a_library_thread_failing_on_the_disk_is_one_line_not_a_traceback(tmp_path, capsys):
    """TensorBoard's event-writer thread on a full disk printed a traceback (seen with benchmarks/chaos.py)."""
    import logging
    import threading

    from learner.report.metrics import setup_logging
    root, hook = logging.getLogger(), threading.excepthook
    handlers = list(root.handlers)
    try:
        setup_logging(tmp_path)

        def write():
            raise OSError(28, "No space left on device")
        t = threading.Thread(target=write, name="EventFileWriter")
        t.start()
        t.join()
    finally:
        threading.excepthook = hook
        for h in root.handlers[len(handlers):]:
            root.removeHandler(h)
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    assert "EventFileWriter stopped: [Errno 28] No space left on device" in (tmp_path / "learner.log").read_text()
