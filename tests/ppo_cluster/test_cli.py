"""The `ppo-cluster` command: its help names the four commands, and each command's --help is that command's own
(train's, which replaces the process with launch.py: tests/integration/test_help.py)."""
from __future__ import annotations

import pytest

from ppo_cluster.cli import COMMANDS, main


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_help_lists_train_actor_evaluate_and_plot(capsys):
    text = help_of(capsys, "--help")
    assert list(COMMANDS) == ["train", "actor", "evaluate", "plot"]
    assert all(f"\n    {name} " in text for name in COMMANDS), text
    assert "python launch.py" in text and "python -m ppo_cluster" in text


@pytest.mark.parametrize("command,own_option", [("actor", "--learner ADDRESS"), ("evaluate", "--episodes EPISODES"),
                                                ("plot", "--smooth")])
def test_each_commands_help_is_its_own(capsys, command, own_option):
    text = help_of(capsys, command, "--help")
    assert own_option in text and "COMMAND" not in text


@pytest.mark.parametrize("argv", [[], ["bogus"], ["--config", "configs/smoke.toml"]])
def test_no_command_or_an_unknown_one_is_a_usage_error(capsys, argv):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2 and "usage: ppo-cluster" in capsys.readouterr().err


def test_the_arguments_after_the_command_are_the_commands_untouched(capsys):
    """--help after the command is the command's; options the top level does not know are never its error."""
    with pytest.raises(SystemExit) as done:
        main(["plot", "--smooth", "x"])  # plot's own parser refuses it, naming its own option
    assert done.value.code == 2 and "argument --smooth" in capsys.readouterr().err
