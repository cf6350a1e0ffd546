"""The actor's session plumbing: where it (re)joins."""
import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import zmq

from actor.env_groups import ActorEnvs
from actor.runner import ActorOptions, LearnerGone, Refused, _prepare, learner_address
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.spaces import SpaceSpec


def test_an_actor_given_an_endpoints_file_joins_the_address_there_while_its_learner_lives(tmp_path):
    endpoints = tmp_path / "endpoints.json"
    opts = ActorOptions(learner="ipc:///first", endpoints=str(endpoints))
    assert learner_address(ActorOptions(learner="ipc:///named")) == "ipc:///named"
    with pytest.raises(LearnerGone, match="no learner in"):  # restarting: none written yet
        learner_address(opts)
    endpoints.write_text(json.dumps({"address": "ipc:///second", "pid": os.getpid()}))
    assert learner_address(opts) == "ipc:///second"
    no_such_pid = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids stay below it
    endpoints.write_text(json.dumps({"address": "ipc:///third", "pid": no_such_pid}))
    with pytest.raises(LearnerGone, match="is gone"):  # a stale file: its learner died
        learner_address(opts)


@pytest.mark.integration
def test_an_actor_whose_env_has_other_spaces_tells_the_learner_and_is_refused():
    """The learner expects 5 numbers per observation, CartPole gives 4: the actor says why to the learner (one
    Error) and ends as refused (no rejoin would help)."""
    ctx = zmq.Context()
    learner, actor = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        learner.bind("inproc://spaces")
        actor.connect("inproc://spaces")
        settings = EnvSettings(env_id="CartPole-v1")
        welcome = m.Welcome(actor_id=1, slots=[0], seeds=[5], env=settings.to_dict(),
                            obs_space=SpaceSpec.from_gym(gym.spaces.Box(-1, 1, (5,), np.float32)),
                            action_space=SpaceSpec.from_gym(gym.spaces.Discrete(2)))
        with pytest.raises(Refused, match="different spaces"):
            _prepare(actor, ActorEnvs(), welcome, ActorOptions(learner="inproc://spaces"), groups=1)
        assert learner.poll(5000), "the learner was told nothing"
        told = m.decode(learner.recv_multipart()[1:])
        assert isinstance(told, m.Error) and "spaces differ" in told.reason
    finally:
        learner.close(0)
        actor.close(0)
        ctx.term()
