"""What one peer may make the learner hold before it reads a byte (issue 60, point 6): the largest message and the
messages queued per peer, derived from the run's own messages."""
from __future__ import annotations

import numpy as np
import pytest

from learner.gateway.admission import Admission, AdmissionRefused, check_run_fits
from learner.gateway.receive import QUEUED_MESSAGES, ReceiveLimits, handshake_bytes
from protocol import compression
from protocol import messages as m
from protocol.spaces import SpaceSpec

CARTPOLE = (SpaceSpec(kind="box", shape=(4,), dtype="float32", low=[-4.8, -1e38, -0.42, -1e38],
                      high=[4.8, 1e38, 0.42, 1e38]), SpaceSpec(kind="discrete", n=2), "CartPole-v1")
PONG_FRAMES = (SpaceSpec(kind="box", shape=(84, 84), dtype="uint8"), SpaceSpec(kind="discrete", n=6), "ALE/Pong-v5")
CAP = 64 << 20


def test_a_cartpole_peer_may_send_kilobytes_not_64_mb():
    limits = ReceiveLimits.of(*CARTPOLE, max_envs_per_actor=256, cap_bytes=CAP)
    assert limits.message_bytes < 32 << 10 and limits.queued_messages == QUEUED_MESSAGES
    assert limits.peer_bytes == (QUEUED_MESSAGES + 1) * limits.message_bytes < 1 << 20
    assert "per actor: 4 messages of up to" in limits.describe()


def test_the_largest_messages_of_the_run_fit_and_the_handshake_may_be_the_largest():
    obs_space, action_space, env_id = CARTPOLE
    one = ReceiveLimits.of(*CARTPOLE, max_envs_per_actor=1, cap_bytes=CAP)
    assert one.message_bytes == handshake_bytes(*CARTPOLE)  # a 1-env step report is smaller than a handshake
    hs = m.Handshake(1, "h" * 300, env_id, obs_space, action_space, groups=1, codecs=compression.available())
    assert sum(len(f) for f in m.encode(hs)) < one.message_bytes
    k = 256
    limits = ReceiveLimits.of(*CARTPOLE, max_envs_per_actor=k, cap_bytes=CAP)
    every_env_cut = m.StepReport(0, np.ones((k, 4), np.float32), np.ones(k, np.float32), np.zeros(k, bool),
                                 np.ones(k, bool), np.ones(k), np.ones(k, np.int64), np.arange(k),
                                 np.ones((k, 4), np.float32))
    assert sum(len(memoryview(f).cast("B")) for f in m.encode(every_env_cut)) < limits.message_bytes


def test_atari_frames_need_megabytes_and_never_more_than_max_message_mb():
    limits = ReceiveLimits.of(*PONG_FRAMES, max_envs_per_actor=256, cap_bytes=CAP)
    assert 2 * 256 * 84 * 84 < limits.message_bytes < 4 << 20
    assert ReceiveLimits.of(*PONG_FRAMES, max_envs_per_actor=4096, cap_bytes=16 << 20).message_bytes == 16 << 20


def test_the_budget_counts_each_admitted_actors_receive_queue():
    plain = Admission.of(1, 0, 8, (4,), "float32", 32)  # CartPole's rollouts in 1 MB
    limits = ReceiveLimits.of(*CARTPOLE, max_envs_per_actor=plain.max_envs_per_actor, cap_bytes=CAP)
    a = plain.with_queues(limits)
    assert a.queue_bytes == limits.peer_bytes and a.bytes_for(8, 2) == 8 * a.slot_bytes + 2 * limits.peer_bytes
    plain.check(plain.max_envs - 8, 8, actors=2)  # without queues: every slot of the budget
    with pytest.raises(AdmissionRefused, match="full: 8 of .* env slots are held with 2 receive queues") as exc:
        a.check(a.max_envs - 8, 8, actors=2)
    assert exc.value.retry
    fits = (a.budget_bytes - a.bytes_for(8, 3)) // a.slot_bytes
    a.check(fits, 8, actors=2)
    line = a.describe(8, 2)
    assert line.startswith("memory budget 1 MB for rollouts (5 KB per env slot) and receive queues (") and \
        "this run's 8 env slots and 2 actors will use" in line, line
    assert "receive queues" in check_run_fits(a.with_queues(ReceiveLimits(1 << 20)), 8, 0, run_actors=2)
    assert a.split(2).receive == limits
