"""Every copy between host memory and the learner's device goes through one DeviceLink, which counts them.

The rollout lives in host memory (pinned when the device is a GPU, so copies are asynchronous DMA), and
messages write into it with plain slice copies. The device sees data in batches only: one copy of an
inference batch in, one copy of its actions, log-probs and values out, and the finished rollout once
per update. The counts let a test show that none of this grows with the number of messages.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch


class DeviceLink:
    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.on_cpu = self.device.type == "cpu"
        self.to_device_copies = 0  # host -> device (counted on CPU too: the same calls, free there)
        self.to_host_copies = 0    # device -> host

    def host_tensor(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """Host storage the device can read by DMA: pinned when the device is a GPU."""
        return torch.zeros(shape, dtype=dtype, pin_memory=not self.on_cpu and torch.cuda.is_available())

    def to_device(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        self.to_device_copies += 1
        if isinstance(x, np.ndarray):
            with warnings.catch_warnings():  # a received frame's read-only view: torch only reads it
                warnings.simplefilter("ignore", UserWarning)
                x = torch.from_numpy(x)
        return x if self.on_cpu else x.to(self.device, non_blocking=x.is_pinned())

    def to_host(self, x: torch.Tensor) -> np.ndarray:
        self.to_host_copies += 1
        return x.numpy() if self.on_cpu else x.cpu().numpy()

