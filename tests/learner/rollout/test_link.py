"""DeviceLink (learner/rollout/link.py): every copy between host memory and the device is counted, and on a CPU
device the "copies" are the host memory itself."""
from __future__ import annotations

import numpy as np
import torch

from learner.rollout.link import DeviceLink


def test_each_copy_is_counted_in_its_direction():
    link = DeviceLink("cpu")
    frame = np.arange(6, dtype=np.uint8).reshape(2, 3)
    x = link.to_device(frame)
    link.to_device(torch.ones(2))
    back = link.to_host(x)
    assert (link.to_device_copies, link.to_host_copies) == (2, 1)
    np.testing.assert_array_equal(back, frame)


def test_on_a_cpu_device_the_device_tensor_is_the_host_memory():
    link = DeviceLink(torch.device("cpu"))
    frame = np.zeros(4, dtype=np.float32)
    x = link.to_device(frame)
    frame[0] = 3.0  # no copy was made: the tensor sees it
    assert link.on_cpu and x[0].item() == 3.0 and x.device.type == "cpu"
    host = link.host_tensor((2, 3), torch.float32)
    assert host.shape == (2, 3) and host.dtype == torch.float32 and not host.is_pinned() and host.abs().sum() == 0
