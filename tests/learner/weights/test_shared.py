"""Weights shared with a collector process: what the training process publishes is what a spawned process
loads, version included, with no copy through a pipe."""
import pytest
import torch
import torch.multiprocessing as mp

from learner.update.ranks import checksum
from learner.weights.shared import SharedWeights

pytestmark = pytest.mark.integration


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))


def _load_in_child(shared: SharedWeights, published, answers) -> None:
    model = _model()
    published.wait(120)
    answers.put((shared.load_into([model, None]), checksum(model), model[1].running_mean.tolist()))


def test_a_spawned_process_loads_what_was_published_after_it_started():
    model = _model()
    shared = SharedWeights([model, None])
    ctx = mp.get_context("spawn")
    answers, published = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_load_in_child, args=(shared, published, answers))
    child.start()
    with torch.no_grad():  # an "update" after the child started: only the shared memory carries it over
        for p in model.parameters():
            p.add_(1.0)
        model[1].running_mean.fill_(0.5)
    shared.publish([model, None], 3)
    published.set()
    try:
        version, digest, running_mean = answers.get(timeout=120)
    finally:
        child.join(30)
    assert version == 3 and digest == checksum(model) and running_mean == [0.5] * 4
    assert all(t.is_shared() for t in shared.tensors)
