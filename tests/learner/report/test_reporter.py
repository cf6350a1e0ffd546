"""Reporter: every statistic an update returns reaches metrics.jsonl unlisted, the job's and the collection's
fields beside them, episodes.jsonl; and every key a line can hold is explained in docs/running.md."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from learner.config import Config, ModelConfig, PPOConfig, apply_overrides
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.report.episodes import RecentEpisodes
from learner.report.reporter import Gathered, Job, Reporter, Since
from learner.update.ppo import PPOUpdater
from protocol.spaces import SpaceSpec

DOCS = Path(__file__).resolve().parents[3] / "docs" / "running.md"
TWO_RANKS = Gathered(widths=[4, 2], actors=[2, 1], sums=["ab", "ab"], rejected=3, dropped=5, events=["joined a"],
                     samples=[512, 256])
ONE_RANK = Gathered(widths=[4], actors=[2], sums=None, rejected=0, dropped=0, events=[])


def make_updater(cfg: PPOConfig, **kwargs) -> PPOUpdater:
    torch.manual_seed(0)
    model = build_model(SpaceSpec(kind="box", shape=(4,), dtype="float32"), SpaceSpec(kind="discrete", n=3),
                        ModelConfig(hidden=16))
    return PPOUpdater(model, cfg, device="cpu", **kwargs)


def update_stats(updater: PPOUpdater) -> dict:
    """What a real update returns (and main.py adds: its time, and the count of non-finite batches dropped),
    on a small random batch."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(32, 4, generator=g)
    actions, logprobs, values = updater.model.act(obs, generator=g)
    advantages = torch.randn(32, generator=g)
    batch = {"obs": obs, "actions": actions, "logprobs": logprobs, "values": values, "advantages": advantages,
             "returns": advantages + values}
    return {**updater.update(batch, progress=0.25, generator=g), "update_s": 0.5, "nonfinite_batches": 0}


def write_lines(run_dir: Path, cfg: Config, updater: PPOUpdater, stats: dict, gathered: Gathered,
                episodes: RecentEpisodes | None = None, collection: dict | None = None) -> list[dict]:
    reporter = Reporter(run_dir, cfg, episodes or RecentEpisodes(), updater, world=len(gathered.widths),
                        policy_lag=0)
    job = Job(update=3, env_steps=300, progress=0.25, batch=None, n_valid=100, t0=10.0, t1=12.0,
              collection=collection)
    reporter.write(job, stats, gathered, interval=4.0, state={"version": 3, "elapsed_s": 30.0},
                   since=Since(env_steps=0, elapsed_s=0.0), serial={"update": 0.5, "total": 0.6})
    reporter.close()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def quiet_config(*overrides: str) -> Config:
    return apply_overrides(Config(), ["log.tensorboard=false", "log.progress_bar=false", "run.total_steps=1000",
                                      *overrides])


def test_every_statistic_the_update_returns_is_written(tmp_path):
    updater = make_updater(PPOConfig(update_epochs=2, num_minibatches=2))
    stats = {**update_stats(updater), "a_statistic_added_later": 1.5}
    (line,) = write_lines(tmp_path, quiet_config(), updater, stats, ONE_RANK)
    for key, value in stats.items():
        assert line[key] == pytest.approx(value), key
    assert line["grad_norm"] > 0 and line["epochs_run"] == 2 and len(line["epoch_kls"]) == 2


def test_job_and_collection_fields(tmp_path):
    updater = make_updater(PPOConfig())
    episodes = RecentEpisodes()
    episodes.add(2.0, 10)
    episodes.add(4.0, 30)
    (line,) = write_lines(tmp_path, quiet_config(), updater, {"update_s": 0.5}, TWO_RANKS, episodes)
    assert line["update"] == 3 and line["env_steps"] == 300 and line["sps"] == 25.0  # 100 steps in 4 s
    assert line["progress"] == 0.3 and line["eta_s"] == pytest.approx(70.0)  # 700 steps left at 10 per s
    assert line["collect_s"] == 2.0 and line["elapsed_s"] == 30.0 and line["weights_version"] == 3
    assert line["episode_return_mean"] == 3.0 and line["episode_length_mean"] == 20.0 and line["episodes"] == 2
    assert line["actors"] == 3 and line["env_slots"] == 6 and line["rejected_messages"] == 3
    assert line["dropped_samples"] == 5 and line["events"] == ["joined a"] and line["learners"] == 2
    assert line["rank_env_slots"] == [4, 2] and line["rank_actors"] == [2, 1] and line["rank_samples"] == [512, 256]
    assert line["rank_weights_checksums"] == ["ab", "ab"]
    rows = [json.loads(row) for row in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert rows == [{"update": 3, "env_steps": 300, "return": 2.0, "length": 10},
                    {"update": 3, "env_steps": 300, "return": 4.0, "length": 30}]


def test_collect_only_line_has_the_schedules_rate_and_no_update_statistics(tmp_path):
    updater = make_updater(PPOConfig(learning_rate=1e-3))
    (line,) = write_lines(tmp_path, quiet_config(), updater, {"update_s": 0.0}, ONE_RANK)
    assert line["learning_rate"] == pytest.approx(0.75e-3)  # progress 0.25 of a linear schedule
    assert "policy_loss" not in line and "grad_norm" not in line and "learners" not in line


def documented_fields() -> set[str]:
    """The backquoted names in the first column of docs/running.md's table of metrics.jsonl fields."""
    text = DOCS.read_text()
    table = text[text.index("Fields of `metrics.jsonl`:"):].split("\n\n")[1]
    rows = [line.split("|")[1] for line in table.splitlines()[2:]]
    return {name for cell in rows for name in re.findall(r"`([a-z0-9_]+)`", cell)}


def recurrent_update() -> tuple[PPOUpdater, dict]:
    """An updater of a recurrent model (model.core) and what its update over an acted rollout returns."""
    from learner.advantages.batch import rollout_to_batch
    from tests.learner.update.test_ppo_recurrent import acted_rollout
    model, policy, buf = acted_rollout("gru", 4)
    updater = PPOUpdater(model, PPOConfig(num_minibatches=2), device="cpu")
    batch = rollout_to_batch(buf, policy.value, 0.99, 0.95)
    return updater, {**updater.update(batch.data, 0.0, torch.Generator().manual_seed(0)), "update_s": 0.1}


def every_line_kind(tmp_path: Path) -> list[dict]:
    """A line of each kind a run can write: the clip variant with value normalization, policy lag, batch
    checksums, evaluation and two ranks and the collection's breakdown; the KL variant; a collect-only update;
    a recurrent core's update."""
    clip = make_updater(PPOConfig(update_epochs=2), value_norm=ValueNormalizer(), batch_checksum=True,
                        policy_lag=True)
    kl = make_updater(PPOConfig(variant="kl"))
    kinds = [(quiet_config("eval.every=1", "run.batch_checksum=true"), clip, update_stats(clip), TWO_RANKS),
             (quiet_config(), kl, update_stats(kl), ONE_RANK), (quiet_config(), kl, {"update_s": 0.0}, ONE_RANK),
             (quiet_config(), *recurrent_update(), ONE_RANK)]
    lines = []
    for i, (cfg, updater, stats, gathered) in enumerate(kinds):
        (tmp_path / str(i)).mkdir()
        lines += write_lines(tmp_path / str(i), cfg, updater, stats, gathered,
                             collection={"rollout_s": 2.0} if i == 0 else None)
    return lines


def test_every_field_of_metrics_jsonl_is_documented_and_every_documented_one_written(tmp_path):
    written = {key for line in every_line_kind(tmp_path) for key in line}
    documented = documented_fields()
    assert not written - documented, f"fields missing from docs/running.md: {sorted(written - documented)}"
    assert not documented - written, f"docs/running.md documents fields no line holds: {sorted(documented - written)}"
