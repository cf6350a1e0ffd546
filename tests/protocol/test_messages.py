"""Message round trips and message-level validation: every malformed message is a ProtocolError naming the problem."""
from __future__ import annotations

import dataclasses
import re
import uuid

import msgpack
import numpy as np
import pytest
import zmq

from protocol import codec
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec


def rejects(frames, expect=None, match: str = "", **kwargs) -> ProtocolError:
    """decode must raise ProtocolError (any other exception propagates and fails the test) saying `match`."""
    with pytest.raises(ProtocolError, match=re.escape(match) if match else None) as info:
        m.decode(frames, expect=expect, **kwargs)
    return info.value


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


# ------------------------------------------------------------------------------------- dtypes and shapes

def test_obs_dtype_not_the_agreed_one(pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    msg.obs = msg.obs.astype(np.float32)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'obs': dtype float32, expected uint8")


def test_reward_dtype_must_be_float32(pt):
    msg = pt.make_step(pt.EXPECT_VEC)
    msg.rewards = msg.rewards.astype(np.float64)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "array 'rewards': dtype float64, expected float32")


def test_flags_must_be_bool(pt):
    msg = pt.make_step(pt.EXPECT_VEC)
    msg.terminated = msg.terminated.astype(np.uint8)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "array 'terminated': dtype uint8, expected bool")


def test_discrete_actions_must_be_int64(pt):
    msg = m.Actions(group=0, actions=np.zeros(4, np.int32))
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'actions': dtype int32, expected int64")


@pytest.mark.parametrize("dtype", ["object", "O", "complex64", "complex128", "<U4", "str", "float128", "V8",
                                   "datetime64", "<f4", "int", ""])
def test_disallowed_dtype_in_header(dtype, pt):
    frames = pt.with_header(m.encode(pt.make_step(pt.EXPECT_VEC)),
                            lambda h: h["a"][pt.spec_index(h, "rewards")].__setitem__(1, dtype))
    rejects(frames, pt.EXPECT_VEC, f"array 'rewards': dtype {dtype!r} is not allowed")


@pytest.mark.parametrize("array", [np.zeros(2, np.complex64), np.array(["ab", "c"]), np.array([None, 1], object),
                                   np.zeros(2, "datetime64[s]")], ids=lambda a: a.dtype.str)
def test_encode_refuses_disallowed_dtypes(array):
    with pytest.raises(ProtocolError, match="cannot send array 'x': dtype .* is not allowed"):
        m.encode(m.Weights(version=0, tensors={"x": array}))


def test_obs_shape_not_the_agreed_one(pt):
    msg = pt.make_step(m.Expect(group_size=4, groups=2, obs_shape=(2, 6, 7), obs_dtype="uint8"))
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'obs': shape (4, 2, 6, 7), expected (4, 2, 6, 6)")


def test_obs_for_the_wrong_number_of_envs(pt):
    msg = pt.make_step(m.Expect(group_size=5, groups=2, obs_shape=(2, 6, 6), obs_dtype="uint8"))
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'obs': shape (5, 2, 6, 6), expected (4, 2, 6, 6)")


@pytest.mark.parametrize("name", ["rewards", "terminated", "truncated"])
def test_per_env_vector_with_the_wrong_length(name, pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    setattr(msg, name, getattr(msg, name)[:3])
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, f"array {name!r}: shape (3,), expected (4,)")


def test_rewards_length_checked_against_obs_without_an_expect(pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    msg.rewards = np.zeros(5, np.float32)
    rejects(pt.to_wire(m.encode(msg)), None, "array 'rewards': shape (5,), expected (4,)")


def test_box_actions_with_the_wrong_width(pt):
    msg = m.Actions(group=0, actions=np.zeros((3, 3), np.float32))
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "array 'actions': shape (3, 3), expected (3, 2)")


def test_final_obs_with_the_wrong_shape(pt):
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[0, 1])
    msg.final_obs = msg.final_obs[:1]
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'final_obs': shape (1, 2, 6, 6), expected (2, 2, 6, 6)")


def test_final_obs_with_the_wrong_dtype(pt):
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[3])
    msg.final_obs = msg.final_obs.astype(np.int16)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "array 'final_obs': dtype int16, expected uint8")


def test_final_index_without_final_obs(pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    msg.final_index = np.array([2], np.int64)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "missing array 'final_obs'")


def test_final_obs_without_final_index(pt):
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[2])
    msg.final_index = np.zeros(0, np.int64)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "final_obs given without final_index")


@pytest.mark.parametrize("returns,lengths", [(np.zeros(2), np.zeros(1, np.int64)), (np.zeros(5), np.zeros(5, np.int64)),
                                             (np.zeros((1, 1)), np.zeros(1, np.int64))])
def test_episode_stats_inconsistent(returns, lengths, pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    msg.episode_returns, msg.episode_lengths = returns, lengths
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "episode_returns and episode_lengths must be 1-D")


# ------------------------------------------------------------------------------------------- field values

@pytest.mark.parametrize("final_index", [[4], [-1], [0, 9], [0, 1, 2, 3, 0], [[0]]])
def test_final_index_out_of_range(final_index, pt):
    fi = np.array(final_index, np.int64)
    n = fi.shape[0]
    arrays = pt.step_arrays(pt.EXPECT_IMG, final_index=fi, final_obs=np.zeros((n, 2, 6, 6), np.uint8))
    frames = pt.raw_message("step", {"group": 0, "first": False}, arrays)
    rejects(frames, pt.EXPECT_IMG, "final_index must hold env indices within the group")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rewards(bad, pt):
    msg = pt.make_step(pt.EXPECT_VEC)
    msg.rewards[1] = bad
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "rewards must be finite")


@pytest.mark.parametrize("group", [2, 3, -1, 2**40])
def test_step_group_out_of_range(group, pt):
    msg = pt.make_step(pt.EXPECT_IMG, group=group)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, f"group {group} out of range [0, 2)")


def test_actions_group_out_of_range(pt):
    rejects(pt.to_wire(m.encode(pt.make_actions(pt.EXPECT_VEC, group=1))), pt.EXPECT_VEC, "group 1 out of range [0, 1)")


@pytest.mark.parametrize("msg_type,field,value", [
    ("step", "group", "0"), ("step", "group", True), ("step", "group", 1.0), ("step", "group", None),
    ("step", "first", 1), ("step", "first", "yes"), ("actions", "group", False), ("actions", "version", "3"),
    ("actions", "version", True), ("weights", "version", "12"), ("handshake", "num_envs", "8"),
    ("handshake", "num_envs", True), ("handshake", "groups", "2"), ("handshake", "name", 7),
    ("handshake", "env_id", 5), ("welcome", "actor_id", True), ("welcome", "actor_id", "3"),
    ("welcome", "slots", "0123"), ("welcome", "env", []), ("welcome", "run_id", None),
    ("goodbye", "reason", b"bytes"), ("error", "reason", 404),
])
def test_field_of_the_wrong_type(msg_type, field, value, pt):
    _, msg, expect = next(c for c in pt.sample_cases() if m.NAMES[type(c[1])] == msg_type)
    frames = pt.with_header(m.encode(msg), lambda h: h["b"].__setitem__(field, value))
    rejects(frames, expect, f"field {field!r} must be ")


def test_missing_field(pt):
    frames = pt.with_header(m.encode(pt.make_actions(pt.EXPECT_IMG)), lambda h: h["b"].pop("version"))
    rejects(frames, pt.EXPECT_IMG, "field 'version' must be int, got None")


@pytest.mark.parametrize("num_envs", [0, -4, 4097])
def test_handshake_num_envs_out_of_range(num_envs, pt):
    rejects(pt.to_wire(m.encode(m.Handshake(num_envs=num_envs))), match=f"num_envs must be in [1, 4096], got {num_envs}")


@pytest.mark.parametrize("num_envs,groups", [(3, 2), (7, 2), (6, 3), (4, 0), (4, -1)])
def test_handshake_groups_must_divide_num_envs(num_envs, groups, pt):
    rejects(pt.to_wire(m.encode(m.Handshake(num_envs=num_envs, groups=groups))),
            match=f"groups must be 1 or 2 and divide num_envs, got {groups}")


@pytest.mark.parametrize("space", [{"kind": "discrete", "n": 0, "shape": [], "dtype": "int64", "low": [], "high": []},
                                   {"kind": "box"}, {"kind": "tuple", "shape": [1], "dtype": "f", "n": 0, "low": [],
                                                     "high": []}, "box", [1, 2]])
def test_handshake_with_a_malformed_space(space, pt):
    frames = pt.with_header(m.encode(m.Handshake(num_envs=2, obs_space=pt.VEC_SPACE)),
                            lambda h: h["b"].__setitem__("obs_space", space))
    rejects(frames, match="space: ")


@pytest.mark.parametrize("slots,seeds", [([0, 1], [5]), ([0, "1"], [5, 6]), ([0, 1], [5, 6.5]), ([[0], 1], [5, 6])])
def test_welcome_slots_and_seeds_must_match(slots, seeds, pt):
    msg = dict((c[0], c[1]) for c in pt.sample_cases())["welcome"]
    msg.slots, msg.seeds = slots, seeds
    rejects(pt.to_wire(m.encode(msg)), match="slots and seeds must be int lists of equal length")


def test_welcome_without_spaces(pt):
    msg = dict((c[0], c[1]) for c in pt.sample_cases())["welcome"]
    frames = pt.with_header(m.encode(msg), lambda h: h["b"].pop("action_space"))
    rejects(frames, match="space: expected a map, got NoneType")


# ------------------------------------------------------------------------------------------ header level

@pytest.mark.parametrize("msg_type", ["launch", "Step", "", "handshake\0"])
def test_unknown_message_type(msg_type, pt):
    frames = pt.with_header(m.encode(m.Goodbye()), lambda h: h.__setitem__("t", msg_type))
    rejects(frames, match=f"unknown message type {msg_type!r}")


@pytest.mark.parametrize("version", [0, 2, -1, "1", None, [1]])
def test_wrong_protocol_version(version, pt):
    frames = pt.with_header(m.encode(m.Goodbye()), lambda h: h.__setitem__("v", version))
    rejects(frames, match=f"protocol version {version!r} does not match ours (1)")


def test_oversized_message_against_the_expect(pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    small = dataclasses.replace(pt.EXPECT_IMG, max_bytes=200)
    rejects(pt.to_wire(m.encode(msg)), small, "message exceeds the 200-byte limit")


def test_oversized_message_against_max_bytes(pt):
    msg = m.Weights(version=1, tensors={"a": np.zeros(100, np.float32), "b": np.zeros(100, np.float32)})
    rejects(pt.to_wire(m.encode(msg)), max_bytes=799, match="message exceeds the 799-byte limit")
    assert m.decode(pt.to_wire(m.encode(msg)), max_bytes=800).tensors["b"].shape == (100,)


def test_oversize_is_judged_from_the_header_before_reading_frames(pt):
    """A header announcing a huge array is refused for its size even though no such frame came."""
    frames = pt.with_header(m.encode(m.Weights(version=1, tensors={"w": np.zeros(4, np.float64)})),
                            lambda h: h["a"][0].__setitem__(2, [1 << 20, 1 << 20]))
    rejects(frames, match=f"message exceeds the {codec.DEFAULT_MAX_BYTES}-byte limit")


@pytest.mark.parametrize("header", [b"", b"\xc1", b"\x81", b'{"v": 1, "t": "goodbye"}', b"\x80\x00"],
                         ids=["empty", "never-used-byte", "truncated-map", "json", "trailing-bytes"])
def test_header_not_msgpack(header):
    rejects([header], match="header is not valid msgpack")


@pytest.mark.parametrize("payload", [[1, 2, 3], 5, "goodbye", None, {"v": 1, "t": "goodbye", "b": {}},
                                     {"t": "goodbye", "b": {}, "a": []}, {"v": 1, "b": {}, "a": []},
                                     {"v": 1, "t": "goodbye", "a": []}])
def test_header_not_a_map_with_the_keys(payload):
    rejects([msgpack.packb(payload)], match="header is not a map with keys v, t, b, a")


@pytest.mark.parametrize("key,value", [("t", 3), ("t", None), ("b", []), ("b", "x"), ("a", {}), ("a", "obs")])
def test_header_fields_of_the_wrong_type(key, value, pt):
    frames = pt.with_header(m.encode(m.Goodbye()), lambda h: h.__setitem__(key, value))
    rejects(frames, match="header fields have the wrong types")


# ---------------------------------------------------------------------------------- known bugs (reported)

@pytest.mark.parametrize("space", [0, "", [], {}, False])
def test_handshake_with_a_falsy_space_that_is_not_none(space, pt):
    frames = pt.with_header(m.encode(m.Handshake(num_envs=2)), lambda h: h["b"].__setitem__("obs_space", space))
    rejects(frames, match="space: ")


@pytest.mark.parametrize("name,expect", [("obs", None), ("final_obs", "img"), ("episode_returns", "img"),
                                         ("final_index", "img"), ("episode_returns", None)])
def test_step_with_a_zero_dimensional_array(name, expect, pt):
    scalar = {"obs": np.array(7, np.uint8), "final_obs": np.array(7, np.uint8),
              "episode_returns": np.array(1.5), "final_index": np.array(0, np.int64)}[name]
    frames = pt.raw_message("step", {"group": 0, "first": False}, pt.step_arrays(pt.EXPECT_IMG, **{name: scalar}))
    rejects(frames, pt.EXPECT_IMG if expect else None)


def test_small_arrays_ride_inline_and_only_observations_take_frames(pt):
    frames = m.encode(pt.make_step(pt.EXPECT_IMG))
    specs = pt.header_of(frames)["a"]
    framed = [s[0] for s in specs if len(s) == 3]
    assert framed == (["obs"] if pt.make_step(pt.EXPECT_IMG).obs.nbytes > codec.INLINE_MAX_BYTES else [])
    assert len(frames) == 1 + len(framed)
    assert all(isinstance(s[3], bytes) for s in specs if len(s) == 4)
    pt.assert_same(m.decode(pt.to_wire(frames), pt.EXPECT_IMG), pt.make_step(pt.EXPECT_IMG))


def test_inline_data_of_the_wrong_length_is_refused():
    h = msgpack.unpackb(codec.encode(1, "x", {}, {"r": np.zeros(3, np.float32)})[0])
    h["a"][0][3] = h["a"][0][3][:-1]
    with pytest.raises(ProtocolError, match="array 'r': inline data has 11 bytes, float32\\(3,\\) needs 12"):
        codec.decode_arrays(h["a"], [])
