"""The ranks' gradient average, weighted by each rank's samples, without processes: ranks simulated by threads
of this process exchanging tensors (ThreadGroup), in place of torch.distributed's process group. The same rule on
real gloo processes: test_ranks.py (integration)."""
from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist

from learner.config import ModelConfig
from learner.model.networks import build_model
from learner.update.ranks import Ranks
from protocol.spaces import SpaceSpec

OBS, ACT = SpaceSpec(kind="box", shape=(4,), dtype="float32"), SpaceSpec(kind="discrete", n=3)


class Done:
    """A finished collective's handle."""

    def wait(self, timeout=None) -> bool:
        return True


class ThreadGroup:
    """`world` ranks as threads: every collective meets at a barrier, each rank reads all the ranks' tensors,
    and they meet again before the next collective may overwrite them."""

    def __init__(self, world: int):
        self.barrier = threading.Barrier(world, timeout=30)
        self.posted: list[torch.Tensor | None] = [None] * world

    def comm(self, rank: int) -> "RankComm":
        return RankComm(self, rank)


class RankComm:
    """One rank's view of a ThreadGroup, with torch.distributed's signatures for what Ranks calls."""

    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank = group, rank

    def _exchange(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.group.posted[self.rank] = tensor.detach().clone()
        self.group.barrier.wait()
        seen = list(self.group.posted)
        self.group.barrier.wait()
        return seen

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, async_op=False):
        seen = torch.stack(self._exchange(tensor))
        tensor.copy_(seen.amax(0) if op == dist.ReduceOp.MAX else seen.sum(0))
        return Done()

    def all_gather(self, out, tensor, async_op=False):
        for dst, src in zip(out, self._exchange(tensor)):
            dst.copy_(src)
        return Done()

    def broadcast(self, tensor, src, async_op=False):
        tensor.copy_(self._exchange(tensor)[src])
        return Done()


def on_ranks(world: int, work) -> list:
    """work(ranks) on `world` simulated ranks at once; each rank's result, in rank order."""
    group, results, errors = ThreadGroup(world), [None] * world, []

    def run(rank: int) -> None:
        try:
            results[rank] = work(Ranks(rank, world, comm=group.comm(rank)))
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a simulated rank hung"
    if errors:
        raise errors[0]
    return results


def model():
    torch.manual_seed(0)
    return build_model(OBS, ACT, ModelConfig(hidden=8))


def batch(n: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, 4, generator=g), "actions": torch.randint(0, 3, (n,), generator=g),
            "advantages": torch.randn(n, generator=g), "returns": torch.randn(n, generator=g)}


def loss_of(net, b) -> torch.Tensor:
    logp, ent, v = net.evaluate(b["obs"], b["actions"])
    return (-(logp * b["advantages"]) + (v - b["returns"]).pow(2) - 0.01 * ent).mean()


def pooled_gradient(batches) -> torch.Tensor:
    """The gradient of the mean loss over every rank's samples together, in one process."""
    net = model()
    loss_of(net, {k: torch.cat([b[k] for b in batches]) for k in batches[0]}).backward()
    return torch.cat([p.grad.reshape(-1) for p in net.parameters()])


def averaged_gradients(batches):
    """Each rank's gradient of its own mean loss, averaged by Ranks with its share of the samples as weight."""
    total = sum(len(b["obs"]) for b in batches)
    nets = [model() for _ in batches]  # here: the threads would race on torch's global seed

    def work(ranks: Ranks) -> torch.Tensor:
        net, mine = nets[ranks.rank], batches[ranks.rank]
        if len(mine["obs"]):
            loss_of(net, mine).backward()
        params = list(net.parameters())
        ranks.average_gradients(params, len(mine["obs"]) / total)
        return torch.cat([p.grad.reshape(-1) for p in params])
    return on_ranks(len(batches), work)


@pytest.mark.parametrize("sizes", [(3, 1), (2, 5, 1)])
def test_the_average_is_the_gradient_of_the_mean_loss_over_every_ranks_samples(sizes):
    """Ranks of unequal sizes: an unweighted mean of the ranks' gradients, or a sum, would differ."""
    batches = [batch(n, seed=10 + r) for r, n in enumerate(sizes)]
    grads = averaged_gradients(batches)
    torch.testing.assert_close(grads[0], pooled_gradient(batches), rtol=1e-5, atol=1e-7)
    assert all(torch.equal(g, grads[0]) for g in grads)  # every rank steps with the same gradient


def test_a_rank_without_samples_adds_nothing_but_takes_part():
    batches = [batch(4, seed=1), batch(0, seed=2)]
    grads = averaged_gradients(batches)
    torch.testing.assert_close(grads[1], pooled_gradient(batches[:1]), rtol=1e-5, atol=1e-7)
    assert torch.equal(grads[0], grads[1])
