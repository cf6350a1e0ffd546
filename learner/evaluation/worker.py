"""Evaluation during training: a process that follows the learner's weight broadcasts and plays whole
episodes with the newest policy every `eval.every` updates, on CPU with one torch thread.

Each evaluation appends one JSON line to RUN_DIR/eval.jsonl::

    {"update": 40, "eval_return_mean": 12.3, "eval_return_std": 4.1, "eval_episodes": 5, ...}

which the learner merges into its metrics records (learner.report.metrics.EvalReader). Every `eval.video_every`
updates the first episode is also recorded to RUN_DIR/videos/update_XXXXXXXX.mp4. Evaluation episodes
are whole games, played with the training env recipe (learner.evaluation.evaluate.eval_settings: after a lost life
FIRE is pressed where training pressed it), `eval.sticky_actions` (-1: as in training) and `eval.greedy`.

launch.py starts it when eval.every > 0; it exits when the learner or launch.py is gone, or on SIGTERM.
It can also follow a run started without it:  python -m learner.evaluation.worker RUN_DIR [--set eval.every=10]
(its results then go to eval.jsonl only: the learner merges them into metrics when its eval.every > 0).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch
import zmq

from actor.envs import describe_spaces, make_env
from learner.config import Config, ConfigError, apply_overrides, load
from learner.evaluation.evaluate import (VideoWriter, build_policy, eval_settings, headless_rendering,
                                         play_episodes, summarize, video_fps)
from learner.seeds import eval_env_seed
from learner.weights.message import load_broadcast
from protocol import messages as m
from protocol.errors import ProtocolError
from protocol.files import open_append
from protocol.processes import parent_alive
from protocol.security import ClientKeys
from protocol.transport import connect_sub, recv_frames

log = logging.getLogger("eval")
POLL_MS = 500


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, i.e. exited but not yet reaped, counts as gone)."""
    if pid <= 0:
        return True  # unknown: don't use it as a reason to leave
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _due(version: int, every: int, last: int) -> bool:
    """A multiple of `every` has been reached since `last` (versions may be skipped: PUB drops)."""
    return every > 0 and version >= every and version // every > last // every


class Evaluator:
    """Model, env and video settings for repeated evaluations of broadcast weights."""

    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg, self.run_dir = cfg, run_dir
        ev = cfg.eval
        self.settings = eval_settings(cfg.env, ev.sticky_actions if ev.sticky_actions >= 0 else None)
        self.seed = eval_env_seed(cfg.run.seed)
        if ev.video_every > 0:
            headless_rendering()
        self.env = make_env(self.settings, self.seed, render_mode="rgb_array" if ev.video_every > 0 else None)
        obs_space, action_space = describe_spaces(self.env)
        self.model, self.obs_norm = build_policy(cfg, obs_space, action_space, "cpu")
        self.last_eval = self.last_video = 0
        self.videos = ev.video_every > 0  # off for good after a failed recording (e.g. no pygame, no ffmpeg)

    def maybe_evaluate(self, version: int, tensors: dict) -> dict | None:
        ev = self.cfg.eval
        video = self.videos and _due(version, ev.video_every, self.last_video)
        if not (_due(version, ev.every, self.last_eval) or video):
            return None
        load_broadcast(self.model, self.obs_norm, tensors)
        try:
            result = self.evaluate(version, video)
        except Exception as exc:
            if not video:
                raise
            log.warning("recording a video failed (%s); evaluating without videos from now on", exc)
            self.videos = video = False
            result = self.evaluate(version, False)
        self.last_eval = version
        if video:
            self.last_video = version
        return result

    def evaluate(self, version: int, video: bool) -> dict:
        ev, t0 = self.cfg.eval, time.monotonic()
        writer = None
        if video:
            writer = VideoWriter(self.run_dir / "videos" / f"update_{version:08d}.mp4",
                                 video_fps(self.env, self.settings))
        try:
            episodes = play_episodes(self.model, self.env, ev.episodes, obs_norm=self.obs_norm, greedy=ev.greedy,
                                     seed=self.seed, video=writer, video_episodes=1)
            if writer is not None:
                writer.close()
                writer = None
        finally:
            if writer is not None:
                writer.abort()
        s = summarize([e.ret for e in episodes])
        result = {"update": version, "eval_return_mean": s["mean"], "eval_return_std": s["std"],
                  "eval_return_min": s["min"], "eval_return_max": s["max"], "eval_episodes": s["episodes"],
                  "eval_length_mean": sum(e.length for e in episodes) / len(episodes),
                  "eval_s": time.monotonic() - t0, "time": time.time()}
        if video:
            result["video"] = f"videos/update_{version:08d}.mp4"
        with open_append(self.run_dir / "eval.jsonl") as f:
            f.write(json.dumps(result) + "\n")  # one write of a whole line: readers never see half of it
        log.info("update %d: eval return %.2f +- %.2f over %d episodes (%.1fs)%s", version, s["mean"], s["std"],
                 s["episodes"], result["eval_s"], f", video {result['video']}" if video else "")
        return result

    def close(self) -> None:
        self.env.close()


def run_evaluator(cfg: Config, run_dir: str | Path, parent_pid: int = 0) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwind: a half-written video is removed
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    run_dir = Path(run_dir)
    endpoints = json.loads((run_dir / "endpoints.json").read_text())
    learner_pid = int(endpoints.get("pid") or 0)
    max_bytes = cfg.cluster.max_message_mb << 20
    curve = None
    if cfg.cluster.server_key:  # CURVE: subscribe with the key launch.py's own actors use
        if not cfg.cluster.client_key:
            log.error("the learner uses CURVE (cluster.server_key) but cluster.client_key is not set: no evaluation")
            return 1
        curve = ClientKeys.load(cfg.cluster.client_key, cfg.cluster.server_key)
    evaluator = Evaluator(cfg, run_dir)
    ctx = zmq.Context()
    sock = connect_sub(ctx, endpoints["weights_address"], max_bytes, curve=curve)
    log.info("evaluating every %d updates (%d episodes) from %s", cfg.eval.every, cfg.eval.episodes,
             endpoints["weights_address"])
    try:
        while alive(learner_pid) and parent_alive(parent_pid):
            frames = recv_frames(sock, POLL_MS)
            if frames is None:
                continue
            while sock.poll(0):  # skip to the newest version that has arrived
                frames = sock.recv_multipart(copy=False)
            try:
                msg = m.decode(frames, max_bytes=max_bytes)
            except ProtocolError as exc:
                log.warning("ignoring a bad weights message: %s", exc)
                continue
            if isinstance(msg, m.Weights):
                try:
                    evaluator.maybe_evaluate(msg.version, msg.tensors)
                except Exception:  # one failed evaluation costs that result, not the ones after it
                    log.exception("evaluating update %d failed", msg.version)
    finally:
        sock.close()
        ctx.term()
        evaluator.close()
    log.info("the learner is gone; evaluation stops")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m learner.evaluation.worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a running training's directory")
    p.add_argument("--set", action="append", default=[], metavar="eval.KEY=VALUE",
                   help="override a config key, e.g. eval.every=10; repeatable")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    try:
        if not (run_dir / "endpoints.json").is_file():
            raise ConfigError(f"{run_dir}: no endpoints.json (not a running training's directory)")
        cfg = apply_overrides(load(run_dir / "config.toml"), args.set)
        if cfg.eval.every <= 0:
            cfg = apply_overrides(cfg, ["eval.every=10"])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [eval] %(message)s", datefmt="%H:%M:%S")
    return run_evaluator(cfg, run_dir)


if __name__ == "__main__":
    sys.exit(main())
