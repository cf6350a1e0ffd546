"""One rollout of T steps for the env slots active when it began, kept in host memory (pinned when the
learner's device is a GPU): every message writes slice copies into it, and the finished rollout goes to
the device once per update (`to_device`).

Slots advance independently (whichever actor is ready gets served), so each column has its own time
index. A column whose actor vanished stops early: its steps after the last completed one are masked
out, and its last completed step is cut as a truncation bootstrapped from the value of the observation
that followed it.

With run.segments (issue 62) a column is a segment of at most T steps, not an env slot: the rollout has room for
more columns than it has env slots (`capacity`), a slot that finishes its segment before the rollout is full opens
another column (`open_columns`), and the rollout is full once its columns hold `quota` completed steps
(`is_full`), however they are spread. `close` then cuts every unfinished segment (the slow slots') where its
bootstrap is known, as a vanished actor's column is cut: those slots go on in a new segment of the next rollout.

With a recurrent core (layout.state_size) each step also keeps whether its episode starts there (the state was
zeroed before it) and the weights version that acted, each sequence's first step (every layout.bptt steps) the
state it entered with, and each bootstrap or final observation the state its value is to be computed from.
"""
from __future__ import annotations

import numpy as np
import torch

from learner.rollout.frames import write_stacks
from learner.rollout.layout import Layout
from learner.rollout.link import DeviceLink


SEGMENT_ROOM = 2  # run.segments: a rollout's columns per env slot (a slot twice as fast as the mean gives two)
REUSED = ("obs", "frames", "restarts")  # the big arrays, rewritten in place where the older rollout's fit


class RolloutBuffer:
    def __init__(self, slots: list[int], num_steps: int, layout: Layout, device: torch.device,
                 reuse: "RolloutBuffer | None" = None, link: DeviceLink | None = None,
                 rows: dict[str, torch.Tensor] | None = None, capacity: int = 0, quota: int = 0):
        """`layout`: the observation's and the action's shape and dtype, and whether observations are stacks
        kept one frame per step (learner/rollout/frames.py: `frames` and `restarts` then stand for `obs`).
        `rows`: the per-step arrays (layout.rows' names and shapes) to write into instead of fresh host
        memory: a collector process's columns of the training process's shared rollout, or that whole rollout.
        `reuse`: an older rollout nobody reads any more, whose big arrays this one rewrites. `capacity` and
        `quota` (run.segments; 0: neither): columns in all, of which the first len(slots) open at once (the
        rest are opened by open_columns; an unopened column is dead and empty), and the completed steps that
        make the rollout full."""
        capacity = max(capacity, len(slots))
        self.slots = list(slots) + [-1] * (capacity - len(slots))  # each column's env slot (-1: not opened)
        self.opened = len(slots)
        self.quota = quota
        self.closed = False  # run.segments: full, its unfinished segments cut (close)
        self.column = {slot: i for i, slot in enumerate(slots)}  # each slot's newest column
        T, N = num_steps, capacity
        self.T, self.N, self.device, self.layout = T, N, torch.device(device), layout
        self.link = link or DeviceLink(device)
        arrays = layout.rows(T, N)
        self.names = tuple(arrays)  # the per-step arrays
        for name, (shape, dtype) in arrays.items():  # obs (frames) only read where valid_mask() holds
            given = (rows or {}).get(name)
            setattr(self, name, given if given is not None else self._fresh(name, shape, dtype, reuse))
        self.next_values = self.link.host_tensor((T, N), torch.float32)
        self.acted = [0] * N     # actions sent per column (obs[t], actions[t], ... written for t < acted)
        self.completed = [0] * N  # steps whose outcome (reward, flags) has arrived
        self.dead = [False] * self.opened + [True] * (N - self.opened)
        self.fresh: set[int] = set()  # columns whose env was (re)started for this rollout: new returns
        self.bootstrap_obs: dict[int, np.ndarray] = {}         # column -> observation after step T-1
        self.final_obs: dict[tuple[int, int], np.ndarray] = {}  # (t, column) -> last obs before a truncation
        # recurrent core: the state the value of each bootstrap / final observation is computed from
        self.bootstrap_states: dict[int, np.ndarray] = {}
        self.final_states: dict[tuple[int, int], np.ndarray] = {}
        self._host = {name: getattr(self, name).numpy() for name in self.names}  # views _put writes through

    def _fresh(self, name: str, shape: tuple, dtype: torch.dtype, reuse: "RolloutBuffer | None") -> torch.Tensor:
        old = getattr(reuse, name, None) if name in REUSED else None
        if old is not None and old.shape == shape and old.dtype == dtype:
            return old  # rewriting in place saves page faults
        return self.link.host_tensor(shape, dtype)

    def columns(self, slots: list[int]) -> list[int]:
        """The columns of these slots: a group's slots are almost always consecutive columns (one list
        comparison), else looked up one by one."""
        c0, n = self.column[slots[0]], len(slots)
        if self.slots[c0:c0 + n] == slots:
            return list(range(c0, c0 + n))
        return [self.column[s] for s in slots]

    @staticmethod
    def _index(cols: list[int]) -> slice | list[int]:
        """A group's columns are almost always contiguous, and a slice copy costs microseconds where advanced
        indexing costs milliseconds."""
        c0, n = cols[0], len(cols)
        return slice(c0, c0 + n) if cols[-1] - c0 == n - 1 else cols

    def _put(self, name: str, t: int, cols: list[int], src: np.ndarray) -> None:
        """self.<name>[t, cols] = src, several times per message: the collector's hottest code. The copy goes
        through a numpy view of the host memory: about 1 us per array, where torch's indexing and copy_ cost
        5-10 us."""
        self._host[name][t, self._index(cols)] = src

    def record_actions(self, cols: list[int], obs, actions, logprobs, values, restart=None, states=None) -> None:
        """Store one inference result for columns that are all at the same step. `restart` says which envs start
        over: with stacked observations (layout.stack > 1) their stacks (learner/rollout/frames.py), with a
        recurrent core their episodes, whose state was zeroed; `states`: the state each entered this step with
        (kept at each sequence's first step)."""
        t = self.acted[cols[0]]
        if self.layout.stack > 1:
            write_stacks(self._host["frames"], self._host["restarts"], t, self._index(cols), obs, restart)
        else:
            self._put("obs", t, cols, obs)
        for name, src in (("actions", actions), ("logprobs", logprobs), ("values", values)):
            self._put(name, t, cols, src)
        if self.layout.state_size:
            self._put("starts", t, cols, restart)
            length = self.layout.sequence(self.T)
            if t % length == 0:
                self._put("states", t // length, cols, states)
        _advance(self.acted, cols, t + 1)

    def set_version(self, version: int) -> None:
        """The steps not acted yet will be acted by the weights of `version` (kept per step with a recurrent core):
        said when the rollout opens and when newer weights serve, never per message."""
        if self.layout.state_size:
            self.versions[torch.arange(self.T).unsqueeze(1) >= torch.as_tensor(self.acted).unsqueeze(0)] = version

    def record_outcome(self, cols: list[int], rewards, terminated, truncated) -> None:
        t = self.completed[cols[0]]
        for name, src in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated)):
            self._put(name, t, cols, src)
        _advance(self.completed, cols, t + 1)

    def wants_action(self, col: int) -> bool:
        return not self.dead[col] and self.acted[col] < self.T

    def open_columns(self, slots: list[int]) -> bool:
        """run.segments: new columns (consecutive) for these slots' next segments, if there is room; False: there
        is not (the slots go on in the next rollout). Whether the rollout is full already is the collector's
        to ask first (its close rule: learner/collection/routes.py)."""
        n = len(slots)
        if self.opened + n > self.N:
            return False
        for i, slot in enumerate(slots, start=self.opened):
            self.slots[i], self.column[slot], self.dead[i] = slot, i, False
        self.opened += n
        return True

    def is_full(self) -> bool:
        """run.segments: the columns hold `quota` completed steps (never without a quota)."""
        return bool(self.quota) and sum(self.completed) >= self.quota

    def close(self) -> list[int]:
        """run.segments, once full: every unfinished segment (no bootstrap yet) ends where it stands, cut in
        `finish` as a vanished actor's column is. Returns the slots whose step in flight (acted, its outcome
        not in yet) is not part of this rollout: their outcome, when it comes, is dropped."""
        self.closed, in_flight = True, []
        for col in range(self.opened):
            if self.dead[col] or col in self.bootstrap_obs:
                continue
            if self.acted[col] > self.completed[col]:
                in_flight.append(self.slots[col])
            self.dead[col] = True
        return in_flight

    def env_slots(self) -> int:
        """Distinct env slots with a column (a slot with several segments counts once)."""
        return len(set(self.slots[:self.opened]) - {-1})

    def is_complete(self) -> bool:
        if len(self.bootstrap_obs) < self.N - self.dead.count(True):
            return False  # some live column has no bootstrap yet (the usual answer, found without a loop)
        return all(self.dead[c] or (self.completed[c] == self.T and c in self.bootstrap_obs) for c in range(self.N))

    def mark_dead(self, col: int) -> None:
        self.dead[col] = True

    def planned_steps(self) -> int:
        """The steps this rollout was to hold: T per column, or with a quota those acted (the rest of what it
        holds is dropped: cut from vanished actors' columns, or in flight at the close)."""
        return sum(self.acted) if self.quota else self.T * self.N

    def valid_mask(self) -> torch.Tensor:
        t = torch.arange(self.T).unsqueeze(1)
        return t < torch.as_tensor(self.completed).unsqueeze(0)

    def finish(self, value_fn) -> dict[str, torch.Tensor]:
        """Fill next_values with value_fn (a batched V: every bootstrap and final observation in one batch;
        with a recurrent core, value_fn(obs, states)) and cut dead columns; returns dones and valid (host
        tensors), and those observations with where their values went: extra_obs (stacked, None when there are
        none), extra_states (a recurrent core's states for them, else None) and extra_at (rows, cols of
        next_values)."""
        self.next_values[:-1] = self.values[1:]
        extra_obs, targets, states = [], [], []
        for col, obs in sorted(self.bootstrap_obs.items()):  # sorted: arrival order must not matter
            extra_obs.append(np.asarray(obs))
            targets.append((self.T - 1, col))
            states.append(self.bootstrap_states.get(col))
        for (t, col), obs in sorted(self.final_obs.items()):
            extra_obs.append(np.asarray(obs))
            targets.append((t, col))
            states.append(self.final_states.get((t, col)))
        rows, cols = zip(*targets) if targets else ((), ())
        stacked = np.stack(extra_obs) if extra_obs else None
        extra_states = np.stack(states) if stacked is not None and self.layout.state_size else None
        if stacked is not None:
            vals = value_fn(stacked, extra_states) if self.layout.state_size else value_fn(stacked)
            self.next_values[list(rows), list(cols)] = torch.as_tensor(vals, dtype=torch.float32).reshape(-1)
        for col in range(self.N):
            if self.dead[col] and col not in self.bootstrap_obs:
                self._cut(col)
        return {"dones": self.terminated | self.truncated, "valid": self.valid_mask(), "extra_obs": stacked,
                "extra_states": extra_states,
                "extra_at": (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long))}

    def to_device(self) -> dict[str, torch.Tensor]:
        """The rollout's arrays on the learner's device: one copy each, once per update (none on a CPU)."""
        return {name: self.link.to_device(getattr(self, name)) for name in (*self.names, "next_values")}

    def _cut(self, col: int) -> None:
        """End a vanished actor's column at its last step whose bootstrap is known."""
        while self.completed[col] > 0:
            n = self.completed[col]
            if self.terminated[n - 1, col] or self.truncated[n - 1, col]:
                return  # the env ended the episode there: V(final obs) (or nothing) already bootstraps it
            if self.acted[col] > n:  # values[n] is V(the obs that followed step n-1), inferred in time
                self.truncated[n - 1, col] = True
                self.next_values[n - 1, col] = self.values[n, col]
                return
            self.completed[col] = n - 1  # the next obs never reached inference: drop the step


def _advance(steps: list[int], cols: list[int], t: int) -> None:
    """steps[c] = t for every column c (all at step t - 1): one slice assignment for contiguous columns."""
    c0, n = cols[0], len(cols)
    if cols[-1] - c0 == n - 1:
        steps[c0:c0 + n] = [t] * n
    else:
        for c in cols:
            steps[c] = t
