"""A run that cannot start says why in one line (learner/lifecycle/startup.py): whatever a library raises inside
`starting(what)` comes out as one StartupError naming what was being done, without the library's chain."""
from __future__ import annotations

import pytest

from learner.lifecycle.startup import StartupError, starting


def test_a_library_error_becomes_one_line_naming_what_was_being_done():
    with pytest.raises(StartupError) as caught:
        with starting("cannot make env 'ALE/Nope-v5'"):
            raise ValueError("Environment Nope does not exist")
    assert str(caught.value) == "cannot make env 'ALE/Nope-v5': Environment Nope does not exist"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no chained traceback


def test_a_startup_error_passes_unchanged_and_a_clean_block_raises_nothing():
    first = StartupError("no checkpoint is usable")
    with pytest.raises(StartupError) as caught:
        with starting("cannot resume"):
            raise first
    assert caught.value is first
    with starting("cannot build the model"):
        built = True
    assert built
