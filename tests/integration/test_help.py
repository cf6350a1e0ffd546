"""The three commands' --help texts say what a user needs and nothing internal (issue 25, item 9)."""
from __future__ import annotations

import subprocess
import sys

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
    text = help_text("-m", "learner.evaluate")
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
