"""The packages' dependency direction along the data path (issue 33): env -> actor -> protocol -> gateway ->
collection -> rollout -> advantages -> update -> weights. Each stage of the learner may import only the stages
this table names: the gateway (where actors arrive, and where they are placed on ranks) none; collection the
gateway it serves, the rollout it writes and the weights it serves (the loop closes there); advantages the
rollout it reads; the update none; the weights the update whose state their checkpoints hold (its optimizer, the
ranks they are saved for and loaded on). The wire and the actors stay light."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ["gateway", "collection", "rollout", "advantages", "update", "weights"]
MAY_IMPORT = {"gateway": set(), "collection": {"gateway", "rollout", "weights"}, "rollout": set(),
              "advantages": {"rollout"}, "update": set(), "weights": {"update"}}


def imports(package: str) -> dict[str, set[str]]:
    """{file: the modules it imports (absolute, dotted)} for every file of `package` (a path under ROOT)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def test_each_stage_of_the_learner_imports_only_the_stages_before_it_on_the_data_path():
    wrong = []
    for stage in STAGES:
        for path, names in imports(f"learner/{stage}").items():
            for name in names:
                parts = name.split(".")
                if parts[0] == "learner" and len(parts) > 1 and parts[1] in STAGES and parts[1] != stage \
                        and parts[1] not in MAY_IMPORT[stage]:
                    wrong.append(f"{path} imports {name}")
    assert wrong == []


def test_collection_and_gateway_import_nothing_from_update():
    wrong = [f"{path} imports {name}" for package in ("learner/collection", "learner/gateway")
             for path, names in imports(package).items() for name in names if name.startswith("learner.update")]
    assert wrong == []


def test_nothing_of_the_learner_actor_or_protocol_imports_the_launcher():
    """launch.py and launcher/ start the learner and the actors, never the other way round."""
    wrong = [f"{path} imports {name}" for package in ("learner", "actor", "protocol")
             for path, names in imports(package).items() for name in names
             if name == "launcher" or name.startswith("launcher.") or name == "launch"]
    assert wrong == []


def test_the_gateway_protocol_and_actors_stay_free_of_torch_and_the_learner():
    heavy = {"protocol": ("torch", "gymnasium", "ale_py", "actor", "learner"),
             "actor": ("torch", "learner"),
             "learner/gateway": ("torch", "learner.collection", "learner.update", "learner.model"),
             "launcher": ("torch", "gymnasium", "ale_py")}  # the launcher's children import them, in themselves
    wrong = [f"{path} imports {name}" for package, banned in heavy.items()
             for path, names in imports(package).items() for name in names
             if any(name == b or name.startswith(b + ".") for b in banned)]
    assert wrong == []


def test_the_config_takes_its_limits_from_the_protocol_not_from_the_learners_stages():
    """learner/config.py is read by every stage: it imports none of them (the env-slot limit is protocol's)."""
    (names,) = [names for path, names in imports("learner").items() if path == "learner/config.py"]
    wrong = sorted(name for name in names if name.split(".")[:2] in (["learner", stage] for stage in STAGES))
    assert wrong == []


def test_the_training_process_imports_collection_only_through_its_front_door():
    """learner/main.py takes collection from learner/collection/__init__.py, never from one of its modules
    (issue 42): what collection shows the training loop is said in one place."""
    (names,) = [names for path, names in imports("learner").items() if path == "learner/main.py"]
    assert "learner.collection" in names
    wrong = sorted(name for name in names if name.startswith("learner.collection."))
    assert wrong == []
