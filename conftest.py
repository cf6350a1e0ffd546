"""Puts the repository root on sys.path so tests import actor/, learner/ and protocol/ directly, and loads the
integration-marker guard (tests/process_guard.py), the order that runs the integration tests first
(tests/integration_first.py) and pytester (tests/test_process_guard.py runs pytest inline)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["tests.process_guard", "tests.integration_first", "pytester"]
