"""Puts the repository root on sys.path so tests import actor/, learner/ and protocol/ directly."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
