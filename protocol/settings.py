"""The environment recipe the learner hands every actor at handshake (the config's [env] section)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class EnvSettings:
    env_id: str = "ALE/Breakout-v5"
    """gymnasium id; ALE ids get the Atari recipe below, any other id is used as registered"""
    noop_max: int = 30
    """Atari: up to this many random no-ops on reset (0 disables)"""
    frame_skip: int = 4
    """Atari: repeat each action this many frames, observe the max of the last two"""
    episodic_life: bool = True
    """Atari: a lost life ends the training episode; the game resets only on game over"""
    fire_reset: bool = True
    """Atari: press FIRE on reset (and after a lost life) in games that wait for it"""
    clip_rewards: bool = True
    """Atari: train on sign(reward); logged returns stay raw"""
    frame_stack: int = 4
    """Atari: stack this many frames (1 disables)"""
    resolution: int = 84
    """Atari: observations are resolution x resolution grayscale"""
    sticky_actions: float = 0.0
    """Atari: probability of repeating the previous action (Machado et al.: 0.25)"""
    max_episode_steps: int = 27000
    """agent steps before an episode is truncated (Atari: 108,000 frames); 0 keeps the env's own limit"""
    full_action_space: bool = False
    """Atari: all 18 actions instead of the game's minimal set"""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "EnvSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            from protocol.errors import ProtocolError
            raise ProtocolError(f"env settings: unknown key(s) {unknown}")
        return cls(**data)

    @property
    def is_atari(self) -> bool:
        return self.env_id.startswith("ALE/") or "NoFrameskip" in self.env_id
