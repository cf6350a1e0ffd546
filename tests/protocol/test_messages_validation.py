"""Message-level validation: every malformed field, dtype, shape, type, version or size is a ProtocolError naming it."""
from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import pytest

from protocol import codec
from protocol import messages as m
from protocol.errors import ProtocolError
from tests.protocol.conftest import rejects


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


@pytest.mark.parametrize("reward", [3.3e38, -2e6, 1e6 * (1 + 1e-6)])
def test_a_finite_reward_past_the_learners_bound_is_refused_naming_it(reward, pt):
    """Issue 60, point 1: a rule-abiding client reporting rewards of 3.3e38 made float32 GAE overflow and the
    update NaN; the learner's bound (cluster.max_abs_reward) refuses it on the wire, by name, usual path or not."""
    expect = dataclasses.replace(pt.EXPECT_VEC, max_abs_reward=1e6)
    for final_index in ([], [2]):  # the usual report (protocol/usual_step.py) and the general decoder
        msg = pt.make_step(expect, final_index=final_index)
        msg.rewards[1] = reward
        rejects(pt.to_wire(m.encode(msg)), expect,
                f"step: rewards must be finite and within +-1e+06 (the learner's cluster.max_abs_reward), got {reward:g}")
        msg.rewards[1] = 1e6  # the bound itself passes
        assert m.decode(pt.to_wire(m.encode(msg)), expect=expect).rewards[1] == 1e6


def test_a_float_observation_past_the_learners_bound_is_refused_naming_it(pt):
    expect = dataclasses.replace(pt.EXPECT_VEC, max_abs_obs=100.0)
    msg = pt.make_step(expect)
    msg.obs[2, 0] = -1e30
    rejects(pt.to_wire(m.encode(msg)), expect, "step: obs must be finite and within +-100 (the learner's "
                                               "cluster.max_abs_obs), got -1e+30")


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
    ("goodbye", "reason", b"bytes"), ("error", "reason", 404), ("error", "rejoin", "yes"), ("error", "rejoin", 1),
    ("redirect", "address", 5557), ("redirect", "reason", None),
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


@pytest.mark.parametrize("num_envs,groups", [(3, 2), (7, 2), (8, 3), (4, 0), (4, -1), (16, 16)])
def test_handshake_groups_must_divide_num_envs(num_envs, groups, pt):
    rejects(pt.to_wire(m.encode(m.Handshake(num_envs=num_envs, groups=groups))),
            match=f"groups must be in [1, 8] and divide num_envs, got {groups}")


def test_a_refused_message_names_its_type_so_a_bad_handshake_can_be_answered(pt):
    """The learner answers a handshake it cannot accept with an Error, and nothing else it cannot decode."""
    with pytest.raises(ProtocolError) as bad_handshake:
        m.decode(pt.to_wire(m.encode(m.Handshake(num_envs=1, groups=2))))
    assert bad_handshake.value.message_type == "handshake"
    with pytest.raises(ProtocolError) as garbage:
        m.decode([b"garbage"])
    assert garbage.value.message_type is None


@pytest.mark.parametrize("address", ["10.0.0.7:5557", "http://x:1", "tcp://" + "a" * 600, ""])
def test_a_redirect_names_a_zmq_endpoint(address, pt):
    frames = pt.raw_message("redirect", {"address": address, "reason": ""})
    with pytest.raises(ProtocolError, match="redirect: address must be"):
        m.decode(frames)


def test_an_error_without_rejoin_is_a_plain_refusal(pt):
    """An older peer's Error has no rejoin field: it reads as a refusal, not as 'rejoin'."""
    frames = pt.raw_message("error", {"reason": "no"})
    assert m.decode(frames) == m.Error("no", rejoin=False)


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


V = m.PROTOCOL_VERSION


@pytest.mark.parametrize("version", [0, V - 1, V + 1, -1, str(V), None, [V]])
def test_wrong_protocol_version(version, pt):
    frames = pt.with_header(m.encode(m.Goodbye()), lambda h: h.__setitem__("v", version))
    rejects(frames, match=f"protocol version {version!r} does not match ours ({V})")


def test_oversized_message_against_the_expect(pt):
    msg = pt.make_step(pt.EXPECT_IMG)
    small = dataclasses.replace(pt.EXPECT_IMG, max_bytes=200)
    rejects(pt.to_wire(m.encode(msg)), small, "message exceeds the 200-byte limit")


def test_a_usual_report_over_the_limit_is_refused_on_the_fast_path_too(pt):
    """protocol/usual_step.py takes a usual report only under the limit the general decoder enforces."""
    msg = pt.make_step(pt.EXPECT_VEC)  # no episode ended, nothing truncated: the usual report
    small = dataclasses.replace(pt.EXPECT_VEC, max_bytes=40)  # 3 x 5 float32 observations alone are 60 bytes
    rejects(pt.to_wire(m.encode(msg)), small, "message exceeds the 40-byte limit")


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


# ------------------------------------------------------------------------------------- what the learner trusts

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_float_observations_must_be_finite(bad, pt):
    msg = pt.make_step(pt.EXPECT_VEC)
    msg.obs[1, 3] = bad
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "step: obs must be finite")


def test_float_final_observations_must_be_finite(pt):
    msg = pt.make_step(pt.EXPECT_VEC, final_index=[2])
    msg.final_obs[0, 0] = np.nan
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_VEC, "step: final_obs must be finite")


def test_a_truncated_env_without_its_final_observation(pt):
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[1, 3])
    msg.final_index, msg.final_obs = msg.final_index[:1], msg.final_obs[:1]
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "final_index [1] must list each env truncated")


@pytest.mark.parametrize("index", [[1, 1], [0]], ids=["twice", "not-truncated"])
def test_a_final_observation_for_an_env_that_was_not_cut(index, pt):
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[1])
    msg.final_index = np.asarray(index, np.int64)
    msg.final_obs = np.zeros((len(index), *pt.EXPECT_IMG.obs_shape), np.uint8)
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "must list each env truncated and not terminated once")


def test_episode_returns_must_be_finite(pt):
    msg = pt.make_step(pt.EXPECT_IMG, n_episodes=2)
    msg.episode_returns[1] = np.nan
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "step: episode_returns must be finite")


def test_episode_lengths_must_not_be_negative(pt):
    msg = pt.make_step(pt.EXPECT_IMG, n_episodes=2)
    msg.episode_lengths[1] = -1
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "step: episode_lengths must be >= 0")


def test_an_env_terminated_and_truncated_at_once_sends_no_final_observation(pt):
    """It ended for real (nothing to bootstrap): a final observation for it is refused, and none is asked for."""
    msg = pt.make_step(pt.EXPECT_IMG, final_index=[1])
    msg.terminated[1] = True
    rejects(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG, "must list each env truncated and not terminated once")
    msg.final_index, msg.final_obs = msg.final_index[:0], None
    decoded = m.decode(pt.to_wire(m.encode(msg)), pt.EXPECT_IMG)
    assert decoded.terminated[1] and decoded.truncated[1] and decoded.final_obs is None


@pytest.mark.parametrize("built,total", [(5, 4), (-1, 4), (0, 5000)])
def test_starting_counts(built, total, pt):
    frames = pt.raw_message("starting", {"built": built, "total": total})
    rejects(frames, None, "starting: need 0 <= built <= total <= 4096")


def test_names_and_reasons_arrive_without_control_characters():
    """Issue 60, point 4: what a peer names itself, or gives as a reason, is logged: no newline may forge a line."""
    hs = m.decode(m.encode(m.Handshake(1, "a\nb\r\x1b[31m\u2028c\u202e" + "d" * 200)))
    assert hs.name == "ab[31mc" + "d" * 93 and len(hs.name) == 100
    bye = m.decode(m.encode(m.Goodbye("done\n12:00:00 ERROR forged")))
    assert bye.reason == "done12:00:00 ERROR forged"
    assert m.decode(m.encode(m.Error("x\ty", rejoin=True))).reason == "xy"
