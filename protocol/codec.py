"""Frames <-> (type, body, arrays): a msgpack header frame followed by one raw frame per array.

The header is {"v": version, "t": type, "b": body map, "a": [[name, dtype, shape], ...]}. Arrays travel as
their raw C-contiguous bytes; dtype and shape come from the header. Nothing is ever unpickled.
"""
from __future__ import annotations

import math

import msgpack
import numpy as np

from protocol.errors import ProtocolError

ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "float16", "float32", "float64"]
)
MAX_HEADER_BYTES = 1 << 20
MAX_ARRAYS = 1024
MAX_DIMS = 8
DEFAULT_MAX_BYTES = 64 << 20


def encode(version: int, msg_type: str, body: dict, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Build the frames of one message; array frames are zero-copy views where possible."""
    specs, frames = [], []
    for name, arr in (arrays or {}).items():
        arr = np.asarray(arr)
        if not arr.dtype.isnative:  # the wire is native-endian; the header names no byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        if arr.dtype.name not in ALLOWED_DTYPES:
            raise ProtocolError(f"cannot send array {name!r}: dtype {arr.dtype} is not allowed")
        specs.append([name, arr.dtype.name, list(arr.shape)])
        frames.append(memoryview(arr).cast("B") if arr.size else b"")
    header = msgpack.packb({"v": version, "t": msg_type, "b": body, "a": specs}, use_bin_type=True)
    return [header, *frames]


def _buffer(frame) -> memoryview:
    # zmq.Frame (copy=False) exposes .buffer; bytes and memoryview work directly
    return memoryview(getattr(frame, "buffer", frame))


def decode_header(frame, version: int) -> tuple[str, dict, list]:
    raw = _buffer(frame)
    if raw.nbytes > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {raw.nbytes} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True,
                                 max_array_len=MAX_ARRAYS * 4, max_map_len=4096)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"header is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(header, dict) or not {"v", "t", "b", "a"} <= header.keys():
        raise ProtocolError("header is not a map with keys v, t, b, a")
    if header["v"] != version:
        raise ProtocolError(f"protocol version {header['v']!r} does not match ours ({version})")
    if not isinstance(header["t"], str) or not isinstance(header["b"], dict) or not isinstance(header["a"], list):
        raise ProtocolError("header fields have the wrong types")
    return header["t"], header["b"], header["a"]


def decode_arrays(specs: list, frames: list, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, np.ndarray]:
    """Validate the array specs against the frames and view each frame as its array (no copy)."""
    if len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"{len(specs)} arrays exceed the limit of {MAX_ARRAYS}")
    if len(frames) != len(specs):
        raise ProtocolError(f"header announces {len(specs)} arrays but {len(frames)} frames follow")
    arrays, total = {}, 0
    for spec, frame in zip(specs, frames):
        if not (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and isinstance(spec[1], str) and isinstance(spec[2], list)):
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        name, dtype, shape = spec
        if dtype not in ALLOWED_DTYPES:
            raise ProtocolError(f"array {name!r}: dtype {dtype!r} is not allowed")
        if len(shape) > MAX_DIMS or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ProtocolError(f"array {name!r}: invalid shape {shape!r:.80}")
        if math.prod(max(d, 1) for d in shape) > max_bytes:  # plain ints: no overflow on hostile shapes
            raise ProtocolError(f"message exceeds the {max_bytes}-byte limit")
        expected = math.prod(shape) * np.dtype(dtype).itemsize
        total += expected
        if total > max_bytes:
            raise ProtocolError(f"message exceeds the {max_bytes}-byte limit")
        buf = _buffer(frame)
        if buf.nbytes != expected:
            raise ProtocolError(f"array {name!r}: frame has {buf.nbytes} bytes, {dtype}{tuple(shape)} needs {expected}")
        if name in arrays:
            raise ProtocolError(f"array {name!r} appears twice")
        arrays[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return arrays
