"""The commands' --help texts say what a user needs and nothing internal (issue 25, item 9); the `ppo-cluster`
command, installed or as `python -m ppo_cluster`, names its four commands and hands each its own --help (issue 42)."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration


def help_text(*command: str) -> str:
    result = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_launch_help_says_how_the_topology_is_picked():
    text = help_text("launch.py")
    assert "8 actors" not in text
    assert "cluster.envs" in text and "per core" in text


def test_evaluate_help_lists_no_internal_names():
    text = help_text("-m", "ppo_cluster", "evaluate")
    assert "RUN_DIR_OR_CHECKPOINT" in text and "--episodes EPISODES" in text  # the real help, its options listed
    for internal in ("load_policy", "eval_settings", "play_episodes", "VideoWriter", "broadcast_state", "load_broadcast"):
        assert internal not in text, internal


def test_actor_help_shows_no_empty_defaults():
    text = " ".join(help_text("-m", "actor").split())
    assert "(default: None)" not in text and "(default: )" not in text
    assert "(required)" in text and "(default: 30)" in text


def test_help_config_prints_every_key_with_its_meaning():
    from learner.config import field_docs
    from learner.config_docs import text
    printed = help_text("launch.py", "--help")  # the option is listed ...
    assert "--help-config" in printed
    result = subprocess.run([sys.executable, "launch.py", "--help-config"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout == text()  # ... and prints the generated reference
    for key, _, doc in field_docs():
        section, name = key.split(".")
        assert f"[{section}]" in result.stdout and f"\n  {name} = " in result.stdout
        assert " ".join(doc.split()[:4]) in " ".join(result.stdout.split()), key


def test_ppo_cluster_train_is_launch_py_with_its_options():
    assert help_text("-m", "ppo_cluster", "train") == help_text("launch.py")
    result = subprocess.run([sys.executable, "-m", "ppo_cluster", "train", "--max-restarts", "-1"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--max-restarts must be >= 0" in result.stderr  # launch.py's own refusal


def installed_script() -> Path:
    """The `ppo-cluster` console script of this interpreter's install (pip install -e .)."""
    scripts = [e for e in metadata.entry_points(group="console_scripts") if e.name == "ppo-cluster"]
    if not scripts:  # an install made before pyproject.toml had [project.scripts]: pip install -e . again
        pytest.skip("ppo-cluster is installed without its console script; reinstall (pip install -e .)")
    assert scripts[0].value == "ppo_cluster.cli:main"
    script = Path(sys.executable).parent / "ppo-cluster"
    assert script.is_file(), f"the install lists the ppo-cluster script but {script} is missing"
    return script


def test_the_installed_command_lists_its_four_commands_and_hands_each_its_help():
    script = installed_script()
    text = subprocess.run([script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert all(f"\n    {name} " in text for name in ("train", "actor", "evaluate", "plot")), text
    for command, own in (("train", "--help-config"), ("actor", "--learner ADDRESS"),
                         ("evaluate", "RUN_DIR_OR_CHECKPOINT"), ("plot", "--smooth")):
        result = subprocess.run([script, command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and own in result.stdout, (command, result.stderr[-2000:])
