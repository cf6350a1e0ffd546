"""The integration tests run first, the unit tests after them (stable: each group keeps its collected order).

With the README's `-n 2 --dist worksteal` the collection is cut in two halves, one per worker, and a worker
that runs out steals the back half of the other's queue. The integration tests are the suite's long ones
(a CartPole learning run: 30-100 s); put first, the last minutes of each worker are unit tests of a fraction
of a second, so neither worker waits long on the other at the end. Serially it changes only the order."""
from __future__ import annotations


def pytest_collection_modifyitems(session, config, items) -> None:
    items.sort(key=lambda item: item.get_closest_marker("integration") is None)
