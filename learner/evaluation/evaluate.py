"""Play full episodes with a trained policy: statistics of the raw return, and optionally a video.

    ppo-cluster evaluate runs/breakout-...            # newest checkpoint of a run, 10 episodes
    ppo-cluster evaluate runs/x/checkpoints/best.pt --episodes 30 --greedy --sticky-actions 0.25
    ppo-cluster evaluate runs/x --episodes 1 --video breakout.mp4

Atari games are played whole (one episode is one game over all lives, until game over or the time limit)
and scored by the raw game score; other tasks by their own episodes. A lost life is handled as in training:
with the run's episodic life and FIRE reset, FIRE is pressed after each lost life just as training pressed it.
A recurrent policy (model.core) carries its state through the game, zeroed where training zeroed it: after
every reset of the env (a game's end, and a lost life with episodic life).
"""
# The reusable pieces (load_policy, eval_settings, play_episodes, VideoWriter)
# also serve the eval worker during training.
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from actor.envs import describe_spaces, make_env
from learner.weights import checkpoint
from learner.config import Config, ConfigError, from_dict
from learner.model.networks import ActorCritic, build_model
from learner.model.normalize import ObsNormalizer
from protocol.settings import EnvSettings


@dataclass
class LoadedPolicy:
    cfg: Config
    model: ActorCritic
    obs_norm: ObsNormalizer | None
    path: Path
    meta: dict = field(default_factory=dict)  # update, env_steps, version, elapsed_s of the checkpoint


@dataclass
class Episode:
    ret: float
    length: int


def resolve_checkpoint(path: str | Path) -> Path:
    """A .pt file as given; a run directory (or its checkpoints/ folder): its newest ckpt_*.pt."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        run_dir = path.parent if path.name == "checkpoints" else path
        found = checkpoint.latest(run_dir)
        if found is not None:
            return found
        raise FileNotFoundError(f"{path}: no checkpoint in {run_dir / 'checkpoints'}")
    raise FileNotFoundError(f"{path}: no such file or directory")


def build_policy(cfg: Config, obs_space, action_space, device: str | torch.device = "cpu"
                 ) -> tuple[ActorCritic, ObsNormalizer | None]:
    model = build_model(obs_space, action_space, cfg.model).to(device).eval()
    obs_norm = ObsNormalizer(obs_space.shape, cfg.normalize.clip).to(device) if cfg.normalize.obs else None
    return model, obs_norm


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> LoadedPolicy:
    """The model (and observation normalizer) of a checkpoint, with the run config it was trained with."""
    path = resolve_checkpoint(path)
    saved = checkpoint.load_checkpoint(path, device)
    cfg = from_dict(saved["config"])
    env = make_env(cfg.env, cfg.run.seed)
    try:
        obs_space, action_space = describe_spaces(env)
    finally:
        env.close()
    model, obs_norm = build_policy(cfg, obs_space, action_space, device)
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError as exc:  # the weights of another network: torch's message runs to many lines
        raise checkpoint.NotACheckpoint(f"{path}: its weights do not fit the network of its own config "
                                        f"({checkpoint.first_line(exc)})") from None
    if obs_norm is not None and saved.get("obs_norm"):
        obs_norm.load_state_dict(saved["obs_norm"])
    meta = {k: saved.get(k) for k in ("update", "env_steps", "version", "elapsed_s")}
    return LoadedPolicy(cfg, model, obs_norm, path, meta)


def eval_settings(env: EnvSettings, sticky_actions: float | None = None, max_steps: int | None = None
                  ) -> EnvSettings:
    """The training env recipe made fit for evaluation: optional sticky actions (None or a negative value: as
    in training) and episode cap in agent steps (None: as in training).

    Episodic life stays as trained. It does not cut the evaluated episode short (info["episode"] comes
    from below it, at game over or the time limit), but its reset after a lost life is where training
    pressed FIRE (FireReset) and restarted the frame stack: without it a policy that never learned to
    press FIRE would stall in Breakout until the time limit."""
    changes = {}
    if sticky_actions is not None and sticky_actions >= 0:
        changes["sticky_actions"] = float(sticky_actions)
    if max_steps is not None:
        changes["max_episode_steps"] = int(max_steps)
    return env.model_copy(update=changes)


def headless_rendering() -> None:
    """Let pygame-based renderers (classic control) draw off-screen without a display (and without SDL's
    stderr complaint about one); call before the first render."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def video_fps(env, settings: EnvSettings) -> float:
    if settings.is_atari:
        return 60.0 / settings.frame_skip  # one frame per agent step of the 60 Hz console
    return float(env.metadata.get("render_fps") or 30)


class VideoWriter:
    """An MP4 (H.264, yuv420p) via imageio's ffmpeg plugin, written to a temp file and renamed on close,
    so an interrupted recording never leaves a broken file under the final name. Frames keep their exact
    size (no macro-block resize); an odd width or height is padded by one black pixel (yuv420p needs even)."""

    def __init__(self, path: str | Path, fps: float):
        import imageio.v2 as imageio  # here: optional (videos only) and slow to import
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(f".{self.path.stem}.tmp{os.getpid()}.mp4")
        self.writer = imageio.get_writer(self.tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                         pixelformat="yuv420p", macro_block_size=1, ffmpeg_log_level="error")
        self.frames = 0
        self.shape: tuple[int, ...] | None = None

    def add(self, frame: np.ndarray) -> None:
        frame = np.asarray(frame, dtype=np.uint8)
        if frame.ndim == 2:
            frame = np.repeat(frame[..., None], 3, axis=2)
        h, w = frame.shape[:2]
        if h % 2 or w % 2:
            frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)))
        self.shape = frame.shape
        self.writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self.writer.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def play_episodes(model: ActorCritic, env, episodes: int, *, obs_norm: ObsNormalizer | None = None,
                  greedy: bool = False, seed: int = 0, device: str | torch.device = "cpu",
                  video: VideoWriter | None = None, video_episodes: int | None = None) -> list[Episode]:
    """Play `episodes` whole episodes on a make_env env; each ends where the env reports info["episode"]
    (its raw return and length in agent steps). A termination without it is a lost life under episodic
    life: the reset that follows continues the same game. With `video`, env.render() frames of the first
    `video_episodes` episodes (None: all) are appended to it; the env must be made with render_mode="rgb_array".
    """
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    space = env.action_space
    discrete = hasattr(space, "n")
    if not discrete:
        low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    record_until = episodes if video_episodes is None else video_episodes
    results: list[Episode] = []
    state = model.initial_state(1, device) if model.recurrent else None  # stepped in place, zeroed at resets
    obs, _ = env.reset(seed=seed)
    if video is not None and record_until > 0:
        video.add(env.render())
    while len(results) < episodes:
        x = torch.as_tensor(np.asarray(obs))[None].to(device)
        if obs_norm is not None:
            x = obs_norm(x)
        action = model.greedy(x, state) if greedy else model.act(x, generator=generator, state=state)[0]
        action = action[0].cpu().numpy()
        action = int(action) if discrete else np.clip(action, low, high)
        obs, _, terminated, truncated, info = env.step(action)
        recording = video is not None and len(results) < record_until
        if recording:
            video.add(env.render())
        if "episode" in info:
            results.append(Episode(float(info["episode"]["r"]), int(info["episode"]["l"])))
        if terminated or truncated:
            obs, reset_info = env.reset()
            if state is not None:
                state.zero_()  # the collector zeroes a slot's state at the same point in training
            if "episode" in reset_info:  # the game ended inside the reset (its time limit struck there)
                info = reset_info
                results.append(Episode(float(info["episode"]["r"]), int(info["episode"]["l"])))
            # a new game's first frame; after a lost life the game goes on from the frame just recorded
            if video is not None and "episode" in info and len(results) < min(record_until, episodes):
                video.add(env.render())
    return results


def summarize(returns: list[float]) -> dict:
    arr = np.asarray(returns, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std()), "min": float(arr.min()), "max": float(arr.max()),
            "episodes": int(arr.size)}


@contextlib.contextmanager
def one_torch_thread():
    """One intra-op thread while playing: batches of one observation gain nothing from more, and OpenMP workers
    spinning between steps take the cores from a training run on the same machine (2 cores: the learner's update
    4x slower beside a default-threaded evaluation, the evaluation itself 5x slower). Restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def evaluate(policy: LoadedPolicy, episodes: int, *, greedy: bool = False, sticky_actions: float | None = None,
             max_steps: int | None = None, seed: int = 0, device: str | torch.device = "cpu",
             video_path: str | Path | None = None, video_episodes: int | None = None) -> tuple[list[Episode], dict]:
    """Make the evaluation env, play (on one torch thread), and return (episodes, video info {"path", "frames",
    "shape"} or {})."""
    settings = eval_settings(policy.cfg.env, sticky_actions, max_steps)
    if video_path:
        headless_rendering()
    env = make_env(settings, seed, render_mode="rgb_array" if video_path else None)
    video = None
    try:
        if video_path:
            video = VideoWriter(video_path, video_fps(env, settings))
        with one_torch_thread():
            results = play_episodes(policy.model, env, episodes, obs_norm=policy.obs_norm, greedy=greedy,
                                    seed=seed, device=device, video=video, video_episodes=video_episodes)
        info = {}
        if video is not None:
            video.close()
            info = {"path": video.path, "frames": video.frames, "shape": video.shape}
            video = None
        return results, info
    finally:
        if video is not None:
            video.abort()
        env.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ppo-cluster evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="a run directory (its newest checkpoint is used) or a checkpoint .pt file (e.g. best.pt)")
    p.add_argument("--episodes", type=int, default=10, help="full episodes to play (default: %(default)s)")
    p.add_argument("--video", default=None, metavar="PATH.mp4", help="record the full-colour episodes as an MP4")
    p.add_argument("--video-episodes", type=int, default=None, metavar="N",
                   help="record only the first N episodes (default: all)")
    p.add_argument("--greedy", action="store_true", help="play the most likely action instead of sampling")
    p.add_argument("--sticky-actions", type=float, default=None, metavar="P",
                   help="Atari: sticky-action probability in [0, 1] (default: as in training; 0.25: Machado et al.)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="cut an episode after N agent steps (default: env.max_episode_steps of the run; 0: the env's own)")
    p.add_argument("--seed", type=int, default=0, help="env and action-sampling seed (default: %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the network runs (default: cpu)")
    return p


def _check_args(args) -> None:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.sticky_actions is not None and not 0 <= args.sticky_actions <= 1:
        raise ConfigError(f"--sticky-actions must be in [0, 1], got {args.sticky_actions}")
    if args.max_steps is not None and args.max_steps < 0:
        raise ConfigError(f"--max-steps must be >= 0, got {args.max_steps}")
    if args.video_episodes is not None and args.video_episodes < 1:
        raise ConfigError(f"--video-episodes must be >= 1, got {args.video_episodes}")
    if args.video is not None and Path(args.video).suffix.lower() != ".mp4":
        raise ConfigError(f"--video must name an .mp4 file, got {args.video}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    if not Path(args.path).exists():
        raise ConfigError(f"{args.path}: no such file or directory")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_args(args)
        ckpt = resolve_checkpoint(args.path)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with torch.no_grad():  # scoped: main() is also called in-process (tests), where grad must stay on
        return _evaluate(args, ckpt)


def _evaluate(args, ckpt) -> int:
    try:
        policy = load_policy(ckpt, args.device)
    except checkpoint.NotACheckpoint as exc:  # (a ValueError) already names the file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, KeyError, ValueError, RuntimeError, ConfigError) as exc:
        print(f"error: {ckpt}: not a usable checkpoint ({checkpoint.first_line(exc)})", file=sys.stderr)
        return 2
    env = policy.cfg.env
    sticky = args.sticky_actions if args.sticky_actions is not None else env.sticky_actions
    meta = policy.meta
    print(f"checkpoint {policy.path} (update {meta.get('update')}, {meta.get('env_steps') or 0:,} env steps): "
          f"{env.env_id}, {args.episodes} episode(s), {'greedy' if args.greedy else 'sampled'} actions"
          + (f", sticky actions {sticky:g}" if env.is_atari else ""), flush=True)
    try:
        results, video = evaluate(policy, args.episodes, greedy=args.greedy, sticky_actions=args.sticky_actions,
                                  max_steps=args.max_steps, seed=args.seed, device=args.device,
                                  video_path=args.video, video_episodes=args.video_episodes)
    except ImportError as exc:  # e.g. pygame for classic-control rendering, imageio-ffmpeg for --video
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__name__ == "DependencyNotInstalled":
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    for i, ep in enumerate(results, 1):
        print(f"episode {i}: return {ep.ret:g} (length {ep.length})")
    s = summarize([ep.ret for ep in results])
    print(f"eval return: mean {s['mean']:.2f} std {s['std']:.2f} min {s['min']:g} max {s['max']:g} "
          f"over {s['episodes']} episode(s)")
    if video:
        h, w = video["shape"][:2] if video["shape"] else (0, 0)
        print(f"video: {video['path']} ({video['frames']} frames, {w}x{h} pixels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
