"""Batched inference for all actors: numpy observations in, numpy actions out, on the learner's device.

Owns what happens to an observation before the network sees it (observation normalization) so that
the rollout stores exactly what the policy saw: the update then reproduces the stored log-probs.

With a recurrent core (model.core) it also keeps each env slot's state, a row of one device tensor indexed by
slot: a batch gathers its rows, zeroes those whose episode starts with this observation (a join, a slot handed
to another actor, a reset after a termination or truncation), steps them and scatters them back, in one
indexing op each way. A retired slot's row is zeroed (forget). The state is not checkpointed: a resumed run
starts every slot from zeros, as at any episode's start. Newer weights that start to serve (follow, policy lag)
keep the table: each episode goes on from the state the older weights left (as Sample Factory and IMPALA do).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from learner.model.core import reset
from learner.model.networks import ActorCritic
from learner.rollout.link import DeviceLink
from learner.model.normalize import ObsNormalizer, ValueNormalizer
from protocol.spaces import SpaceSpec


RANDOM_POOL = 4096  # random discrete actions drawn at a time


@dataclass
class ActResult:
    """One inference batch's results, in host memory (numpy): what the rollout stores and the actors get."""
    actions: np.ndarray   # sent to the actors and stored (a Box action's unclipped sample)
    obs: np.ndarray | None  # what the network saw after observation normalization (None: the input as it was)
    logprobs: np.ndarray
    values: np.ndarray    # de-normalized (raw return units) when the critic is trained on normalized ones
    states: np.ndarray | None = None  # recurrent core: each row's state entering this step (after its reset)


def served_modules(model: ActorCritic, value_norm: ValueNormalizer | None, policy_lag: bool
                   ) -> tuple[ActorCritic, ValueNormalizer | None]:
    """The network and value statistics the actors' policy serves: the training ones themselves, or with
    policy lag a snapshot of both (copies, refreshed together by Inference.follow after each update). The
    update of rollout N folds N's returns into the training statistics while rollout N+1 is collected with
    the previous weights: those weights' critic speaks the previous statistics' units, so N+1's values and
    bootstrap values are de-normalized with the snapshot, never with statistics moving under them."""
    if not policy_lag:
        return model, value_norm
    return copy.deepcopy(model), copy.deepcopy(value_norm)


class Inference:
    """The learner's inference server: one batch of observations in, one batch of results out. On a GPU a
    batch costs one copy to the device and one back (actions, log-probs and values packed together)."""

    def __init__(self, model: ActorCritic, action_space: SpaceSpec, device: torch.device,
                 obs_norm: ObsNormalizer | None, seed: int, random_actions: bool = False,
                 value_norm: ValueNormalizer | None = None, link: DeviceLink | None = None):
        self.model, self.action_space, self.device = model, action_space, device
        self.link = link or DeviceLink(device)
        self.obs_norm = obs_norm
        self.value_norm = value_norm  # the critic speaks normalized units: values leave here de-normalized
        self.random_actions = random_actions
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self._pool, self._drawn = np.zeros(0, np.int64), 0  # random discrete actions drawn ahead (_draw)
        self._zeros = np.zeros(0, np.float32)  # the log-probs and values of random actions (read-only)
        self.recurrent = model is not None and model.recurrent and not random_actions
        # recurrent core: row s is env slot s's state (grown as slots appear)
        self.states = model.initial_state(0, device) if self.recurrent else None

    def follow(self, model: torch.nn.Module, value_norm: ValueNormalizer | None = None) -> None:
        """Serve `model`'s current weights and `value_norm`'s statistics (policy lag: the served copies catch
        up after each update, both at once, so that the critic's outputs are always de-normalized with the
        statistics its weights were trained against). A recurrent core's states are kept."""
        self.model.load_state_dict(model.state_dict())
        if self.value_norm is not None:
            self.value_norm.load_state_dict(value_norm.state_dict())

    def prepare(self, obs: np.ndarray, update_stats: bool) -> torch.Tensor:
        t = self.link.to_device(obs)
        if self.obs_norm is None:
            return t
        if update_stats:
            self.obs_norm.update(t)
        return self.obs_norm(t)

    def act(self, groups: list[np.ndarray], slots: np.ndarray | None = None, starts: np.ndarray | None = None
            ) -> ActResult:
        """Actions for every waiting group's observations, in one batch (the groups' rows in order). A recurrent
        core needs each row's env slot and whether its episode starts here (int64 and bool arrays)."""
        if self.random_actions and self.obs_norm is None:
            return self._random(sum(len(g) for g in groups))  # nothing reads the observations: no copy at all
        obs = groups[0] if len(groups) == 1 else np.concatenate(groups)
        if self.random_actions:
            with torch.no_grad():
                seen = self.link.to_host(self.prepare(obs, update_stats=True))
            return dataclasses.replace(self._random(len(obs)), obs=seen)
        return self._act(obs, slots, starts)

    @torch.no_grad()
    def _act(self, obs: np.ndarray, slots: np.ndarray | None, starts: np.ndarray | None) -> ActResult:
        x = self.prepare(obs, update_stats=True)
        n = len(obs)
        if self.recurrent:
            index, state = self._gather(slots, starts)
            entering = state.clone()  # act steps `state` in place
            action, logprob, value = self.model.act(x, generator=self.generator, state=state)
            self.states[index] = state
        else:
            action, logprob, value = self.model.act(x, generator=self.generator)
        columns = [action.reshape(n, -1).to(logprob.dtype), logprob.reshape(n, 1), self.raw_values(value).reshape(n, 1)]
        if self.recurrent:
            columns.append(entering)
        packed = self.link.to_host(torch.cat(columns, dim=1))  # one copy back for everything
        width = columns[0].shape[1]
        actions = packed[:, :width].reshape(action.shape)
        if self.action_space.kind == "discrete":
            actions = actions.astype(np.int64)  # exact: action ids are small integers
        seen = None if self.obs_norm is None else self.link.to_host(x)
        return ActResult(actions, seen, packed[:, width], packed[:, width + 1],
                         packed[:, width + 2:] if self.recurrent else None)

    def _gather(self, slots: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's rows of the state table (on the device: its slots and start flags in one copy), zeroed
        where an episode starts."""
        if slots is None or starts is None or len(slots) != len(starts):
            raise ValueError("a recurrent policy needs every row's env slot and episode-start flag")
        self._grow(int(slots.max()) + 1)
        both = self.link.to_device(np.stack([slots, starts.astype(np.int64)]))
        index = both[0]
        return index, reset(self.states[index], both[1].bool())

    def _grow(self, rows: int) -> None:
        if rows > len(self.states):
            grown = self.model.initial_state(max(rows, 2 * len(self.states)), self.device)
            grown[:len(self.states)] = self.states
            self.states = grown

    def states_of(self, slots: list[int]) -> np.ndarray:
        """The current state of these env slots (the state after their last step), a host copy."""
        self._grow(max(slots) + 1)
        return self.link.to_host(self.states[torch.as_tensor(slots, device=self.device)]).copy()

    def forget(self, slots: list[int]) -> None:
        """These env slots were retired: their state goes (a slot's next actor starts from zeros anyway)."""
        if self.recurrent and slots:
            self._grow(max(slots) + 1)
            self.states[torch.as_tensor(slots, device=self.device)] = 0

    def raw_values(self, values: torch.Tensor) -> torch.Tensor:
        return values if self.value_norm is None else self.value_norm.denormalize(values)

    @torch.no_grad()
    def value(self, obs: torch.Tensor | np.ndarray, states: np.ndarray | None = None) -> torch.Tensor:
        """V of raw observations (bootstrap and final ones: normalized without updating the stats), as a host
        tensor: one copy in, one out (a recurrent core's: with the rows' `states`, one more copy in)."""
        if self.random_actions:
            return torch.zeros(len(obs))
        x = self.prepare(obs.numpy() if isinstance(obs, torch.Tensor) else obs, update_stats=False)
        state = None if states is None else self.link.to_device(np.ascontiguousarray(states, np.float32))
        return torch.from_numpy(self.link.to_host(self.raw_values(self.model.value(x, state)).float()))

    def _random(self, n: int) -> ActResult:
        space = self.action_space
        if space.kind == "discrete":
            actions = self._draw(n)
        else:
            low = np.asarray(space.low, np.float32).reshape(space.shape)
            high = np.asarray(space.high, np.float32).reshape(space.shape)
            actions = self.rng.uniform(low, high, size=(n, *space.shape)).astype(np.float32)
        if len(self._zeros) < n:
            self._zeros = _read_only(np.zeros(n, np.float32))
        zeros = self._zeros[:n]
        return ActResult(actions, None, zeros, zeros)

    def _draw(self, n: int) -> np.ndarray:
        """n random discrete actions: slices of a pool drawn RANDOM_POOL at a time, since one call of numpy's
        integers() costs tens of microseconds, mostly checking its arguments."""
        if self._drawn + n > len(self._pool):
            self._pool = _read_only(self.rng.integers(0, self.action_space.n, size=max(RANDOM_POOL, n), dtype=np.int64))
            self._drawn = 0
        self._drawn += n
        return self._pool[self._drawn - n:self._drawn]


def _read_only(arr: np.ndarray) -> np.ndarray:
    """Shared by the results of many batches (slices): nobody may write into it."""
    arr.flags.writeable = False
    return arr
