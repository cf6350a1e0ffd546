"""The update's arithmetic (ppo.update_precision): fp32, bf16 autocast of the encoder, or auto, which takes bf16
only where the device computes bfloat16 at speed.

On a CPU the bf16 convolutions run through oneDNN: with AVX-512 (and best with avx512_bf16 or AMX) they are
faster than fp32, but on an AVX2-only CPU they fall back to a slow path. Measured on an AVX2-only 2-core VM
(2026-11-30, benchmarks/update_cost.py --compare precision): pong-fast's update several times slower in bf16
than in fp32 (docs/results/2026-11-30-update-precision-avx2-2core-cpu.md). A recipe that asks for "auto" keeps
its speed on both kinds of machine."""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("learner")


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 at speed: a CUDA GPU that supports it, a CPU whose oneDNN has a bf16
    path (torch's own check: AVX-512 cores or newer), nothing else."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a build without oneDNN
            return False
    return False


def resolve_precision(requested: str, device: torch.device, native: bool) -> str:
    """The precision the update runs in: `requested` (ppo.update_precision), with auto resolved by `native`
    (native_bf16(device)). bf16 asked for where it is slow is kept, with a warning that says so."""
    if requested == "auto":
        chosen = "bf16" if native else "fp32"
        log.info("update precision %s (ppo.update_precision auto: %s bfloat16 on %s)", chosen,
                 "native" if native else "no fast", device.type)
        return chosen
    if requested == "bf16" and not native:
        log.warning("ppo.update_precision bf16 on a %s without fast bfloat16: the update can run several times "
                    "slower than fp32 here; set ppo.update_precision = \"auto\" (or \"fp32\")", device.type)
    return requested
