"""The actor's session plumbing: where it (re)joins, and how it takes the learner's messages (by the table)."""
import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import zmq

from actor.env_groups import ActorEnvs
from actor.runner import (ActorOptions, Busy, LearnerGone, Redirected, Refused, Retired, Session, _prepare,
                          learner_address)
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


def test_a_message_the_table_does_not_give_an_actor_now_is_logged_by_name_counted_and_dropped(caplog):
    """Not silently: the first of each type and state in full; never acted on (a Welcome while serving would
    otherwise be lost without a word, as before the table)."""
    session = Session(None, ActorEnvs(), ActorOptions(learner="inproc://none", name="a"), groups=1)
    welcome = m.Welcome(0, [0], [1], {}, SpaceSpec(kind="box", shape=(3,)), SpaceSpec(kind="discrete", n=2))
    with caplog.at_level("WARNING", logger="actor"):
        for msg, state in [(welcome, m.SERVING), (welcome, m.SERVING), (m.Goodbye("x"), m.JOINING),
                           (m.StepReport(0, np.zeros((1, 3)), np.zeros(1), np.zeros(1, bool), np.zeros(1, bool)),
                            m.SERVING)]:
            assert session.dispatch(msg, state) is None
    assert session.unexpected == 4
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["actor a: ignoring a message from the learner: Welcome while serving (in turn while joining)",
                     "actor a: ignoring a message from the learner: Goodbye while joining (in turn while preparing or "
                     "serving)",
                     "actor a: ignoring a message from the learner: unexpected StepReport: only the collector takes it"]


def test_the_learners_answers_end_the_wait_as_the_table_routes_them():
    session = Session(None, ActorEnvs(), ActorOptions(learner="inproc://none"), groups=1)
    assert session.dispatch(m.Goodbye("the end"), m.SERVING) == "the end"
    with pytest.raises(Busy):  # before a welcome, "rejoin" is "full for now"
        session.dispatch(m.Error("full", rejoin=True), m.JOINING)
    with pytest.raises(Retired):
        session.dispatch(m.Error("retired", rejoin=True), m.SERVING)
    with pytest.raises(Refused):
        session.dispatch(m.Error("another game"), m.PREPARING)
    with pytest.raises(Redirected):
        session.dispatch(m.Redirect("tcp://10.0.0.2:5555"), m.JOINING)
