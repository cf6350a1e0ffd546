"""The encoders `model.kind` can name: one entry each. The config's choices (learner/config.py), their meaning
in docs/configuration.md and `--help-config`, and build_model's choice (learner/model/networks.py) all come
from ENCODERS; adding an encoder is one entry here plus the module with its body.

An encoder turns observations into the feature vector [B, features] the policy and value heads share. An
entry names what it takes (PIXELS: (C, H, W) images; VECTORS: 1-D vectors), the function that builds its body
as "module:function" (imported only when a network is built: this file, like the config, is torch-free) and
one line for the docs.

The body contract (PIXELS), which learner/model/encoders.py's PixelEncoder relies on:
    body(in_channels: int, flat: int, activation: str) -> nn.Sequential(convs, nn.Linear(flat, features), act)
  - [0], the convs, maps a float (B, C, H, W) batch (scaled, channels-last) to (B, flat): it ends in a Flatten;
  - [-2] is the Linear whose out_features is the feature count the heads read;
  - `activation` is one of encoders.ACTIVATION_LAYERS (model.activation);
  - building it with flat = 1 draws no random numbers that the real build would not (the encoder measures flat
    on such a throwaway body with the generator's state put back).
A VECTORS body is the whole actor-critic of a flat observation (mlp: separate tanh MLPs for the policy and the
value): body(obs_size: int, action_space: SpaceSpec, hidden: int, cfg: ModelConfig) -> ActorCritic, with
cfg's recurrent core (model.core, learner/model/networks.py's recurrent_core) before its MLPs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

PIXELS, VECTORS = "pixels", "vectors"
AUTO = "auto"


@dataclass(frozen=True)
class EncoderKind:
    """One value of model.kind."""
    name: str
    inputs: str  # PIXELS or VECTORS
    body: str    # "module:function" that builds it (see the module doc for its signature)
    doc: str     # what it is, for docs/configuration.md
    auto: bool = False  # what model.kind = "auto" picks for its inputs

    def build_body(self):
        """The body's builder function (imports its module: torch)."""
        module, _, function = self.body.partition(":")
        return getattr(importlib.import_module(module), function)


ENCODERS: dict[str, EncoderKind] = {e.name: e for e in (
    EncoderKind("cnn", PIXELS, "learner.model.encoders:nature_body",
                "the Nature CNN (Mnih et al. 2015, CleanRL's Atari network), 512 features", auto=True),
    EncoderKind("impala", PIXELS, "learner.model.encoders:impala_body",
                "IMPALA's 15-layer residual CNN (Espeholt et al. 2018), 256 features; about 6x the Nature CNN's "
                "compute"),
    EncoderKind("mlp", VECTORS, "learner.model.networks:mlp_actor_critic",
                "separate tanh MLPs for the policy and the value (model.hidden wide)", auto=True),
)}
KINDS = (AUTO, *ENCODERS)  # model.kind's choices


def auto_kind(inputs: str) -> str:
    """The encoder model.kind = "auto" picks for PIXELS or VECTORS."""
    return next(e.name for e in ENCODERS.values() if e.auto and e.inputs == inputs)


def kind_doc() -> str:
    """model.kind's meaning, one clause per encoder (docs/configuration.md, --help-config)."""
    auto = f"{AUTO} ({auto_kind(PIXELS)} for images, {auto_kind(VECTORS)} for vectors)"
    return " | ".join([auto, *(f"{e.name} ({e.inputs}: {e.doc})" for e in ENCODERS.values())])


def pixel_kinds() -> str:
    """The encoders of images, named for the docs of the keys only they read."""
    return ", ".join(e.name for e in ENCODERS.values() if e.inputs == PIXELS)
