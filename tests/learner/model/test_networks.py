import math

import pytest
import torch
from torch.distributions import Categorical, Normal

from learner.config import ModelConfig
from learner.model.encoders import FlatEncoder, PixelEncoder
from learner.model.networks import build_model
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
VECTOR = SpaceSpec(kind="box", shape=(8,), dtype="float32", low=[-1.0] * 8, high=[1.0] * 8)
DISCRETE = SpaceSpec(kind="discrete", n=6)
BOX3 = SpaceSpec(kind="box", shape=(3,), dtype="float32", low=[-1.0] * 3, high=[1.0] * 3)


def spectral_norm(w):
    return torch.linalg.matrix_norm(w.detach().flatten(1), ord=2).item()


def test_cnn_shapes():
    model = build_model(IMAGE, DISCRETE, ModelConfig())
    assert isinstance(model.encoder, PixelEncoder)
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    action, logprob, value = model.act(obs)
    assert action.shape == (5,) and action.dtype == torch.long
    assert logprob.shape == (5,) and value.shape == (5,)
    assert ((action >= 0) & (action < 6)).all()
    lp, ent, v = model.evaluate(obs, action)
    assert lp.shape == ent.shape == v.shape == (5,)
    torch.testing.assert_close(lp, logprob)
    assert model.value(obs).shape == (5,)
    assert model.greedy(obs).shape == (5,)


def test_cnn_any_resolution():
    space = SpaceSpec(kind="box", shape=(2, 60, 100), dtype="uint8")
    model = build_model(space, DISCRETE, ModelConfig())
    assert model.value(torch.zeros(3, 2, 60, 100, dtype=torch.uint8)).shape == (3,)


def test_an_unstacked_frame_is_one_channel_for_the_cnn_and_its_core():
    """env.frame_stack = 1 on Atari: (H, W) frames, no channel axis; the same network as on (1, H, W)."""
    cfg = ModelConfig(core="lstm", core_size=32, normalize_input=True)
    torch.manual_seed(0)
    flat = build_model(SpaceSpec(kind="box", shape=(84, 84), dtype="uint8"), DISCRETE, cfg)
    torch.manual_seed(0)
    channel = build_model(SpaceSpec(kind="box", shape=(1, 84, 84), dtype="uint8"), DISCRETE, cfg)
    frames = torch.randint(0, 256, (3, 84, 84), dtype=torch.uint8)
    flat.encoder.observe(frames)
    channel.encoder.observe(frames[:, None])
    torch.testing.assert_close(flat.encoder(frames), channel.encoder(frames[:, None]))
    assert flat.encoder(frames).shape == (3, flat.encoder.out_dim) and flat.core is not None


def test_cnn_scales_pixels_inside():
    model = build_model(IMAGE, DISCRETE, ModelConfig())
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    expected = model.critic(model.encoder.trunk(obs.float() / 255)).squeeze(-1)
    torch.testing.assert_close(model.value(obs), expected)


@pytest.mark.parametrize("activation,layer", [("relu", torch.nn.ReLU), ("elu", torch.nn.ELU)])
def test_cnn_activation_is_the_configured_one_in_every_hidden_layer(activation, layer):
    model = build_model(IMAGE, DISCRETE, ModelConfig(activation=activation))
    acts = [m for m in model.encoder.trunk.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.ELU))]
    assert len(acts) == 4 and all(type(m) is layer for m in acts)
    obs = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    hidden = model.encoder.trunk(obs.float() / 255)  # the 512 features go below 0 only with elu
    assert bool((hidden < 0).any()) == (activation == "elu")


def test_activation_is_validated():
    from learner.config import ConfigError, from_dict
    with pytest.raises(ConfigError, match="model.activation must be relu or elu, got 'tanh'"):
        from_dict({"model": {"activation": "tanh"}})


def test_mlp_shapes_box():
    model = build_model(VECTOR, BOX3, ModelConfig(hidden=32))
    assert isinstance(model.encoder, FlatEncoder)
    obs = torch.randn(7, 8)
    action, logprob, value = model.act(obs)
    assert action.shape == (7, 3) and action.dtype == torch.float32
    assert logprob.shape == value.shape == (7,)
    lp, ent, v = model.evaluate(obs, action)
    assert lp.shape == ent.shape == v.shape == (7,)
    torch.testing.assert_close(lp, logprob)
    assert model.greedy(obs).shape == (7, 3)
    torch.testing.assert_close(model.value(obs), v)


def test_init_gains():
    small_image = SpaceSpec(kind="box", shape=(4, 36, 36), dtype="uint8")  # the smallest the convs accept
    cnn = build_model(small_image, DISCRETE, ModelConfig())
    assert spectral_norm(cnn.head.linear.weight) == pytest.approx(0.01, rel=1e-3)
    assert spectral_norm(cnn.critic.weight) == pytest.approx(1.0, rel=1e-3)
    assert spectral_norm(cnn.encoder.trunk[1].weight) == pytest.approx(math.sqrt(2), rel=1e-3)
    mlp = build_model(VECTOR, BOX3, ModelConfig())
    assert spectral_norm(mlp.head.linear.weight) == pytest.approx(0.01, rel=1e-3)
    assert spectral_norm(mlp.actor[0].weight) == pytest.approx(math.sqrt(2), rel=1e-3)
    assert spectral_norm(mlp.critic[-1].weight) == pytest.approx(1.0, rel=1e-3)
    for model in (cnn, mlp):
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                assert (p == 0).all(), name
    assert (mlp.head.log_std == 0).all()


def test_gaussian_logprob_entropy_match_torch():
    torch.manual_seed(0)
    model = build_model(VECTOR, BOX3, ModelConfig())
    with torch.no_grad():
        model.head.log_std.copy_(torch.tensor([-0.5, 0.0, 0.7]))
    obs, action = torch.randn(9, 8), torch.randn(9, 3) * 2
    lp, ent, _ = model.evaluate(obs, action)
    mean = model(obs)[0]
    ref = Normal(mean, model.head.log_std.exp())
    torch.testing.assert_close(lp, ref.log_prob(action).sum(-1))
    torch.testing.assert_close(ent, ref.entropy().sum(-1))


def test_categorical_logprob_entropy_match_torch():
    torch.manual_seed(0)
    model = build_model(VECTOR, DISCRETE, ModelConfig())
    with torch.no_grad():
        model.head.linear.weight.mul_(300)  # sharpen the policy so the comparison is not trivially uniform
    obs, action = torch.randn(9, 8), torch.randint(0, 6, (9,))
    lp, ent, _ = model.evaluate(obs, action)
    ref = Categorical(logits=model.head.linear(model.actor(obs)))
    torch.testing.assert_close(lp, ref.log_prob(action))
    torch.testing.assert_close(ent, ref.entropy())


@pytest.mark.parametrize("action_space", [DISCRETE, BOX3])
def test_act_deterministic_with_generator(action_space):
    model = build_model(VECTOR, action_space, ModelConfig())
    obs = torch.randn(64, 8)
    a1, lp1, _ = model.act(obs, generator=torch.Generator().manual_seed(3))
    a2, lp2, _ = model.act(obs, generator=torch.Generator().manual_seed(3))
    a3, _, _ = model.act(obs, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a1, a2) and torch.equal(lp1, lp2)
    assert not torch.equal(a1, a3)


def test_build_model_selection():
    assert isinstance(build_model(IMAGE, DISCRETE, ModelConfig(kind="auto")).encoder, PixelEncoder)
    assert isinstance(build_model(VECTOR, DISCRETE, ModelConfig(kind="auto")).encoder, FlatEncoder)
    assert isinstance(build_model(IMAGE, DISCRETE, ModelConfig(kind="mlp", hidden=8)).encoder, FlatEncoder)
    float_image = SpaceSpec(kind="box", shape=(3, 64, 64), dtype="float32")
    assert build_model(float_image, DISCRETE, ModelConfig(kind="cnn")).encoder.scale == 1.0


@pytest.mark.parametrize("obs_space, action_space, kind", [
    (VECTOR, DISCRETE, "cnn"),                                                   # cnn on vectors
    (SpaceSpec(kind="box", shape=(3, 4), dtype="float32"), DISCRETE, "auto"),    # 2-D: ambiguous
    (SpaceSpec(kind="box", shape=(4, 84, 84), dtype="float32"), DISCRETE, "auto"),  # float image
    (SpaceSpec(kind="discrete", n=5), DISCRETE, "auto"),                         # discrete observations
    (VECTOR, SpaceSpec(kind="box", shape=(2, 2), dtype="float32"), "auto"),      # 2-D box actions
    (SpaceSpec(kind="box", shape=(4, 8, 8), dtype="uint8"), DISCRETE, "auto"),   # too small for the convs
    (VECTOR, DISCRETE, "transformer"),
])
def test_build_model_rejects(obs_space, action_space, kind):
    with pytest.raises(ValueError, match="space|kind"):
        build_model(obs_space, action_space, ModelConfig(kind=kind))


def test_categorical_greedy_is_the_most_likely_action():
    torch.manual_seed(1)
    model = build_model(VECTOR, DISCRETE, ModelConfig())
    with torch.no_grad():
        model.head.linear.weight.mul_(300)  # distinct, far-apart logits: no ties
    obs = torch.randn(64, 8)
    probs = Categorical(logits=model.head.linear(model.actor(obs))).probs
    greedy = model.greedy(obs)
    assert torch.equal(greedy, probs.argmax(-1))
    assert len(set(greedy.tolist())) > 1, "one action everywhere would not tell argmax from a constant"


def test_gaussian_greedy_is_the_mean():
    torch.manual_seed(1)
    model = build_model(VECTOR, BOX3, ModelConfig())
    with torch.no_grad():
        model.head.log_std.fill_(1.0)
    obs = torch.randn(16, 8)
    torch.testing.assert_close(model.greedy(obs), model.head.linear(model.actor(obs)))


def test_gaussian_samples_have_std_exp_log_std():
    torch.manual_seed(1)
    model = build_model(VECTOR, BOX3, ModelConfig())
    with torch.no_grad():
        model.head.log_std.fill_(math.log(3.0))
        model.head.log_std[1] = math.log(0.5)
    obs = torch.randn(1, 8).expand(20_000, 8)
    actions, logprob, _ = model.act(obs, generator=torch.Generator().manual_seed(0))
    mean = model.head.linear(model.actor(obs[:1])).detach()
    # 20k samples: the std estimate's relative error is ~0.5%, the mean's ~std/141
    torch.testing.assert_close(actions.std(0), torch.tensor([3.0, 0.5, 3.0]), rtol=0.03, atol=0)
    torch.testing.assert_close(actions.mean(0), mean[0], atol=4 * 3.0 / math.sqrt(20_000), rtol=0)
    ref = Normal(mean.expand(20_000, 3), torch.tensor([3.0, 0.5, 3.0]))
    torch.testing.assert_close(logprob, ref.log_prob(actions).sum(-1))


def test_a_checkpoint_from_before_the_encoder_split_loads():
    """Pre-split state dicts kept `trunk.*` and `input_norm.*` at the top level."""
    model = build_model(IMAGE, DISCRETE, ModelConfig(normalize_input=True))
    old = {(k[len("encoder."):] if k.startswith("encoder.") else k): v.clone() + 1
           for k, v in model.state_dict().items()}
    assert any(k.startswith("trunk.") for k in old) and any(k.startswith("input_norm.") for k in old)
    fresh = build_model(IMAGE, DISCRETE, ModelConfig(normalize_input=True))
    fresh.load_state_dict(old)
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, old[key[len("encoder."):] if key.startswith("encoder.") else key])


def test_mlp_parameters_keep_their_order():
    """The optimizer and the gradient clipping see parameters in registration order: the policy MLP,
    the head, the critic (as before the encoder split), so deterministic runs stay bit-identical."""
    model = build_model(VECTOR, DISCRETE, ModelConfig(kind="mlp"))
    names = [n.split(".")[0] for n, _ in model.named_parameters()]
    assert names == sorted(names, key=["actor", "head", "critic"].index)


def test_the_heads_stay_fp32_under_autocast():
    torch.manual_seed(0)
    model = build_model(IMAGE, DISCRETE, ModelConfig())
    obs = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, value = model(obs)
        hidden = model.encoder(obs)
        alone = model.value(obs)
    assert hidden.dtype == torch.bfloat16  # the encoder ran in bf16
    assert out.dtype == value.dtype == alone.dtype == torch.float32
