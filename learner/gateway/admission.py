"""What peers may claim: env slots per actor and in all, bounded by a memory budget derived from the config and
the machine's memory, so that nothing one local client claims can grow the learner past the budget.

The learner's memory per env slot is its rollout columns: (num_steps + 1) observations and a few scalars per
step, held ROLLOUT_COPIES times (the rollout being filled, the previous one kept for reuse or trained on, and
the update's batch); with a recurrent core (model.core) also its state: a start flag and a weights version per
step and the state at each sequence's start in each of those copies, and the slot's row of the inference's state
table. Each actor admitted also holds a receive queue in the learner, up to `queue_bytes` (receive.py: zmq's
limits on its messages, derived from the run's own), counted in the budget too (issue 60). A handshake whose claim would
pass a limit is refused: over the per-actor limit for good (retrying would not help), over the total for now
(the actor retries; slots free up as peers leave).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from learner.gateway.receive import ReceiveLimits
from protocol.messages import MAX_ENV_SLOTS

ROLLOUT_COPIES = 3  # rollouts of one slot alive at once: filling, previous (reused / trained on), the batch
STEP_SCALARS_BYTES = 32  # per step and slot besides the observation: action, log-prob, value, reward, flags
DEFAULT_BUDGET_SHARE = 0.5  # cluster.memory_budget_mb = 0: this share of the machine's physical memory
DEFAULT_PER_ACTOR = 256  # cluster.max_envs_per_actor = 0: at most this many (or the run's own envs, if more)


class AdmissionRefused(ValueError):
    """A claim over a limit. `retry`: over the total only (others hold the slots; they may free up)."""

    def __init__(self, reason: str, retry: bool):
        super().__init__(reason)
        self.retry = retry


def machine_memory_bytes() -> int:
    """Physical memory of this machine (0 when the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def slot_bytes(obs_shape: tuple, obs_dtype: str, num_steps: int, columns: int = 1) -> int:
    """The learner's memory for one env slot: ROLLOUT_COPIES rollouts of its `columns` (run.segments: room for
    more than one column per slot, learner/rollout/buffer.py's SEGMENT_ROOM)."""
    obs = int(np.prod(obs_shape, dtype=np.int64)) * np.dtype(obs_dtype).itemsize
    return ROLLOUT_COPIES * columns * (num_steps + 1) * (obs + STEP_SCALARS_BYTES)


def state_bytes(state_size: int, num_steps: int, sequence: int) -> int:
    """A recurrent core's memory for one env slot (0 without one): in each rollout copy a start flag and an int32
    weights version per step and a float32 state per sequence (num_steps / sequence of them), plus the slot's
    row of the inference's state table and its bootstrap state."""
    if not state_size:
        return 0
    return ROLLOUT_COPIES * (num_steps * 5 + num_steps // sequence * state_size * 4) + 2 * state_size * 4


@dataclass(frozen=True)
class Admission:
    budget_bytes: int  # for all peers' rollout memory together
    slot_bytes: int  # one env slot's share of it
    max_envs: int  # env slots all peers together may hold
    max_envs_per_actor: int  # env slots one peer may claim
    state_bytes: int = 0  # of slot_bytes, a recurrent core's state (state_bytes)
    receive: ReceiveLimits | None = None  # what one peer's messages may hold before they are read (receive.py)

    @property
    def queue_bytes(self) -> int:
        """One admitted actor's receive queue at most, counted in the budget (0: not counted)."""
        return self.receive.peer_bytes if self.receive is not None else 0

    @classmethod
    def of(cls, budget_mb: int, per_actor: int, run_envs: int, obs_shape: tuple, obs_dtype: str, num_steps: int,
           memory_bytes: int | None = None, state: int = 0, columns: int = 1) -> "Admission":
        """From the config (cluster.memory_budget_mb, cluster.max_envs_per_actor: 0 derives them) and the
        machine's memory; `state`: a recurrent core's bytes per env slot (state_bytes); `columns`: rollout
        columns per env slot (slot_bytes)."""
        memory = machine_memory_bytes() if memory_bytes is None else memory_bytes
        budget = budget_mb << 20 if budget_mb else int(memory * DEFAULT_BUDGET_SHARE) or (8 << 30)
        each = slot_bytes(obs_shape, obs_dtype, num_steps, columns) + state
        total = max(0, min(MAX_ENV_SLOTS, budget // each))
        return cls(budget, each, total, min(total, per_actor or max(DEFAULT_PER_ACTOR, run_envs)), state)

    def split(self, parts: int) -> "Admission":
        """Each of `parts` collectors' share of the total (each admits its own joiners)."""
        if parts <= 1:
            return self
        share = self.max_envs // parts
        return replace(self, budget_bytes=self.budget_bytes // parts, max_envs=share,
                       max_envs_per_actor=min(self.max_envs_per_actor, share))

    def with_queues(self, receive: ReceiveLimits) -> "Admission":
        """The same limits, with each admitted actor's receive queue (receive.peer_bytes) counted in the budget."""
        return replace(self, receive=receive)

    def bytes_for(self, slots: int, actors: int) -> int:
        """The memory `slots` env slots and the receive queues of `actors` actors may take."""
        return slots * self.slot_bytes + actors * self.queue_bytes

    def check_claim(self, claimed: int) -> None:
        """Raise AdmissionRefused (for good) when one peer claims more env slots than any one may hold, however
        many are free: the same on every collector of the run, so no other collector could take it either."""
        if claimed > self.max_envs_per_actor:
            raise AdmissionRefused(
                f"claims {claimed} envs, more than the {self.max_envs_per_actor} one actor may hold "
                f"(cluster.max_envs_per_actor; the memory budget is {_mb(self.budget_bytes)}, "
                f"{_mb(self.slot_bytes)} per env slot)", retry=False)

    def check(self, claimed: int, held: int, actors: int = 0) -> None:
        """Raise AdmissionRefused unless a peer may claim `claimed` env slots while `held` are taken by `actors`."""
        self.check_claim(claimed)
        if held + claimed > self.max_envs or self.bytes_for(held + claimed, actors + 1) > self.budget_bytes:
            queues = f" with {actors} receive queues" if self.queue_bytes else ""
            raise AdmissionRefused(
                f"full: {held} of {self.max_envs} env slots are held{queues} and {claimed} more would pass the memory "
                f"budget of {_mb(self.budget_bytes)} (cluster.memory_budget_mb); try again later", retry=True)

    def describe(self, run_envs: int, run_actors: int = 0) -> str:
        """The one start-up line: the budget, what it admits, and what this run's own actors will use."""
        state = f", {_mb(self.state_bytes)} of it recurrent state" if self.state_bytes else ""
        queues = f" and receive queues ({self.receive.describe()})" if self.receive is not None else ""
        actors = f" and {run_actors} actors" if self.queue_bytes else ""
        return (f"memory budget {_mb(self.budget_bytes)} for rollouts ({_mb(self.slot_bytes)} per env slot{state})"
                f"{queues}: "
                f"up to {self.max_envs} env slots, {self.max_envs_per_actor} per actor; this run's {run_envs} "
                f"env slots{actors} will use {_mb(self.bytes_for(run_envs, run_actors))}")


def check_run_fits(admission: Admission, run_envs: int, min_envs: int, run_actors: int = 0) -> str | None:
    """Why the run's own actors could never fit the budget (None: they fit)."""
    need = max(run_envs, min_envs)
    if need > admission.max_envs or admission.bytes_for(need, run_actors) > admission.budget_bytes:
        queues = f" and {run_actors} actors' receive queues" if admission.queue_bytes and run_actors else ""
        return (f"the run's {need} env slots{queues} need {_mb(admission.bytes_for(need, run_actors))} of memory, "
                f"more than the memory budget of {_mb(admission.budget_bytes)} (cluster.memory_budget_mb): "
                f"fewer envs, a shorter ppo.num_steps or a larger budget")
    return None


def _mb(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GB"
    return f"{math.ceil(n / (1 << 20))} MB" if n >= 1 << 20 else f"{math.ceil(n / 1024)} KB"
