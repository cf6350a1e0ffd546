"""protocol/messages.py's TABLE is the one list of message types: every part it says takes a type has the
handler it names, and every type the wire knows has its row (a new type: one row plus its handlers)."""
from __future__ import annotations

import pytest

from actor.runner import Session
from learner.collection.collector import Collector
from learner.evaluation.worker import Evaluator
from learner.gateway.gateway import Gateway
from protocol import messages as m

PARTS = {m.GATEWAY: Gateway, m.COLLECTOR: Collector, m.ACTOR: Session, m.SUBSCRIBER: Evaluator}


@pytest.mark.parametrize("route", m.TABLE, ids=lambda r: r.name)
def test_each_part_that_takes_a_type_has_its_handler(route):
    assert route.by and route.by <= set(PARTS), route
    for part in route.by:
        assert callable(getattr(PARTS[part], route.handler, None)), f"{PARTS[part].__name__}.{route.handler}"
    assert any(route.when & states for states in m.STATES), "in turn in no state of its receiver"


def test_the_wire_knows_exactly_the_table():
    assert set(m.TYPES) == {r.name for r in m.TABLE} == set(m._BUILDERS)
    assert len(m.ROUTES) == len(m.TABLE), "one row per class"
