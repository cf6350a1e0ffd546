"""The collector's tests run over inproc (unit tests: no socket beyond the process) and loopback TCP (the same
tests, marked integration): `address` is where their gateway binds."""
import uuid

import pytest


@pytest.fixture(params=["inproc", pytest.param("tcp", marks=pytest.mark.integration)])
def address(request) -> str:
    return f"inproc://collector-test-{uuid.uuid4().hex}" if request.param == "inproc" else "tcp://127.0.0.1:0"
