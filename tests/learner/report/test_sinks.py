"""Where the metrics go besides metrics.jsonl (learner/report/sinks.py): TensorBoard, Weights & Biases (--track),
numbers only."""
from __future__ import annotations

import logging
import sys
import types

import pytest

from learner.config import Config, apply_overrides
from learner.report.metrics import MetricsWriter
from learner.report.sinks import numeric
from tests.learner.report.test_metrics import _record


def test_tensorboard_sink_roundtrip(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    writer = MetricsWriter(tmp_path, Config())
    for update in range(1, 4):
        writer.write(_record(update, approx_kl=float("nan") if update == 2 else 0.01, epoch_kls=[0.5, 0.25]))
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    returns = acc.Scalars("episode_return_mean")
    assert [(e.step, e.value) for e in returns] == [(64, 1.0), (128, 2.0), (192, 3.0)]
    assert len(acc.Scalars("approx_kl")) == 2  # NaN is "not defined": left out
    assert "events" not in acc.Tags()["scalars"]
    assert [e.value for e in acc.Scalars("epoch_kls/1")] == [0.25] * 3  # a list: one scalar per index
    assert "config/text_summary" in acc.Tags()["tensors"]


def test_tensorboard_sink_writes_an_updates_scalars_as_one_event(tmp_path):
    """One event per update, not one per scalar: add_scalar per key cost the training loop 3.4 ms per update."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    writer = MetricsWriter(tmp_path, Config())
    for update in range(1, 4):
        writer.write(_record(update, epoch_kls=[0.5, 0.25]))
    writer.close()
    (path,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    scalar_events = [e for e in LegacyEventFileLoader(str(path)).Load()  # as written, not upgraded
                     if any(v.HasField("simple_value") for v in e.summary.value)]
    assert [e.step for e in scalar_events] == [64, 128, 192]
    assert all(len(e.summary.value) > 5 for e in scalar_events)


def test_numeric_keeps_finite_numbers_only():
    assert numeric({"a": 1, "b": 2.5, "c": None, "d": True, "e": "x", "g": float("inf")}) == {"a": 1, "b": 2.5}


def test_numeric_gives_a_list_of_numbers_one_scalar_per_index():
    record = {"epoch_kls": [0.01, 0.02], "sums": ["ab", "cd"], "events": [], "mixed": [1, None, "x", 3.0]}
    assert numeric(record) == {"epoch_kls/0": 0.01, "epoch_kls/1": 0.02, "mixed/0": 1, "mixed/3": 3.0}


def test_numeric_gives_a_dict_one_scalar_per_key_nested():
    record = {"collection": {"parked_end_s": 0.5, "batch_slots": {"p50": 8, "p99": 16}, "serial_s": None,
                             "messages_per_s": [100.0, 120.0]}}
    assert numeric(record) == {"collection/parked_end_s": 0.5, "collection/batch_slots/p50": 8,
                               "collection/batch_slots/p99": 16, "collection/messages_per_s/0": 100.0,
                               "collection/messages_per_s/1": 120.0}


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
    writer.write(_record(2, grad_norm=0.7, epoch_kls=[0.5]))
    writer.close()
    assert calls["init"]["project"] == "demo" and calls["init"]["config"] == cfg.to_dict()
    assert calls["init"]["dir"] == str(tmp_path) and calls["finished"]
    (values, step), = calls["log"]
    assert step == 128 and values["policy_loss"] == 0.1 and "events" not in values and "env_steps" not in values
    assert values["grad_norm"] == 0.7 and values["epoch_kls/0"] == 0.5
