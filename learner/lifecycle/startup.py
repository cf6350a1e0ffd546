"""A run that cannot start says why in one line (exit 2)."""
from __future__ import annotations

from contextlib import contextmanager


class StartupError(Exception):
    """A run that cannot start (bad env id, unsupported space, address in use, bad keys): one line, exit 2."""


@contextmanager
def starting(what: str):
    try:
        yield
    except StartupError:
        raise
    except Exception as exc:  # whatever gymnasium, torch or zmq raise here, the user gets one line
        raise StartupError(f"{what}: {exc}") from None
