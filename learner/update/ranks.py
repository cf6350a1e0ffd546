"""Everything that makes a learner one rank of a data-parallel job, in one place, on torch.distributed.

Each rank collects its own rollout from its own actors and computes its own GAE; the ranks then run the
same epochs and minibatches, and before every optimizer step the gradients are averaged across ranks,
weighted by the samples each rank contributed to that minibatch (a rank with no actors takes part with
weight 0, so nobody waits on it). Weights start identical (broadcast from rank 0) and stay bit-identical:
every rank applies the same averaged gradient. The job's statistics (env steps, episodes, losses) are
summed or pooled here too.

`Ranks.single()` is the 1-rank case: every method is then a no-op or an identity, so the learner's loop
reads the same with or without torch.distributed. The job is started by launch.py (`--learners G`),
torchrun or srun; the rank comes from the usual environment variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, LOCAL_RANK). Collectives time out after `timeout_s`, so a dead rank stops the others.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("learner")
ADDRESS_BYTES = 512  # an endpoint string, padded, for all_gather (no pickled objects on the wire)
PAIRS_ROOM = 128  # (x, y) pairs (finished episodes) that ride with the metrics line's counts in one collective


def _collective(method):
    """A failed or timed-out collective means a lost rank: one clear error, not a torch traceback.

    Every collective inside is started with async_op=True and waited on here (`Ranks._wait`, with the
    collective timeout): with NCCL a plain call only enqueues the work, and its failure would surface
    later, outside this wrapper (at a host read, or as NCCL's watchdog abort)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except RuntimeError as exc:  # DistBackendError, DistNetworkError, gloo's "Connection closed by peer"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RanksLost(f"learner rank {self.rank} of {self.world}: a collective ({method.__name__}) failed, "
                            f"another rank died or stopped answering: {first}") from None
    return wrapper


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")  # where collectives run (NCCL: the rank's GPU)
    timeout_s: float = 300.0  # each collective's wait (cluster.collective_timeout_s)
    # the collectives (all_reduce, all_gather, broadcast, barrier, with torch.distributed's signatures): the
    # default process group; unit tests pass ranks simulated in threads (tests/learner/update/test_ranks.py)
    comm: Any = dist

    @staticmethod
    def single() -> "Ranks":
        return Ranks()

    @staticmethod
    def from_env(device: torch.device, timeout_s: float) -> "Ranks":
        """Join the job the environment describes (torchrun, srun, launch.py --learners); 1 rank without one."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return Ranks.single()
        if not dist.is_initialized():
            backend = "nccl" if device.type == "cuda" else "gloo"
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
        ranks = Ranks(dist.get_rank(), dist.get_world_size(), device, timeout_s)
        log.info("learner rank %d of %d (%s)", ranks.rank, ranks.world, dist.get_backend())
        return ranks

    def own_group(self) -> "Ranks":
        """The same ranks on a process group of their own (every rank calls this, in the same order): with
        policy lag the update's collectives run in its thread while the training thread's run in theirs, and
        two threads on one group would interleave their collectives differently on each rank."""
        if not self.distributed:
            return self
        group = dist.new_group(timeout=datetime.timedelta(seconds=self.timeout_s))
        return Ranks(self.rank, self.world, self.device, self.timeout_s, GroupComm(group))

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def _wait(self, work) -> None:
        """Block until an async collective is done: raises (inside the caller's wrapper) when it failed or
        took longer than timeout_s. An explicit timeout makes NCCL's wait block the host too."""
        work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))

    def close(self, clean: bool) -> None:
        """After a clean end every rank meets once more before the group is torn down (tearing it down while
        a peer is still mid-collective aborts gloo's threads); after a failure the peers may be gone, so the
        group is left to the process exit."""
        if self.distributed and dist.is_initialized() and clean:
            dist.barrier()
            dist.destroy_process_group()

    # -- sums, maxima, gathers of small numbers ---------------------------------------------------------
    def sum(self, values: list[float]) -> list[float]:
        if not self.distributed:
            return list(values)
        return self.sum_tensor(torch.tensor(values, dtype=torch.float64, device=self.device)).tolist()

    @_collective
    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """The sum over the ranks of a tensor that may stay on the device (no host read here)."""
        if not self.distributed:
            return t
        t = t.to(self.device, copy=True)
        self._wait(self.comm.all_reduce(t, async_op=True))
        return t

    @_collective
    def max_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """The maximum over the ranks of a tensor that may stay on the device."""
        if not self.distributed:
            return t
        t = t.to(self.device, copy=True)
        self._wait(self.comm.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True))
        return t

    @_collective
    def any(self, flag: bool) -> bool:
        if not self.distributed:
            return flag
        t = torch.tensor([int(flag)], dtype=torch.int64, device=self.device)
        self._wait(self.comm.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True))
        return bool(t.item())

    @_collective
    def gather_ints(self, value: int) -> list[int]:
        """Every rank's value, in rank order."""
        return [row[0] for row in self._gather_rows([value])]

    def _gather_rows(self, values: list[int]) -> list[list[int]]:
        if not self.distributed:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.int64, device=self.device)
        out = [torch.zeros_like(mine) for _ in range(self.world)]
        self._wait(self.comm.all_gather(out, mine, async_op=True))
        return [t.tolist() for t in out]

    @_collective
    def gather_pairs(self, pairs: list[tuple[float, float]], counts: list[int] | None = None
                     ) -> list[tuple[float, float]]:
        """Concatenate every rank's list of (x, y) pairs, in rank order (e.g. finished episodes). `counts`: every
        rank's len(pairs), if already gathered (else one more collective gathers them)."""
        if not self.distributed:
            return list(pairs)
        counts = [row[0] for row in self._gather_rows([len(pairs)])] if counts is None else counts
        width = max(max(counts), 1)
        mine = torch.zeros((width, 2), dtype=torch.float64, device=self.device)
        if pairs:
            mine[:len(pairs)] = torch.tensor(pairs, dtype=torch.float64)
        out = [torch.zeros_like(mine) for _ in range(self.world)]
        self._wait(self.comm.all_gather(out, mine, async_op=True))
        return [(float(x), float(y)) for t, n in zip(out, counts) for x, y in t[:n].tolist()]

    @_collective
    def gather_rows_and_pairs(self, values: list[int], pairs: list[tuple[float, float]], room: int = PAIRS_ROOM
                              ) -> tuple[list[list[int]], list[tuple[float, float]]]:
        """Every rank's `values` (int64s, as many on every rank), in rank order, and every rank's pairs concatenated
        in rank order (as gather_pairs), in one collective while no rank has more than `room` pairs (their float64
        bits ride in the row); a second collective gathers them when some rank has more. The metrics line after
        every update: its counts, the weights checksum and the finished episodes cost one round trip."""
        if not self.distributed:
            return [list(values)], list(pairs)
        packed = torch.zeros(2 * room, dtype=torch.float64)
        if fit := pairs[:room]:
            packed[:2 * len(fit)] = torch.tensor(fit, dtype=torch.float64).reshape(-1)
        width = len(values)
        rows = self._gather_rows(list(values) + [len(pairs)] + packed.view(torch.int64).tolist())
        counts = [row[width] for row in rows]
        if max(counts) > room:
            return [row[:width] for row in rows], self.gather_pairs(pairs, counts)
        gathered = []
        for row, n in zip(rows, counts):
            bits = torch.tensor(row[width + 1:width + 1 + 2 * n], dtype=torch.int64).view(torch.float64)
            gathered += [(float(x), float(y)) for x, y in bits.reshape(-1, 2).tolist()]
        return [row[:width] for row in rows], gathered

    @_collective
    def gather_strings(self, text: str) -> list[str]:
        """Every rank's string (an endpoint), in rank order."""
        if not self.distributed:
            return [text]
        raw = text.encode()
        if len(raw) > ADDRESS_BYTES:
            raise ValueError(f"{text!r} is longer than {ADDRESS_BYTES} bytes")
        mine = torch.zeros(ADDRESS_BYTES, dtype=torch.uint8, device=self.device)
        mine[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        out = [torch.zeros_like(mine) for _ in range(self.world)]
        self._wait(self.comm.all_gather(out, mine, async_op=True))
        return [bytes(t.cpu().tolist()).rstrip(b"\0").decode() for t in out]

    @_collective
    def store(self) -> dist.Store | None:
        """A key-value store every rank reaches, for what a collector's thread shares with the other ranks without a
        collective (learner/collection/ranks_quota.py): a TCPStore hosted by rank 0 on MASTER_ADDR, on a port the
        system picks and rank 0 hands to the others (a collective: every rank calls this). Its reads wait at
        most timeout_s. None with one rank."""
        if not self.distributed:
            return None
        host, timeout = os.environ.get("MASTER_ADDR", "127.0.0.1"), datetime.timedelta(seconds=self.timeout_s)
        server = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=timeout) if self.main else None
        port = self.gather_ints(server.port if server is not None else 0)[0]
        return server if server is not None else dist.TCPStore(host, port, is_master=False, timeout=timeout)

    # -- the model ----------------------------------------------------------------------------------------
    @_collective
    def broadcast_tensors(self, tensors: list[torch.Tensor]) -> None:
        """Overwrite every rank's tensors with rank 0's, in place."""
        if not self.distributed:
            return
        for t in tensors:
            buf = t.detach().to(self.device)
            self._wait(self.comm.broadcast(buf, src=0, async_op=True))
            if buf is not t:
                t.detach().copy_(buf)

    @_collective
    def broadcast_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Give every rank rank 0's Adam state (step counts and moments), e.g. after rank 0 resumed."""
        if not self.distributed:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        has_state = self.gather_ints(int(bool(optimizer.state)))[0]
        if not has_state:
            return
        for p in params:
            state = optimizer.state[p]
            if not state:  # this rank has not stepped: take rank 0's shapes
                state.update(step=torch.zeros((), dtype=torch.float32), exp_avg=torch.zeros_like(p),
                             exp_avg_sq=torch.zeros_like(p))
            self.broadcast_tensors([state["step"], state["exp_avg"], state["exp_avg_sq"]])

    @_collective
    def average_gradients(self, params: list[torch.nn.Parameter], weight: float) -> None:
        """grad <- sum over ranks of weight_r * grad_r, in one flat all-reduce.

        weight is this rank's share of the minibatch's samples (the weights of all ranks sum to 1), so the
        result is the gradient of the sample-weighted mean loss. A rank with no samples has no gradients
        and weight 0: it contributes zeros but still takes part."""
        if not self.distributed:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]).to(self.device) * weight
        self._wait(self.comm.all_reduce(flat, async_op=True))
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).to(p.device)
            offset += n


class GroupComm:
    """torch.distributed's collectives (as Ranks calls them) on one process group of every rank."""

    def __init__(self, group):
        self.group = group

    def all_reduce(self, t, op=dist.ReduceOp.SUM, async_op=False):
        return dist.all_reduce(t, op=op, group=self.group, async_op=async_op)

    def all_gather(self, out, t, async_op=False):
        return dist.all_gather(out, t, group=self.group, async_op=async_op)

    def broadcast(self, t, src, async_op=False):
        return dist.broadcast(t, src=src, group=self.group, async_op=async_op)


def env_rank() -> int:
    """This process's rank as the launcher set it (0 outside a multi-rank job)."""
    return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


class RanksLost(Exception):
    """A collective failed or timed out: another rank died or hangs. The job stops with this error."""


def checksum(module: torch.nn.Module) -> str:
    """A hash of the weights' bytes: equal on every rank exactly when the weights are bit-identical. The bytes
    are hashed where they lie (a host tensor's own memory, no copy): 3.6 ms for the Nature CNN on 2 cores,
    against 9-18 ms with a bytes copy of each parameter (it runs after every update of a multi-rank job)."""
    digest = hashlib.sha1()
    for p in module.parameters():
        digest.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()[:16]


def checksum_to_int(text: str) -> int:
    """A checksum's 64 bits as an int64 (to gather it with other counts); checksum_from_int reverses it."""
    return int(text, 16) - 2**63


def checksum_from_int(value: int) -> str:
    return f"{value + 2**63:016x}"
