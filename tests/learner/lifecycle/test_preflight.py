"""What the learner settles before any socket opens (learner/lifecycle/preflight.py): the device, the env's
spaces as the actors send them and as the network sees them, and what peers may claim; a run that cannot
start gets one StartupError naming why."""
from __future__ import annotations

import pytest
import torch

from learner.config import from_dict
from learner.lifecycle.preflight import admission_of, learner_spaces, pick_device
from learner.lifecycle.startup import StartupError


def test_the_device_is_the_cpu_without_cuda_and_asking_for_cuda_there_is_refused():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert pick_device("auto") == torch.device("cpu") and pick_device("cpu") == torch.device("cpu")
    with pytest.raises(StartupError, match="no CUDA device"):
        pick_device("cuda")


def test_an_atari_run_stacks_on_the_learner_the_actors_send_single_frames():
    spaces = learner_spaces(from_dict({"env": {"env_id": "ALE/Pong-v5"}}))
    assert spaces.frame_stack == 4
    assert tuple(spaces.actor_obs_space.shape) == (84, 84) and tuple(spaces.obs_space.shape) == (4, 84, 84)
    assert spaces.actor_env.frame_stack == 1 and spaces.action_space.n == 6


def test_a_vector_env_is_seen_as_its_actors_send_it():
    spaces = learner_spaces(from_dict({"env": {"env_id": "CartPole-v1"}}))
    assert spaces.frame_stack == 1 and spaces.actor_obs_space.to_dict() == spaces.obs_space.to_dict()


def test_an_unknown_env_and_normalize_obs_on_pixels_are_refused_in_one_line():
    with pytest.raises(StartupError, match="cannot make env 'ALE/Nope-v5'"):
        learner_spaces(from_dict({"env": {"env_id": "ALE/Nope-v5"}}))
    with pytest.raises(StartupError, match="normalize.obs is for vector observations"):
        learner_spaces(from_dict({"env": {"env_id": "ALE/Pong-v5"}, "normalize": {"obs": True}}))


def test_a_run_whose_own_actors_cannot_fit_the_memory_budget_is_refused():
    fits = from_dict({"env": {"env_id": "ALE/Pong-v5"}, "cluster": {"envs": 8, "memory_budget_mb": 4096}})
    spaces = learner_spaces(fits)
    assert admission_of(fits, spaces) is not None
    tight = from_dict({"env": {"env_id": "ALE/Pong-v5"}, "cluster": {"envs": 64, "memory_budget_mb": 1}})
    with pytest.raises(StartupError):
        admission_of(tight, spaces)
