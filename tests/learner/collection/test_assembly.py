"""Collection is assembled in one place (learner/collection/assembly.py), and the training loop sees one interface."""
import ast
from pathlib import Path

import pytest
import torch

from learner.collection.assembly import collector_settings
from learner.collection.collection import Collection
from learner.collection.local import LocalCollection
from learner.collection.processes.pool import CollectorPool
from learner.config import from_dict

ROOT = Path(__file__).resolve().parents[3]


def calls_of(name: str) -> list[str]:
    """Every module of learner/ that calls `name(...)`."""
    found = []
    for path in sorted((ROOT / "learner").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
                found.append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", ["Collector", "Gateway"])
def test_a_collections_parts_are_made_in_one_module(name):
    assert calls_of(name) == ["learner/collection/assembly.py"]


def test_the_training_loop_does_not_know_which_form_it_has():
    imported = {alias.name for node in ast.walk(ast.parse((ROOT / "learner/main.py").read_text()))
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert not imported & {"LocalCollection", "CollectorPool", "CollectorSpec", "Collector"}
    assert issubclass(LocalCollection, Collection) and issubclass(CollectorPool, Collection)


@pytest.mark.parametrize("run, in_process, want", [
    ({}, True, dict(lockstep=False, policy_lag=False, collect_only=False, startup_timeout_s=7.0)),
    ({}, False, dict(policy_lag=False, startup_timeout_s=0.0)),  # the pool's wait has the deadline
    ({"policy_lag": 1}, True, dict(policy_lag=True)),
    ({"policy_lag": 1}, False, dict(policy_lag=True)),  # issue 62: collector processes flow on too
    ({"policy_lag": 1, "collect_only": True}, True, dict(policy_lag=False, collect_only=True)),
    ({"collect_only": True, "deterministic": True}, True, dict(lockstep=True, collect_only=False)),
])
def test_collector_settings_come_from_the_config(run, in_process, want):
    cfg = from_dict({"run": run, "cluster": {"startup_timeout_s": 7.0}, "ppo": {"num_steps": 16}})
    settings = collector_settings(cfg, torch.device("cpu"), 4, in_process)
    assert (settings.num_steps, settings.frame_stack) == (16, 4)
    assert {k: getattr(settings, k) for k in want} == want
