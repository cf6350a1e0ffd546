"""Data-parallel PPO on a real gloo process group of 2 processes: the gradient all-reduce and the update."""
from __future__ import annotations

import datetime
import multiprocessing as mp

import numpy as np
import pytest
import torch
import torch.distributed as dist

from learner.config import ModelConfig, PPOConfig
from learner.distributed import Ranks, checksum
from learner.model import build_model
from learner.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

OBS, ACT = SpaceSpec(kind="box", shape=(4,), dtype="float32"), SpaceSpec(kind="discrete", n=3)
SIZES = (3, 5)  # samples per rank


def model():
    torch.manual_seed(0)
    return build_model(OBS, ACT, ModelConfig(hidden=8))


def data(rank: int, n: int | None = None):
    g = torch.Generator().manual_seed(100 + rank)
    n = SIZES[rank] if n is None else n
    return {"obs": torch.randn(n, 4, generator=g), "actions": torch.randint(0, 3, (n,), generator=g),
            "logprobs": torch.full((n,), -1.0986), "values": torch.randn(n, generator=g),
            "advantages": torch.randn(n, generator=g), "returns": torch.randn(n, generator=g)}


def loss_of(net, batch):
    logp, ent, v = net.evaluate(batch["obs"], batch["actions"])
    return (-(logp * batch["advantages"]) + (v - batch["returns"]).pow(2) - 0.01 * ent).mean()


def _worker(rank: int, store: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        ranks = Ranks(rank, 2)
        net = model()
        loss_of(net, data(rank)).backward()
        params = list(net.parameters())
        ranks.average_gradients(params, SIZES[rank] / sum(SIZES))
        np.save(f"{out_dir}/grads_{rank}.npy", torch.cat([p.grad.reshape(-1) for p in params]).numpy())
        net = model()  # then two updates: rank 1 has no samples in the first, both have some in the second
        updater = PPOUpdater(net, PPOConfig(update_epochs=2, num_minibatches=2), "cpu", ranks=ranks)
        gen = torch.Generator().manual_seed(7 + rank)
        updater.update(data(rank, 6 if rank == 0 else 0), 0.0, gen)
        np.save(f"{out_dir}/after_first_{rank}.npy", torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy())
        updater.update(data(rank, 6 + rank), 0.5, gen)
        with open(f"{out_dir}/checksum_{rank}", "w") as f:
            f.write(checksum(net))
    finally:
        dist.barrier()  # both ranks done before the group is torn down
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory):
    """One real 2-rank job for every test in this file (starting processes is the slow part)."""
    tmp_path = tmp_path_factory.mktemp("ranks")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, str(tmp_path / "store"), str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(120)
            assert p.exitcode == 0, f"rank process exit code {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    return tmp_path


def test_averaged_gradients_are_the_sample_weighted_mean_of_the_ranks(ranks_dir):
    tmp_path = ranks_dir
    reference = []
    for rank in range(2):  # each rank's own mean-loss gradient, weighted by its share of the samples
        net = model()
        loss_of(net, data(rank)).backward()
        reference.append(torch.cat([p.grad.reshape(-1) for p in net.parameters()]) * SIZES[rank] / sum(SIZES))
    expected = (reference[0] + reference[1]).numpy()
    # the same thing: the gradient of the mean loss over all samples pooled
    pooled = model()
    loss_of(pooled, {k: torch.cat([data(0)[k], data(1)[k]]) for k in data(0)}).backward()
    np.testing.assert_allclose(expected, torch.cat([p.grad.reshape(-1) for p in pooled.parameters()]).numpy(),
                               rtol=1e-5, atol=1e-6)
    for rank in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"grads_{rank}.npy"), expected, rtol=1e-5, atol=1e-6)


def test_a_rank_without_samples_takes_part_and_weights_stay_identical(ranks_dir):
    tmp_path = ranks_dir
    # with weight 0 on the empty rank, the first update is exactly a 1-rank update on rank 0's data
    net = model()
    PPOUpdater(net, PPOConfig(update_epochs=2, num_minibatches=2), "cpu").update(
        data(0, 6), 0.0, torch.Generator().manual_seed(7))
    single = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy()
    for rank in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"after_first_{rank}.npy"), single)
    sums = {(tmp_path / f"checksum_{r}").read_text() for r in range(2)}
    assert len(sums) == 1, "ranks diverged after an update on different data"
