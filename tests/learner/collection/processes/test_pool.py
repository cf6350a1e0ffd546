"""The pool's choices that need no process: how many collectors by default, and where the collector processes
after the first bind."""
import torch

from learner.collection.processes.pool import collector_address, default_collectors


def test_default_collectors_follow_the_device_and_cores():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert default_collectors(0, cpu, 64, False, False) == 1
    assert default_collectors(0, cuda, 2, False, False) == 1
    assert default_collectors(0, cuda, 16, False, False) == 2
    assert default_collectors(0, cuda, 96, False, False) == 4
    assert default_collectors(0, cuda, 96, True, False) == 1  # deterministic: one process
    assert default_collectors(0, cuda, 96, False, True) == 1  # normalize.obs: one set of statistics
    assert default_collectors(3, cpu, 2, False, False) == 3   # asked for: given


def test_other_collectors_bind_a_free_port_of_the_first_ones_host_or_an_ipc_path_beside_it():
    assert collector_address("tcp://10.0.0.5:5555", 2) == "tcp://10.0.0.5:0"
    assert collector_address("tcp://[::1]:5555", 1) == "tcp://[::1]:0"
    first = "ipc:///tmp/ppo-cluster-x/learner.sock"
    assert collector_address(first, 3) == f"{first}-collector-3"
