"""Property-style fuzzing of decode(): whatever arrives, the outcome is a valid message or a ProtocolError.

No hypothesis dependency: seeded numpy RNGs, fixed case counts (each test well under a second), and on failure
the assertion lists the first offending inputs so they can be replayed.
"""
from __future__ import annotations

import copy

import msgpack
import numpy as np
import pytest

from protocol import messages as m
from protocol.errors import ProtocolError


def outcome(frames, expect, check_invariants):
    """None if decode behaved (valid message that keeps its promises, or ProtocolError), else a description."""
    try:
        msg = m.decode(frames, expect=expect)
    except ProtocolError as exc:
        return None if str(exc) else "ProtocolError without a message"
    except Exception as exc:  # noqa: BLE001 - this is exactly what the fuzz looks for
        return f"{type(exc).__name__}: {exc}"[:200]
    try:
        check_invariants(msg, expect)
    except AssertionError as exc:
        return f"decoded {type(msg).__name__} breaks an invariant: {exc}"[:200]
    return None


def run_cases(cases, check_invariants):
    failures = []
    for label, frames, expect in cases:
        problem = outcome(frames, expect, check_invariants)
        if problem is not None:
            failures.append(f"{label}: {problem} | frames={[bytes(f)[:48] for f in frames]!r:.300}")
    assert not failures, f"{len(failures)} bad outcomes, first ones:\n" + "\n".join(failures[:8])


def valid_corpus(pt):
    return [(label, pt.to_wire(m.encode(msg)), expect) for label, msg, expect in pt.sample_cases()]


def bitflip(rng, data: bytes, n: int) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for pos in rng.integers(0, len(buf), size=n):
        buf[pos] ^= 1 << int(rng.integers(0, 8))
    return bytes(buf)


def mutate_frames(rng, frames: list[bytes]) -> tuple[str, list[bytes]]:
    frames = list(frames)
    kind = int(rng.integers(0, 9))
    i = int(rng.integers(0, len(frames)))
    if kind == 0:
        frames[0] = bitflip(rng, frames[0], int(rng.integers(1, 4)))
        return "header-bitflip", frames
    if kind == 1:
        frames[0] = frames[0][:int(rng.integers(0, max(1, len(frames[0]))))]
        return "header-truncate", frames
    if kind == 2:
        frames[i] = bitflip(rng, frames[i], int(rng.integers(1, 9)))
        return "frame-bitflip", frames
    if kind == 3:
        frames[i] = frames[i][:int(rng.integers(0, len(frames[i]) + 1))]
        return "frame-truncate", frames
    if kind == 4:
        frames[i] = frames[i] + rng.bytes(int(rng.integers(1, 9)))
        return "frame-extend", frames
    if kind == 5:
        del frames[i]
        return "frame-drop", frames
    if kind == 6:
        frames.insert(i, frames[i])
        return "frame-duplicate", frames
    if kind == 7:
        frames = frames[:int(rng.integers(0, len(frames) + 1))]
        return "message-truncate", frames
    j = int(rng.integers(0, len(frames)))
    frames[i], frames[j] = frames[j], frames[i]
    return "frame-swap", frames


def test_random_byte_strings(pt):
    rng = np.random.default_rng(20240601)
    expects = [None, pt.EXPECT_IMG, pt.EXPECT_VEC]
    cases = []
    for n in range(3000):
        frames = [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 5)))]
        cases.append((f"random#{n}", frames, expects[n % 3]))
    run_cases(cases, pt.check_invariants)


def test_random_msgpack_values_as_headers(pt):
    """Random bytes rarely parse as msgpack; random msgpack values exercise the checks behind the parser."""
    rng = np.random.default_rng(7)
    atoms = [0, 1, -1, 2**63 - 1, -2**63, True, False, None, 0.5, float("nan"), "", "step", "v", b"\0", [], {}]
    cases = []
    for n in range(1500):
        value = {"v": 1, "t": ["step", "actions", "handshake", "goodbye", "x"][n % 5], "b": {}, "a": []}
        for key in rng.choice(["v", "t", "b", "a"], size=int(rng.integers(0, 3)), replace=False):
            value[str(key)] = atoms[int(rng.integers(0, len(atoms)))]
        if rng.random() < 0.3:
            value = atoms[int(rng.integers(0, len(atoms)))]
        frames = [msgpack.packb(value)] + [rng.bytes(int(rng.integers(0, 16))) for _ in range(int(rng.integers(0, 3)))]
        cases.append((f"msgpack#{n}", frames, [None, pt.EXPECT_IMG][n % 2]))
    run_cases(cases, pt.check_invariants)


@pytest.mark.parametrize("with_expect", [True, False], ids=["expect", "no-expect"])
def test_mutations_of_valid_messages(with_expect, pt):
    rng = np.random.default_rng(12345 + with_expect)
    corpus = valid_corpus(pt)
    cases = []
    for n in range(4000):
        label, frames, expect = corpus[n % len(corpus)]
        frames = list(frames)
        steps = []
        for _ in range(int(rng.integers(1, 4))):
            if not frames:
                break
            kind, frames = mutate_frames(rng, frames)
            steps.append(kind)
        cases.append((f"{label}#{n}[{'+'.join(steps)}]", frames, expect if with_expect else None))
    run_cases(cases, pt.check_invariants)


def test_the_fuzz_harness_catches_a_stray_exception(pt, monkeypatch):
    """Guard against a harness that passes everything: a decode that raises KeyError must be reported."""
    def broken(frames, expect=None, max_bytes=0):
        raise KeyError("boom")
    monkeypatch.setattr(m, "decode", broken)
    with pytest.raises(AssertionError, match="KeyError"):
        run_cases(valid_corpus(pt)[:1], pt.check_invariants)


def test_the_fuzz_harness_catches_a_broken_promise(pt, monkeypatch):
    """...and so must a decoded step report whose obs does not have the agreed shape."""
    real = m.decode
    def lax(frames, expect=None, max_bytes=0):
        msg = real(frames, expect=None)
        if isinstance(msg, m.StepReport):
            msg.obs = msg.obs[:, :1]
        return msg
    monkeypatch.setattr(m, "decode", lax)
    step = [c for c in valid_corpus(pt) if c[0] == "step-plain"]
    with pytest.raises(AssertionError, match="breaks an invariant"):
        run_cases(step, pt.check_invariants)


# ---------------------------------------------------------------------------------- structured (header-aware)

# values a hostile or buggy peer might put where the protocol wants something else
ODD_VALUES = [0, -1, 1, 2, 3, 4096, 4097, 2**31, 2**63 - 1, -2**63, 2**64 - 1, True, False, None, 0.0, 1.5,
              float("inf"), float("-inf"), float("nan"), "", "0", "x" * 200, b"", b"\xff", [], [0], [1, 2], {}, {"k": 1}]
ODD_DIMS = [0, 1, 2, 3, 4, 5, 6, 7, 255, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, (2**64 + 8) // 3, -1]
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "float16", "float32", "float64",
          "object", "complex64", "<U4", "", "float128"]


def mutate_header(rng, header: dict):
    """One structural edit to a decoded header; returns a label."""
    pick = lambda seq: seq[int(rng.integers(0, len(seq)))]  # noqa: E731
    kind = int(rng.integers(0, 6))
    specs = header["a"]
    if kind == 0 and header["b"]:
        key = pick(sorted(header["b"]))
        header["b"][key] = copy.deepcopy(pick(ODD_VALUES))
        return f"body[{key}]"
    if kind == 1 and specs:
        spec = pick(specs)
        spec[1] = pick(DTYPES)
        return f"dtype[{spec[0]}]"
    if kind == 2 and specs:
        spec = pick(specs)
        shape = spec[2]
        edit = int(rng.integers(0, 4))
        if edit == 0 or not shape:
            shape.append(pick(ODD_DIMS))
        elif edit == 1:
            shape.pop(int(rng.integers(0, len(shape))))
        elif edit == 2:
            shape[int(rng.integers(0, len(shape)))] = pick(ODD_DIMS)
        else:
            spec[2] = []
        return f"shape[{spec[0]}]"
    if kind == 3 and specs:
        spec = specs.pop(int(rng.integers(0, len(specs))))
        return f"drop[{spec[0]}]"
    if kind == 4:
        header["t"] = pick(list(m.TYPES))
        return "type"
    key = pick(["group", "first", "version", "obs_space", "action_space", "num_envs", "groups", "slots", "n"])
    header["b"][key] = copy.deepcopy(pick(ODD_VALUES))
    return f"add[{key}]"


def frames_for(rng, header: dict, old_frames: list[bytes]) -> list[bytes]:
    """Frames sized to fit the (mutated) specs where that is cheap, so decoding gets past the byte counts."""
    frames = []
    for i, spec in enumerate(header["a"]):
        try:
            n = int(np.prod(spec[2], dtype=object)) * np.dtype(spec[1]).itemsize
        except Exception:  # noqa: BLE001 - odd dtypes/shapes: any frame will do
            n = -1
        if 0 <= n <= 1 << 16:
            data = rng.bytes(n) if rng.random() < 0.5 else (old_frames[i] + bytes(n))[:n] if i < len(old_frames) \
                else bytes(n)
        else:
            data = old_frames[i] if i < len(old_frames) else b""
        frames.append(data)
    return [msgpack.packb(header, use_bin_type=True), *frames]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_structured_mutations_of_valid_messages(pt):
    rng = np.random.default_rng(99)
    corpus = valid_corpus(pt)
    cases = []
    for n in range(3000):
        label, frames, expect = corpus[n % len(corpus)]
        header = msgpack.unpackb(frames[0], raw=False)
        edits = [mutate_header(rng, header) for _ in range(int(rng.integers(1, 3)))]
        new_frames = frames_for(rng, header, frames[1:])
        cases.append((f"{label}#{n}[{'+'.join(edits)}]", new_frames, expect if n % 3 else None))
    run_cases(cases, pt.check_invariants)
