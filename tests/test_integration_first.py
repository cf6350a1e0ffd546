"""The collection order (tests/integration_first.py): the integration tests first, each group in its own order."""
from __future__ import annotations

INNER = '''
import pytest

def test_unit_a():
    pass

@pytest.mark.integration
def test_integration_b():
    pass

def test_unit_c():
    pass

@pytest.mark.integration
@pytest.mark.parametrize("n", [1, 2])
def test_integration_d(n):
    pass
'''


def test_the_integration_tests_are_collected_first_and_each_group_keeps_its_order(pytester):
    pytester.makeconftest('pytest_plugins = ["tests.integration_first"]')
    pytester.makeini("[pytest]\nmarkers =\n    integration: real processes\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    collected = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert collected == ["test_integration_b", "test_integration_d[1]", "test_integration_d[2]",
                         "test_unit_a", "test_unit_c"]
