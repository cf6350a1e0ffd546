"""MetricsWriter's extras without a training run: eval.jsonl following, TensorBoard, progress bar, score."""
from __future__ import annotations

import io
import json
import logging
import sys
import types

import pytest

from learner.config import Config, apply_overrides
from learner.report.metrics import EvalReader, MetricsWriter
from learner.report.sinks import numeric


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


def test_tensorboard_sink_roundtrip(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    writer = MetricsWriter(tmp_path, Config())
    for update in range(1, 4):
        writer.write(_record(update, approx_kl=float("nan") if update == 2 else 0.01))
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    returns = acc.Scalars("episode_return_mean")
    assert [(e.step, e.value) for e in returns] == [(64, 1.0), (128, 2.0), (192, 3.0)]
    assert len(acc.Scalars("approx_kl")) == 2  # NaN is "not defined": left out
    assert "events" not in acc.Tags()["scalars"]
    assert "config/text_summary" in acc.Tags()["tensors"]


def test_numeric_keeps_finite_numbers_only():
    assert numeric({"a": 1, "b": 2.5, "c": None, "d": True, "e": "x", "f": [1], "g": float("inf")}) == {"a": 1, "b": 2.5}


def test_progress_bar_off_when_not_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())
    writer = MetricsWriter(tmp_path, apply_overrides(Config(), ["log.tensorboard=false"]))
    writer.write(_record(1))
    writer.close()
    assert writer.bar is None and "\r" not in (tmp_path / "metrics.jsonl").read_text()


def test_track_without_wandb_warns_once_and_continues(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    cfg = apply_overrides(Config(), ["log.track=true", "log.tensorboard=false"])
    with caplog.at_level(logging.WARNING):
        writer = MetricsWriter(tmp_path, cfg)
        writer.write(_record(1))
        writer.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "wandb is not installed" in warnings[0]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def test_track_logs_numeric_metrics_to_wandb(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def log(self, values, step=None):
            calls.setdefault("log", []).append((values, step))

        def finish(self):
            calls["finished"] = True

    def init(**kwargs):
        calls["init"] = kwargs
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    cfg = apply_overrides(Config(), ["log.track=true", "log.tensorboard=false", "log.wandb_project='demo'"])
    writer = MetricsWriter(tmp_path, cfg)
    writer.write(_record(2))
    writer.close()
    assert calls["init"]["project"] == "demo" and calls["init"]["config"] == cfg.to_dict()
    assert calls["init"]["dir"] == str(tmp_path) and calls["finished"]
    (values, step), = calls["log"]
    assert step == 128 and values["policy_loss"] == 0.1 and "events" not in values and "env_steps" not in values


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal_never_tears_a_log_line_nor_reaches_the_log_file(tmp_path, monkeypatch):
    """The console handler setup_logging installs, a file handler beside it, and tqdm's bar on the same stdout:
    each log line comes out whole on a line of its own, the bar comes back below it, the file has no bar."""
    tty = FakeTTY()
    monkeypatch.setattr("sys.stdout", tty)
    console, logfile = logging.StreamHandler(tty), logging.FileHandler(tmp_path / "learner.log")
    root, logger = logging.getLogger(), logging.getLogger("learner")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    root.addHandler(console)
    root.addHandler(logfile)
    try:
        writer = MetricsWriter(tmp_path, apply_overrides(Config(), ["log.tensorboard=false", "run.total_steps=640"]))
        assert writer.bar is not None
        writer.write(_record(1))
        logger.info("an actor joined")
        writer.write(_record(2))
        writer.close()
        assert console in root.handlers and logfile in root.handlers  # the console handler is back after close
    finally:
        root.removeHandler(console)
        root.removeHandler(logfile)
        logfile.close()
        logger.setLevel(old_level)
    log_text = (tmp_path / "learner.log").read_text()
    assert "\r" not in log_text and "\x1b" not in log_text and "step/s" not in log_text
    assert log_text.count("\n") == 3 and "an actor joined" in log_text
    screen = tty.getvalue()
    assert "128/640" in screen and "update 2, return 2.00" in screen  # the bar: steps of total_steps, and more
    after_bar = screen[screen.index("/640"):]  # the log lines that came once the bar was up
    lines = [line.split("\r")[-1].strip() for line in after_bar.split("\n")]
    joined = [line for line in lines if "an actor joined" in line]
    assert len(joined) == 1 and joined[0] == "an actor joined", lines  # whole: no bar text before or after it
    assert any(line.startswith("update 2 | steps 128") for line in lines), lines


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
