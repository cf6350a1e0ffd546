"""The encoders: the IMPALA CNN's architecture against the paper's description, and the pixel handling
that every conv body shares."""
import torch

from learner.config import ModelConfig
from learner.model.encoders import PixelEncoder, ResidualBlock, impala_body, nature_body
from learner.model.networks import build_model
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
DISCRETE = SpaceSpec(kind="discrete", n=6)


def test_impala_is_the_15_layer_residual_network():
    """Espeholt et al. 2018, fig. 3: three stages of 16, 32, 32 channels, each a 3x3 conv, a 3x3/2 max-pool
    and two residual blocks of two 3x3 convs; then 256 features: 15 layers with weights."""
    model = build_model(IMAGE, DISCRETE, ModelConfig(kind="impala"))
    convs = [m for m in model.encoder.trunk.modules() if isinstance(m, torch.nn.Conv2d)]
    linears = [m for m in model.encoder.trunk.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) == 15 and len(linears) == 1
    assert [c.out_channels for c in convs] == [16] * 5 + [32] * 10
    assert all(c.kernel_size == (3, 3) and c.stride == (1, 1) for c in convs)
    assert len([m for m in model.encoder.trunk.modules() if isinstance(m, ResidualBlock)]) == 6
    assert len([m for m in model.encoder.trunk.modules() if isinstance(m, torch.nn.MaxPool2d)]) == 3
    # 84 -> 42 -> 21 -> 11 after the three pools: 32 x 11 x 11 into 256 features
    assert linears[0].in_features == 32 * 11 * 11 and model.encoder.out_dim == 256


def test_residual_block_adds_its_input():
    block = ResidualBlock(4, "relu")
    with torch.no_grad():
        for p in block.parameters():
            p.zero_()
    x = torch.randn(2, 4, 5, 5)
    torch.testing.assert_close(block(x), x)


def test_impala_acts_and_evaluates():
    model = build_model(IMAGE, DISCRETE, ModelConfig(kind="impala", activation="elu", normalize_input=True))
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    action, logprob, value = model.act(obs)
    lp, ent, v = model.evaluate(obs, action)
    torch.testing.assert_close(lp, logprob)
    torch.testing.assert_close(v, value)
    assert ent.shape == (3,) and model.value(obs).shape == (3,)
    model.observe(obs)  # the input normalizer lives in the encoder for every body
    assert model.encoder.input_norm is not None


def test_pixel_encoder_scales_before_the_body():
    encoder = PixelEncoder((4, 84, 84), impala_body, scale=1 / 255)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(encoder(obs), encoder.trunk(obs.float() * (1 / 255)))


def test_measuring_the_body_draws_no_random_numbers():
    """The Nature CNN starts from the same weights as before the encoder split: the throwaway body that
    measures the conv output size leaves the generator where it was."""
    torch.manual_seed(5)
    encoder = PixelEncoder((4, 84, 84), nature_body)
    torch.manual_seed(5)
    reference = nature_body(4, 64 * 7 * 7, "relu")
    for got, want in zip(encoder.trunk.parameters(), reference.parameters(), strict=True):
        assert torch.equal(got, want)


def _per_op_input(obs: torch.Tensor, scale: float, norm) -> torch.Tensor:
    """The body's input computed one whole-tensor op at a time, as the encoder did before body_input."""
    x = obs.float() * scale
    if norm is not None:
        x = norm(x)
    return x.contiguous(memory_format=torch.channels_last)


def test_body_input_is_bit_identical_to_one_pass_per_op():
    """In place and chunked (a partial last chunk included), the same values to the bit, in fp32 and as
    autocast's bf16 cast of them; channels-last either way."""
    from learner.model.encoders import CPU_CHUNK, body_input
    from learner.model.normalize import PixelNormalizer
    g = torch.Generator().manual_seed(0)
    norm = PixelNormalizer((4, 84, 84))
    norm.observe(torch.randint(0, 256, (40, 4, 84, 84), dtype=torch.uint8, generator=g), 1 / 255)
    obs = torch.randint(0, 256, (2 * CPU_CHUNK + 3, 4, 84, 84), dtype=torch.uint8, generator=g)
    for pixel_norm in (None, norm):
        expected = _per_op_input(obs, 1 / 255, pixel_norm)
        got = body_input(obs, 1 / 255, pixel_norm)
        assert got.dtype == torch.float32 and got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got, expected)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = body_input(obs, 1 / 255, pixel_norm)
        assert low.dtype == torch.bfloat16 and torch.equal(low, expected.to(torch.bfloat16))
        assert torch.equal(body_input(obs[:1], 1 / 255, pixel_norm), expected[:1])
