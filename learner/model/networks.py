"""Actor-critic networks: an encoder (observations -> features) shared by a policy head and a value head.

Images go through a PixelEncoder around a conv body; vectors through separate tanh MLPs for the policy and
the value (sharing hurts on vector tasks). Which one: model.kind, an entry of learner/model/registry.py.
Every model exposes act / evaluate / value / greedy: act and greedy run without gradients (they feed the
env); evaluate and value are differentiable (they feed the update).

model.core = "lstm" | "gru" puts a recurrent core (learner/model/core.py) between the encoder and the heads:
act, greedy and value then take each row's state (act and greedy step it in place), and evaluate replays
whole sequences from their first step's state, resetting where episodes start as acting did.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from learner.config import ModelConfig
from learner.model.core import RecurrentCore
from learner.model.encoders import HIDDEN_GAIN, FlatEncoder, PixelEncoder
from learner.model.heads import CategoricalHead, GaussianHead, layer_init, policy_head
from learner.model.registry import AUTO, ENCODERS, PIXELS, VECTORS, auto_kind
from protocol.spaces import SpaceSpec

VALUE_GAIN = 1.0
# checkpoints written before the encoder/head split kept the pixel parts at the model's top level
_OLD_PIXEL_KEYS = ("trunk.", "input_norm.")


class ActorCritic(nn.Module):
    """encoder: obs -> features; core (optional, recurrent): features and a state -> features; actor
    (optional): features -> the policy's own features; head: those -> the policy's distribution parameters;
    critic: features -> the value. forward(obs, state) -> (head output, value [B]).

    With a core, `state` is the rows' recurrent state [B, state_size]: for one step (act, greedy, value) the
    state entering it, already zeroed where an episode starts (act and greedy overwrite it with the state
    after the step); for evaluate, the state before the first of L steps of B sequences, whose observations
    come time-major ([L * B], step j of sequence b at j * B + b) with `starts` ([L * B] bool) saying where an
    episode starts (the state is zeroed there first)."""

    def __init__(self, encoder: nn.Module, head: CategoricalHead | GaussianHead, critic: nn.Module,
                 actor: nn.Module | None = None, core: RecurrentCore | None = None):
        super().__init__()
        self.encoder = encoder
        if core is not None:  # registered only when there is one: a feed-forward model's modules stay as they were
            self.core = core
        self.actor = actor if actor is not None else nn.Identity()
        self.head = head
        self.critic = critic
        self.register_load_state_dict_pre_hook(_from_old_layout)

    @property
    def recurrent(self) -> bool:
        return "core" in self._modules

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env slot (0: feed-forward)."""
        return self.core.state_size if self.recurrent else 0

    def initial_state(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The state of n rows at an episode's start: zeros [n, state_size]."""
        return torch.zeros((n, self.state_size), dtype=torch.float32, device=device)

    def _features(self, obs: torch.Tensor, state: torch.Tensor | None, starts: torch.Tensor | None = None,
                  advance: bool = True) -> torch.Tensor:
        """The heads' input, float32: the encoder's features, through the core when there is one (under autocast,
        ppo.update_precision, only the encoder runs in low precision: the core, log-probs and values stay
        float32, as PPO's probability ratios need)."""
        features = self.encoder(obs)
        with torch.autocast(features.device.type, enabled=False):
            features = features.float()
            if not self.recurrent:
                return features
            if state is None:
                raise ValueError("a recurrent model (model.core) needs the rows' state")
            if starts is not None:  # sequences: evaluate
                n = state.shape[0]
                x = features.reshape(-1, n, features.shape[1])
                return self.core.unroll(x, state, starts.reshape(-1, n)).flatten(0, 1)
            out, after = self.core.step(features, state)
            if advance:
                state.copy_(after)
            return out

    def forward(self, obs: torch.Tensor, state: torch.Tensor | None = None, starts: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        features = self._features(obs, state, starts)
        with torch.autocast(features.device.type, enabled=False):
            return self.head(self.actor(features)), self.critic(features).squeeze(-1)

    def value(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        features = self._features(obs, state, advance=False)  # the policy's part is not needed
        with torch.autocast(features.device.type, enabled=False):
            return self.critic(features).squeeze(-1)

    def observe(self, obs: torch.Tensor, ranks=None) -> None:
        """Fold a training batch into statistics the encoder keeps about its inputs (if any)."""
        self.encoder.observe(obs, ranks)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None, state: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, value = self(obs, state)
        action = self.head.sample(out, generator)
        return action, self.head.log_prob(out, action), value

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor, state: torch.Tensor | None = None,
                 starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out, value = self(obs, state, starts)
        return self.head.log_prob(out, action), self.head.entropy(out), value

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        return self.head.mode(self(obs, state)[0])


def _from_old_layout(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Rename a pre-split checkpoint's `trunk.*` / `input_norm.*` to `encoder.*`, in place."""
    for key in [k for k in state_dict if k.startswith(tuple(prefix + p for p in _OLD_PIXEL_KEYS))]:
        state_dict[prefix + "encoder." + key[len(prefix):]] = state_dict.pop(key)


def _mlp(in_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden), HIDDEN_GAIN), nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden), HIDDEN_GAIN), nn.Tanh(),
    )


CORE_SIZES = {PIXELS: 256, VECTORS: 64}  # model.core_size = 0: the core's width on each kind of input


def recurrent_core(cfg: ModelConfig | None, in_dim: int, inputs: str) -> RecurrentCore | None:
    """The configured core on `in_dim` features (None: model.core = "none")."""
    if cfg is None or cfg.core == "none":
        return None
    return RecurrentCore(cfg.core, in_dim, cfg.core_size or CORE_SIZES[inputs])


def mlp_actor_critic(obs_dim: int, action_space: SpaceSpec, hidden: int = 64, cfg: ModelConfig | None = None
                     ) -> ActorCritic:
    """Separate policy and value MLPs on the flattened observation (sharing hurts on vector tasks); with a
    core, both on its outputs."""
    core = recurrent_core(cfg, obs_dim, VECTORS)
    width = obs_dim if core is None else core.size
    actor = _mlp(width, hidden)
    head = policy_head(hidden, action_space)
    critic = nn.Sequential(_mlp(width, hidden), layer_init(nn.Linear(hidden, 1), VALUE_GAIN))
    return ActorCritic(FlatEncoder(obs_dim), head, critic, actor=actor, core=core)


def pixel_actor_critic(obs_shape: tuple[int, ...], action_space: SpaceSpec, make_body, scale: float,
                       cfg: ModelConfig) -> ActorCritic:
    encoder = PixelEncoder(obs_shape, make_body, scale=scale, activation=cfg.activation,
                           normalize_input=cfg.normalize_input)
    core = recurrent_core(cfg, encoder.out_dim, PIXELS)
    width = encoder.out_dim if core is None else core.size
    head = policy_head(width, action_space)
    return ActorCritic(encoder, head, layer_init(nn.Linear(width, 1), VALUE_GAIN), core=core)


def build_model(obs_space: SpaceSpec, action_space: SpaceSpec, cfg: ModelConfig) -> ActorCritic:
    """The actor-critic model.kind names (learner/model/registry.py), for these spaces."""
    if not (action_space.kind == "discrete" or len(action_space.shape) == 1):
        raise ValueError(f"unsupported action space {action_space}: need discrete or 1-D box")
    if obs_space.kind != "box":
        raise ValueError(f"unsupported observation space {obs_space}: need a box")
    encoder = ENCODERS[_resolve_kind(obs_space, cfg.kind)]
    shape, why = obs_space.shape, f"unsupported observation space {obs_space} for model.kind={encoder.name!r}"
    if encoder.inputs == VECTORS:
        if len(shape) == 0:
            raise ValueError(f"{why}: scalar box")
        return encoder.build_body()(obs_space.size, action_space, hidden=cfg.hidden, cfg=cfg)
    if len(shape) not in (2, 3):
        raise ValueError(f"{why}: need (C, H, W) or (H, W)")
    scale = 1 / 255 if np.dtype(obs_space.dtype) == np.uint8 else 1.0
    try:
        return pixel_actor_critic(shape, action_space, encoder.build_body(), scale, cfg)
    except RuntimeError as exc:  # a resolution too small for the convs
        raise ValueError(f"{why}: {exc}") from None


def _resolve_kind(obs_space: SpaceSpec, kind: str) -> str:
    """model.kind, with "auto" resolved by the observations: (C, H, W) or (H, W) uint8 images or 1-D vectors."""
    if kind != AUTO:
        if kind not in ENCODERS:
            raise ValueError(f"unknown model.kind {kind!r} for observation space {obs_space} "
                             f"(known: {', '.join(ENCODERS)})")
        return kind
    shape = obs_space.shape
    if len(shape) in (2, 3) and np.dtype(obs_space.dtype) == np.uint8:
        return auto_kind(PIXELS)
    if len(shape) == 1:
        return auto_kind(VECTORS)
    raise ValueError(f"unsupported observation space {obs_space} for model.kind='auto': "
                     "need (C, H, W) or (H, W) uint8 images or 1-D vectors (or force model.kind)")
