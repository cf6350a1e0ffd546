"""benchmarks/mutations.py: every mutation still applies to the code (a target string found exactly once), and
one that does not is named, with exit code 2, before any test run."""
from __future__ import annotations

import pytest

from benchmarks import mutations
from benchmarks.mutations import EXTRA_MUTATIONS, MUTATIONS, missing_targets


def test_every_mutations_target_is_found_exactly_once_in_the_code():
    assert missing_targets(MUTATIONS + EXTRA_MUTATIONS, mutations.ROOT) == []


def test_a_target_not_found_fails_at_once_naming_the_mutation_its_file_and_the_string(tmp_path, monkeypatch, capsys):
    (tmp_path / "learner" / "model").mkdir(parents=True)
    (tmp_path / "learner" / "model" / "heads.py").write_text("return logp.argmax(-1)  # moved\n" * 2)
    monkeypatch.setattr(mutations, "ROOT", tmp_path)  # a tree where the code moved (not a git checkout: nothing runs)
    assert mutations.main(["--only", "greedy-argmin", "gaussian-std-1"]) == 2
    err = capsys.readouterr().err.splitlines()  # in the order of MUTATIONS
    assert err[0].startswith("gaussian-std-1") and "(0 matches of" in err[0]
    assert err[1].split() == ["greedy-argmin", "TARGET", "MISSING", "(2", "matches", "of", "'return", "logp.argmax(-1)'",
                              "in", "learner/model/heads.py)"]
    assert err[2] == "the code moved: update MUTATIONS"


def test_an_entry_of_the_table_without_a_key_it_needs_is_one_line_naming_it(tmp_path):
    table = tmp_path / "mutations.toml"
    table.write_text("[[mutation]]\nname = 'a'\nwhat = 'b'\npath = 'c'\nold = 'd'\n")
    with pytest.raises(SystemExit) as stop:
        mutations.load(table, "mutation")
    assert str(stop.value) == ("mutations.toml: [[mutation]] 1 has keys ['name', 'old', 'path', 'what']; wanted "
                               "['name', 'new', 'old', 'path', 'what'] (and tests)")
