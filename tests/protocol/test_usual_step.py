"""The usual step report's fast path: taken for the usual report, giving what the general decoder gives, and
declined (None) for everything else, which the general decoder then accepts or refuses with its own error."""
from __future__ import annotations

import msgpack
import numpy as np
import pytest

from protocol import codec
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.usual_step import usual_step
from tests.protocol.conftest import EXPECT_IMG, EXPECT_VEC, make_step

SINGLE = m.Expect(group_size=1, groups=2, obs_shape=(3,), obs_dtype="float32")


def general(frames, expect):
    """The general decoder alone: decode() without the fast path."""
    name, body, specs = codec.decode_header(frames[0], m.PROTOCOL_VERSION)
    return m._BUILDERS[name](body, codec.decode_arrays(specs, frames[1:], expect.max_bytes), expect)


def fast(frames, expect):
    _, body, specs = codec.decode_header(frames[0], m.PROTOCOL_VERSION)
    return usual_step(body, specs, frames[1:], expect)


def wire(msg) -> list[bytes]:
    return [bytes(f) for f in m.encode(msg)]


def surgery(frames, change) -> list[bytes]:
    """The same message with its header edited by change(header dict)."""
    header = msgpack.unpackb(frames[0], raw=False)
    change(header)
    return [msgpack.packb(header, use_bin_type=True), *frames[1:]]


def assert_same_report(a: m.StepReport, b: m.StepReport) -> None:
    assert (a.group, a.first, a.final_obs is None) == (b.group, b.first, b.final_obs is None)
    for name in ("obs", "rewards", "terminated", "truncated", "episode_returns", "episode_lengths", "final_index",
                 "final_obs"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            continue
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name


@pytest.mark.parametrize("expect", [EXPECT_IMG, EXPECT_VEC, SINGLE], ids=["image-framed", "vector-inline", "one-env"])
@pytest.mark.parametrize("first", [False, True])
def test_the_usual_report_takes_the_fast_path_and_decodes_as_the_general_decoder_does(expect, first):
    msg = make_step(expect, group=expect.groups - 1, first=first, seed=5)
    frames = wire(msg)
    assert fast(frames, expect) is not None
    assert_same_report(m.decode(frames, expect=expect), general(frames, expect))
    assert_same_report(m.decode(frames, expect=expect), msg)


def _set_dim(header, index, value):
    header["a"][index][2][0] = value


DECLINED = {  # the general decoder accepts these: the fast path leaves them to it
    "an episode ended": lambda e: wire(make_step(e, n_episodes=1)),
    "an env truncated": lambda e: wire(make_step(e, final_index=[0])),
}
REFUSED = {  # the general decoder refuses these (with its own error): the fast path must not take them
    "a NaN reward": lambda e: wire(_with(make_step(e), rewards=np.full(e.group_size, np.nan, np.float32))),
    "a float dim": lambda e: surgery(wire(make_step(e)), lambda h: _set_dim(h, 1, float(e.group_size))),
    "a bool dim where 1 is": lambda e: surgery(wire(make_step(e)), lambda h: _set_dim(h, 2, True)),
    "a bool dim where 0 is": lambda e: surgery(wire(make_step(e)), lambda h: _set_dim(h, 4, False)),
    "a float obs dim": lambda e: surgery(wire(make_step(e)), lambda h: _set_dim(h, 0, float(e.group_size))),
    "group a bool": lambda e: surgery(wire(make_step(e)), lambda h: h["b"].update(group=False)),
    "group out of range": lambda e: surgery(wire(make_step(e)), lambda h: h["b"].update(group=e.groups)),
    "first an int": lambda e: surgery(wire(make_step(e)), lambda h: h["b"].update(first=0)),
    "rewards one byte short": lambda e: surgery(wire(make_step(e)), lambda h: h["a"][1].__setitem__(3, h["a"][1][3][1:])),
    "an extra frame": lambda e: wire(make_step(e)) + [b"x"],
    "obs of another dtype": lambda e: surgery(wire(make_step(e)), lambda h: h["a"][0].__setitem__(1, "int8")),
}


def _with(msg: m.StepReport, **fields) -> m.StepReport:
    for k, v in fields.items():
        setattr(msg, k, v)
    return msg


@pytest.mark.parametrize("expect", [EXPECT_IMG, SINGLE], ids=["image", "one-env"])
@pytest.mark.parametrize("case", sorted(DECLINED) + sorted(REFUSED))
def test_anything_else_is_left_to_the_general_decoder(expect, case):
    frames = (DECLINED.get(case) or REFUSED.get(case))(expect)
    assert fast(frames, expect) is None
    if case in DECLINED:
        assert_same_report(m.decode(frames, expect=expect), general(frames, expect))
        return
    with pytest.raises(ProtocolError) as general_error:
        general(frames, expect)
    with pytest.raises(ProtocolError, match=None) as decode_error:
        m.decode(frames, expect=expect)
    assert str(decode_error.value) == str(general_error.value)


def test_over_max_bytes_there_is_no_fast_path():
    small = m.Expect(group_size=4, groups=2, obs_shape=(2, 6, 6), obs_dtype="uint8", max_bytes=100)
    frames = wire(make_step(small))
    assert fast(frames, small) is None
    with pytest.raises(ProtocolError, match="exceeds the 100-byte limit"):
        m.decode(frames, expect=small)
