"""The capacity benchmark's inference delay (`benchmarks/learner_capacity.py --inference-delay-ms`), not the
product's: put on PYTHONPATH with PPO_BENCH_INFERENCE_DELAY_MS set, every Python process started with it (the
learner, its collector processes) waits that long after each inference batch, on the collecting thread, as a
GPU learner's thread waits for its batch (the H200's measured p50 was 1.8-2.2 ms). Without the variable it
does nothing."""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import time

TARGET = "learner.collection.inference"


def delayed(act, delay_s: float):
    @functools.wraps(act)
    def act_then_wait(self, groups):
        result = act(self, groups)
        time.sleep(delay_s)
        return result
    return act_then_wait


class DelayInference(importlib.abc.MetaPathFinder):
    """Wraps Inference.act once its module is loaded (the finder steps aside to find the real spec)."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module, delay_s = spec.loader.exec_module, self.delay_s

        def exec_module(module):
            run_module(module)
            module.Inference.act = delayed(module.Inference.act, delay_s)
        spec.loader.exec_module = exec_module
        return spec


if (_ms := float(os.environ.get("PPO_BENCH_INFERENCE_DELAY_MS", "0") or 0)) > 0:
    sys.meta_path.insert(0, DelayInference(_ms / 1000))
