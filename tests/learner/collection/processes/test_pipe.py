"""The pipe between the training process and its collector processes speaks typed messages, checked at the
boundary: anything else is one clear line."""
import dataclasses
import os

import pytest
import torch

from learner.collection.assembly import RunOnRank, Spaces
from learner.collection.processes.pipe import (FROM_COLLECTOR, TO_COLLECTOR, Close, Collect, Done, Failed, Know, PipeError,
                                     Ready, Rows, Width, check, describe_failure)
from learner.collection.processes.board import BOARD_COLUMNS
from learner.collection.processes.process import CollectorRole, CollectorSpec, collector_main
from learner.config import from_dict
from learner.lifecycle.preflight import probe_spaces
from learner.model.networks import build_model
from learner.rollout.layout import Layout
from learner.weights.shared import SharedWeights


def test_the_expected_kinds_pass_unchanged():
    message = Collect(3, [4, 4])
    assert check(message, (Know, Collect, Close), "parent") is message


@pytest.mark.parametrize("message, said", [
    (("collect", 3, None), "parent sent an unknown message (tuple ('collect', 3, None)) where Know or Collect "
                           "or Close was expected"),
    (Width(8), "parent sent Width where Know or Collect or Close was expected"),
])
def test_anything_else_is_one_line_naming_what_came(message, said):
    with pytest.raises(PipeError) as err:
        check(message, (Know, Collect, Close), "parent")
    assert str(err.value) == said


def test_a_collectors_failure_or_a_message_out_of_turn_is_named():
    assert describe_failure(Failed("OSError: address in use"), "collector 1") == "collector 1: OSError: address in use"
    assert describe_failure(Ready("tcp://x:1"), "collector 1") == "collector 1: sent Ready out of turn"


def test_messages_are_frozen():
    rows = Rows(1, 0, None, {1})
    with pytest.raises(AttributeError):
        rows.offset = 2
    assert Done("shard").shard == "shard"


@pytest.mark.integration
def test_a_collector_process_told_something_unknown_says_so_in_one_line_and_exits(tmp_path):
    """A real collector process, spawned as the pool does, sent the bare tuple the pipe spoke before."""
    cfg = from_dict({"env": {"env_id": "CartPole-v1"}, "ppo": {"num_steps": 8}})
    obs, act = probe_spaces(cfg.env, 0)
    spec = CollectorSpec(RunOnRank(cfg, str(tmp_path), 0, "run", 0, os.getpid(), "cpu"),
                         Spaces(cfg.env, obs, obs, act, 1), Layout.of(obs, act), CollectorRole(0, 1, "tcp://127.0.0.1:0"))
    served = [build_model(obs, act, cfg.model), None]
    board = torch.zeros(1, BOARD_COLUMNS, dtype=torch.int64).share_memory_()
    halt = torch.zeros(1, dtype=torch.int8).share_memory_()
    ctx = torch.multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=collector_main, args=(spec, theirs, SharedWeights(served), board, halt), daemon=True)
    proc.start()
    theirs.close()
    try:
        assert mine.poll(120) and isinstance(mine.recv(), Ready)
        mine.send(("collect", 0, None))
        assert mine.poll(60)
        failed = mine.recv()
        assert isinstance(failed, Failed)
        assert failed.text == ("the training process sent an unknown message (tuple ('collect', 0, None)) where "
                               "Know or Collect or Strike or Close was expected")
        proc.join(60)
        assert proc.exitcode == 1
    finally:
        halt[0] = 1
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


@pytest.mark.parametrize("kind", TO_COLLECTOR + FROM_COLLECTOR, ids=lambda k: k.__name__)
def test_every_message_kind_is_a_frozen_dataclass_of_its_fields(kind):
    assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen
    fields = [f.name for f in dataclasses.fields(kind)]
    assert fields == list(getattr(kind, "__annotations__", {}))
