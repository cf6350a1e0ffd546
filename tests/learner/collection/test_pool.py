"""The pool's choice that needs no process: how many collectors by default."""
import torch

from learner.collection.pool import default_collectors


def test_default_collectors_follow_the_device_and_cores():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert default_collectors(0, cpu, 64, False, False) == 1
    assert default_collectors(0, cuda, 2, False, False) == 1
    assert default_collectors(0, cuda, 16, False, False) == 2
    assert default_collectors(0, cuda, 96, False, False) == 4
    assert default_collectors(0, cuda, 96, True, False) == 1  # deterministic: one process
    assert default_collectors(0, cuda, 96, False, True) == 1  # normalize.obs: one set of statistics
    assert default_collectors(3, cpu, 2, False, False) == 3   # asked for: given
