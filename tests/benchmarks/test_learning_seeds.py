"""benchmarks/learning_seeds.py: seeds parsed, and each seed run once: fresh, resumed when cut off, skipped when
ended or imported from an earlier entry; the entry it publishes from the seeds' runs."""
from __future__ import annotations

import argparse
import gzip
import json

import pytest

from benchmarks.learning_seeds import import_entry, parse_args, publish, seed_command, seed_list


def test_seed_lists():
    assert seed_list("1-5") == [1, 2, 3, 4, 5]
    assert seed_list("1,3,7") == [1, 3, 7]
    assert seed_list("2-3,9") == [2, 3, 9]
    for bad in ("", "a", "1-", "1,1", "3-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            seed_list(bad)


def test_each_seed_runs_fresh_then_resumes_then_is_done(tmp_path):
    args = parse_args(["configs/pong-fast.toml", "--seeds", "1-2", "--target", "20", "--max-steps", "1000",
                       "--runs", str(tmp_path), "--", "--set", "ppo.ent_coef=0.01"])
    assert args.marks == [200, 400, 600, 800, 1000]
    fresh = seed_command(args, 2)
    assert fresh[fresh.index("--seed") + 1] == "2"
    assert fresh[-5:] == ["--run-dir", str(tmp_path / "pong-fast" / "seed2"), "--", "--set", "ppo.ent_coef=0.01"]
    run = tmp_path / "pong-fast" / "seed2"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    resumed = seed_command(args, 2)
    assert resumed[-2:] == ["--resume", str(run)] and "ppo.ent_coef=0.01" not in resumed
    published = tmp_path / "pong-fast" / "published" / "2026-11-29-2core-cpu-pong-fast-seed2"
    published.mkdir(parents=True)
    summary = {"reached": False, "final": {"env_steps": 500}, "runs": [{"stopped_for": "budget"}]}
    (published / "summary.json").write_text(json.dumps(summary))
    assert seed_command(args, 2)[-2:] == ["--resume", str(run)]  # stopped by hand at 500 of 1000: resumed
    for ended in ({"reached": True}, {"final": {"env_steps": 1000}}, {"runs": [{"stopped_for": "max-hours"}]}):
        (published / "summary.json").write_text(json.dumps({**summary, **ended}))
        assert seed_command(args, 2) is None


@pytest.mark.integration  # git and uname name the commit and the machine
def test_publish_counts_the_seeds_that_ended_and_names_the_others(tmp_path):
    """Seeds 1 and 2 ended (published at the budget), seed 3 is still running, seed 4 has not started: the entry
    counts 1 of 2, names 3 and 4 as not counted yet, and keeps the ended seeds' metrics and games only (seed 2
    logged no game: its tail is not known). It is named by the day its first seed was published, not today's, so
    that publishing it again as the others end writes the same entry."""
    args = parse_args(["configs/cartpole.toml", "--seeds", "1-4", "--target", "100", "--max-steps", "300",
                       "--marks", "100,300", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    for seed, returns in ((1, [10, 120, 150]), (2, [10, 50, 90]), (3, [10])):
        run = tmp_path / "runs" / "cartpole" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "config.toml").write_text("[run]\n")
        rows = [{"update": i + 1, "env_steps": 100 * (i + 1), "elapsed_s": 5.0 * (i + 1), "episodes": 100 * (i + 1),
                 "episode_return_mean": r} for i, r in enumerate(returns)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if seed != 2:
            games = [{"update": 3, "env_steps": 300, "return": r, "length": 9} for r in [150.0] * 19 + [7.0]]
            (run / "episodes.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
        if seed < 3:
            published = tmp_path / "runs" / "cartpole" / "published" / f"2026-11-29-test-cartpole-seed{seed}"
            published.mkdir(parents=True)
            (published / "summary.json").write_text(json.dumps(
                {"reached": seed == 1, "final": {"env_steps": 300}, "runs": [{"stopped_for": "budget"}],
                 "date": f"2026-11-{30 - seed}"}))
    entry = publish(args)
    assert entry.name.startswith("2026-11-28-") and entry.name.endswith("-cartpole-seeds1-4")
    summary = json.loads((entry / "summary.json").read_text())
    assert (summary["runs"], summary["logged"], summary["reached"], summary["pending"]) == (2, 2, 1, [3, 4])
    assert {p.name for p in entry.iterdir()} == {"summary.json", "README.md", "plot.png", "config.toml",
                                                 "seed1-metrics.jsonl.gz", "seed2-metrics.jsonl.gz",
                                                 "seed1-episodes.jsonl.gz"}
    tails = {s["seed"]: s["last_games"] for s in summary["seeds"]}
    assert tails == {1: {"n": 20, "mean": 142.85, "mean_without_worst_tenth": 150.0, "worst": 7.0}, 2: None}
    readme = (entry / "README.md").read_text()
    assert "**1 of 2 seeds reached 100**" in readme
    assert "seed 3 (100 agent steps so far), seed 4 (not started)" in readme
    assert "| 150.00 / 7 |" in readme


def test_publish_before_any_seed_ended_says_so(tmp_path):
    args = parse_args(["configs/cartpole.toml", "--seeds", "1", "--target", "100", "--max-steps", "300",
                       "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    run = tmp_path / "runs" / "cartpole" / "seed1"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"update": 1, "env_steps": 100, "elapsed_s": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="no seed of cartpole has ended yet"):
        publish(args)


def made_up_entry(path, command: str):
    """An entry as publish writes it: seed 1 ran on machine M1 and reached the target; seed 2 ended short of the
    budget (its wall-time limit) and had itself been imported from an older entry (run on M0)."""
    path.mkdir(parents=True)
    seeds = [{"seed": 1, "reached": True, "final_steps": 200, "evaluation": {"mean": 150.0}},
             {"seed": 2, "reached": False, "final_steps": 200, "evaluation": None}]
    older = {"imported_from": "docs/results/older-entry", "machine": "M0", "commit": "c0"}
    (path / "summary.json").write_text(json.dumps({"command": command, "machine": "M1", "commit": "c1",
                                                   "seeds": seeds, "imported": {"2": older}}))
    (path / "config.toml").write_text("[run]\nseed = 1\ntotal_steps = 300\n")
    for seed, returns in ((1, [10, 120]), (2, [10, 50])):
        rows = [{"update": i + 1, "env_steps": 100 * (i + 1), "elapsed_s": 5.0 * (i + 1), "episodes": 100 * (i + 1),
                 "episode_return_mean": r} for i, r in enumerate(returns)]
        (path / f"seed{seed}-metrics.jsonl.gz").write_bytes(gzip.compress(
            "".join(json.dumps(r) + "\n" for r in rows).encode()))
    games = [{"update": 2, "env_steps": 200, "return": 120.0, "length": 9}] * 20
    (path / "seed1-episodes.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(g) + "\n" for g in games).encode()))
    return path


SAME = "python benchmarks/learning_seeds.py configs/cartpole.toml --name old --seeds 1-2 --target 100 --max-steps 300"


def test_an_entrys_seeds_count_as_ended_and_only_the_others_run(tmp_path):
    """--from ENTRY: seeds 1 and 2 come in as ended runs (their metrics, games and config, the seed set), seed 3
    runs; seed 2 keeps the machine it ran on (the entry had imported it); importing again changes nothing."""
    entry = made_up_entry(tmp_path / "entry", SAME + " -- --set ppo.ent_coef=0.01")
    args = parse_args(["configs/cartpole.toml", "--seeds", "1-3", "--target", "100", "--max-steps", "300",
                       "--runs", str(tmp_path / "runs"), "--from", str(entry), "--", "--set", "ppo.ent_coef=0.01"])
    assert args.imports == [entry]
    assert import_entry(args, entry) == [1, 2]
    assert seed_command(args, 1) is None and seed_command(args, 2) is None
    assert seed_command(args, 3)[-3:] == ["--", "--set", "ppo.ent_coef=0.01"]
    run = tmp_path / "runs" / "cartpole"
    assert (run / "seed1" / "metrics.jsonl").read_bytes() == gzip.decompress(
        (entry / "seed1-metrics.jsonl.gz").read_bytes())
    assert len((run / "seed1" / "episodes.jsonl").read_text().splitlines()) == 20
    assert not (run / "seed2" / "episodes.jsonl").exists()
    assert (run / "seed2" / "config.toml").read_text() == "[run]\nseed = 2\ntotal_steps = 300\n"
    origins = {s: json.loads((run / "published" / f"imported-seed{s}" / "summary.json").read_text())
               for s in (1, 2)}
    assert (origins[1]["machine"], origins[1]["imported_from"], origins[1]["evaluation"]) == ("M1", str(entry),
                                                                                              {"mean": 150.0})
    assert (origins[2]["machine"], origins[2]["imported_from"]) == ("M0", "docs/results/older-entry")
    (run / "seed1" / "metrics.jsonl").write_text("{}\n")  # a run here is kept
    assert import_entry(args, entry) == []
    assert (run / "seed1" / "metrics.jsonl").read_text() == "{}\n"


@pytest.mark.parametrize("command, named", [
    (SAME, "launch_args"),
    (SAME.replace("--max-steps 300", "--max-steps 400") + " -- --set ppo.ent_coef=0.01", "max_steps"),
    (SAME.replace("--target 100", "--target 90") + " -- --set ppo.ent_coef=0.01", "target"),
    (SAME.replace("cartpole.toml", "pendulum.toml") + " -- --set ppo.ent_coef=0.01", "recipe"),
])
def test_an_entry_of_other_settings_is_refused(tmp_path, command, named):
    entry = made_up_entry(tmp_path / "entry", command)
    args = parse_args(["configs/cartpole.toml", "--seeds", "1-3", "--target", "100", "--max-steps", "300",
                       "--runs", str(tmp_path / "runs"), "--", "--set", "ppo.ent_coef=0.01"])
    with pytest.raises(SystemExit, match=f"its {named} is"):
        import_entry(args, entry)
    assert not (tmp_path / "runs").exists()


@pytest.mark.integration  # git and uname name the commit and the machine
def test_publish_names_where_each_imported_seed_ran(tmp_path):
    entry = made_up_entry(tmp_path / "entry", SAME)
    args = parse_args(["configs/cartpole.toml", "--seeds", "1-3", "--target", "100", "--max-steps", "300",
                       "--marks", "100,300", "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    import_entry(args, entry)
    summary = json.loads((publish(args) / "summary.json").read_text())
    assert (summary["runs"], summary["reached"], summary["pending"]) == (2, 1, [3])
    assert {s: i["machine"] for s, i in summary["imported"].items()} == {"1": "M1", "2": "M0"}
    readme = next((tmp_path / "res").iterdir()) / "README.md"
    assert ("Imported, run elsewhere: seed 1 on M1, commit c1 (entry); seed 2 on M0, commit c0 (older-entry)."
            in readme.read_text())


@pytest.mark.integration  # git and uname name the commit and the machine
def test_publishing_again_keeps_the_notes_and_names_the_command_without_publish_only(tmp_path, monkeypatch):
    """An entry published as its seeds end: the "## Notes" a person added to its README survive the next
    publication, and the command it gives is the one that runs the seeds (--publish-only only rewrote it)."""
    argv = ["configs/cartpole.toml", "--seeds", "1", "--target", "100", "--max-steps", "300", "--publish-only",
            "--runs", str(tmp_path / "runs"), "--results", str(tmp_path / "res")]
    monkeypatch.setattr("sys.argv", ["benchmarks/learning_seeds.py", *argv])
    args = parse_args(argv)
    run = tmp_path / "runs" / "cartpole" / "seed1"
    run.mkdir(parents=True)
    (run / "config.toml").write_text("[run]\n")
    (run / "metrics.jsonl").write_text(json.dumps({"update": 1, "env_steps": 300, "elapsed_s": 1.0,
                                                   "episodes": 10, "episode_return_mean": 120.0}) + "\n")
    published = tmp_path / "runs" / "cartpole" / "published" / "2026-11-29-test-cartpole-seed1"
    published.mkdir(parents=True)
    (published / "summary.json").write_text(json.dumps({"reached": True, "final": {"env_steps": 300},
                                                        "runs": [], "date": "2026-11-29"}))
    readme = publish(args) / "README.md"
    assert "## Notes" not in readme.read_text()
    readme.write_text(readme.read_text() + "\n## Notes\n\n- seed 1 ran beside the test suite.\n")
    again = publish(args) / "README.md"
    assert again == readme
    text = readme.read_text()
    assert text.count("## Notes") == 1 and text.endswith("## Notes\n\n- seed 1 ran beside the test suite.\n")
    assert "--publish-only" not in text and "--max-steps 300" in text
    assert "--publish-only" not in json.loads((readme.parent / "summary.json").read_text())["command"]
