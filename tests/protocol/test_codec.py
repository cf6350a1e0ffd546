"""The frame codec on its own: header checks, array specs, byte counts, zero-copy views."""
from __future__ import annotations

import re

import msgpack
import numpy as np
import pytest

from protocol import codec
from protocol.errors import ProtocolError, VersionMismatch

V = 7  # any version: the codec only compares it


def header(specs, body=None, msg_type="x", version=V) -> bytes:
    return msgpack.packb({"v": version, "t": msg_type, "b": body or {}, "a": specs}, use_bin_type=True)


def refuse(specs, frames, match: str, max_bytes: int = codec.DEFAULT_MAX_BYTES):
    with pytest.raises(ProtocolError, match=re.escape(match)):
        codec.decode_arrays(specs, frames, max_bytes)


def round_trip(arrays: dict, body=None):
    frames = [bytes(f) for f in codec.encode(V, "x", body or {}, arrays)]
    msg_type, body, specs = codec.decode_header(frames[0], V)
    return msg_type, body, codec.decode_arrays(specs, frames[1:])


@pytest.mark.parametrize("dtype", sorted(codec.ALLOWED_DTYPES))
@pytest.mark.parametrize("shape", [(5,), (2, 3), (0,), (3, 0, 2), (1, 1, 1, 1, 1, 1, 1, 2)])
def test_every_allowed_dtype_round_trips(dtype, shape):
    rng = np.random.default_rng(len(shape))
    arr = ((rng.standard_normal(shape) * 100).astype(dtype) if dtype.startswith("float")
           else rng.integers(0, 2 if dtype == "bool" else 100, size=shape).astype(dtype))
    _, _, out = round_trip({"a": arr})
    assert out["a"].dtype == np.dtype(dtype) and out["a"].shape == shape
    np.testing.assert_array_equal(out["a"], arr)


def test_header_carries_type_body_and_specs():
    msg_type, body, out = round_trip({"p": np.zeros((2, 3), np.int16), "q": np.ones(4, np.float16)},
                                     body={"k": [1, "two", None, 3.5], "nested": {"x": b"raw"}})
    assert msg_type == "x" and body == {"k": [1, "two", None, 3.5], "nested": {"x": b"raw"}}
    assert list(out) == ["p", "q"]


def test_encoded_header_is_the_documented_map():
    big = codec.INLINE_MAX_BYTES + 1
    frames = codec.encode(V, "step", {"group": 1}, {"obs": np.zeros((1, big), np.uint8), "r": np.ones(2, np.uint8)})
    assert msgpack.unpackb(frames[0]) == {"v": V, "t": "step", "b": {"group": 1},
                                          "a": [["obs", "uint8", [1, big]], ["r", "uint8", [2], b"\x01\x01"]]}
    assert len(frames) == 2 and bytes(frames[1]) == bytes(big)


def test_encode_shares_memory_with_contiguous_arrays():
    arr = np.zeros(codec.INLINE_MAX_BYTES, np.float32)  # large enough for a frame of its own
    frames = codec.encode(V, "x", {}, {"a": arr})
    arr[2] = 1.5
    assert bytes(frames[1])[:16] == np.array([0, 0, 1.5, 0], np.float32).tobytes()


def test_decode_is_a_view_of_the_frame():
    frame = bytearray(np.arange(4, dtype=np.int32).tobytes())
    out = codec.decode_arrays([["a", "int32", [2, 2]]], [frame])
    frame[0:4] = np.int32(99).tobytes()
    assert out["a"][0, 0] == 99


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda t: t.__name__)
def test_decode_takes_any_buffer(wrap):
    data = np.arange(6, dtype=np.float64)
    out = codec.decode_arrays([["a", "float64", [3, 2]]], [wrap(data.tobytes())])
    np.testing.assert_array_equal(out["a"], data.reshape(3, 2))
    _, _, specs = codec.decode_header(wrap(header([["a", "float64", [3, 2]]])), V)
    assert specs == [["a", "float64", [3, 2]]]


def test_frame_shorter_than_announced():
    refuse([["obs", "float32", [2, 3]]], [bytes(23)], "array 'obs': frame has 23 bytes, float32(2, 3) needs 24")


def test_frame_longer_than_announced():
    refuse([["obs", "uint8", [2, 3]]], [bytes(7)], "array 'obs': frame has 7 bytes, uint8(2, 3) needs 6")


def test_empty_array_needs_an_empty_frame():
    refuse([["e", "int64", [0, 4]]], [b"\0"], "array 'e': frame has 1 bytes")


@pytest.mark.parametrize("n_frames", [0, 1, 3])
def test_frame_count_must_match_specs(n_frames):
    specs = [["a", "uint8", [1]], ["b", "uint8", [1]]]
    refuse(specs, [b"\0"] * n_frames, f"header announces 2 array frames but {n_frames} frames follow")


@pytest.mark.parametrize("dtype", ["object", "complex64", "<U4", "|S3", "float128", "bool_", "f4", 5, None])
def test_disallowed_or_malformed_dtypes(dtype):
    if isinstance(dtype, str):
        refuse([["a", dtype, [1]]], [b"\0"], f"array 'a': dtype {dtype!r} is not allowed")
    else:
        refuse([["a", dtype, [1]]], [b"\0"], "malformed array spec")


@pytest.mark.parametrize("spec", [["a", "uint8"], ["a", "uint8", [1], 0], [1, "uint8", [1]], ["a", "uint8", 1],
                                  ["a", "uint8", None], "a", None, {"a": 1}])
def test_malformed_spec(spec):
    refuse([spec], [b"\0"], "malformed array spec")


@pytest.mark.parametrize("shape", [[-1], [2, -3], [True], [1.0], ["1"], [None], [[1]], [1] * 9])
def test_invalid_shape(shape):
    refuse([["a", "uint8", shape]], [b"\0"], "array 'a': invalid shape")


def test_eight_dimensions_are_allowed():
    out = codec.decode_arrays([["a", "uint8", [1] * 8]], [b"\x05"])
    assert out["a"].shape == (1,) * 8


def test_duplicate_array_name():
    refuse([["a", "uint8", [1]], ["a", "uint8", [1]]], [b"\0", b"\1"], "array 'a' appears twice")


def test_too_many_arrays():
    specs = [[f"a{i}", "uint8", [0]] for i in range(codec.MAX_ARRAYS + 1)]
    refuse(specs, [b""] * len(specs), f"{codec.MAX_ARRAYS + 1} arrays exceed the limit of {codec.MAX_ARRAYS}")


def test_max_bytes_is_a_total_over_all_arrays():
    specs = [["a", "float32", [10]], ["b", "float32", [10]]]
    frames = [bytes(40), bytes(40)]
    assert set(codec.decode_arrays(specs, frames, max_bytes=80)) == {"a", "b"}
    refuse(specs, frames, "message exceeds the 79-byte limit", max_bytes=79)


def test_header_size_limit():
    big = header([], body={"pad": "x" * codec.MAX_HEADER_BYTES})
    with pytest.raises(ProtocolError, match=f"header of {len(big)} bytes exceeds the {codec.MAX_HEADER_BYTES}-byte"):
        codec.decode_header(big, V)


@pytest.mark.parametrize("raw", [b"", b"\xc1", b"\x92\x01", b"\xa5abc", b"\x80\x80", b"\xd9\x02\xff\xfe"],
                         ids=["empty", "reserved-byte", "short-array", "short-str", "two-objects", "bad-utf8"])
def test_header_not_msgpack(raw):
    with pytest.raises(ProtocolError, match="header is not valid msgpack"):
        codec.decode_header(raw, V)


def test_header_with_non_string_map_keys():
    raw = b"\x81\x01\xa1x"  # {1: "x"}: msgpack itself refuses non-string keys (strict_map_key)
    with pytest.raises(ProtocolError, match="header is not valid msgpack"):
        codec.decode_header(raw, V)


def test_header_version_mismatch():
    with pytest.raises(ProtocolError, match=re.escape(f"protocol version {V + 1} does not match ours ({V})")):
        codec.decode_header(header([], version=V + 1), V)


def test_a_version_mismatch_names_the_peers_version_and_message_type():
    """What the learner needs to answer an actor of other code in words (and a version) it can read."""
    frame = codec.encode(V + 1, "handshake", {"num_envs": 1})[0]
    with pytest.raises(VersionMismatch) as caught:
        codec.decode_header(frame, V)
    assert (caught.value.theirs, caught.value.ours, caught.value.message_type) == (V + 1, V, "handshake")


def test_decoding_never_unpickles():
    """An 'object' array would let a peer run code through pickle; the codec refuses it before reading bytes."""
    import pickle
    payload = pickle.dumps([1, 2])
    refuse([["a", "object", [1]]], [payload], "dtype 'object' is not allowed")


# ---------------------------------------------------------------------------------- known bugs (reported)

@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_zero_dimensional_array_round_trips(dtype):
    arr = np.array(3, dtype=dtype)
    _, _, out = round_trip({"s": arr})
    assert out["s"].shape == () and out["s"] == arr


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">f8", ">u2"])
def test_byte_swapped_array_keeps_its_values(dtype):
    arr = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    _, _, out = round_trip({"a": arr})
    np.testing.assert_array_equal(out["a"], arr)


@pytest.mark.parametrize("dtype,shape,nbytes", [
    ("uint8", [3, (2**64 + 8) // 3], 8),     # 3 * 6148914691236517208 wraps to 8
    ("uint8", [2**32, 2**32], 0),            # wraps to 0
    ("float64", [0, 2**62, 4], 0),           # zero elements, but numpy refuses the shape as too big
    ("uint8", [0, 2**63], 0),                # zero elements, a dimension beyond intp
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_shape_whose_size_overflows(dtype, shape, nbytes):
    with pytest.raises(ProtocolError):
        codec.decode_arrays([["a", dtype, shape]], [bytes(nbytes)])
