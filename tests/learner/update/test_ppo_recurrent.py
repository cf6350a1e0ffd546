"""PPO over sequences with a recurrent core (issue 63): a rollout acted slot by slot through Inference (the
state gathered, reset and scattered as the collector does) becomes a batch of sequences; the update's
minibatches are whole sequences, and its exact-replay check recomputes what the acting policy gave, unless a
reset or a state is wrong."""
import numpy as np
import pytest
import torch

from learner.advantages.batch import rollout_to_batch
from learner.collection.inference import Inference
from learner.config import ModelConfig, PPOConfig
from learner.model.networks import build_model
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

OBS = SpaceSpec(kind="box", shape=(3,), dtype="float32")
ACT = SpaceSpec(kind="discrete", n=3)
T, N = 8, 4
SLOTS = [2, 5, 6, 9]


def acted_rollout(core="lstm", bptt=0, dead=None, seed=0):
    """T steps of N env slots (two rollouts: the second's columns start from the first's states), episodes
    ending at random; `dead`: a column whose actor vanishes after 5 steps of the second rollout."""
    torch.manual_seed(seed)
    model = build_model(OBS, ACT, ModelConfig(core=core, core_size=8))
    policy = Inference(model, ACT, torch.device("cpu"), None, seed=seed)
    layout = Layout((3,), torch.float32, (), torch.long, state_size=model.state_size, bptt=bptt)
    rng = np.random.default_rng(seed)
    starts = np.ones(N, bool)  # a join
    for r in range(2):
        buf = RolloutBuffer(SLOTS, T, layout, "cpu")
        cols = list(range(N))
        for t in range(T):
            live = [c for c in cols if not (r == 1 and c == dead and t >= 5)]
            obs = rng.normal(size=(len(live), 3)).astype(np.float32)
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
                buf.bootstrap_obs[c] = rng.normal(size=3).astype(np.float32)
                buf.bootstrap_states[c] = policy.states_of([SLOTS[c]])[0] * (not starts[c])
    return model, policy, buf


def update_once(model, policy, buf, **ppo):
    cfg = PPOConfig(update_epochs=1, num_minibatches=2, **ppo)
    batch = rollout_to_batch(buf, policy.value, 0.99, 0.95)
    return PPOUpdater(model, cfg, "cpu").update(batch.data, 0.0, torch.Generator().manual_seed(0)), batch


@pytest.mark.parametrize("core, bptt", [("lstm", 0), ("gru", 4), ("lstm", 2)])
def test_the_update_replays_exactly_what_the_acting_policy_gave(core, bptt):
    model, policy, buf = acted_rollout(core, bptt)
    assert buf.starts.any() and buf.states[0].abs().sum() > 0  # resets inside, and states carried in from before
    stats, batch = update_once(model, policy, buf)
    assert batch.data["sequences"].count() == N * T // (bptt or T)
    assert stats["replay_logprob_max_diff"] < 1e-5 and stats["replay_value_max_diff"] < 1e-5, stats
    assert np.isfinite(stats["loss"]) and stats["minibatches"] == 2


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
