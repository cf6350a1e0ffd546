"""issue 32: `ppo-cluster evaluate` on an empty, random, pickled or list file printed a traceback. Anything
that is not a checkpoint of this project is refused in one line, exit 2, and nothing in it is unpickled."""
from __future__ import annotations

import pytest
import torch

from learner.evaluation.evaluate import main
from learner.weights import checkpoint
from tests.learner.weights.test_checkpoint_housekeeping import NOT_CHECKPOINTS, _state, write_not_a_checkpoint


@pytest.mark.parametrize("content", NOT_CHECKPOINTS)
def test_evaluate_refuses_what_is_not_a_checkpoint_in_one_line(tmp_path, capsys, content):
    path = tmp_path / "x.pt"
    write_not_a_checkpoint(path, content)
    assert main([str(path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not a checkpoint of this project" in err, err
    assert not (tmp_path / "pwned").exists()


def test_evaluate_refuses_weights_that_do_not_fit_the_network_of_their_config(tmp_path, capsys):
    from learner.config import Config
    cfg = Config()
    cfg.env.env_id = "CartPole-v1"
    saved = {**_state(1), "config": cfg.to_dict(), "model": torch.nn.Linear(3, 2).state_dict()}
    checkpoint.save(tmp_path, 1, saved, keep=1)
    assert main([str(tmp_path), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "do not fit" in err, err


def test_evaluate_rejects_missing_path(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert main([str(tmp_path)]) == 2  # a directory without checkpoints
    err = capsys.readouterr().err
    assert "no such file or directory" in err and "no checkpoint" in err
