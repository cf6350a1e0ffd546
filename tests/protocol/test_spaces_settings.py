"""SpaceSpec and EnvSettings as they cross the wire: round trips, and ProtocolError for anything malformed."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.settings import ENV_KEYS_OF_VERSION, EnvSettings
from protocol.spaces import SpaceSpec

REPO = Path(__file__).resolve().parents[2]


def good(**overrides) -> dict:
    data = {"kind": "box", "shape": [3, 4], "dtype": "float32", "n": 0, "low": [-1.0] * 12, "high": [1.0] * 12}
    data.update(overrides)
    return data


@pytest.mark.parametrize("spec", [
    SpaceSpec(kind="discrete", n=18),
    SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8"),
    SpaceSpec(kind="box", shape=(3,), dtype="float64", low=[-1.0, float("-inf"), 0.0], high=[1.0, float("inf"), 2.5]),
], ids=["discrete", "image", "vector"])
def test_space_round_trips_through_msgpack(spec):
    data = msgpack.unpackb(msgpack.packb(spec.to_dict()))
    back = SpaceSpec.from_dict(data)
    assert back == spec and isinstance(back.shape, tuple)


def test_space_size():
    assert SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8").size == 4 * 84 * 84
    assert SpaceSpec(kind="discrete", n=3).size == 1


@pytest.mark.parametrize("data,match", [
    (None, "space: expected a map, got NoneType"),
    ([["kind", "box"]], "space: expected a map, got list"),
    ("box", "space: expected a map, got str"),
    (7, "space: expected a map, got int"),
    ({}, "space: malformed description"),
    ({k: v for k, v in good().items() if k != "shape"}, "space: malformed description"),
    ({k: v for k, v in good().items() if k != "high"}, "space: malformed description"),
    (good(kind="tuple"), "unknown kind 'tuple'"),
    (good(kind=None), "unknown kind None"),
    (good(kind=["box"]), "unknown kind ['box']"),
    (good(shape=5), "space: malformed description"),
    (good(shape=None), "space: malformed description"),
    (good(shape=[3, 0]), "non-positive dimension"),
    (good(shape=[-3]), "non-positive dimension"),
    (good(shape=["x"]), "space: malformed description"),
    (good(shape=[[3]]), "space: malformed description"),
    (good(shape=[float("nan")]), "space: malformed description"),
    (good(n="many"), "space: malformed description"),
    (good(n=None), "space: malformed description"),
    (good(low=5.0), "space: malformed description"),
    (good(low=["low"]), "space: malformed description"),
    (good(high=[None]), "space: malformed description"),
    (good(kind="discrete", n=0), "discrete space needs n > 0"),
    (good(kind="discrete", n=-2), "discrete space needs n > 0"),
])
def test_malformed_space(data, match):
    with pytest.raises(ProtocolError, match=re.escape(match)):
        SpaceSpec.from_dict(data)


@pytest.mark.parametrize("data", [good(kind="discrete", n=float("inf")), good(shape=[float("inf")]),
                                  good(shape=[2, float("-inf")])], ids=["n", "shape", "negative-shape"])
def test_space_with_infinite_integers(data):
    with pytest.raises(ProtocolError, match="space: "):
        SpaceSpec.from_dict(data)


def test_settings_round_trip_through_msgpack():
    settings = EnvSettings(env_id="CartPole-v1", frame_stack=1, sticky_actions=0.25, max_episode_steps=0)
    assert EnvSettings.from_dict(msgpack.unpackb(msgpack.packb(settings.to_dict()))) == settings


def test_settings_accept_a_subset_of_keys():
    assert EnvSettings.from_dict({"noop_max": 0}) == EnvSettings(noop_max=0)
    assert EnvSettings.from_dict({}) == EnvSettings()


@pytest.mark.parametrize("data,bad", [({"bogus": 1}, "['bogus']"), ({"env_id": "X", "frame_skip": 4, "zz": 0, "aa": 1},
                                                                     "['aa', 'zz']"),
                                      ({"Frame_skip": 4}, "['Frame_skip']")])
def test_settings_with_an_unknown_key(data, bad):
    with pytest.raises(ProtocolError, match=re.escape(f"env settings: unknown key(s) {bad}")):
        EnvSettings.from_dict(data)


@pytest.mark.parametrize("key, value, words", [
    ("frame_stack", 0, "env.frame_stack must be in [1, 16], got 0"),
    ("frame_stack", "4", "env.frame_stack: expected int, got '4'"),
    ("frame_stack", True, "env.frame_stack: expected int, got True"),
    ("frame_skip", 101, "env.frame_skip must be in [1, 100], got 101"),
    ("noop_max", -1, "env.noop_max must be in [0, 1000], got -1"),
    ("resolution", 4, "env.resolution must be in [8, 512], got 4"),
    ("sticky_actions", 1.5, "env.sticky_actions must be in [0, 1], got 1.5"),
    ("sticky_actions", float("nan"), "env.sticky_actions must be a finite number, got nan"),
    ("max_episode_steps", 2**31, "env.max_episode_steps must be in [0, 2147483647], got 2147483648"),
    ("env_id", " ", "env.env_id must be non-empty, got ' '"),
    ("env_id", 7, "env.env_id: expected str, got 7"),
    ("clip_rewards", 1, "env.clip_rewards: expected bool, got 1"),
])
def test_a_welcome_with_bad_env_settings_is_a_protocol_error_naming_the_key(key, value, words):
    """What the actor does with a Welcome's env (actor/env_groups.py): the learner's settings are checked against
    the same bounds as the learner's config, before any env is built from them."""
    welcome = m.Welcome(actor_id=0, slots=[0], seeds=[1], env={**EnvSettings().to_dict(), key: value},
                        obs_space=SpaceSpec(kind="discrete", n=2), action_space=SpaceSpec(kind="discrete", n=2))
    received = m.decode([bytes(frame) for frame in m.encode(welcome)])
    with pytest.raises(ProtocolError) as caught:
        EnvSettings.from_dict(received.env)
    assert str(caught.value) == f"env settings: {words}"


def test_settings_take_an_int_where_a_float_belongs():
    assert EnvSettings.from_dict({"sticky_actions": 1}).sticky_actions == 1.0
    assert isinstance(EnvSettings.from_dict({"sticky_actions": 1}).sticky_actions, float)


@pytest.mark.integration
def test_protocol_imports_neither_torch_nor_gymnasium():
    code = ("import protocol, protocol.messages, protocol.transport, sys; "
            "bad = sorted(m for m in ('torch', 'gymnasium') if m in sys.modules); "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_env_key_added_without_a_protocol_version_bump_fails_here():
    """An actor refuses a Welcome with an [env] key it does not know: a new key is a new protocol version."""
    assert max(ENV_KEYS_OF_VERSION) == m.PROTOCOL_VERSION, "ENV_KEYS_OF_VERSION has no entry for this version"
    assert sorted(ENV_KEYS_OF_VERSION[m.PROTOCOL_VERSION]) == sorted(EnvSettings.model_fields), \
        "protocol/settings.py's [env] keys changed: bump PROTOCOL_VERSION and add them to ENV_KEYS_OF_VERSION"
