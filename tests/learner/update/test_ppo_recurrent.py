"""PPO over sequences with a recurrent core (issue 63): a rollout acted slot by slot through Inference (the
state gathered, reset and scattered as the collector does) becomes a batch of sequences; the update's
minibatches are whole sequences, and its exact-replay check recomputes what the acting policy gave, unless a
reset or a state is wrong."""
import copy

import numpy as np
import pytest
import torch

from learner.advantages.batch import empty_batch, rollout_to_batch
from learner.collection.inference import Inference
from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec
from tests.learner.update.test_ranks_weighting import on_ranks

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=3)
T, N = 8, 4
SLOTS = [2, 5, 6, 9]


def acted_rollout(core="lstm", bptt=0, dead=None, seed=0, switch_at=None, obs_space=OBS):
    """T steps of N env slots (two rollouts: the second's columns start from the first's states), episodes
    ending at random; `dead`: a column whose actor vanishes after 5 steps of the second rollout; `switch_at`
    (policy lag): at that step of the second rollout the policy follows newer weights (version 1), as when the
    update that ran meanwhile is done, and the model returned holds them. `obs_space`: vectors, or uint8 images."""
    torch.manual_seed(seed)
    model = build_model(obs_space, ACT, ModelConfig(core=core, core_size=8))
    policy = Inference(model, ACT, torch.device("cpu"), None, seed=seed)
    images = obs_space.dtype == "uint8"
    shape = tuple(obs_space.shape)
    layout = Layout(shape, torch.uint8 if images else torch.float32, (), torch.long, state_size=model.state_size,
                    bptt=bptt)
    rng = np.random.default_rng(seed)

    def observe(n):
        if images:
            return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
        return rng.normal(size=(n, *shape)).astype(np.float32)
    starts = np.ones(N, bool)  # a join
    for r in range(2):
        buf = RolloutBuffer(SLOTS, T, layout, "cpu")
        buf.set_version(0)
        cols = list(range(N))
        for t in range(T):
            if r == 1 and t == switch_at:
                policy.follow(moved(model))
                buf.set_version(1)
            live = [c for c in cols if not (r == 1 and c == dead and t >= 5)]
            obs = observe(len(live))
            result = policy.act([obs], np.array([SLOTS[c] for c in live]), starts[live])
            for i, c in enumerate(live):
                buf.record_actions([c], obs[i:i + 1], result.actions[i:i + 1], result.logprobs[i:i + 1],
                                   result.values[i:i + 1], starts[c:c + 1], result.states[i:i + 1])
            ended = rng.random(N) < 0.2
            for c in live:
                buf.record_outcome([c], rng.normal(size=1).astype(np.float32), ended[c:c + 1], np.zeros(1, bool))
            starts = ended
        if dead is not None and r == 1:
            buf.mark_dead(dead)
        for c in range(N):
            if not buf.dead[c]:
                buf.bootstrap_obs[c] = observe(1)[0]
                buf.bootstrap_states[c] = policy.states_of([SLOTS[c]])[0] * (not starts[c])
    return model, policy, buf


def moved(model):
    """The model's weights after an update: a copy, each weight moved."""
    newer = copy.deepcopy(model)
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return newer


def update_once(model, policy, buf, policy_lag=False, version=None, **ppo):
    cfg = PPOConfig(update_epochs=1, num_minibatches=2, **ppo)
    batch = rollout_to_batch(buf, policy.value, 0.99, 0.95, keep_gae_inputs=(
        (lambda x: torch.as_tensor(x)) if ppo.get("lag_fresh_advantages") else None))
    updater = PPOUpdater(model, cfg, "cpu", policy_lag=policy_lag)
    return updater.update(batch.data, 0.0, torch.Generator().manual_seed(0), version), batch


@pytest.mark.parametrize("core, bptt", [("lstm", 0), ("gru", 4), ("lstm", 2)])
def test_the_update_replays_exactly_what_the_acting_policy_gave(core, bptt):
    model, policy, buf = acted_rollout(core, bptt)
    assert buf.starts.any() and buf.states[0].abs().sum() > 0  # resets inside, and states carried in from before
    stats, batch = update_once(model, policy, buf)
    assert batch.data["sequences"].count() == N * T // (bptt or T)
    assert stats["replay_logprob_max_diff"] < 1e-5 and stats["replay_value_max_diff"] < 1e-5, stats
    assert np.isfinite(stats["loss"]) and stats["minibatches"] == 2


def test_under_bf16_updates_the_replay_is_still_exact_in_float32():
    """ppo.update_precision bf16 (pong-lstm): the update's passes run under autocast, but the replay, which only
    checks, runs in float32 as the acting policy did (under bf16 its differences were ~1e-2 on Pong)."""
    model, policy, buf = acted_rollout("lstm", obs_space=SpaceSpec(kind="box", shape=(36, 36), dtype="uint8"))
    stats, _ = update_once(model, policy, buf, update_precision="bf16")
    assert stats["replay_logprob_max_diff"] < 1e-5 and stats["replay_value_max_diff"] < 1e-5, stats


@pytest.mark.parametrize("broken", ["no_resets", "zero_states", "shifted_resets"])
def test_the_replay_check_sees_a_wrong_reset_or_state(broken):
    """The check is the test of the resets: a collector that forgot them, or kept the wrong states, shows."""
    model, policy, buf = acted_rollout("lstm", 4)
    if broken == "no_resets":
        buf.starts.zero_()
    elif broken == "zero_states":
        buf.states.zero_()
    else:
        buf.starts.copy_(torch.roll(buf.starts, 1, dims=0))
    stats, _ = update_once(model, policy, buf)
    assert stats["replay_logprob_max_diff"] > 1e-3 or stats["replay_value_max_diff"] > 1e-3, stats


def test_a_vanished_actors_steps_are_masked_out_of_sequences_and_replay():
    model, policy, buf = acted_rollout("gru", 4, dead=1)
    stats, batch = update_once(model, policy, buf)
    assert batch.n_valid == T * N - (T - 5) - 1  # its last acted step has no outcome's successor: cut too
    seq = batch.data["sequences"]
    assert int(seq.valid.sum()) == batch.n_valid and int((seq.sample >= 0).sum()) == batch.n_valid
    assert stats["replay_logprob_max_diff"] < 1e-5 and np.isfinite(stats["loss"]), stats


def test_minibatches_are_whole_sequences():
    """Sequence s is column s % N from step (s // N) * bptt: its steps, time-major, and its first state."""
    _, policy, buf = acted_rollout("lstm", 4)
    seq = rollout_to_batch(buf, policy.value, 0.99, 0.95).data["sequences"]
    part = seq.part(torch.tensor([5, 2]))  # column 1 from step 4, column 2 from step 0
    obs = buf.obs
    expected = torch.stack([torch.stack([obs[4 + j, 1], obs[j, 2]]) for j in range(4)]).flatten(0, 1)
    assert torch.equal(part.obs, expected)
    assert torch.equal(part.state, torch.stack([buf.states[1, 1], buf.states[0, 2]]))
    assert torch.equal(part.starts, torch.stack([torch.stack([buf.starts[4 + j, 1], buf.starts[j, 2]])
                                                 for j in range(4)]).flatten())
    assert torch.equal(part.rows, torch.tensor([(4 + j) * N + 1 if b == 0 else j * N + 2
                                                for j in range(4) for b in range(2)]))


def exact_by_hand(buf, length: int) -> list[bool]:
    """Each sample (step-major) that version 1 acted since its sequence or episode began: a loop per column."""
    exact = np.zeros((T, N), bool)
    for c in range(N):
        chain = True
        for t in range(T):
            if t % length == 0 or buf.starts[t, c]:
                chain = True
            chain = chain and int(buf.versions[t, c]) == 1
            exact[t, c] = chain
    return exact[buf.valid_mask().numpy()].tolist()


@pytest.mark.parametrize("core, bptt, fresh", [("lstm", 4, False), ("gru", 0, True), ("lstm", 2, False)])
def test_under_policy_lag_the_replay_is_exact_for_the_samples_the_starting_weights_acted(core, bptt, fresh):
    """Newer weights serve from step 3 of the rollout on, the states kept: the update, starting from them, replays
    each sequence from the stored (older) states; the samples acted by its own weights since their sequence or
    episode began replay exactly, and the metric covers those, no others (the lag's distance on the rest)."""
    model, policy, buf = acted_rollout(core, bptt, switch_at=3)
    assert buf.versions[:3].eq(0).all() and buf.versions[3:].eq(1).all()
    stats, batch = update_once(model, policy, buf, policy_lag=True, version=1, lag_fresh_advantages=fresh)
    exact = exact_by_hand(buf, bptt or T)
    assert batch.data["sequences"].acted_by(1).tolist() == exact
    assert 0 < sum(exact) < len(exact) and stats["replay_samples"] == sum(exact)
    assert stats["replay_logprob_max_diff"] < 1e-5 and stats["replay_value_max_diff"] < 1e-5, stats
    assert np.isfinite(stats["loss"]) and stats["minibatches"] == 2
    everything, _ = update_once(*acted_rollout(core, bptt, switch_at=3), policy_lag=True)  # no version: all samples
    assert everything["replay_samples"] == len(exact) and everything["replay_logprob_max_diff"] > 1e-3, everything


@pytest.mark.parametrize("second", ["broken", "empty"])
def test_on_several_ranks_the_replay_is_the_jobs_and_a_rank_without_samples_takes_part(second):
    """Ranks simulated by threads: each updates on its own sequences with the gradients averaged; the replay
    metric is the largest difference on any rank (rank 1's wrong states show in rank 0's line), its samples
    every rank's; a rank with no actors (an empty batch) takes part in the same collectives."""
    rollouts = [acted_rollout("lstm", 4, seed=0), acted_rollout("lstm", 4, seed=0)]  # the same start weights
    if second == "broken":
        rollouts[1][2].states.zero_()
    batches = [rollout_to_batch(buf, policy.value, 0.99, 0.95).data for _, policy, buf in rollouts]
    if second == "empty":
        batches[1] = empty_batch(rollouts[1][2].layout, "cpu")
    cfg = PPOConfig(update_epochs=1, num_minibatches=2)

    def work(ranks):
        model = rollouts[ranks.rank][0]
        stats = PPOUpdater(model, cfg, "cpu", ranks=ranks).update(batches[ranks.rank], 0.0,
                                                                  torch.Generator().manual_seed(0), version=0)
        return stats, torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    (first, weights0), (other, weights1) = on_ranks(2, work)
    assert torch.equal(weights0, weights1)
    for key in ("replay_logprob_max_diff", "replay_value_max_diff", "replay_samples"):
        assert first[key] == other[key], key
    assert first["replay_samples"] == T * N * (2 if second == "broken" else 1)
    if second == "broken":
        assert first["replay_logprob_max_diff"] > 1e-4 or first["replay_value_max_diff"] > 1e-3, first
    else:
        assert first["replay_logprob_max_diff"] < 1e-5, first
