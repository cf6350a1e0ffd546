"""The weights collector processes serve: one copy of every tensor of the served modules in memory they all
map (shared memory on a CPU, CUDA IPC on a GPU, as Sample Factory shares its model), and the version those
tensors hold.

The training process writes it after each update (`publish`); a collector loads it into its own copy of the
model before a rollout whose version differs, or with policy lag as soon as it sees a newer version mid-rollout
(`load_into`). A publish may then meet a load: the version is a sequence lock (WRITING while the tensors are
written), so a load that saw WRITING, or a version that changed while it copied, copies again.
"""
from __future__ import annotations

import time

import torch

WRITING = -1
LOAD_DEADLINE_S = 60.0  # a publish takes milliseconds; one that never ends is a dead training process


def _tensors(modules) -> list[torch.Tensor]:
    return [t for module in modules if module is not None for t in module.state_dict().values()]


class SharedWeights:
    def __init__(self, modules):
        """`modules`: the model, and the value normalizer when there is one (None entries are skipped);
        a collector passes its own copies, built the same way, in the same order."""
        self.tensors = [t.detach().clone() for t in _tensors(modules)]
        for t in self.tensors:
            if t.device.type == "cpu":
                t.share_memory_()  # CUDA tensors travel to the collectors as IPC handles instead
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()

    @torch.no_grad()
    def publish(self, modules, version: int) -> None:
        self.version[0] = WRITING
        for dst, src in zip(self.tensors, _tensors(modules), strict=True):
            dst.copy_(src)
        if self.tensors and self.tensors[0].is_cuda:
            torch.cuda.synchronize(self.tensors[0].device)  # done before any collector reads them
        self.version[0] = version

    @torch.no_grad()
    def load_into(self, modules) -> int:
        """Copy the shared tensors into `modules`; returns the version they hold."""
        deadline = time.monotonic() + LOAD_DEADLINE_S
        while time.monotonic() < deadline:
            before = int(self.version[0])
            if before != WRITING:
                for dst, src in zip(_tensors(modules), self.tensors, strict=True):
                    dst.copy_(src)
                if int(self.version[0]) == before:
                    return before
            time.sleep(0.001)  # a publish is under way: its copy takes about as long as ours
        raise TimeoutError(f"the shared weights stayed mid-publish for {LOAD_DEADLINE_S:g}s")

    def current(self) -> int:
        return int(self.version[0])
