"""Console hygiene: making an Atari env prints nothing (ALE's start-up banner stays out of consoles and logs)."""
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT

pytestmark = pytest.mark.integration

MAKE_AND_STEP = """
from actor.envs import make_env
from protocol.settings import EnvSettings
env = make_env(EnvSettings(env_id="ALE/Breakout-v5"), 1)
env.reset()
env.step(1)
print("stepped")
"""


def test_a_new_atari_env_process_prints_no_banner():
    """In a fresh process: ALE prints its banner once per process, so only a fresh one shows it."""
    result = subprocess.run([sys.executable, "-c", MAKE_AND_STEP], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "stepped\n"
    assert result.stderr == "", result.stderr
