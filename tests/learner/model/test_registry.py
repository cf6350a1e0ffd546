"""The encoder registry is the one list of encoders: the config's choices, their docs and build_model come from
it, every entry keeps the body contract, and a new entry plus its body is all a new encoder needs."""
import typing

import pytest
import torch
from torch import nn

from learner.config import ModelConfig
from learner.config_docs import markdown
from learner.model import registry
from learner.model.encoders import HIDDEN_GAIN
from learner.model.heads import layer_init
from learner.model.networks import build_model
from learner.model.registry import ENCODERS, PIXELS, EncoderKind
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
VECTOR = SpaceSpec(kind="box", shape=(3,), dtype="float32")
DISCRETE = SpaceSpec(kind="discrete", n=6)


def test_the_config_and_its_docs_offer_exactly_the_registry():
    assert typing.get_args(ModelConfig.model_fields["kind"].annotation) == ("auto", *ENCODERS)
    row = next(line for line in markdown().splitlines() if line.startswith("| `model.kind`"))
    for entry in ENCODERS.values():
        assert entry.name in row and entry.doc in row


@pytest.mark.parametrize("entry", [e for e in ENCODERS.values() if e.inputs == PIXELS], ids=lambda e: e.name)
def test_every_pixel_body_keeps_the_contract(entry):
    """registry.py's contract: (convs ending in a Flatten, the feature Linear at [-2], an activation), and a
    throwaway build with flat = 1 leaves the generator where it was."""
    make_body = entry.build_body()
    torch.manual_seed(3)
    state = torch.random.get_rng_state()
    probe = make_body(4, 1, "elu")
    assert isinstance(probe[0][-1], nn.Flatten) and isinstance(probe[-2], nn.Linear)
    flat = probe[0](torch.zeros(1, *IMAGE.shape)).shape[1]
    torch.random.set_rng_state(state)
    body = make_body(4, flat, "relu")
    assert body[-2].in_features == flat and body(torch.zeros(2, *IMAGE.shape)).shape == (2, body[-2].out_features)


def tiny_body(in_channels: int, flat: int, activation: str) -> nn.Sequential:
    """A body a developer might add: one conv, 16 features."""
    convs = nn.Sequential(layer_init(nn.Conv2d(in_channels, 8, 8, stride=8), HIDDEN_GAIN), nn.ReLU(), nn.Flatten())
    return nn.Sequential(convs, layer_init(nn.Linear(flat, 16), HIDDEN_GAIN), nn.ReLU())


def test_a_new_encoder_is_one_entry_and_its_body(monkeypatch):
    monkeypatch.setitem(registry.ENCODERS, "tiny", EncoderKind("tiny", PIXELS, f"{__name__}:tiny_body", "one conv"))
    model = build_model(IMAGE, DISCRETE, ModelConfig.model_construct(kind="tiny", activation="relu",
                                                                     normalize_input=False, hidden=64))
    assert model.encoder.out_dim == 16
    action, _, value = model.act(torch.zeros(2, *IMAGE.shape, dtype=torch.uint8))
    assert action.shape == (2,) and value.shape == (2,)


def test_auto_picks_the_registry_defaults():
    assert registry.auto_kind(PIXELS) == "cnn" and registry.auto_kind(registry.VECTORS) == "mlp"
    assert build_model(VECTOR, DISCRETE, ModelConfig()).encoder.out_dim == 3  # mlp: the flat observation
    assert build_model(IMAGE, DISCRETE, ModelConfig()).encoder.out_dim == 512  # the Nature CNN
