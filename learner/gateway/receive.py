"""What one peer may make the learner hold before it reads a byte (issue 60): the largest message, derived from the
run's own messages, and how many wait per peer. Both are zmq's, on the gateway's ROUTER socket:

* MAXMSGSIZE (`message_bytes`): the largest message an actor of this run can send, a step report of the most envs
  one actor may hold (cluster.max_envs_per_actor, in one group, each env with a final observation too) or its
  handshake (the run's own spaces and env id, a long name, every codec), whichever is larger, with room for
  headers and compression; never above cluster.max_message_mb. A larger message disconnects its sender before
  zmq allocates it. A CartPole peer may send 24 KB (256 envs): peers could send 64 MB before.
* RCVHWM (`queued_messages`): messages held per peer until the learner reads them. An actor has at most one step
  report per group (2) and a sign of life waiting; past the mark zmq stops reading from that peer, whose own sends
  wait (nothing is lost). Before: 1,000 per peer, of up to 64 MB each (8 peers took a learner from 0.35 to 4 GB).

So each peer costs at most `peer_bytes` = (queued_messages + 1) x message_bytes (one more being received), which the
admission budget counts for every actor it admits (admission.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocol import compression
from protocol import messages as m
from protocol.spaces import SpaceSpec

QUEUED_MESSAGES = 4  # per peer: two groups' reports, a Starting, a Goodbye
STEP_SCALARS_BYTES = 30  # per env of a step report: reward, two flags, an episode's return and length, an index
SLACK_BYTES = 8192  # headers, specs, the longest reason a peer may give


@dataclass(frozen=True)
class ReceiveLimits:
    message_bytes: int  # zmq MAXMSGSIZE
    queued_messages: int = QUEUED_MESSAGES  # zmq RCVHWM

    @property
    def peer_bytes(self) -> int:
        """The most one peer's messages can hold of the learner's memory before it reads them."""
        return (self.queued_messages + 1) * self.message_bytes

    @classmethod
    def of(cls, obs_space: SpaceSpec, action_space: SpaceSpec, env_id: str, max_envs_per_actor: int,
           cap_bytes: int) -> "ReceiveLimits":
        """From the spaces the actors send (`obs_space`: without the learner's frame stacking), the most envs one
        actor may hold, and cluster.max_message_mb (`cap_bytes`)."""
        k = max(1, max_envs_per_actor)
        obs = obs_space.size * np.dtype(obs_space.dtype).itemsize
        raw = 2 * k * obs + k * STEP_SCALARS_BYTES  # observations, and as many final observations at most
        step = raw + raw // 64 + SLACK_BYTES  # compressed frames: lz4 and zstd grow incompressible data < 1/128
        return cls(min(cap_bytes, max(step, handshake_bytes(obs_space, action_space, env_id))))

    def describe(self) -> str:
        return f"{_kb(self.peer_bytes)} per actor: {self.queued_messages} messages of up to {_kb(self.message_bytes)}"


def handshake_bytes(obs_space: SpaceSpec, action_space: SpaceSpec, env_id: str) -> int:
    """The largest handshake an actor of this run sends: the run's spaces and env id, a long name, every codec."""
    longest = m.Handshake(m.MAX_ENV_SLOTS, "\U0010ffff" * 256, env_id, obs_space, action_space, groups=2,
                          codecs=["x" * 16] * compression.MAX_OFFERED)
    return sum(len(frame) for frame in m.encode(longest)) + SLACK_BYTES


def _kb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB" if n >= 1 << 20 else f"{-(-n // 1024)} KB"
