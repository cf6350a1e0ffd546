"""Frames <-> (type, body, arrays): a msgpack header frame followed by one raw frame per array.

The header is {"v": version, "t": type, "b": body map, "a": [[name, dtype, shape(, bytes)], ...]}. Arrays
travel as their raw C-contiguous bytes: in a frame of their own, in order, or, when small (rewards,
flags), inline as the spec's 4th element, since every extra frame costs more than its bytes. dtype and
shape come from the header. Nothing is ever unpickled.
"""
from __future__ import annotations

import msgpack
import numpy as np

from protocol.errors import ProtocolError, VersionMismatch

ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "float16", "float32", "float64"]
)
DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPES}  # np.dtype(name) parses the name on every call
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}  # dtype.name is slow on the hot path
EMPTY = {dtype: np.frombuffer(b"", dtype) for dtype in DTYPES.values()}  # read-only, like every decoded array
MAX_HEADER_BYTES = 1 << 20
MAX_ARRAYS = 1024
MAX_DIMS = 8
DEFAULT_MAX_BYTES = 64 << 20
INLINE_MAX_BYTES = 4096
_HEADER_KEYS = frozenset(("v", "t", "b", "a"))  # built once, not per message


def encode(version: int, msg_type: str, body: dict, arrays: dict[str, np.ndarray] | None = None,
           packed: dict[str, bytes] | None = None) -> list:
    """Build the frames of one message; array frames are zero-copy views where possible. `packed`: arrays
    whose frame is this compressed form instead (see protocol/compression.py); the spec still names the
    array's dtype and shape."""
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
        if packed and name in packed:
            specs.append([name, dtype, list(arr.shape)])
            frames.append(packed[name])
        elif arr.nbytes <= INLINE_MAX_BYTES:  # small arrays ride in the header: frames cost more than bytes
            specs.append([name, dtype, list(arr.shape), arr.tobytes()])
        else:
            specs.append([name, dtype, list(arr.shape)])
            frames.append(memoryview(arr).cast("B"))
    header = msgpack.packb({"v": version, "t": msg_type, "b": body, "a": specs}, use_bin_type=True)
    return [header, *frames]


def buffer_of(frame) -> memoryview:
    # zmq.Frame (copy=False) exposes .buffer; bytes and memoryview work directly
    return memoryview(getattr(frame, "buffer", frame))


def decode_header(frame, version: int) -> tuple[str, dict, list]:
    raw = buffer_of(frame)
    if raw.nbytes > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {raw.nbytes} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True,
                                 max_array_len=MAX_ARRAYS * 4, max_map_len=4096)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"header is not valid msgpack ({type(exc).__name__})") from None
    if not isinstance(header, dict) or not _HEADER_KEYS <= header.keys():
        raise ProtocolError("header is not a map with keys v, t, b, a")
    if header["v"] != version:
        raise VersionMismatch(header["v"], version, header["t"])
    if not isinstance(header["t"], str) or not isinstance(header["b"], dict) or not isinstance(header["a"], list):
        raise ProtocolError("header fields have the wrong types")
    return header["t"], header["b"], header["a"]


def decode_arrays(specs: list, frames: list, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, np.ndarray]:
    """Validate the array specs against the frames and view each as its array (no copy).

    Runs for every message the learner receives: written for few Python calls per array (exact type
    checks, cached dtypes, one loop over the dims), with the same checks and errors as a plain version.
    """
    if len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"{len(specs)} arrays exceed the limit of {MAX_ARRAYS}")
    checked, total, framed = [], 0, 0
    for spec in specs:  # every spec first, so the error names the real problem, not a frame count
        # msgpack yields exact list/str/bytes/int; type() also keeps bools out of the dimensions
        if type(spec) is not list or not 3 <= len(spec) <= 4:
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        name, dtype_name, shape = spec[0], spec[1], spec[2]
        inline = spec[3] if len(spec) == 4 else None
        if type(name) is not str or type(dtype_name) is not str or type(shape) is not list \
                or (inline is not None and type(inline) is not bytes):
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            raise ProtocolError(f"array {name!r}: dtype {dtype_name!r} is not allowed")
        if len(shape) > MAX_DIMS:
            raise ProtocolError(f"array {name!r}: invalid shape {shape!r:.80}")
        count = bound = 1
        for d in shape:
            if type(d) is not int or d < 0:
                raise ProtocolError(f"array {name!r}: invalid shape {shape!r:.80}")
            count *= d
            bound *= d or 1  # plain ints: no overflow on hostile shapes; zeros must not hide huge dims
        if bound > max_bytes:
            raise ProtocolError(f"message exceeds the {max_bytes}-byte limit")
        expected = count * dtype.itemsize
        total += expected
        if total > max_bytes:
            raise ProtocolError(f"message exceeds the {max_bytes}-byte limit")
        framed += inline is None
        checked.append((name, dtype, shape, expected, inline))
    if len(frames) != framed:
        raise ProtocolError(f"header announces {framed} array frames but {len(frames)} frames follow")
    arrays, next_frame = {}, iter(frames)
    for name, dtype, shape, expected, inline in checked:
        buf = buffer_of(next(next_frame)) if inline is None else inline
        nbytes = len(inline) if inline is not None else buf.nbytes
        if nbytes != expected:
            where = "frame" if inline is None else "inline data"
            raise ProtocolError(f"array {name!r}: {where} has {nbytes} bytes, {dtype}{tuple(shape)} needs {expected}")
        if name in arrays:
            raise ProtocolError(f"array {name!r} appears twice")
        if not expected and len(shape) == 1:  # no episode ended, no env truncated: the usual step's three
            arrays[name] = EMPTY[dtype]
            continue
        arr = np.frombuffer(buf, dtype=dtype)
        arrays[name] = arr if len(shape) == 1 else arr.reshape(shape)  # 1-D: already the right shape
    return arrays
