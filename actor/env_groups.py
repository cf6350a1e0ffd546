"""An actor's envs in groups: K envs stepped together on one Actions message, and the step report built for
them; the groups kept from one session with the learner to the next (never imports torch)."""
from __future__ import annotations

import numpy as np

from actor.envs import describe_spaces, make_env
from protocol import messages as m
from protocol.settings import EnvSettings


class SpacesDiffer(Exception):
    """The env built from the learner's settings has other spaces than the learner's: joining cannot work."""


class EnvGroup:
    """K envs stepped together; builds the step report the learner expects for them."""

    def __init__(self, envs, seeds, space, obs: np.ndarray | None = None):
        """`obs`: the envs' current observations, for envs already playing (regrouped); else each is reset
        with its seed."""
        self.envs, self.space = envs, space
        self.obs = obs if obs is not None else np.stack([env.reset(seed=seed)[0] for env, seed in zip(envs, seeds)])
        if space.kind == "box":
            self.low = np.asarray(space.low, np.float32).reshape(space.shape)
            self.high = np.asarray(space.high, np.float32).reshape(space.shape)

    def first_report(self, group: int) -> m.StepReport:
        k = len(self.envs)
        return m.StepReport(group, self.obs, np.zeros(k, np.float32), np.zeros(k, bool), np.zeros(k, bool), first=True)

    def step(self, group: int, actions: np.ndarray) -> m.StepReport:
        if self.space.kind == "box":
            actions = np.clip(actions, self.low, self.high)  # the learner keeps the unclipped sample
        k = len(self.envs)
        rewards, term, trunc = np.zeros(k, np.float32), np.zeros(k, bool), np.zeros(k, bool)
        ep_returns, ep_lengths, final_index, final_obs = [], [], [], []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            obs, reward, term[i], trunc[i], info = env.step(action.item() if self.space.kind == "discrete" else action)
            rewards[i] = reward
            if "episode" in info:
                ep_returns.append(float(info["episode"]["r"]))
                ep_lengths.append(int(info["episode"]["l"]))
            if term[i] or trunc[i]:
                if trunc[i] and not term[i]:
                    final_index.append(i)
                    final_obs.append(obs)
                obs, reset_info = env.reset()
                if "episode" in reset_info:  # the game ended inside the reset (a time limit struck there)
                    ep_returns.append(float(reset_info["episode"]["r"]))
                    ep_lengths.append(int(reset_info["episode"]["l"]))
            self.obs[i] = obs
        return m.StepReport(group, self.obs, rewards, term, trunc,
                            np.asarray(ep_returns, np.float64), np.asarray(ep_lengths, np.int64),
                            np.asarray(final_index, np.int64), np.stack(final_obs) if final_obs else None)

    def close(self):
        for env in self.envs:
            env.close()


class ActorEnvs:
    """The actor's env groups, kept from one session with the learner to the next: a rejoin under the same
    settings reuses them as they are (their games go on), because building and seeding an Atari env costs
    0.1-0.2 s, and a rejoin storm must not repeat that work for every actor at once."""

    def __init__(self):
        self.key: tuple | None = None
        self.groups: list[EnvGroup] = []
        self.built = 0  # envs built so far by the running build (read by the heartbeat)

    def reusable(self, key: tuple, groups: int) -> bool:
        return self.key == key and len(self.groups) == groups

    def regroup(self, groups: int) -> None:
        """The same envs, their games going on, split into `groups` equal groups (groups "auto")."""
        envs = [env for group in self.groups for env in group.envs]
        obs = np.concatenate([group.obs for group in self.groups])
        k = len(envs) // groups
        self.groups = [EnvGroup(envs[g * k:(g + 1) * k], None, self.groups[0].space, obs[g * k:(g + 1) * k].copy())
                       for g in range(groups)]

    def build(self, key: tuple, welcome: m.Welcome, groups: int) -> None:
        """Make and seed every env (in a worker thread: the actor's main thread keeps saying it is alive)."""
        self.close()
        settings = EnvSettings.from_dict(welcome.env)
        envs = []
        try:
            for seed in welcome.seeds:
                envs.append(make_env(settings, seed))
                self.built = len(envs)
            obs_space, action_space = describe_spaces(envs[0])
            if obs_space.to_dict() != welcome.obs_space.to_dict() or \
                    action_space.to_dict() != welcome.action_space.to_dict():
                raise SpacesDiffer("the env built from the learner's settings has different spaces")
            k = len(envs) // groups
            self.groups = [EnvGroup(envs[g * k:(g + 1) * k], welcome.seeds[g * k:(g + 1) * k], action_space)
                           for g in range(groups)]
        except BaseException:
            for env in envs:
                env.close()
            raise
        self.key = key

    def close(self) -> None:
        for group in self.groups:
            group.close()
        self.key, self.groups, self.built = None, [], 0
