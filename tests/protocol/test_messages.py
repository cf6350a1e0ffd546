"""Message round trips and frame structure: what is sent comes back; missing or extra frames are ProtocolErrors."""
from __future__ import annotations

import uuid

import numpy as np
import pytest
import zmq

from protocol import codec
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec
from tests.protocol.conftest import rejects




# ---------------------------------------------------------------------------------------------- round trips

def test_every_sample_round_trips_through_bytes_frames(sample_case, pt):
    _, msg, expect = sample_case
    frames = m.encode(msg)
    wire = pt.to_wire(frames)
    assert all(isinstance(f, bytes) for f in wire)
    pt.assert_same(m.decode(wire, expect=expect), msg)


def test_every_sample_round_trips_without_an_expect(sample_case, pt):
    _, msg, _ = sample_case
    pt.assert_same(m.decode(pt.to_wire(m.encode(msg))), msg)


def test_every_sample_round_trips_from_the_encoders_own_frames(sample_case, pt):
    """encode() hands out memoryviews over the arrays; decode must take those unchanged (in-process use)."""
    _, msg, expect = sample_case
    pt.assert_same(m.decode(m.encode(msg), expect=expect), msg)


def test_sample_cases_cover_every_message_type(pt):
    assert {type(msg) for _, msg, _ in pt.sample_cases()} == set(m.TYPES.values())


def test_handshake_without_spaces_keeps_the_nones(pt):
    msg = m.decode(pt.to_wire(m.encode(m.Handshake(num_envs=6, name="a", groups=2))))
    assert msg == m.Handshake(num_envs=6, name="a", env_id=None, obs_space=None, action_space=None, groups=2)


def test_handshake_with_spaces_decodes_space_specs(pt):
    msg = m.decode(pt.to_wire(m.encode(m.Handshake(num_envs=4, env_id="ALE/Pong-v5", obs_space=pt.IMG_SPACE,
                                                   action_space=pt.DISCRETE_SPACE))))
    assert isinstance(msg.obs_space, SpaceSpec) and isinstance(msg.action_space, SpaceSpec)
    assert msg.obs_space == pt.IMG_SPACE and msg.obs_space.shape == (2, 6, 6)
    assert msg.action_space == pt.DISCRETE_SPACE and msg.action_space.n == 6
    assert msg.env_id == "ALE/Pong-v5"


def test_welcome_env_rebuilds_the_same_settings(pt):
    settings = EnvSettings(env_id="ALE/Breakout-v5", sticky_actions=0.25, frame_stack=1, episodic_life=False)
    msg = m.Welcome(actor_id=0, slots=[0, 1], seeds=[11, 12], env=settings.to_dict(), obs_space=pt.IMG_SPACE,
                    action_space=pt.DISCRETE_SPACE)
    decoded = m.decode(pt.to_wire(m.encode(msg)))
    assert EnvSettings.from_dict(decoded.env) == settings
    assert decoded.run_id == ""


@pytest.mark.parametrize("final_index,n_episodes", [((), 0), ((), 2), ((0,), 1), ((0, 1, 2, 3), 4), ((3, 1), 0)])
def test_step_report_variants_round_trip(final_index, n_episodes, pt):
    msg = pt.make_step(pt.EXPECT_IMG, group=1, final_index=final_index, n_episodes=n_episodes, seed=len(final_index))
    decoded = m.decode(pt.to_wire(m.encode(msg)), expect=pt.EXPECT_IMG)
    pt.assert_same(decoded, msg)
    assert (decoded.final_obs is None) == (len(final_index) == 0)


def test_step_report_without_final_obs_sends_no_final_obs_frame(pt, framed):
    plain = m.encode(pt.make_step(pt.EXPECT_IMG))
    with_finals = m.encode(pt.make_step(pt.EXPECT_IMG, final_index=[2]))
    assert [s[0] for s in pt.header_of(plain)["a"]] == [
        "obs", "rewards", "terminated", "truncated", "episode_returns", "episode_lengths", "final_index"]
    assert len(plain) == 8 and len(with_finals) == 9
    assert pt.header_of(with_finals)["a"][-1] == ["final_obs", "uint8", [1, 2, 6, 6]]


def test_step_report_default_episode_fields_round_trip(pt):
    k = pt.EXPECT_VEC.group_size
    msg = m.StepReport(group=0, obs=np.ones((k, 5), np.float32), rewards=np.full(k, -0.5, np.float32),
                       terminated=np.zeros(k, bool), truncated=np.zeros(k, bool))
    decoded = m.decode(pt.to_wire(m.encode(msg)), expect=pt.EXPECT_VEC)
    pt.assert_same(decoded, msg)
    assert decoded.episode_returns.dtype == np.float64 and decoded.episode_lengths.dtype == np.int64


def test_discrete_actions_round_trip_as_int64_vector(pt):
    msg = m.Actions(group=1, actions=np.array([0, 5, 2, 3], np.int64), version=9)
    decoded = m.decode(pt.to_wire(m.encode(msg)), expect=pt.EXPECT_IMG)
    pt.assert_same(decoded, msg)
    assert decoded.actions.shape == (4,) and decoded.actions.dtype == np.int64


def test_box_actions_round_trip_as_float32_matrix(pt):
    acts = np.array([[0.5, -1.0], [1e-8, 3.25], [-0.0, 7.0]], np.float32)
    decoded = m.decode(pt.to_wire(m.encode(m.Actions(group=0, actions=acts, version=1))), expect=pt.EXPECT_VEC)
    assert decoded.actions.shape == (3, 2) and decoded.actions.dtype == np.float32
    np.testing.assert_array_equal(decoded.actions, acts)
    assert decoded.version == 1 and decoded.group == 0


@pytest.mark.parametrize("actions", [np.array([0, 5, 2, 3], np.int64), np.arange(512, dtype=np.int64) % 7,
                                     np.array([[0.5, -1.0], [1e-8, 3.25], [-0.0, 7.0]], np.float32),
                                     np.arange(600, dtype=np.float32).reshape(300, 2),  # past inline: framed
                                     np.arange(8, dtype=np.int64)[::2]],  # not contiguous
                         ids=["discrete", "discrete-512", "box", "box-framed", "strided"])
def test_encode_actions_gives_the_very_bytes_of_encode(actions):
    """The learner's cached-header encoder for actions: identical frames, whatever the group, version and
    shape (each combination twice, so the second comes from the cache)."""
    for group, version in [(0, 1), (1, 1), (0, 2), (1, 70000), (0, 1)] * 2:
        fast = m.encode_actions(group, actions, version)
        slow = m.encode(m.Actions(group, actions, version))
        assert [bytes(f) for f in fast] == [bytes(f) for f in slow]
        decoded = m.decode(fast)
        np.testing.assert_array_equal(decoded.actions, actions)
        assert (decoded.group, decoded.version) == (group, version)


def test_weights_keep_names_order_dtypes_and_values(pt):
    rng = np.random.default_rng(0)
    tensors = {f"layer{i}.{kind}": pt.random_array(rng, shape, dtype)
               for i, (kind, shape, dtype) in enumerate([("weight", (16, 4, 8, 8), np.float32), ("bias", (16,), np.float32),
                                                         ("w", (3, 7), np.float64), ("h", (5,), np.float16),
                                                         ("steps", (2, 2), np.int64), ("empty", (0,), np.float32)])}
    decoded = m.decode(pt.to_wire(m.encode(m.Weights(version=123456, tensors=tensors))))
    assert list(decoded.tensors) == list(tensors)
    pt.assert_same(decoded, m.Weights(version=123456, tensors=tensors))


def test_weights_from_non_contiguous_arrays_keep_their_values(pt):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    tensors = {"t": base.T, "strided": base[:, ::2], "neg": base[::-1]}
    decoded = m.decode(pt.to_wire(m.encode(m.Weights(version=0, tensors=tensors))))
    for name, arr in tensors.items():
        np.testing.assert_array_equal(decoded.tensors[name], arr)
        assert decoded.tensors[name].shape == arr.shape


def test_goodbye_and_error_stay_distinct(pt):
    bye = m.decode(pt.to_wire(m.encode(m.Goodbye("done"))))
    err = m.decode(pt.to_wire(m.encode(m.Error("done"))))
    assert type(bye) is m.Goodbye and type(err) is m.Error
    assert bye.reason == err.reason == "done"
    assert m.decode(pt.to_wire(m.encode(m.Goodbye()))) == m.Goodbye("")


def test_decoded_text_fields_are_capped(pt):
    hs = m.decode(pt.to_wire(m.encode(m.Handshake(num_envs=1, name="n" * 5000))))
    err = m.decode(pt.to_wire(m.encode(m.Error("e" * 50_000))))
    assert hs.name == "n" * 100
    assert err.reason == "e" * 1000


def test_zmq_frames_received_without_copy_decode(pt):
    """One real trip over inproc PAIR sockets: recv_multipart(copy=False) yields zmq.Frames, decode takes them."""
    ctx = zmq.Context()
    address = f"inproc://protocol-test-{uuid.uuid4().hex}"
    sender, receiver = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        for sock in (sender, receiver):
            sock.setsockopt(zmq.LINGER, 0)
        receiver.bind(address)
        sender.connect(address)
        for label, msg, expect in pt.sample_cases():
            sender.send_multipart(m.encode(msg), copy=False)
            assert receiver.poll(2000, zmq.POLLIN), f"{label}: nothing arrived"
            frames = receiver.recv_multipart(copy=False)
            assert all(isinstance(f, zmq.Frame) for f in frames)
            pt.assert_same(m.decode(frames, expect=expect), msg)
    finally:
        sender.close()
        receiver.close()
        ctx.term()


def test_encode_refuses_objects_that_are_not_messages(pt):
    with pytest.raises(ProtocolError, match="cannot encode Expect"):
        m.encode(pt.EXPECT_IMG)
    with pytest.raises(ProtocolError, match="cannot encode dict"):
        m.encode({"t": "goodbye"})


# ------------------------------------------------------------------------------------- frames and framing

def test_empty_message():
    rejects([], match="empty message")


def test_array_frame_shorter_than_announced(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_step(pt.EXPECT_IMG)))
    n = len(frames[1])
    frames[1] = frames[1][:-1]
    rejects(frames, pt.EXPECT_IMG, f"array 'obs': frame has {n - 1} bytes, uint8(4, 2, 6, 6) needs {n}")


def test_last_array_frame_truncated(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_step(pt.EXPECT_IMG, final_index=[0, 2])))
    frames[-1] = frames[-1][:7]
    rejects(frames, pt.EXPECT_IMG, "array 'final_obs': frame has 7 bytes")


def test_array_frame_longer_than_announced(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_actions(pt.EXPECT_IMG)))
    frames[1] += b"\0" * 8
    rejects(frames, pt.EXPECT_IMG, "array 'actions': frame has 40 bytes, int64(4,) needs 32")


def test_missing_frame(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_step(pt.EXPECT_IMG)))
    rejects(frames[:-1], pt.EXPECT_IMG, "header announces 7 array frames but 6 frames follow")


def test_header_only(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_step(pt.EXPECT_IMG, final_index=[1])))
    rejects(frames[:1], pt.EXPECT_IMG, "header announces 8 array frames but 0 frames follow")


def test_extra_frame(pt, framed):
    frames = pt.to_wire(m.encode(pt.make_step(pt.EXPECT_IMG)))
    rejects(frames + [b""], pt.EXPECT_IMG, "header announces 7 array frames but 8 frames follow")


def test_extra_frame_on_a_message_without_arrays(pt, framed):
    rejects(pt.to_wire(m.encode(m.Goodbye("x"))) + [b"\x01"], match="header announces 0 array frames but 1 frames follow")


def test_missing_array(pt):
    frames = pt.raw_message("step", {"group": 0, "first": False}, pt.step_arrays(pt.EXPECT_IMG, rewards=None))
    rejects(frames, pt.EXPECT_IMG, "missing array 'rewards'")


@pytest.mark.parametrize("msg", [m.Handshake(num_envs=1), m.Goodbye("x"), m.Error("x")], ids=lambda msg: type(msg).__name__)
def test_arrays_on_a_message_that_takes_none(msg, pt):
    name = m.NAMES[type(msg)]
    body = {k: (v.to_dict() if isinstance(v, SpaceSpec) else v) for k, v in vars(msg).items()}
    frames = codec.encode(m.PROTOCOL_VERSION, name, body, {"smuggled": np.zeros(3, np.uint8)})
    rejects(pt.to_wire(frames), match="unexpected arrays ['smuggled']")
