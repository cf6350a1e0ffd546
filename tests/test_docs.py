"""The documentation stays true to the code: the generated config reference matches the schema."""
from __future__ import annotations

from pathlib import Path

from learner.config_docs import REGENERATE, markdown

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_doc_is_the_schema():
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == markdown(), f"docs/configuration.md disagrees with learner/config.py: run `{REGENERATE}`"
