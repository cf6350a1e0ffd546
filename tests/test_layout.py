"""Test files mirror the packages (issue 33): the unit tests of <path>/<module>.py live in
tests/<path>/test_<module>.py, or tests/<path>/test_<module>_<aspect>.py for a second file on one aspect of it.
Multi-process tests live in tests/integration/ and the benchmarks' in tests/benchmarks/, named by what they
check; tests/test_*.py check the project as a whole. A module moved or renamed leaves no orphan test file.

learner/'s root keeps at most LOOSE_MODULES modules of its own: the rest lives in the subpackages that say what
they are (issue 42).

`python -m tests.test_layout` lists the modules that have no unit test file of their own."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PACKAGES = ("actor", "launcher", "learner", "protocol", "ppo_cluster")
HOMES = ("integration", "benchmarks")  # named by what they check, not by a module
LOOSE_MODULES = 6


def modules() -> list[Path]:
    """Every module of the packages, and launch.py, relative to the root (no __init__.py)."""
    found = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if p.name != "__init__.py"]
    return sorted(p.relative_to(ROOT) for p in [*found, ROOT / "launch.py"])


def unit_test_files() -> list[Path]:
    """Every tests/<path>/test_*.py outside the homes and the top level, relative to tests/."""
    files = [p.relative_to(TESTS) for p in TESTS.rglob("test_*.py")]
    return sorted(p for p in files if len(p.parts) > 1 and p.parts[0] not in HOMES)


def module_of(test_file: Path) -> Path | None:
    """The module that tests/<path>/test_<name>[_<aspect>].py mirrors: <path>/<name>.py, the longest name that
    fits; None when there is none."""
    stem = test_file.stem[len("test_"):]
    fits = [m for m in modules() if m.parent == test_file.parent and (stem == m.stem or stem.startswith(m.stem + "_"))]
    return max(fits, key=lambda m: len(m.stem), default=None)


def untested_modules() -> list[Path]:
    tested = {module_of(f) for f in unit_test_files()}
    return [m for m in modules() if m not in tested]


def test_every_unit_test_file_mirrors_a_module():
    orphans = [f"tests/{f}" for f in unit_test_files() if module_of(f) is None]
    assert orphans == [], f"test files named after no module beside their mirror (tests/<path>/test_<module>.py " \
                          f"for <path>/<module>.py): {orphans}"


def test_the_mirror_rule_reads_names_as_documented():
    assert module_of(Path("learner/collection/test_collector.py")) == Path("learner/collection/collector.py")
    assert module_of(Path("learner/collection/test_collector_framestack.py")) == \
        Path("learner/collection/collector.py")
    assert module_of(Path("learner/test_collector.py")) is None  # not beside its mirror
    assert module_of(Path("protocol/test_fuzz.py")) is None


def test_the_learners_root_keeps_at_most_six_loose_modules():
    loose = sorted(p.name for p in (ROOT / "learner").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= LOOSE_MODULES, f"learner/ holds {len(loose)} modules of its own ({loose}): at most " \
                                        f"{LOOSE_MODULES}; move some into the subpackage they belong to"


if __name__ == "__main__":
    print("modules without a unit test file of their own:")
    print("\n".join(f"  {m}" for m in untested_modules()))
