"""Compressed observation frames (issue 34): exact round trips on real Atari frames, the delta across resets
and truncations, the decompression bound, corrupt frames, and what each side does with a peer without a codec."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import zstandard

from protocol import compression
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.settings import EnvSettings

K, STEPS = 4, 80  # 80 messages: past the sender's first probe of delta against plain, and its second
GAMES = ("ALE/Pong-v5", "ALE/Breakout-v5", "ALE/SpaceInvaders-v5")


@functools.lru_cache(maxsize=None)
def recorded(game: str) -> list[m.StepReport]:
    """STEPS step reports of K real envs (one 84x84 frame each, as actors send them), random actions, short
    games (max_episode_steps=30), so resets and truncations happen in them."""
    from actor.envs import describe_spaces, make_env
    from actor.env_groups import EnvGroup
    settings = EnvSettings(env_id=game, frame_stack=1, max_episode_steps=30)
    envs = [make_env(settings, seed) for seed in range(K)]
    obs_space, action_space = describe_spaces(envs[0])
    assert tuple(obs_space.shape) == (84, 84)
    group = EnvGroup(envs, list(range(K)), action_space)
    rng = np.random.default_rng(0)
    reports = [group.first_report(0)]
    reports[0].obs = reports[0].obs.copy()
    for _ in range(STEPS - 1):
        report = group.step(0, rng.integers(0, action_space.n, K))
        report.obs = report.obs.copy()  # the group rewrites its buffer on the next step
        reports.append(report)
    group.close()
    return reports


def expect_for(obs_shape=(84, 84), codec="zstd", groups=1, k=K) -> m.Expect:
    return m.Expect(group_size=k, groups=groups, obs_shape=obs_shape, obs_dtype="uint8",
                    frames=None if codec == "none" else compression.Receiver(codec, groups))


@pytest.mark.parametrize("game", GAMES)
def test_real_frames_come_back_exactly_and_small(game):
    reports, sender, expect = recorded(game), compression.Sender("zstd"), expect_for()
    assert any(r.truncated.any() for r in reports) and any(r.terminated.any() or r.truncated.any() for r in reports)
    wire_bytes = 0
    for report in reports:
        frames = [bytes(f) for f in m.encode(report, sender)]
        wire_bytes += sum(map(len, frames))
        got = m.decode(frames, expect=expect)
        np.testing.assert_array_equal(got.obs, report.obs)
        np.testing.assert_array_equal(got.terminated, report.terminated)
        if report.final_obs is not None:
            np.testing.assert_array_equal(got.final_obs, report.final_obs)
        assert not got.obs.flags.writeable
    per_step = wire_bytes / (STEPS * K)
    assert per_step < 2000, f"{game}: {per_step:.0f} bytes per agent step"  # raw: 7,056 + the rest


def _scene(seed: int, k: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (k, 84, 84), dtype=np.uint8)


def _report(obs, terminated=(), truncated=(), first=False) -> m.StepReport:
    k = len(obs)
    term, trunc = np.zeros(k, bool), np.zeros(k, bool)
    term[list(terminated)], trunc[list(truncated)] = True, True
    final = sorted(set(truncated) - set(terminated))
    return m.StepReport(0, obs, np.zeros(k, np.float32), term, trunc, final_index=np.asarray(final, np.int64),
                        final_obs=obs[final] + 1 if final else None, first=first)


def _wire_obs(frames) -> np.ndarray:
    """The observation rows as sent: the obs frame decompressed, delta undone nowhere."""
    return np.frombuffer(zstandard.ZstdDecompressor().decompress(bytes(frames[1])), np.uint8).reshape(-1, 84, 84)


def test_the_first_frame_of_an_episode_is_never_a_delta_of_the_last_games():
    """Delta rows are XORs with the previous frame of the same env, except the envs whose episode just ended
    (terminated, truncated, or both): their row is the new episode's first frame, as it is."""
    sender, expect = compression.Sender("zstd"), expect_for(k=3)
    base = _scene(1)
    obs = base.copy()
    sent = [_report(obs.copy(), first=True)]
    for t in range(1, 2 * compression.PROBE_EVERY + 3):  # tiny changes: the delta pays, the sender keeps it
        obs[:, t % 84, t % 84] ^= 0xFF
        sent.append(_report(obs.copy()))
    fresh = _scene(2)
    sent.append(_report(np.stack([fresh[0], obs[1], fresh[2]]), terminated=[0], truncated=[2]))
    for report in sent:
        frames = m.encode(report, sender)
        got = m.decode(frames, expect=expect)
        np.testing.assert_array_equal(got.obs, report.obs)
    body = m.codec.decode_header(frames[0], m.PROTOCOL_VERSION)[1]
    assert body["d"] is True, "the test must exercise a delta message"
    rows = _wire_obs(frames)
    np.testing.assert_array_equal(rows[0], fresh[0])  # terminated: sent as it is
    np.testing.assert_array_equal(rows[2], fresh[2])  # truncated: sent as it is
    np.testing.assert_array_equal(rows[1], sent[-1].obs[1] ^ sent[-2].obs[1])  # went on: a delta
    np.testing.assert_array_equal(got.final_obs, sent[-1].final_obs)


def test_a_reset_row_decodes_right_whatever_the_receiver_remembers_of_the_last_game():
    sender, expect = compression.Sender("zstd"), expect_for(k=2)
    sender.use_delta, sender.sent = True, 1  # delta from the second message on, no probe in between
    m.decode(m.encode(_report(_scene(3, 2), first=True), sender), expect=expect)
    expect.frames.prev[0] = np.zeros((2, 84, 84), np.uint8)  # the last game's frames, forgotten
    fresh = _scene(4, 2)
    got = m.decode(m.encode(_report(fresh, terminated=[0, 1]), sender), expect=expect)
    np.testing.assert_array_equal(got.obs, fresh)


def test_a_frame_declaring_more_than_the_header_is_refused_before_inflating():
    report = _report(_scene(5))
    frames = m.encode(report, compression.Sender("zstd"))
    bomb = zstandard.ZstdCompressor(level=1).compress(bytes(64 << 20))  # 64 MB of zeros in ~2 KB
    assert len(bomb) < 10_000
    with pytest.raises(ProtocolError, match="declares 67108864 bytes, the header 21168"):
        m.decode([frames[0], bomb], expect=expect_for(k=3))


def test_a_frame_without_its_size_inflates_no_further_than_the_header_declares():
    stream = zstandard.ZstdCompressor(level=1).compressobj()  # streamed: no content size in the frame
    bomb = stream.compress(bytes(64 << 20)) + stream.flush()
    assert zstandard.frame_content_size(bomb) == -1
    frames = m.encode(_report(_scene(5)), compression.Sender("zstd"))
    with pytest.raises(ProtocolError, match="corrupt compressed frame"):
        m.decode([frames[0], bomb], expect=expect_for(k=3))


@pytest.mark.parametrize("damage", ["magic", "truncate", "garbage"])
def test_a_corrupt_frame_is_a_protocol_error(damage):
    frames = m.encode(recorded(GAMES[1])[5], compression.Sender("zstd"))
    data = bytearray(frames[1])
    if damage == "magic":
        data[:4] = b"PK\x03\x04"
    elif damage == "truncate":
        data = data[:len(data) // 2]
    else:
        data = bytearray(b"not zstd at all")
    with pytest.raises(ProtocolError, match="compressed frame"):
        m.decode([frames[0], bytes(data)], expect=expect_for())


def test_compressed_frames_where_none_was_agreed_get_a_clear_error():
    frames = m.encode(_report(_scene(7)), compression.Sender("zstd"))
    with pytest.raises(ProtocolError, match="no codec was agreed"):
        m.decode(frames, expect=expect_for(k=3, codec="none"))


def test_a_delta_without_a_previous_frame_is_refused():
    sender = compression.Sender("zstd")
    sender.use_delta, sender.sent = True, 1
    m.encode(_report(_scene(8), first=True), sender)
    frames = m.encode(_report(_scene(8)), sender)  # a delta; the receiver never saw the first report
    with pytest.raises(ProtocolError, match="without a previous frame"):
        m.decode(frames, expect=expect_for(k=3))


def test_a_first_report_sent_as_a_delta_is_refused(pt):
    """A first report starts the actor's envs afresh: a delta against what the receiver kept of an earlier
    game would decode into another game's screen."""
    sender, expect = compression.Sender("zstd"), expect_for(k=3)
    sender.use_delta, sender.sent = True, 1
    m.decode(m.encode(_report(_scene(8), first=True), sender), expect=expect)  # the receiver keeps this frame
    delta = m.encode(_report(_scene(8)), sender)
    first_again = pt.with_header(delta, lambda h: h["b"].__setitem__("first", True))
    with pytest.raises(ProtocolError, match="without a previous frame"):
        m.decode(first_again, expect=expect)


def test_frames_compressed_with_another_codec_than_agreed_are_named(pt):
    frames = m.encode(_report(_scene(7)), compression.Sender("zstd"))
    other = pt.with_header(frames, lambda h: h["b"].__setitem__("z", "lz4"))
    with pytest.raises(ProtocolError, match="frames compressed with 'lz4', but 'zstd' was agreed"):
        m.decode(other, expect=expect_for(k=3))


def test_a_frame_inflating_to_less_than_the_header_declares_is_refused():
    stream = zstandard.ZstdCompressor(level=1).compressobj()  # streamed: no content size to check first
    short = stream.compress(bytes(100)) + stream.flush()
    frames = m.encode(_report(_scene(5)), compression.Sender("zstd"))
    with pytest.raises(ProtocolError, match="inflates to 100 bytes, the header declares 21168"):
        m.decode([frames[0], short], expect=expect_for(k=3))


def test_raw_frames_still_decode_where_a_codec_was_agreed():
    expect = expect_for(k=3)
    obs = _scene(9)
    got = m.decode(m.encode(_report(obs, first=True)), expect=expect)
    np.testing.assert_array_equal(got.obs, obs)


def test_handshake_and_welcome_carry_the_offer_and_the_pick_and_older_peers_mean_raw():
    hs = m.decode(m.encode(m.Handshake(4, "a", codecs=["zstd", "lz4"])))
    assert hs.codecs == ["zstd", "lz4"]
    old = m.decode(m.codec.encode(m.PROTOCOL_VERSION, "handshake", {"num_envs": 4, "name": "a", "groups": 1}))
    assert old.codecs is None
    welcome = m.Welcome(0, [0], [1], {}, m.SpaceSpec(kind="discrete", n=2), m.SpaceSpec(kind="discrete", n=2))
    body = {k: (v.to_dict() if isinstance(v, m.SpaceSpec) else v) for k, v in vars(welcome).items()}
    del body["codec"]  # a learner from before codecs
    assert m.decode(m.codec.encode(m.PROTOCOL_VERSION, "welcome", body)).codec == "none"
    with pytest.raises(ProtocolError, match="codecs must be a list"):
        m.decode(m.encode(m.Handshake(4, "a", codecs="zstd")))


@pytest.mark.parametrize("setting, offered, remote, picked", [
    ("auto", ["zstd"], True, "zstd"), ("auto", ["zstd"], False, "none"), ("auto", None, True, "none"),
    ("auto", ["brotli", "zstd"], True, "zstd"), ("auto", ["brotli"], True, "none"),
    ("zstd", ["zstd"], False, "zstd"), ("zstd", None, True, "none"), ("zstd", [], True, "none"),
    ("none", ["zstd"], True, "none"),
])
def test_the_learner_picks_what_both_sides_have(setting, offered, remote, picked):
    assert compression.pick(setting, offered, remote) == picked
