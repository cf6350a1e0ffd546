"""Admission limits from a memory budget, and the silence clock that forgives only the learner's own pauses."""
import pytest

from learner.gateway.admission import (ROLLOUT_COPIES, Admission, AdmissionRefused, check_run_fits,
                                       slot_bytes, state_bytes)
from learner.gateway.receive import ReceiveLimits
from learner.gateway.registry import ActorRegistry
from tests.learner.gateway.test_receive import CARTPOLE

BREAKOUT = ((4, 84, 84), "uint8", 128)


def test_the_limits_follow_the_budget_and_the_rollout_shape():
    each = slot_bytes(*BREAKOUT)
    assert each == ROLLOUT_COPIES * 129 * (4 * 84 * 84 + 32)
    a = Admission.of(1024, 0, 8, *BREAKOUT)
    assert a.max_envs == (1024 << 20) // each and a.max_envs_per_actor == a.max_envs  # fewer than 256 fit
    half = Admission.of(0, 0, 8, *BREAKOUT, memory_bytes=64 << 30)
    assert half.budget_bytes == 32 << 30 and half.max_envs_per_actor == 256
    assert half.split(2).max_envs == half.max_envs // 2


def test_segments_count_their_room_for_more_columns_in_each_slot():
    """run.segments: a rollout has room for SEGMENT_ROOM columns per env slot, and the budget counts them."""
    from learner.rollout.buffer import SEGMENT_ROOM
    assert slot_bytes(*BREAKOUT, columns=SEGMENT_ROOM) == SEGMENT_ROOM * slot_bytes(*BREAKOUT)
    a = Admission.of(1024, 0, 8, *BREAKOUT, columns=SEGMENT_ROOM)
    assert a.max_envs == (1024 << 20) // (SEGMENT_ROOM * slot_bytes(*BREAKOUT))


def test_a_recurrent_state_counts_in_each_slot_and_is_said_at_start():
    """model.core = lstm, 256 wide (512 floats of state), sequences of 32 steps: a start flag and an int32 version
    per step and a state per sequence in each rollout copy, plus the slot's row of the state table and its
    bootstrap state."""
    each = state_bytes(512, 128, 32)
    assert each == ROLLOUT_COPIES * (128 * (1 + 4) + 4 * 512 * 4) + 2 * 512 * 4  # flag, version; states
    assert state_bytes(0, 128, 32) == 0
    a = Admission.of(1024, 0, 8, *BREAKOUT, state=each)
    assert a.slot_bytes == slot_bytes(*BREAKOUT) + each and a.max_envs == (1024 << 20) // a.slot_bytes
    assert a.split(2).state_bytes == each
    assert "of it recurrent state" in a.describe(8)
    assert "recurrent" not in Admission.of(1024, 0, 8, *BREAKOUT).describe(8)
    queued = a.with_queues(ReceiveLimits.of(*CARTPOLE, max_envs_per_actor=a.max_envs_per_actor, cap_bytes=64 << 20))
    assert queued.bytes_for(8, 2) == 8 * a.slot_bytes + 2 * queued.queue_bytes  # the state beside the queues
    assert queued.split(2).state_bytes == each and queued.split(2).queue_bytes == queued.queue_bytes
    assert "of it recurrent state" in queued.describe(8, 2) and "receive queues" in queued.describe(8, 2)


def test_a_greedy_claim_is_refused_for_good_and_a_full_learner_says_later():
    a = Admission.of(1024, 16, 8, *BREAKOUT)
    with pytest.raises(AdmissionRefused, match="claims 4092 envs, more than the 16 one actor may hold") as exc:
        a.check(4092, 0)
    assert not exc.value.retry
    with pytest.raises(AdmissionRefused, match="full") as exc:
        a.check(16, a.max_envs - 8)
    assert exc.value.retry
    a.check(8, a.max_envs - 8)  # exactly full
    with pytest.raises(AdmissionRefused, match="full"):
        a.check(9, a.max_envs - 8)  # one slot over


def test_a_registry_with_a_budget_holds_no_more_than_it_admits():
    a = Admission.of(1024, 16, 8, *BREAKOUT)
    registry = ActorRegistry(admission=a)
    for i in range(a.max_envs // 16):
        registry.join(bytes([i]), f"a{i}", 16, 1, None)
    with pytest.raises(AdmissionRefused):
        registry.join(b"late", "late", 16, 1, None)
    assert registry.num_slots() <= a.max_envs


def test_runs_and_updates_that_cannot_work_are_named():
    assert "more than the memory budget" in check_run_fits(Admission.of(64, 0, 8, *BREAKOUT), 64, 0)
    assert check_run_fits(Admission.of(1024, 0, 8, *BREAKOUT), 8, 0) is None


def test_a_run_of_actors_from_elsewhere_only_is_not_judged_by_its_zero_local_envs():
    from learner.config import load
    cfg = load("configs/cartpole.toml", ["cluster.actors=0"])
    assert cfg.num_envs == 0  # and load() validated it: no "0 samples" refusal
    with pytest.raises(Exception, match="less than one sample"):
        load("configs/cartpole.toml", ["cluster.actors=0", "cluster.min_envs=2", "ppo.num_minibatches=65"])
