"""Shards from K collector processes laid side by side: one rollout whose training batch is, column for
column, what each shard's rollout would have given on its own."""
import pickle

import numpy as np
import torch

from learner.advantages.batch import rollout_to_batch
from learner.collection.processes.shard import Shard, SharedRows, merge_shards, merged_slot
from learner.gateway.registry import MAX_ENV_SLOTS
from learner.rollout.buffer import RolloutBuffer
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink

T, LAYOUT = 4, Layout((1,), torch.float32, (), torch.long)


def shard_rollout(seed: int, n: int, rows=None) -> RolloutBuffer:
    """n columns with random values and rewards; column 0 truncated at t=1, the last one lost after 2 steps."""
    buf = RolloutBuffer(list(range(n)), T, LAYOUT, torch.device("cpu"), rows=rows)
    rng = np.random.default_rng(seed)
    for t in range(T):
        cols = list(range(n)) if t < 2 else list(range(n - 1))
        values = rng.normal(size=len(cols)).astype(np.float32)
        buf.record_actions(cols, values[:, None], np.full(len(cols), t), rng.normal(size=len(cols)).astype(np.float32),
                           values)
        truncated = np.array([t == 1 and c == 0 for c in cols])
        buf.record_outcome(cols, rng.normal(size=len(cols)).astype(np.float32), np.zeros(len(cols), bool), truncated)
    buf.final_obs[(1, 0)] = np.array([7.0 + seed], np.float32)
    for c in range(n - 1):
        buf.bootstrap_obs[c] = np.array([100.0 + 10 * seed + c], np.float32)
    buf.mark_dead(n - 1)
    buf.fresh.add(n - 1)
    return buf


def value_fn(obs):
    return torch.as_tensor(obs[:, 0])  # V(x) = x: every bootstrap is recognisable


def test_merged_batch_is_each_shards_batch_column_for_column():
    alone = [shard_rollout(1, 3), shard_rollout(2, 2)]
    _, rows = SharedRows(T, LAYOUT, policy_lag=False).take(5)  # what two collectors write their 3 and 2 columns into
    columns = [{name: t[:, a:b] for name, t in rows.items()} for a, b in ((0, 3), (3, 5))]
    shards = [Shard.of(k, shard_rollout(k + 1, n, rows=columns[k])) for k, n in ((0, 3), (1, 2))]
    merged = merge_shards(shards, T, LAYOUT, torch.device("cpu"), DeviceLink("cpu"), rows)
    assert merged.obs.data_ptr() == rows["obs"].data_ptr()  # no copy
    assert merged.slots == [0, 1, 2, MAX_ENV_SLOTS, MAX_ENV_SLOTS + 1] == [merged_slot(0, s) for s in range(3)] + \
        [merged_slot(1, s) for s in range(2)]
    assert merged.dead == [False, False, True, False, True] and merged.fresh == {2, 4}
    assert set(merged.bootstrap_obs) == {0, 1, 3} and set(merged.final_obs) == {(1, 0), (1, 3)}
    whole = rollout_to_batch(merged, value_fn, 0.9, 0.8)
    parts = [rollout_to_batch(buf, value_fn, 0.9, 0.8) for buf in alone]
    assert whole.n_valid == sum(p.n_valid for p in parts) and whole.width == 5
    # the merged batch is ordered t-major over all 5 columns: regroup each shard's rows to compare
    valid = merged.valid_mask()
    owner = torch.tensor([0, 0, 0, 1, 1]).expand(T, 5)[valid]
    for k, part in enumerate(parts):
        for key in ("obs", "advantages", "returns", "logprobs", "values", "actions"):
            torch.testing.assert_close(whole.data[key][owner == k], part.data[key])


RECURRENT = Layout((1,), torch.float32, (), torch.long, state_size=2)  # a recurrent core's rows too


def recurrent_shard(k: int, n: int, rows: dict) -> RolloutBuffer:
    """Collector k's n columns as its process fills them: each step's start flag and acting version, each
    sequence's first state, and the states of its bootstrap observations and of column 0's final one."""
    buf = RolloutBuffer(list(range(n)), T, RECURRENT, torch.device("cpu"), rows=rows)
    buf.set_version(5 + k)  # writes through into the shared rows
    zeros = np.zeros(n, np.float32)
    for t in range(T):
        cols = list(range(n))
        buf.record_actions(cols, zeros[:, None], np.zeros(n, np.int64), zeros, zeros, np.full(n, t == 2),
                           np.full((n, 2), 10.0 * k + 1, np.float32))
        buf.record_outcome(cols, zeros, np.zeros(n, bool), np.array([t == 1 and c == 0 for c in cols]))
    buf.final_obs[(1, 0)] = np.array([0.5], np.float32)
    buf.final_states[(1, 0)] = np.array([k, 7.0], np.float32)
    for c in range(n):
        buf.bootstrap_obs[c] = np.array([0.25], np.float32)
        buf.bootstrap_states[c] = np.array([k, c], np.float32)
    return buf


def test_a_recurrent_cores_states_reach_the_training_process_with_the_bootstrap_observations():
    """Each collector process keeps its own slots' states: what it stored in the shared rows (start flags,
    versions, first states) is the merged rollout's, and the states its bootstrap and final observations are
    valued from cross the pipe with its shard (pickled, as the pipe sends it)."""
    _, rows = SharedRows(T, RECURRENT, policy_lag=False).take(5)
    columns = [{name: t[:, a:b] for name, t in rows.items()} for a, b in ((0, 3), (3, 5))]
    shards = [pickle.loads(pickle.dumps(Shard.of(k, recurrent_shard(k, n, columns[k])))) for k, n in ((0, 3), (1, 2))]
    merged = merge_shards(shards, T, RECURRENT, torch.device("cpu"), DeviceLink("cpu"), rows)
    assert merged.versions.tolist() == [[5, 5, 5, 6, 6]] * T and merged.starts[2].all() and not merged.starts[1].any()
    assert merged.states[0, :, 0].tolist() == [1, 1, 1, 11, 11]

    def value_fn(obs, states):  # V = obs + 100 x the collector + the column or 7: every state is recognisable
        return torch.as_tensor(obs[:, 0] + 100 * states[:, 0] + states[:, 1])
    batch = rollout_to_batch(merged, value_fn, 0.9, 0.8)
    assert merged.next_values[T - 1].tolist() == [0.25, 1.25, 2.25, 100.25, 101.25]
    assert merged.next_values[1, 0] == 7.5 and merged.next_values[1, 3] == 107.5
    assert batch.data["sequences"].versions.tolist() == [5, 5, 5, 6, 6] * T


def test_shared_rows_alternate_two_sets_under_policy_lag_and_reallocate_only_on_a_new_width():
    rows = SharedRows(T, LAYOUT, policy_lag=True)
    a, b = rows.take(4), rows.take(4)
    assert a[0] != b[0] and all(t.is_shared() for t in a[1].values())
    assert rows.take(4)[0] == a[0] and rows.take(4)[0] == b[0]  # the same memory, in turn
    c = rows.take(6)
    assert c[0] not in (a[0], b[0]) and c[1]["obs"].shape == (T, 6, 1)
    assert rows.take(4)[0] == b[0]  # the other set kept its width


def test_without_policy_lag_one_set_of_shared_rows_serves_every_rollout():
    rows = SharedRows(T, LAYOUT, policy_lag=False)
    a = rows.take(4)
    assert rows.take(4) is a and rows.take(4)[1]["obs"].data_ptr() == a[1]["obs"].data_ptr()
    c = rows.take(6)
    assert c[0] != a[0] and rows.sets == [c]  # the old width's set let go


def test_shared_rows_of_stacked_observations_keep_one_frame_per_step():
    layout = Layout((4, 3, 3), torch.uint8, (), torch.long, stack=4)
    _, arrays = SharedRows(T, layout, policy_lag=False).take(5)
    assert "obs" not in arrays and arrays["frames"].shape == (T + 3, 5, 3, 3) and arrays["restarts"].shape == (T, 5)
