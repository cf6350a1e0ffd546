"""Frames <-> (type, body, arrays): a msgpack header frame followed by one raw frame per array.

The header is {"v": version, "t": type, "b": body map, "a": [[name, dtype, shape(, bytes)], ...]}. Arrays
travel as their raw C-contiguous bytes: in a frame of their own, in order, or, when small (rewards,
flags), inline as the spec's 4th element, since every extra frame costs more than its bytes. dtype and
shape come from the header. Nothing is ever unpickled.
"""
from __future__ import annotations

import math

import msgpack
import numpy as np

from protocol.errors import ProtocolError

ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "float16", "float32", "float64"]
)
DTYPE_NAMES = {np.dtype(name): name for name in ALLOWED_DTYPES}  # dtype.name is slow on the hot path
MAX_HEADER_BYTES = 1 << 20
MAX_ARRAYS = 1024
MAX_DIMS = 8
DEFAULT_MAX_BYTES = 64 << 20
INLINE_MAX_BYTES = 4096


def encode(version: int, msg_type: str, body: dict, arrays: dict[str, np.ndarray] | None = None) -> list:
    """Build the frames of one message; array frames are zero-copy views where possible."""
    specs, frames = [], []
    for name, arr in (arrays or {}).items():
        arr = np.asarray(arr)
        if not arr.dtype.isnative:  # the wire is native-endian; the header names no byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        dtype = DTYPE_NAMES.get(arr.dtype)
        if dtype is None:
            raise ProtocolError(f"cannot send array {name!r}: dtype {arr.dtype} is not allowed")
        if arr.nbytes <= INLINE_MAX_BYTES:  # small arrays ride in the header: frames cost more than bytes
            specs.append([name, dtype, list(arr.shape), arr.tobytes()])
        else:
            specs.append([name, dtype, list(arr.shape)])
            frames.append(memoryview(arr).cast("B"))
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
    """Validate the array specs against the frames and view each as its array (no copy)."""
    if len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"{len(specs)} arrays exceed the limit of {MAX_ARRAYS}")
    checked, total = [], 0
    for spec in specs:  # every spec first, so the error names the real problem, not a frame count
        if not (isinstance(spec, list) and len(spec) in (3, 4) and isinstance(spec[0], str)
                and isinstance(spec[1], str) and isinstance(spec[2], list)
                and (len(spec) == 3 or isinstance(spec[3], bytes))):
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        name, dtype, shape = spec[:3]
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
        checked.append((name, dtype, shape, expected, spec[3] if len(spec) == 4 else None))
    framed = sum(1 for *_, inline in checked if inline is None)
    if len(frames) != framed:
        raise ProtocolError(f"header announces {framed} array frames but {len(frames)} frames follow")
    arrays, next_frame = {}, iter(frames)
    for name, dtype, shape, expected, inline in checked:
        buf = _buffer(next(next_frame) if inline is None else inline)
        if buf.nbytes != expected:
            where = "frame" if inline is None else "inline data"
            raise ProtocolError(f"array {name!r}: {where} has {buf.nbytes} bytes, {dtype}{tuple(shape)} needs {expected}")
        if name in arrays:
            raise ProtocolError(f"array {name!r} appears twice")
        arrays[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    return arrays
