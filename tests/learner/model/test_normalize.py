import math

import numpy as np
import pytest
import torch

from learner.model.normalize import ObsNormalizer, RewardScaler, RunningMeanStd


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, 3)) for n in (1, 17, 64, 5)]
    rms = RunningMeanStd((3,))
    for b in batches:
        rms.update(torch.as_tensor(b))
    data = np.concatenate(batches)
    # the 1e-4 prior count (mean 0, var 1) shifts the result by ~1e-4 relative at most
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-4, atol=1e-4)
    assert rms.count.item() == pytest.approx(len(data) + 1e-4)


def test_running_mean_std_state_dict_round_trip():
    rms = RunningMeanStd((2,))
    rms.update(torch.randn(10, 2) * 5 + 1)
    other = RunningMeanStd((2,))
    other.load_state_dict(rms.state_dict())
    for key in ("mean", "var", "count"):
        assert torch.equal(getattr(other, key), getattr(rms, key))


def test_obs_normalizer_normalizes_and_clips():
    norm = ObsNormalizer((2,), clip=5.0)
    data = torch.tensor([[0.0, 10.0], [2.0, 30.0], [4.0, 50.0]])
    norm.update(data)
    out = norm(torch.tensor([[2.0, 30.0], [1000.0, -1000.0]]))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out[0], torch.zeros(2), atol=1e-3, rtol=0)
    torch.testing.assert_close(out[1], torch.tensor([5.0, -5.0]))
    x = torch.tensor([[4.0, 50.0]])
    expected = (x.double() - norm.rms.mean) / (norm.rms.var + 1e-8).sqrt()
    torch.testing.assert_close(norm(x), expected.float())


def test_reward_scaler_hand_sequence():
    # gamma = 0.5, two envs; env 1's episode ends at step 0, so its return restarts at step 1.
    #   step 0: rewards [1, 2] -> returns [1, 2]                    var{1, 2} = 0.25, std 0.5
    #           scaled [1/0.5, 2/0.5] = [2, 4]; then env 1's return is reset
    #   step 1: rewards [1, 0] -> returns [0.5*1 + 1, 0] = [1.5, 0]  var{1, 2, 1.5, 0} = 0.546875
    #           scaled [1/sqrt(0.546875), 0]
    #   step 2: rewards [1, 2] -> returns [0.75 + 1, 0 + 2] = [1.75, 2]
    #           var{1, 2, 1.5, 0, 1.75, 2} = 0.4965277..., scaled [1, 2] / sqrt of it
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=10.0)
    rewards = torch.tensor([[1.0, 2.0], [1.0, 0.0], [1.0, 2.0]])
    dones = torch.tensor([[False, True], [False, False], [False, False]])
    out = scaler(rewards, dones)
    var2 = np.var([1, 2, 1.5, 0, 1.75, 2])
    expected = torch.tensor([[2.0, 4.0], [1 / math.sqrt(0.546875), 0.0], [1 / math.sqrt(var2), 2 / math.sqrt(var2)]])
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(scaler.returns, torch.tensor([1.75, 2.0], dtype=torch.float64))

    # one step at a time gives the same as the whole [T, N] block
    stepwise = RewardScaler(num_envs=2, gamma=0.5)
    rows = [stepwise(rewards[t], dones[t]) for t in range(3)]
    torch.testing.assert_close(torch.stack(rows), out)


def test_reward_scaler_clip_and_no_update():
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=3.0)
    out = scaler(torch.tensor([1.0, 2.0]), torch.tensor([False, False]))
    torch.testing.assert_close(out, torch.tensor([2.0, 3.0]), rtol=1e-3, atol=1e-4)  # 4 clipped to 3
    state = {k: v.clone() for k, v in scaler.state_dict().items()}
    scaler(torch.tensor([5.0, 5.0]), torch.tensor([True, True]), update=False)
    for key, value in scaler.state_dict().items():
        assert torch.equal(value, state[key])


def test_reward_scaler_state_dict_resize_and_reset():
    scaler = RewardScaler(num_envs=3, gamma=0.9)
    scaler(torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]), torch.zeros(2, 3, dtype=torch.bool))
    restored = RewardScaler(num_envs=1, gamma=0.9)  # different slot count: adopts the checkpoint's
    restored.load_state_dict(scaler.state_dict())
    assert restored.num_envs == 3
    assert torch.equal(restored.returns, scaler.returns)
    assert torch.equal(restored.rms.var, scaler.rms.var)

    old = scaler.returns.clone()
    scaler.resize(5)
    assert torch.equal(scaler.returns[:3], old) and (scaler.returns[3:] == 0).all()
    scaler.resize(2)
    assert torch.equal(scaler.returns, old[:2])
    scaler.reset([1])
    assert scaler.returns[1] == 0 and scaler.returns[0] == old[0]
    with pytest.raises(ValueError, match="resize"):
        scaler(torch.zeros(3), torch.zeros(3))


def test_pixel_normalizer_matches_numpy_over_batches_and_clips():
    from learner.model.normalize import PixelNormalizer
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (n, 2, 3, 3), dtype=np.uint8) for n in (5, 2500)]  # 2500: several chunks
    norm = PixelNormalizer((2, 3, 3), clip=5.0, eps=1e-5)
    for f in frames:
        norm.observe(torch.from_numpy(f), scale=1 / 255)
    seen = np.concatenate(frames).astype(np.float64) / 255
    np.testing.assert_allclose(norm.rms.mean.numpy(), seen.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(norm.rms.var.numpy(), seen.var(0), rtol=1e-4, atol=1e-9)
    x = torch.from_numpy(seen[:4]).float()
    expected = np.clip((seen[:4] - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-5), -5, 5)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-4, atol=1e-4)
    flat = PixelNormalizer((1,), clip=5.0)
    flat.observe(torch.tensor([[0.0], [0.0], [0.0]]))  # a pixel that never changes: var 0
    assert float(flat(torch.tensor([[1.0]]))) == 5.0  # clipped, not inf


def test_cnn_normalize_input_standardizes_pixels_and_observe_is_its_only_update():
    from learner.config import ModelConfig
    from learner.model.networks import build_model
    from protocol.spaces import SpaceSpec
    image, actions = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8"), SpaceSpec(kind="discrete", n=6)
    model = build_model(image, actions, ModelConfig(normalize_input=True))
    plain = build_model(image, actions, ModelConfig())
    assert "encoder.input_norm.rms.mean" in model.state_dict() and "encoder.input_norm.rms.mean" not in plain.state_dict()
    obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    before = model.value(obs)
    model.value(obs)
    torch.testing.assert_close(model.value(obs), before)  # forward passes leave the statistics alone
    model.observe(obs)
    x = obs.double() / 255
    std = (x.var(0, unbiased=False) + 1e-5).sqrt()
    expected = model.critic(model.encoder.trunk(((x - x.mean(0)) / std).clamp(-5, 5).float())).squeeze(-1)
    torch.testing.assert_close(model.value(obs), expected, rtol=1e-3, atol=1e-3)  # count starts at 1e-4


def test_pixel_normalizer_sums_uint8_pixels_exactly():
    """uint8 pixels (several chunks and a partial one) give the float64 mean and variance of the pixels to
    rounding, whatever the chunking: float32 sums of the scaled pixels would be off by ~1e-7."""
    from learner.model.normalize import PIXEL_CHUNK, PixelNormalizer
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (3 * PIXEL_CHUNK + 17, 2, 5, 5), dtype=np.uint8)
    norm = PixelNormalizer((2, 5, 5))
    norm.rms.count.fill_(0.0)  # no prior count: the statistics are exactly the batch's
    norm.observe(torch.from_numpy(frames), scale=1 / 255)
    seen = frames.astype(np.float64) / 255
    np.testing.assert_allclose(norm.rms.mean.numpy(), seen.mean(0), rtol=1e-13, atol=0)
    np.testing.assert_allclose(norm.rms.var.numpy(), seen.var(0), rtol=1e-10, atol=0)
