"""Data-parallel PPO on a real gloo process group of 2 processes: the gradient all-reduce and the update."""
from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from learner.config import ModelConfig, PPOConfig
from learner.update.ranks import Ranks, RanksLost, checksum
from learner.model.networks import build_model
from learner.update.ppo import PPOUpdater, explained_variance
from protocol.spaces import SpaceSpec

pytestmark = pytest.mark.integration  # real gloo groups of 2 spawned processes

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
        _tear_down(rank, out_dir)


def _tear_down(rank: int, out_dir: str) -> None:
    dist.barrier()  # both ranks done before the group is torn down
    Path(out_dir, f"met_{rank}").touch()  # past the last collective: whatever follows is gloo's teardown
    dist.destroy_process_group()


def _spawn(target, tmp_path, timeout_s: float = 120) -> list[int]:
    """The ranks' exit codes. A rank that met the other at the end and then died of SIGABRT counts as 0: gloo's
    I/O thread can throw an uncaught IoException ("Connection closed by peer") when the peer tears the group
    down first (e.g. github.com/horovod/horovod/issues/2907); seen twice in CI, never before the last barrier."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, str(tmp_path / "store"), str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return [0 if p.exitcode == -signal.SIGABRT and (tmp_path / f"met_{r}").exists() else p.exitcode
            for r, p in enumerate(procs)]


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory):
    """One real 2-rank job for every test in this file (starting processes is the slow part)."""
    tmp_path = tmp_path_factory.mktemp("ranks")
    codes = _spawn(_worker, tmp_path)
    assert codes == [0, 0], f"rank process exit codes {codes}"
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


# -- job-wide statistics: pooled over the ranks' samples, as the gradients are -------------------------------
CLIP = 0.0036  # between the first minibatch's ratio deviations: 2 of rank 1's 3 samples clipped, none of rank 0's 2


def _stats_worker(rank: int, store: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        ranks = Ranks(rank, 2, timeout_s=60)
        batch = data(rank)
        ev = explained_variance(batch["values"], batch["returns"], ranks)
        cfg = PPOConfig(update_epochs=1, num_minibatches=2, clip_coef=CLIP)
        stats = PPOUpdater(model(), cfg, "cpu", ranks=ranks).update(batch, 0.0, torch.Generator().manual_seed(7 + rank))
        with open(f"{out_dir}/stats_{rank}.json", "w") as f:
            json.dump({"ev": float(ev), **stats}, f)
    finally:
        _tear_down(rank, out_dir)


def test_explained_variance_and_first_minibatch_statistics_are_the_jobs(tmp_path):
    assert _spawn(_stats_worker, tmp_path) == [0, 0]
    stats = [json.loads((tmp_path / f"stats_{r}.json").read_text()) for r in range(2)]
    values = np.concatenate([data(r)["values"].numpy() for r in range(2)]).astype(np.float64)
    returns = np.concatenate([data(r)["returns"].numpy() for r in range(2)]).astype(np.float64)
    expected_ev = 1 - np.var(returns - values) / np.var(returns)  # the pooled samples, by hand
    for s in stats:
        assert s["ev"] == pytest.approx(expected_ev, rel=1e-9)
        assert s["explained_variance"] == pytest.approx(expected_ev, rel=1e-9)
    # the first minibatch of each rank (its own permutation), evaluated with the starting weights
    devs, clipped = [], []
    for rank in range(2):
        batch = data(rank)
        perm = torch.randperm(SIZES[rank], generator=torch.Generator().manual_seed(7 + rank))
        idx = torch.tensor_split(perm, 2)[0]
        with torch.no_grad():
            new = model().evaluate(batch["obs"][idx], batch["actions"][idx])[0]
        ratio = (new - batch["logprobs"][idx]).double().exp().numpy()
        devs += list(np.abs(ratio - 1))
        clipped += list(np.abs(ratio - 1) > CLIP)
    assert np.mean(clipped) == pytest.approx(0.4), "2 of 5 pooled; rank 0 alone says 0, a mean of ranks 1/3"
    for s in stats:
        assert s["first_minibatch_ratio_max_dev"] == pytest.approx(max(devs), rel=1e-5)
        assert s["first_minibatch_clip_fraction"] == pytest.approx(np.mean(clipped), rel=1e-6)


# -- a collective that never completes fails inside its wrapper, at the collective timeout --------------------
def _silent_peer_worker(rank: int, store: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))  # the group's own timeout: far away
    store = dist.distributed_c10d._get_default_store()  # the rendezvous store, beside the group's own sockets
    if rank == 1:  # alive and connected, but never joins the collective: it waits (100 s at most) for rank 0
        store.wait(["done"], datetime.timedelta(seconds=100))
        os._exit(0)
    t0 = time.monotonic()
    try:
        Ranks(0, 2, timeout_s=2.0).gather_ints(1)
        result = "no error"
    except RanksLost as exc:
        result = str(exc)
    (Path(out_dir) / "result.json").write_text(json.dumps({"error": result, "after_s": time.monotonic() - t0}))
    store.set("done", "1")
    os._exit(0)


def test_a_collective_nobody_answers_raises_ranks_lost_naming_it_at_the_timeout(tmp_path):
    assert _spawn(_silent_peer_worker, tmp_path) == [0, 0]
    result = json.loads((tmp_path / "result.json").read_text())
    assert "a collective (gather_ints) failed" in result["error"], result
    assert "\n" not in result["error"]
    assert 1.5 <= result["after_s"] < 30, result  # the wrapper's wait (2 s), not the group's 120 s
