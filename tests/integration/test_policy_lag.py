"""run.policy_lag = 1 against a real learner process (issue 11, item 6).

The test process is the actor: it steps real Pendulum envs through the actor's own EnvGroup over a real
socket, and records every observation it sent and every action it got. The learner checkpoints after
every update, so the weights W_v of every version and the optimizer state before every update are on
disk. Then:

- actions of rollout r (r >= 3) are exactly mean_{W_v}(obs) + std_{W_v} * noise, with v the version the
  Actions message names and the noise replayed from the policy's seeded generator: the actors are served
  by W_{r-2} while update r-1 runs and by W_{r-1} from the moment it is done, mid-rollout (the group then
  goes on into the next rollout at once): v is r-2 or r-1, never older, never going back;
- update r, replayed in the test from checkpoint r-1 on the recorded rollout, ends exactly at W_r: the
  rollout the update trained on is the one collected, never overwritten by the next rollout that was
  collected into the other buffer while the update ran. Episodes are cut at 10 steps, so the replayed
  rollouts hold truncations mid-rollout: the learner must bootstrap them from the final observation,
  not treat them as terminations. The bootstrap values come from the weights served when the rollout
  ended (W_{r-1} if update r-1 was done by then, else W_{r-2}): the replay tries both.
"""
from __future__ import annotations

from functools import partial

import copy
import json
import time

import numpy as np
import pytest
import torch
import zmq

from actor.envs import describe_spaces, make_env
from actor.env_groups import EnvGroup
from learner.config import load
from learner.advantages.gae import compute_gae
from learner.model.networks import build_model
from learner.model.normalize import ValueNormalizer
from learner.update.ppo import PPOUpdater
from protocol import messages as m
from protocol.settings import EnvSettings
from protocol.transport import connect_dealer
from tests.integration.cluster import kill_group, launch, metrics, run_launch, wait_for

pytestmark = pytest.mark.integration
T, K, ROLLOUTS, EPOCHS, MINIBATCHES, SEED = 8, 2, 7, 8, 4, 1
EPISODE = 10  # truncations in the middle of rollouts 3 and 4, the ones replayed


def new_updater(model, cfg, value_norm: ValueNormalizer | None = None) -> PPOUpdater:
    """The one place that knows PPOUpdater's constructor (anneal_lr is off: the schedule plays no part); the
    learner's updater knows of the lag (its value clip is anchored at the critic each update starts from)."""
    return PPOUpdater(model, cfg, device="cpu", value_norm=value_norm, policy_lag=True)


def value_statistics(saved: dict) -> ValueNormalizer | None:
    """A checkpoint's value statistics (normalize.value), None without them."""
    if not saved.get("value_norm"):
        return None
    vn = ValueNormalizer()
    vn.load_state_dict(saved["value_norm"])
    return vn


def run_update(updater: PPOUpdater, batch: dict, update: int, generator: torch.Generator) -> dict:
    return updater.update(batch, 0.0, generator)  # anneal_lr is off: progress does not matter


def next_message(sock, deadline: float):
    """The next message from the learner, failing past the deadline."""
    while time.monotonic() < deadline:
        if sock.poll(100):
            return m.decode(sock.recv_multipart())
    raise AssertionError("the learner went silent")


def act_as_actor(address: str, deadline: float) -> tuple[list, list, list, dict]:
    """Join with K Pendulum envs, answer every Actions until the learner says goodbye.

    Returns obs[s] (sent before step s), actions[s] (Actions message for step s), rewards[s], and
    finals[s] = {env index: last observation} for the envs truncated at step s."""
    ctx = zmq.Context()
    sock = connect_dealer(ctx, address, 1 << 20)
    group = None
    sent, received, rewards, finals = [], [], [], {}
    try:
        sock.send_multipart(m.encode(m.Handshake(K, "test-actor")))

        recv = partial(next_message, sock, deadline)
        welcome = recv()
        assert isinstance(welcome, m.Welcome), welcome
        settings = EnvSettings.from_dict(welcome.env)
        envs = [make_env(settings, seed) for seed in welcome.seeds]
        group = EnvGroup(envs, welcome.seeds, describe_spaces(envs[0])[1])
        first = group.first_report(0)
        sent.append(first.obs.copy())
        sock.send_multipart(m.encode(first))
        while True:
            msg = recv()
            if isinstance(msg, m.Goodbye):
                return sent, received, rewards, finals
            assert isinstance(msg, m.Actions), msg
            received.append(msg)
            report = group.step(0, msg.actions)
            assert not report.terminated.any(), "Pendulum episodes only end by truncation"
            if report.truncated.any():
                finals[len(received) - 1] = dict(zip(report.final_index.tolist(), report.final_obs.copy()))
            sent.append(report.obs.copy())
            rewards.append(report.rewards.copy())
            sock.send_multipart(m.encode(report))
    finally:
        if group is not None:
            group.close()
        sock.close(linger=0)
        ctx.term()


def checkpoints_by_version(run_dir) -> dict[int, dict]:
    """Every checkpoint on disk, keyed by the weights version it holds. Not by file name: under policy lag
    today the learner saves update u's checkpoint after counting rollout u+1, so ckpt_{u+1} holds W_u (and
    the final update's checkpoint overwrites the one before it)."""
    saved = [torch.load(p, weights_only=True) for p in sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))]
    return {int(c["version"]): c for c in saved}


def served_critic(model, stats: ValueNormalizer | None):
    """A served version's raw values: its critic's outputs de-normalized with its own statistics."""
    def critic(x):
        out = model.value(x)
        return out if stats is None else stats.denormalize(out)
    return critic


def bootstraps(critic, values: torch.Tensor, last_obs: np.ndarray, finals: list[dict]):
    """GAE's next values for a rollout of `values` [T, K] and which steps were truncations: the next step's
    value, `critic` at the observation after the last step and at each truncated episode's final one."""
    with torch.no_grad():
        next_values = torch.cat([values[1:], critic(torch.from_numpy(last_obs))[None]])
        truncated = torch.zeros(values.shape, dtype=torch.bool)
        for t, cut in enumerate(finals):
            for i, final in cut.items():
                truncated[t, i] = True
                next_values[t, i] = critic(torch.from_numpy(final)[None])[0]
    return next_values, truncated


def replay_update(r: int, batch: dict, model, saved: dict, cfg):
    """Update r run here from checkpoint `saved` (r-1's) and `model` (its weights) on `batch`, with the
    learner's update generator advanced past updates 1..r-1: the model, the updater and the update's stats."""
    updater = new_updater(model, cfg.ppo, value_statistics(saved))
    updater.load_state_dict(copy.deepcopy(saved["updater"]))  # the optimizer would step the saved tensors
    gen = torch.Generator().manual_seed(SEED + 1)  # the learner's update generator
    for _ in range((r - 1) * EPOCHS):  # what updates 1..r-1 drew
        torch.randperm(T * K, generator=gen)
    stats = run_update(updater, batch, r, gen)
    return model, updater, stats


def same_weights(model, reference) -> bool:
    return all(torch.allclose(p.detach(), q.detach(), atol=1e-5, rtol=0)
               for p, q in zip(model.parameters(), reference.parameters()))


@pytest.mark.parametrize("value_norm, fresh", [(False, False), (True, False), (True, True)])
def test_policy_lag_serves_previous_weights_and_trains_on_the_collected_rollout(tmp_path, value_norm, fresh):
    """With normalize.value (issue 40) the served critic's outputs are de-normalized with the statistics of
    the served version (its checkpoint's), not with those the running update moves: else the replayed
    advantages, and so the replayed update, would differ. With ppo.lag_fresh_advantages the advantages are
    GAE's with the critic update r starts from (W_(r-1) and its statistics) for every step and bootstrap."""
    run_dir = tmp_path / "lag"
    proc = launch("--config", "configs/pendulum.toml", "--run-dir", str(run_dir), "--actors", "0",
                  "--total-steps", str(ROLLOUTS * T * K), "--set", "run.policy_lag=1", "--set", f"run.seed={SEED}",
                  "--set", f"cluster.min_envs={K}", "--set", "normalize.obs=false", "--set", "normalize.reward=false",
                  "--set", f"normalize.value={str(value_norm).lower()}",
                  "--set", f"ppo.lag_fresh_advantages={str(fresh).lower()}",
                  "--set", f"ppo.num_steps={T}", "--set", f"ppo.update_epochs={EPOCHS}",
                  "--set", f"ppo.num_minibatches={MINIBATCHES}", "--set", "ppo.learning_rate=3e-3",
                  "--set", "ppo.anneal_lr=false", "--set", "run.checkpoint_every=1",
                  "--set", f"log.keep_checkpoints={ROLLOUTS + 2}", "--set", f"env.max_episode_steps={EPISODE}")
    try:
        endpoints = wait_for(lambda: (run_dir / "endpoints.json").exists()
                             and json.loads((run_dir / "endpoints.json").read_text()), 60, "endpoints", proc)
        obs, actions, rewards, finals = act_as_actor(endpoints["address"], time.monotonic() + 90)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        kill_group(proc)

    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, ROLLOUTS + 1)) and all(r["policy_lag"] == 1 for r in rows)
    assert len(actions) in (ROLLOUTS * T, ROLLOUTS * T + 1)  # + the step it went on into the next rollout with
    actions = actions[:ROLLOUTS * T]
    versions = [a.version for a in actions]
    # rollout r (1-based) is served by version r-2 while update r-1 runs, by r-1 once it is done
    assert all(v in (max(s // T - 1, 0), s // T) for s, v in enumerate(versions)), versions
    assert versions == sorted(versions), versions

    cfg = load(run_dir / "config.toml", [])
    space = EnvSettings(env_id="Pendulum-v1")
    env = make_env(space, 0)
    obs_space, action_space = describe_spaces(env)
    env.close()

    saved = checkpoints_by_version(run_dir)

    def weights(version: int):
        model = build_model(obs_space, action_space, cfg.model)
        model.load_state_dict(saved[version]["model"])
        return model

    W = {v: weights(v) for v in saved}
    assert set(range(1, ROLLOUTS - 1)) <= set(W), f"weights versions on disk: {sorted(W)}"

    # 1. served weights, exactly: the policy's generator (seeded with the run seed) drew one noise batch per step
    noise_gen = torch.Generator().manual_seed(SEED)
    noise = [torch.randn((K, 1), generator=noise_gen) for _ in range(ROLLOUTS * T)]

    def predicted(model, s):
        with torch.no_grad():
            mean = model(torch.from_numpy(obs[s]))[0]
            return (mean + model.head.log_std.exp() * noise[s]).numpy()

    for s in range(2 * T, ROLLOUTS * T):
        v = versions[s]
        np.testing.assert_allclose(actions[s].actions, predicted(W[v], s), atol=1e-5, rtol=0,
                                   err_msg=f"step {s}: not served by version {v}")
        for other in (v - 1, v + 1):
            if other in W:
                gap = np.abs(actions[s].actions - predicted(W[other], s)).max()
                assert gap > 1e-4, f"versions {other} and {v} act alike: the check above proves nothing"

    # 2. update r replayed from checkpoint r-1 on the recorded rollout r lands on W_r
    truncations = 0  # inside replayed rollouts, not at their last step
    replayed = [r for r in range(3, ROLLOUTS + 1) if {r - 2, r - 1, r} <= set(W)]
    assert len(replayed) >= 2, f"too few consecutive versions on disk to replay updates: {sorted(W)}"
    critics = {v: served_critic(W[v], value_statistics(saved[v])) for v in W}
    for r in replayed:
        steps = range((r - 1) * T, r * T)
        with torch.no_grad():
            o = torch.stack([torch.from_numpy(obs[s]) for s in steps])
            a = torch.stack([torch.from_numpy(np.array(actions[s].actions)) for s in steps])
            logprobs = torch.stack([W[versions[s]].evaluate(o[t], a[t])[0] for t, s in enumerate(steps)])
            values = torch.stack([critics[r - 1 if fresh else versions[s]](o[t]) for t, s in enumerate(steps)])
        reward = torch.stack([torch.from_numpy(rewards[s]) for s in steps])
        replays = {}
        for end in (r - 1,) if fresh else (r - 1, r - 2):  # the critic served when the rollout ended bootstraps it
            next_values, truncated = bootstraps(critics[end], values, obs[r * T], [finals.get(s, {}) for s in steps])
            adv, ret = compute_gae(reward, values, next_values, torch.zeros((T, K), dtype=torch.bool), truncated,
                                   cfg.ppo.gamma, cfg.ppo.gae_lambda)
            batch = {"obs": o.flatten(0, 1), "actions": a.flatten(0, 1), "logprobs": logprobs.flatten(),
                     "values": values.flatten(), "advantages": adv.flatten(), "returns": ret.flatten()}
            replays[end] = replay_update(r, batch, weights(r - 1), saved[r - 1], cfg)
        truncations += int(truncated[:-1].sum())
        landed = [(model, updater, stats) for model, updater, stats in replays.values() if same_weights(model, W[r])]
        assert landed, f"update {r} replayed on the recorded rollout does not land on W_{r}, whichever critic bootstraps"
        model, updater, stats = landed[0]
        assert (updater.value_norm is not None) == value_norm
        assert stats["first_minibatch_ratio_max_dev"] == pytest.approx(rows[r - 1]["first_minibatch_ratio_max_dev"],
                                                                       rel=1e-3, abs=1e-6)
        if value_norm:  # rollout r's returns folded into version r-1's statistics: version r's
            torch.testing.assert_close(updater.value_norm.state_dict(), value_statistics(saved[r]).state_dict())
    assert truncations > 0, "no truncation inside a replayed rollout: the test would not see it treated as a termination"


def play(address: str, deadline: float, leave_at: int | None = None) -> list[np.ndarray]:
    """Join with K Pendulum envs and answer every Actions until the learner says goodbye, or say goodbye
    on receiving Actions number `leave_at` (0-based) instead of stepping: its outcome never arrives.
    Returns the observations sent, in order."""
    ctx = zmq.Context()
    sock = connect_dealer(ctx, address, 1 << 20)
    group, sent = None, []
    try:
        sock.send_multipart(m.encode(m.Handshake(K, f"player-{leave_at}")))

        recv = partial(next_message, sock, deadline)
        welcome = recv()
        assert isinstance(welcome, m.Welcome), welcome
        envs = [make_env(EnvSettings.from_dict(welcome.env), seed) for seed in welcome.seeds]
        group = EnvGroup(envs, welcome.seeds, describe_spaces(envs[0])[1])
        report, received = group.first_report(0), 0
        while True:
            sent.append(report.obs.copy())
            sock.send_multipart(m.encode(report))
            msg = recv()
            if isinstance(msg, m.Goodbye):
                return sent
            assert isinstance(msg, m.Actions), msg
            if received == leave_at:
                sock.send_multipart(m.encode(m.Goodbye("leaving before this step's outcome")))
                sock.close(linger=2000)  # until the goodbye has left
                return sent
            received += 1
            report = group.step(0, msg.actions)
    finally:
        if group is not None:
            group.close()
        sock.close(linger=0)
        ctx.term()


def test_a_policy_lag_run_with_an_empty_rollout_trains_on_exactly_the_rollouts_collected(tmp_path):
    """Update 2 runs (slowly: many tiny minibatches) while rollout 3 is collected; rollout 3's only actor
    leaves before its first outcome, so it holds no valid step; rollout 4, from a new actor, must not be
    written into the buffer update 2 is still reading (issue 20). batch_checksum is the sum of the
    observations each update read, taken after its last epoch."""
    run_dir, steps = tmp_path / "empty", 16
    proc = launch("--config", "configs/pendulum.toml", "--run-dir", str(run_dir), "--actors", "0",
                  "--total-steps", str(3 * steps * K), "--set", "run.policy_lag=1", "--set", "run.batch_checksum=true",
                  "--set", f"cluster.min_envs={K}", "--set", "normalize.obs=false", "--set", "normalize.reward=false",
                  "--set", f"ppo.num_steps={steps}", "--set", "ppo.update_epochs=60",
                  "--set", f"ppo.num_minibatches={steps * K}")
    try:
        address = wait_for(lambda: (run_dir / "endpoints.json").exists()
                           and json.loads((run_dir / "endpoints.json").read_text()), 60, "endpoints", proc)["address"]
        first = play(address, time.monotonic() + 120, leave_at=2 * steps)  # rollouts 1 and 2, then rollout 3's step 0
        second = play(address, time.monotonic() + 120)  # rollout 4, while update 2 may still run
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-2000:]
    finally:
        kill_group(proc)
    rows = metrics(run_dir)
    assert [r["update"] for r in rows] == [1, 2, 3] and all(r["env_slots"] == K for r in rows), rows
    assert len(first) == 2 * steps + 1 and len(second) >= steps
    collected = [first[:steps], first[steps:2 * steps], second[:steps]]
    for row, obs in zip(rows, collected):
        expected = float(np.sum(np.stack(obs).astype(np.float64)))
        assert row["batch_checksum"] == pytest.approx(expected, rel=1e-9, abs=1e-9), \
            f"update {row['update']} trained on other observations than its rollout's"
    log_text = (run_dir / "learner.log").read_text()
    assert "actor player-32 left: said goodbye" in log_text


def test_a_policy_lag_runs_elapsed_time_is_its_wall_time(tmp_path):
    """With policy lag an update's metrics line is written after the next rollout was collected: elapsed_s
    must still be wall clock (not collection counted twice), from the learner's start to its last line."""
    run_dir = tmp_path / "clock"
    result = run_launch("--config", "configs/cartpole.toml", "--run-dir", str(run_dir), "--total-steps", "24576",
                        "--set", "run.policy_lag=1", "--set", "ppo.update_epochs=4", timeout=180)
    assert result.returncode == 0, result.stdout[-2000:]
    rows = metrics(run_dir)
    assert len(rows) >= 90 and all(r["policy_lag"] == 1 for r in rows)
    # the learner writes endpoints.json as it starts and the last metrics line at its last update
    wall = (run_dir / "metrics.jsonl").stat().st_mtime - (run_dir / "endpoints.json").stat().st_mtime
    assert rows[-1]["elapsed_s"] == pytest.approx(wall, rel=0.10), (rows[-1]["elapsed_s"], wall)
    assert all(b["elapsed_s"] > a["elapsed_s"] for a, b in zip(rows, rows[1:]))
    collect, update = sum(r["collect_s"] for r in rows), sum(r["update_s"] for r in rows)
    assert collect <= wall and update <= wall, "rollouts follow each other, and so do updates: each sums below the wall"
