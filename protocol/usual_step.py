"""The usual step report, decoded against a template of what the handshake agreed, in a few comparisons.

Most step reports are alike: the agreed observation, rewards and flags inline, no episode ended and no env
truncated. For those, the array specs are compared with a template (list comparisons run in C) and the
arrays viewed, in a handful of numpy calls. Anything else (an episode end, a truncation, another layout, a
non-finite number, anything malformed) answers None and goes through the general decoder in messages.py,
which checks it field by field and names what is wrong. So this path accepts only messages the general one
accepts, and gives the same arrays; it is an optimization, never a second set of rules.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from protocol import codec

# no episode ended, no env truncated: the last three specs of the usual report, data included
_NONE_ENDED = [["episode_returns", "float64", [0], b""], ["episode_lengths", "int64", [0], b""],
               ["final_index", "int64", [0], b""]]
_FLOAT32, _BOOL = codec.DTYPES["float32"], codec.DTYPES["bool"]
_INTS = [int, int, int]


@dataclass(frozen=True)
class Template:
    obs: list  # ["obs", dtype name, [k, *obs_shape]], as msgpack decodes the spec
    obs_dims: list  # [int] * its number of dims: dims must be ints, not floats or bools equal to them
    obs_dtype: np.dtype
    obs_shape: tuple
    obs_bytes: int
    per_env: tuple  # (["rewards", "float32", [k]], 4k), (["terminated", "bool", [k]], k), (["truncated", ...], k)


@functools.lru_cache(maxsize=64)
def template(k: int, obs_shape: tuple, obs_dtype: str, max_bytes: int) -> Template | None:
    """The template of the usual report for an Expect's fields; None where the general decoder would refuse
    even the usual report (over max_bytes) or the dtype is not one the wire allows."""
    dtype = codec.DTYPES.get(obs_dtype)
    shape = (k, *obs_shape)
    if dtype is None or any(type(d) is not int or d < 0 for d in shape):
        return None
    obs_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    bound = int(np.prod([d or 1 for d in shape], dtype=object))
    if obs_bytes + 6 * k > max_bytes or bound > max_bytes:
        return None
    per_env = ((["rewards", "float32", [k]], 4 * k), (["terminated", "bool", [k]], k), (["truncated", "bool", [k]], k))
    return Template(["obs", obs_dtype, list(shape)], [int] * len(shape), dtype, shape, obs_bytes, per_env)


def usual_step(body: dict, specs: list, frames: list, expect) -> tuple | None:
    """(group, first, obs, rewards, terminated, truncated) of a usual step report, or None: not one (the
    general decoder then decides). `expect` is the sender's messages.Expect."""
    t = template(expect.group_size, expect.obs_shape, expect.obs_dtype, expect.max_bytes)
    if t is None or len(specs) != 7 or specs[4:] != _NONE_ENDED or list(map(_first_dim_type, specs[4:])) != _INTS:
        return None  # (0 == False == 0.0: the dims' types are checked too)
    group, first = body.get("group"), body.get("first")
    if type(group) is not int or not 0 <= group < expect.groups or type(first) is not bool:
        return None
    obs = _obs(specs[0], frames, t)
    per_env = [_inline(spec, *want) for spec, want in zip(specs[1:4], t.per_env)]
    if obs is None or None in per_env:
        return None
    rewards = np.frombuffer(per_env[0], _FLOAT32)
    terminated, truncated = np.frombuffer(per_env[1], _BOOL), np.frombuffer(per_env[2], _BOOL)
    if (np.count_nonzero(truncated) or not within(rewards, expect.max_abs_reward)
            or (obs.dtype.kind == "f" and not within(obs, expect.max_abs_obs))):
        return None  # a truncation needs its final observation matched; a bad number needs its error line
    return group, first, obs, rewards, terminated, truncated


def _obs(spec, frames: list, t: Template) -> np.ndarray | None:
    """The observation array, framed (the usual) or inline (small observations), if its spec is the agreed one."""
    if type(spec) is not list or spec[:3] != t.obs or list(map(type, spec[2])) != t.obs_dims:
        return None
    if len(spec) == 3 and len(frames) == 1:
        buf = codec.buffer_of(frames[0])
        nbytes = buf.nbytes
    elif len(spec) == 4 and not frames and type(spec[3]) is bytes:
        buf = spec[3]
        nbytes = len(buf)
    else:
        return None
    return np.frombuffer(buf, t.obs_dtype).reshape(t.obs_shape) if nbytes == t.obs_bytes else None


def _inline(spec, want: list, nbytes: int) -> bytes | None:
    """The inline data of a per-env vector's spec, if the spec is the agreed one."""
    if type(spec) is not list or len(spec) != 4 or spec[:3] != want or type(spec[2][0]) is not int:
        return None
    data = spec[3]
    return data if type(data) is bytes and len(data) == nbytes else None


def _first_dim_type(spec: list) -> type:
    return type(spec[2][0])


def within(arr: np.ndarray, bound: float) -> bool:
    """Every element finite and within [-bound, bound] (bound finite): NaN fails, as it compares false. Two C
    calls, as the finite check it replaced (the general decoder in messages.py uses it too)."""
    return arr.size == 0 or bool(np.abs(arr).max() <= bound)
