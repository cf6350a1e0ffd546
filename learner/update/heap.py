"""The CPU update's large tensors and glibc's allocator.

glibc serves every allocation above its mmap threshold (32 MB at most) with a fresh mmap and unmaps it when it
is freed, so each minibatch of a CPU update faults its inputs and activations in again, page by page, zeroed
by the kernel: pong-fast's bf16 update spent ~2 of its 12 s in the system that way (benchmarks/update_cost.py
`--compare trees`). UpdateHeap turns those mmaps off (M_MMAP_MAX 0) and the automatic trim with them, so the
heap keeps the pages and reuses them from one minibatch to the next; release(), after each update, gives the
free pages back (malloc_trim), so the memory held between updates stays what it was (benchmarks/memory.py).
Not glibc (musl, macOS): a no-op.
"""
from __future__ import annotations

import ctypes
import logging
import sys

import torch

log = logging.getLogger("learner")

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
NEVER_TRIM = 2**31 - 1  # bytes: free memory at the heap's top is given back only by release()


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


class UpdateHeap:
    def __init__(self, libc=None):
        self.libc = libc  # None: nothing to tune (a GPU update, or not glibc)

    @staticmethod
    def for_update_on(device: torch.device) -> "UpdateHeap":
        """Tuned for an update on the CPU; a no-op for one on a GPU (its tensors are not malloc's)."""
        libc = _glibc() if device.type == "cpu" else None
        if libc is None:
            return UpdateHeap()
        if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)):
            log.warning("glibc's mallopt refused the update's settings: each minibatch will map its memory anew")
            return UpdateHeap()
        return UpdateHeap(libc)

    def release(self) -> None:
        """After an update: the heap's free pages back to the system."""
        if self.libc is not None:
            self.libc.malloc_trim(0)
