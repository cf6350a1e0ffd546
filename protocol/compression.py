"""Compressed observation frames on the wire, negotiated at handshake (issue 34).

A raw 84x84 frame is 7,056 bytes per agent step; compressed with zstd level 1 as one call per message it is
about 70-550 bytes (docs/scaling.md). The actor offers the codecs it has (`Handshake.codecs`), the learner
picks one (`Welcome.codec`); a peer that offers none, or a learner that names none, means raw frames, as
before. Only step reports are compressed, and in them only the arrays that travel in frames of their own
(the observations): the header still declares each array's dtype and shape, so the learner knows the exact
size every frame must inflate to, and refuses a frame that declares or yields any other (a bomb costs its
sender's slots, never the learner's memory).

Delta: for integer observations, a message may carry each env's frame XOR the previous frame of the same
env (between consecutive Atari frames 1-2% of pixels change), except the envs whose episode just ended:
their row is the first frame of a new episode, sent as it is, never a delta of the last game's. Each side
derives those rows from the message's own terminated/truncated flags. The sender tries both ways every
PROBE_EVERY messages and keeps the smaller ("where it pays": SpaceInvaders, Breakout yes, Pong no).

zstandard is a base dependency (one maintained wheel, no system library; a better ratio than lz4 at these
sizes); lz4 is used when installed and picked by name only.
"""
from __future__ import annotations

import numpy as np

from protocol import codec
from protocol.errors import ProtocolError

try:
    import zstandard
except ImportError:  # an old install: offers no codec, gets raw frames
    zstandard = None
try:
    import lz4.block as lz4_block
except ImportError:
    lz4_block = None

NONE = "none"
PREFERENCE = ("zstd", "lz4")  # the learner's pick among what both sides have, best first
SETTINGS = ("auto", NONE, *PREFERENCE)  # cluster.codec
PROBE_EVERY = 64  # messages between the sender's tries of delta against plain
ZSTD_LEVEL = 1  # higher levels cost the actor more CPU for a few percent on these frames
MAX_OFFERED = 8


def available() -> list[str]:
    """The codecs this install can encode and decode, best first."""
    return [name for name, lib in zip(PREFERENCE, (zstandard, lz4_block)) if lib is not None]


def offered_codecs(value) -> list[str] | None:
    """A handshake's `codecs` field, validated: None (an older actor: raw frames) or a short list of names."""
    if value is None:
        return None
    if type(value) is not list or len(value) > MAX_OFFERED or not all(type(v) is str and len(v) <= 16 for v in value):
        raise ProtocolError(f"handshake: codecs must be a list of at most {MAX_OFFERED} short names, got {value!r:.80}")
    return value


def pick(setting: str, offered: list[str] | None, remote: bool) -> str:
    """The learner's choice for one actor. auto: the best codec both sides have when the actor is `remote`
    (TCP beyond loopback), none otherwise; a named codec: that one if the actor offers it (an actor without
    it gets raw frames); none: raw frames."""
    ours = [c for c in available() if c in (offered or ())]
    if setting == "auto":
        return ours[0] if remote and ours else NONE
    return setting if setting in ours else NONE


class _Zstd:
    def __init__(self):
        # no checksum: verifying it doubled the learner's decompression time, and TCP and CURVE (which
        # authenticates every message) already keep frames intact on the wire; a frame that decodes to other
        # pixels is no worse than a raw frame with other pixels: the sizes are what the learner must trust
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.decompressor = zstandard.ZstdDecompressor()

    def compress(self, data) -> bytes:
        return self.compressor.compress(data)

    def decompress(self, data, size: int) -> bytes:
        declared = zstandard.frame_content_size(data)  # decompress() would allocate what the frame declares
        if declared not in (size, -1):
            raise ProtocolError(f"compressed frame declares {declared} bytes, the header {size}")
        return self.decompressor.decompress(data, max_output_size=size)


class _Lz4:
    @staticmethod
    def compress(data) -> bytes:
        return lz4_block.compress(data, store_size=False)

    @staticmethod
    def decompress(data, size: int) -> bytes:
        return lz4_block.decompress(data, uncompressed_size=size)


def _make(name: str):
    if name == "zstd" and zstandard is not None:
        return _Zstd()
    if name == "lz4" and lz4_block is not None:
        return _Lz4()
    raise ValueError(f"codec {name!r} is not available here (have: {available()})")


class Sender:
    """An actor's encoder for one env group: keeps the group's previous observations for the delta."""

    def __init__(self, name: str):
        self.name, self.lib = name, _make(name)
        self.prev: np.ndarray | None = None
        self.sent = 0
        self.use_delta = False

    def pack(self, report) -> tuple[dict, dict[str, bytes]]:
        """(body fields, {array name: compressed bytes}) for a step report: its observations compressed, as a
        delta where that pays. Small arrays stay inline and uncompressed."""
        obs = report.obs
        can_delta = (not report.first and self.prev is not None and obs.dtype.kind in "ui"
                     and self.prev.shape == obs.shape)
        packed, delta = self._obs(report, obs) if can_delta else (self.lib.compress(obs), False)
        self.prev = obs.copy()  # the actor rewrites its obs buffer in place on the next step
        self.sent += 1
        out = {"obs": packed}
        if report.final_obs is not None and report.final_obs.nbytes > codec.INLINE_MAX_BYTES:
            out["final_obs"] = self.lib.compress(np.ascontiguousarray(report.final_obs))
        return {"z": self.name, "d": delta}, out

    def _obs(self, report, obs: np.ndarray) -> tuple[bytes, bool]:
        probe = self.sent % PROBE_EVERY == 0  # try both, keep the smaller until the next probe
        if not (probe or self.use_delta):
            return self.lib.compress(obs), False
        wire = np.bitwise_xor(obs, self.prev)
        reset = report.terminated | report.truncated  # first frames of new episodes: sent as they are
        if np.count_nonzero(reset):
            wire[reset] = obs[reset]
        delta = self.lib.compress(wire)
        if probe:
            plain = self.lib.compress(obs)
            self.use_delta = len(delta) < len(plain)
            if not self.use_delta:
                return plain, False
        return delta, True


class Receiver:
    """The learner's decoder for one actor: inflates frames to the exact sizes the header declares and
    undoes the delta against each group's previous observations."""

    def __init__(self, name: str, groups: int):
        self.name, self.lib = name, _make(name)
        self.prev: list[np.ndarray | None] = [None] * groups

    def inflate(self, body: dict, specs: list, frames: list, max_bytes: int) -> list:
        """The step report's frames, raw: each compressed frame inflated to its spec's size."""
        z = body.get("z")
        if z is None:
            return frames
        if z != self.name:
            raise ProtocolError(f"frames compressed with {z!r:.20}, but {self.name!r} was agreed")
        sizes = _framed_sizes(specs, max_bytes)
        if len(sizes) != len(frames):
            raise ProtocolError(f"header announces {len(sizes)} array frames but {len(frames)} frames follow")
        return [self._inflate(f, size) for f, size in zip(frames, sizes)]

    def _inflate(self, frame, size: int) -> bytes:
        try:
            out = self.lib.decompress(codec.buffer_of(frame), size)
        except ProtocolError:
            raise
        except Exception as exc:  # zstd and lz4 raise their own types on corrupt input
            raise ProtocolError(f"corrupt compressed frame ({type(exc).__name__}: {str(exc)[:80]})") from None
        if len(out) != size:
            raise ProtocolError(f"compressed frame inflates to {len(out)} bytes, the header declares {size}")
        return out

    def restore(self, report, body: dict):
        """The report with its delta rows undone; remembers its observations for the next delta."""
        delta = body.get("d", False)
        if type(delta) is not bool:
            raise ProtocolError("field 'd' must be bool")
        if delta:
            prev = self.prev[report.group]
            if report.first or prev is None or prev.shape != report.obs.shape:
                raise ProtocolError("a delta frame without a previous frame to apply it to")
            obs = np.bitwise_xor(report.obs, prev)
            reset = report.terminated | report.truncated  # first frames of new episodes: sent as they are
            if np.count_nonzero(reset):
                obs[reset] = report.obs[reset]
            obs.flags.writeable = False  # like every decoded array
            report.obs = obs
        self.prev[report.group] = report.obs
        return report


def _framed_sizes(specs: list, max_bytes: int) -> list[int]:
    """The byte size of each array that travels in a frame of its own, from the header's specs (checked as
    the general decoder checks them, so the bound is the one it will enforce)."""
    sizes, total = [], 0
    for spec in specs:
        if type(spec) is not list or not 3 <= len(spec) <= 4 or type(spec[2]) is not list:
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        dtype = codec.DTYPES.get(spec[1]) if type(spec[1]) is str else None
        if dtype is None or len(spec[2]) > codec.MAX_DIMS:
            raise ProtocolError(f"malformed array spec {spec!r:.80}")
        size = dtype.itemsize
        for d in spec[2]:  # plain ints: no overflow on hostile shapes
            if type(d) is not int or d < 0:
                raise ProtocolError(f"malformed array spec {spec!r:.80}")
            size *= d
        total += size
        if total > max_bytes:
            raise ProtocolError(f"message exceeds the {max_bytes}-byte limit")
        if len(spec) == 3:
            sizes.append(size)
    return sizes
