"""The rollout buffer: per-column time indices, truncation bootstraps, and cutting a dead actor's column."""
import numpy as np
import torch

from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout

LAYOUT = Layout((2,), torch.float32, (), torch.long)

def make(n=3, T=4):
    return RolloutBuffer(list(range(10, 10 + n)), T, LAYOUT, torch.device("cpu"))


def step(buf, cols, t_obs_value, reward, term=False, trunc=False):
    k = len(cols)
    buf.record_actions(cols, torch.full((k, 2), float(t_obs_value)), torch.zeros(k, dtype=torch.long),
                       torch.zeros(k), torch.full((k,), float(t_obs_value)))
    buf.record_outcome(cols, np.full(k, reward, np.float32), np.full(k, term), np.full(k, trunc))


def test_complete_rollout_next_values_and_truncation_bootstrap():
    buf = make(n=2, T=3)
    for t in range(3):  # value of obs t is t + 1 in both columns
        step(buf, [0, 1], t + 1, reward=1.0, trunc=(t == 1))
    assert not buf.is_complete()
    buf.bootstrap_obs[0] = torch.full((2,), 9.0)
    buf.bootstrap_obs[1] = torch.full((2,), 9.0)
    buf.final_obs[(1, 1)] = torch.full((2,), 7.0)  # column 1 was truncated at step 1
    assert buf.is_complete()
    out = buf.finish(lambda obs: obs[:, 0] * 10)  # V(x) = 10 x: distinguishable from stored values
    assert out["valid"].all()
    # next_values[t] = values[t+1], except t = T-1 (bootstrap obs) and the truncated step (its final obs)
    assert buf.next_values[:, 0].tolist() == [2.0, 3.0, 90.0]
    assert buf.next_values[:, 1].tolist() == [2.0, 70.0, 90.0]
    assert out["dones"][:, 1].tolist() == [False, True, False]


def test_dead_column_is_cut_after_its_last_completed_step():
    buf = make(n=2, T=4)
    for t in range(2):
        step(buf, [0, 1], t + 1, reward=1.0)
    # column 1's actor got actions for step 2 and then vanished; column 0 goes on to the end
    buf.record_actions([1], torch.full((1, 2), 3.0), torch.zeros(1, dtype=torch.long), torch.zeros(1), torch.full((1,), 3.0))
    buf.mark_dead(1)
    for t in range(2, 4):
        step(buf, [0], t + 1, reward=1.0)
    buf.bootstrap_obs[0] = torch.full((2,), 9.0)
    assert buf.is_complete()
    out = buf.finish(lambda obs: obs[:, 0])
    assert out["valid"][:, 0].all()
    assert out["valid"][:, 1].tolist() == [True, True, False, False], "no sample after the last completed step"
    # its last completed step (1) becomes a truncation bootstrapped from V(obs 2) = 3, inferred before it died
    assert out["dones"][1, 1] and buf.truncated[1, 1] and not buf.terminated[1, 1]
    assert buf.next_values[1, 1] == 3.0


def test_column_dead_before_any_step_is_fully_masked():
    buf = make(n=2, T=2)
    buf.mark_dead(1)
    for t in range(2):
        step(buf, [0], t, reward=0.0)
    buf.bootstrap_obs[0] = torch.zeros(2)
    assert buf.is_complete()
    out = buf.finish(lambda obs: obs[:, 0])
    assert out["valid"][:, 1].sum() == 0 and out["valid"][:, 0].all()


def test_non_contiguous_columns_are_written_to_the_right_place():
    buf = make(n=3, T=1)
    buf.obs.fill_(-1.0)  # storage starts undefined (only valid steps are read): mark it to see what is written
    buf.record_actions([0, 2], torch.tensor([[1.0, 1.0], [2.0, 2.0]]), torch.tensor([4, 5]), torch.zeros(2),
                       torch.tensor([0.5, 0.7]))
    assert buf.obs[0, :, 0].tolist() == [1.0, -1.0, 2.0]
    assert buf.actions[0].tolist() == [4, 0, 5]
    assert buf.acted == [1, 0, 1]


def test_writes_land_in_host_memory_by_slices_contiguous_or_not():
    buf = make(n=3, T=2)
    for cols in ([0, 1], [2]), ([0, 2], [1]):  # contiguous and not
        for group in cols:
            k = len(group)
            obs = np.arange(2 * k, dtype=np.float32).reshape(k, 2) + 10 * group[0]
            buf.record_actions(group, obs, np.array(group), np.zeros(k, np.float32), np.full(k, 0.5, np.float32))
            buf.record_outcome(group, np.full(k, 1.5, np.float32), np.array([True] * k), np.zeros(k, bool))
    assert buf.obs[1, :, 0].tolist() == [0.0, 10.0, 2.0] and buf.actions[1].tolist() == [0, 1, 2]
    assert buf.values.eq(0.5).all() and buf.rewards.eq(1.5).all() and buf.terminated.all()


def test_dead_column_whose_last_step_was_a_truncation_keeps_the_final_obs_bootstrap():
    buf = make(n=2, T=4)
    for t in range(2):
        step(buf, [0, 1], t + 1, reward=1.0, trunc=(t == 1))
    buf.final_obs[(1, 1)] = torch.full((2,), 7.0)  # the env truncated column 1 at step 1 ...
    buf.record_actions([1], torch.full((1, 2), 3.0), torch.zeros(1, dtype=torch.long), torch.zeros(1),
                       torch.full((1,), 3.0))  # ... was served for the reset obs, then its actor vanished
    buf.mark_dead(1)
    for t in range(2, 4):
        step(buf, [0], t + 1, reward=1.0)
    buf.bootstrap_obs[0] = torch.full((2,), 9.0)
    out = buf.finish(lambda obs: obs[:, 0] * 10)
    assert out["valid"][:, 1].tolist() == [True, True, False, False]
    assert buf.next_values[1, 1] == 70.0, "V(final obs before the truncation), not V(the reset obs)"
    assert out["dones"][1, 1] and not buf.terminated[1, 1]


def test_dead_column_whose_next_obs_was_never_inferred_drops_that_step():
    buf = make(n=2, T=4)
    for t in range(3):  # column 1 completes steps 0..2; its obs after step 2 never reached inference
        step(buf, [0, 1], t + 1, reward=1.0)
    buf.mark_dead(1)
    step(buf, [0], 4, reward=1.0)
    buf.bootstrap_obs[0] = torch.full((2,), 9.0)
    out = buf.finish(lambda obs: obs[:, 0])
    # step 2 has no known bootstrap (0 would make it a termination): masked out; step 1 is cut as a
    # truncation bootstrapped from V(obs 2) = 3, which was inferred
    assert out["valid"][:, 1].tolist() == [True, True, False, False]
    assert out["dones"][1, 1] and buf.truncated[1, 1] and not buf.terminated[1, 1]
    assert buf.next_values[1, 1] == 3.0
    assert not buf.terminated[:, 1].any()


def test_dead_column_at_full_length_without_bootstrap_drops_its_last_step():
    buf = make(n=1, T=3)
    for t in range(3):
        step(buf, [0], t + 1, reward=1.0)
    buf.mark_dead(0)  # gone after its last outcome, before its bootstrap obs was inferred
    out = buf.finish(lambda obs: obs[:, 0])
    assert out["valid"][:, 0].tolist() == [True, True, False]
    assert out["dones"][1, 0] and buf.next_values[1, 0] == 3.0


def test_dead_column_ending_in_a_termination_is_kept_as_it_is():
    buf = make(n=1, T=3)
    step(buf, [0], 1, reward=1.0)
    step(buf, [0], 2, reward=5.0, term=True)
    buf.mark_dead(0)
    out = buf.finish(lambda obs: obs[:, 0])
    assert out["valid"][:, 0].tolist() == [True, True, False]
    assert buf.terminated[1, 0] and not buf.truncated[1, 0]


def test_host_device_copies_per_rollout_do_not_grow_with_the_messages():
    """Messages write host memory only; the device sees one copy in and one out per inference batch, and
    the finished rollout once (one copy per array, one batch of bootstrap observations), whatever T is."""
    from learner.advantages.batch import rollout_to_batch
    from learner.collection.inference import Inference
    from learner.config import ModelConfig
    from learner.model.networks import build_model
    from learner.rollout.link import DeviceLink
    from protocol.spaces import SpaceSpec
    obs_space, act_space = SpaceSpec(kind="box", shape=(2,), dtype="float32"), SpaceSpec(kind="discrete", n=3)
    model = build_model(obs_space, act_space, ModelConfig(hidden=8))
    per_rollout = []
    for T in (4, 32):
        link = DeviceLink("cpu")
        inference = Inference(model, act_space, torch.device("cpu"), None, seed=0, link=link)
        buf = RolloutBuffer([0, 1, 2, 3], T, LAYOUT, torch.device("cpu"), link=link)
        rng = np.random.default_rng(T)
        for t in range(T):
            obs = rng.standard_normal((4, 2)).astype(np.float32)
            result = inference.act([obs[:2], obs[2:]])  # both groups (two messages) in one batch
            for group in ([0, 1], [2, 3]):
                s = slice(group[0], group[-1] + 1)
                buf.record_actions(group, obs[s], result.actions[s], result.logprobs[s], result.values[s])
                buf.record_outcome(group, np.ones(2, np.float32), np.zeros(2, bool), np.zeros(2, bool))
        for col in range(4):
            buf.bootstrap_obs[col] = rng.standard_normal(2).astype(np.float32)
        assert (link.to_device_copies, link.to_host_copies) == (T, T), "one copy each way per inference batch"
        batch = rollout_to_batch(buf, inference.value, 0.99, 0.95)
        assert batch.n_valid == 4 * T
        per_rollout.append((link.to_device_copies - T, link.to_host_copies - T))
    assert per_rollout[0] == per_rollout[1] == (10, 1), per_rollout  # 8 arrays + valid + bootstrap batch; values back


def test_a_recurrent_rollout_keeps_the_acting_weights_version_of_every_step():
    """Said when the rollout opens and when newer weights serve (policy lag), never per message: each column's
    steps acted so far keep their version, those still to come take the new one."""
    buf = RolloutBuffer([3, 4, 5], 4, Layout((2,), torch.float32, (), torch.long, state_size=2), torch.device("cpu"))
    buf.set_version(7)
    for cols in ([0, 1, 2], [0, 1], [0]):
        buf.record_actions(cols, np.zeros((len(cols), 2), np.float32), np.zeros(len(cols), np.int64),
                           np.zeros(len(cols), np.float32), np.zeros(len(cols), np.float32), np.zeros(len(cols), bool),
                           np.zeros((len(cols), 2), np.float32))
    buf.set_version(8)  # column 0 has acted 3 steps, column 1 two, column 2 one
    assert buf.versions.t().tolist() == [[7, 7, 7, 8], [7, 7, 8, 8], [7, 8, 8, 8]]
    plain = make()
    plain.set_version(8)  # feed-forward: nothing kept
    assert not hasattr(plain, "versions")
