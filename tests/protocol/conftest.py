"""Shared builders for the protocol tests: sample messages, the Expects they satisfy, and header surgery.

Helpers are handed out as one fixture, `pt`; `sample_case` parametrizes a test over sample_cases().
"""
from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import msgpack
import numpy as np
import pytest

from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec

# Atari-like: 2 groups of 4 envs, uint8 frame stacks, discrete actions.
EXPECT_IMG = m.Expect(group_size=4, groups=2, obs_shape=(2, 6, 6), obs_dtype="uint8")
# MuJoCo-like: 1 group of 3 envs, float32 vector observations, 2-D box actions.
EXPECT_VEC = m.Expect(group_size=3, groups=1, obs_shape=(5,), obs_dtype="float32",
                      action_shape=(2,), action_dtype="float32")


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def make_step(expect: m.Expect, group: int = 0, final_index=(), n_episodes: int = 0, first: bool = False,
              seed: int = 0) -> m.StepReport:
    """A StepReport that satisfies `expect`: truncated envs in final_index get a final_obs row each."""
    rng = np.random.default_rng(seed)
    k = expect.group_size
    final_index = np.asarray(final_index, dtype=np.int64)
    truncated = np.zeros(k, dtype=bool)
    truncated[final_index] = True
    return m.StepReport(
        group=group,
        obs=random_array(rng, (k, *expect.obs_shape), expect.obs_dtype),
        rewards=rng.standard_normal(k).astype(np.float32),
        terminated=(rng.random(k) < 0.5) & ~truncated,
        truncated=truncated,
        episode_returns=rng.standard_normal(n_episodes) * 50,
        episode_lengths=rng.integers(1, 27000, n_episodes).astype(np.int64),
        final_index=final_index,
        final_obs=(random_array(rng, (len(final_index), *expect.obs_shape), expect.obs_dtype)
                   if len(final_index) else None),
        first=first,
    )


def make_actions(expect: m.Expect, group: int = 0, version: int = 0, seed: int = 0) -> m.Actions:
    rng = np.random.default_rng(seed)
    shape = (expect.group_size, *expect.action_shape)
    if expect.action_dtype == "int64":
        actions = rng.integers(0, 6, size=shape).astype(np.int64)
    else:
        actions = rng.uniform(-1, 1, size=shape).astype(expect.action_dtype)
    return m.Actions(group=group, actions=actions, version=version)


IMG_SPACE = SpaceSpec(kind="box", shape=(2, 6, 6), dtype="uint8")
VEC_SPACE = SpaceSpec(kind="box", shape=(5,), dtype="float32", low=[-1.0, -2.0, -3.0, -4.0, -5.0],
                      high=[1.0, 2.0, 3.0, 4.0, float("inf")])
DISCRETE_SPACE = SpaceSpec(kind="discrete", n=6)
BOX_ACTION_SPACE = SpaceSpec(kind="box", shape=(2,), dtype="float32", low=[-1.0, -1.0], high=[1.0, 1.0])


def sample_cases() -> list[tuple[str, object, m.Expect | None]]:
    """(label, message, expect to decode it with) for every message type and variant."""
    return [
        ("handshake-bare", m.Handshake(num_envs=8, name="actor-7", groups=2), None),
        ("handshake-spaces", m.Handshake(num_envs=3, name="mujoco-box", env_id="HalfCheetah-v4",
                                         obs_space=VEC_SPACE, action_space=BOX_ACTION_SPACE), None),
        ("welcome", m.Welcome(actor_id=3, slots=[4, 5, 6, 7], seeds=[2**40 + 1, 7, 0, 2**62],
                              env=EnvSettings(env_id="ALE/Pong-v5", frame_stack=2).to_dict(),
                              obs_space=IMG_SPACE, action_space=DISCRETE_SPACE, run_id="run-20240101"), None),
        ("starting", m.Starting(built=12, total=32), None),
        ("step-plain", make_step(EXPECT_IMG, group=1, first=True, seed=1), EXPECT_IMG),
        ("step-finals", make_step(EXPECT_IMG, group=0, final_index=[1, 3], n_episodes=3, seed=2), EXPECT_IMG),
        ("step-vec", make_step(EXPECT_VEC, final_index=[2], n_episodes=1, seed=3), EXPECT_VEC),
        ("actions-discrete", make_actions(EXPECT_IMG, group=1, version=17, seed=4), EXPECT_IMG),
        ("actions-box", make_actions(EXPECT_VEC, version=2**33, seed=5), EXPECT_VEC),
        ("weights", m.Weights(version=12, tensors={
            "conv.weight": random_array(np.random.default_rng(6), (8, 2, 3, 3), np.float32),
            "conv.bias": random_array(np.random.default_rng(7), (8,), np.float32),
            "head.weight": random_array(np.random.default_rng(8), (6, 8), np.float64),
            "mask": random_array(np.random.default_rng(9), (3, 3), bool),
            "empty": np.zeros((0, 5), np.float16),
        }), None),
        ("goodbye", m.Goodbye(reason="actor shutting down"), None),
        ("error", m.Error(reason="env 'X' does not match"), None),
        ("error-rejoin", m.Error(reason="retired: silent for more than 10s", rejoin=True), None),
        ("redirect", m.Redirect(address="tcp://10.0.0.7:5557", reason="fewest live env slots"), None),
    ]


def to_wire(frames) -> list[bytes]:
    """What a peer receives: every frame as independent bytes."""
    return [bytes(f) for f in frames]


def header_of(frames) -> dict:
    return msgpack.unpackb(bytes(frames[0]), raw=False)


def with_header(frames, mutate) -> list[bytes]:
    """frames with the header unpacked, edited in place by mutate (its return value is ignored), repacked."""
    header = header_of(frames)
    mutate(header)
    return [msgpack.packb(header, use_bin_type=True), *to_wire(frames[1:])]


def spec_index(header: dict, name: str) -> int:
    return [s[0] for s in header["a"]].index(name)


def raw_message(msg_type: str, body: dict, arrays: dict[str, np.ndarray] | None = None,
                version: int = m.PROTOCOL_VERSION, shapes: dict | None = None) -> list[bytes]:
    """Frames built by hand (no codec.encode), so the header can say anything; shapes overrides specs."""
    arrays = arrays or {}
    shapes = shapes or {}
    specs = [[k, a.dtype.name, list(shapes.get(k, a.shape))] for k, a in arrays.items()]
    header = msgpack.packb({"v": version, "t": msg_type, "b": body, "a": specs}, use_bin_type=True)
    return [header, *[np.ascontiguousarray(a).tobytes() for a in arrays.values()]]


def step_arrays(expect: m.Expect, seed: int = 0, **overrides) -> dict[str, np.ndarray]:
    """The arrays of a valid step report for `expect`, with some replaced (None removes one)."""
    report = make_step(expect, seed=seed)
    arrays = {k: getattr(report, k) for k in ("obs", "rewards", "terminated", "truncated", "episode_returns",
                                              "episode_lengths", "final_index")}
    arrays.update(overrides)
    return {k: v for k, v in arrays.items() if v is not None}


def assert_same(decoded, original) -> None:
    """Field-by-field equality, arrays compared by dtype, shape and values (NaN-aware)."""
    assert type(decoded) is type(original), (type(decoded), type(original))
    for f in dataclasses.fields(original):
        a, b = getattr(decoded, f.name), getattr(original, f.name)
        _assert_value(a, b, f.name)


def _assert_value(a, b, where: str) -> None:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), f"{where}: {type(a)} vs {type(b)}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(b, dict) and any(isinstance(v, np.ndarray) for v in b.values()):
        assert isinstance(a, dict) and list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in b:
            _assert_value(a[key], b[key], f"{where}[{key!r}]")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def _fits(rows: np.ndarray, group: int, expect: m.Expect, shape: tuple, dtype: str) -> None:
    """One group's rows of observations or actions, as negotiated with the actor (`expect`)."""
    assert rows.shape == (expect.group_size, *shape)
    assert rows.dtype.name == dtype
    assert 0 <= group < expect.groups


def check_invariants(msg, expect: m.Expect | None) -> None:
    """What any successfully decoded message guarantees its consumer (used by the fuzz tests)."""
    assert type(msg) in m.NAMES, type(msg)
    if isinstance(msg, m.Handshake):
        assert isinstance(msg.num_envs, int) and 1 <= msg.num_envs <= 4096
        assert 1 <= msg.groups <= m.MAX_GROUPS and msg.num_envs % msg.groups == 0
        assert isinstance(msg.name, str) and (msg.env_id is None or isinstance(msg.env_id, str))
        for space in (msg.obs_space, msg.action_space):
            assert space is None or isinstance(space, SpaceSpec), repr(space)
    elif isinstance(msg, m.Welcome):
        assert isinstance(msg.obs_space, SpaceSpec) and isinstance(msg.action_space, SpaceSpec)
        assert len(msg.slots) == len(msg.seeds) and isinstance(msg.env, dict)
    elif isinstance(msg, m.Starting):
        assert 0 <= msg.built <= msg.total <= 4096
    elif isinstance(msg, m.StepReport):
        k = msg.obs.shape[0]
        assert msg.obs.ndim >= 1
        assert msg.rewards.shape == (k,) and msg.rewards.dtype == np.float32 and np.isfinite(msg.rewards).all()
        if msg.obs.dtype.kind == "f":
            assert np.isfinite(msg.obs).all()
        assert sorted(msg.final_index.tolist()) == np.flatnonzero(msg.truncated & ~msg.terminated).tolist()
        assert msg.terminated.shape == (k,) and msg.truncated.shape == (k,)
        assert msg.terminated.dtype == bool and msg.truncated.dtype == bool
        assert msg.episode_returns.ndim == 1 and msg.episode_lengths.shape == msg.episode_returns.shape
        assert msg.final_index.ndim == 1 and len(msg.final_index) <= k
        assert ((0 <= msg.final_index) & (msg.final_index < k)).all()
        if len(msg.final_index):
            assert msg.final_obs is not None and msg.final_obs.dtype == msg.obs.dtype
            assert msg.final_obs.shape == (len(msg.final_index), *msg.obs.shape[1:])
        else:
            assert msg.final_obs is None or msg.final_obs.size == 0
        assert isinstance(msg.first, bool)
        if expect is not None:
            _fits(msg.obs, msg.group, expect, expect.obs_shape, expect.obs_dtype)
    elif isinstance(msg, m.Actions):
        assert isinstance(msg.version, int)
        if expect is not None:
            _fits(msg.actions, msg.group, expect, expect.action_shape, expect.action_dtype)
    elif isinstance(msg, m.Weights):
        assert isinstance(msg.version, int)
        assert all(isinstance(t, np.ndarray) for t in msg.tensors.values())
    else:
        assert isinstance(msg.reason, str)


@pytest.fixture
def pt():
    """The helpers above, as one namespace."""
    return SimpleNamespace(
        EXPECT_IMG=EXPECT_IMG, EXPECT_VEC=EXPECT_VEC, IMG_SPACE=IMG_SPACE, VEC_SPACE=VEC_SPACE,
        DISCRETE_SPACE=DISCRETE_SPACE, BOX_ACTION_SPACE=BOX_ACTION_SPACE,
        random_array=random_array, make_step=make_step, make_actions=make_actions, sample_cases=sample_cases,
        to_wire=to_wire, header_of=header_of, with_header=with_header, spec_index=spec_index,
        raw_message=raw_message, step_arrays=step_arrays, assert_same=assert_same,
        check_invariants=check_invariants,
    )


def pytest_generate_tests(metafunc):
    """Any test taking `sample_case` runs once per (label, message, expect) in sample_cases()."""
    if "sample_case" in metafunc.fixturenames:
        cases = sample_cases()
        metafunc.parametrize("sample_case", cases, ids=[c[0] for c in cases])


@pytest.fixture
def framed(monkeypatch):
    """Every array in a frame of its own (small ones normally ride inline in the header)."""
    from protocol import codec
    monkeypatch.setattr(codec, "INLINE_MAX_BYTES", -1)


def rejects(frames, expect=None, match: str = "", **kwargs) -> ProtocolError:
    """decode must raise ProtocolError (any other exception propagates and fails the test) saying `match`."""
    with pytest.raises(ProtocolError, match=re.escape(match) if match else None) as info:
        m.decode(frames, expect=expect, **kwargs)
    return info.value
