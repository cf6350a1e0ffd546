"""The recurrent core (model.core, issue 63): where it sits, its state, and that replaying a sequence gives
exactly what stepping it gave."""
import pytest
import torch

from learner.config import ModelConfig
from learner.model.core import RecurrentCore, reset
from learner.model.networks import build_model
from protocol.spaces import SpaceSpec

IMAGE = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
VECTOR = SpaceSpec(kind="box", shape=(4,), dtype="float32", low=[-1.0] * 4, high=[1.0] * 4)
DISCRETE = SpaceSpec(kind="discrete", n=3)
BOX2 = SpaceSpec(kind="box", shape=(2,), dtype="float32", low=[-1.0] * 2, high=[1.0] * 2)


def test_none_is_the_feed_forward_model_unchanged():
    """The same modules, parameter names and initial weights as before the core existed."""
    for space in (IMAGE, VECTOR):
        torch.manual_seed(0)
        plain = build_model(space, DISCRETE, ModelConfig())
        torch.manual_seed(0)
        none = build_model(space, DISCRETE, ModelConfig(core="none"))
        assert not none.recurrent and none.state_size == 0
        assert plain.state_dict().keys() == none.state_dict().keys()
        assert not any(k.startswith("core.") for k in none.state_dict())
        for k, v in plain.state_dict().items():
            assert torch.equal(v, none.state_dict()[k]), k


@pytest.mark.parametrize("space, core, size, state", [(IMAGE, "lstm", 0, 512), (IMAGE, "gru", 32, 32),
                                                       (VECTOR, "lstm", 0, 128), (VECTOR, "gru", 0, 64)])
def test_the_core_sits_between_encoder_and_heads(space, core, size, state):
    model = build_model(space, DISCRETE, ModelConfig(core=core, core_size=size))
    assert model.recurrent and model.state_size == state
    assert any(k.startswith("core.rnn.") for k in model.state_dict())
    obs = (torch.randint(0, 256, (5, *space.shape), dtype=torch.uint8) if space is IMAGE
           else torch.randn(5, *space.shape))
    h = model.initial_state(5)
    assert h.shape == (5, state) and not h.any()
    action, logprob, value = model.act(obs, state=h)
    assert action.shape == logprob.shape == value.shape == (5,)
    assert h.abs().sum() > 0, "act steps the state in place"
    before = h.clone()
    model.value(obs, state=h)
    assert torch.equal(h, before), "value reads the state, never steps it"


def test_a_recurrent_model_refuses_to_run_without_its_state():
    model = build_model(VECTOR, DISCRETE, ModelConfig(core="lstm"))
    with pytest.raises(ValueError, match="state"):
        model.act(torch.zeros(2, 4))


@pytest.mark.parametrize("core", ["lstm", "gru"])
@pytest.mark.parametrize("action_space", [DISCRETE, BOX2])
def test_evaluate_replays_what_stepping_gave_with_the_same_resets(core, action_space):
    """L steps of B rows acted one at a time (the state zeroed where episodes start, as the collector does),
    then replayed as B sequences from their first state: the same log-probs and values."""
    torch.manual_seed(1)
    model = build_model(VECTOR, action_space, ModelConfig(core=core, core_size=16))
    L, B = 7, 3
    obs = torch.randn(L, B, 4)
    starts = torch.zeros(L, B, dtype=torch.bool)
    starts[2, 0] = starts[5, 2] = starts[0, 1] = True
    h0 = torch.randn(B, model.state_size)
    h = h0.clone()
    acted = []
    for t in range(L):
        h = reset(h, starts[t])
        acted.append(model.act(obs[t], generator=torch.Generator().manual_seed(t), state=h))
    actions = torch.stack([a for a, _, _ in acted])
    logprob, _, value = model.evaluate(obs.flatten(0, 1), actions.flatten(0, 1), state=h0, starts=starts.flatten())
    torch.testing.assert_close(logprob, torch.stack([lp for _, lp, _ in acted]).flatten(), rtol=0, atol=1e-5)
    torch.testing.assert_close(value, torch.stack([v for _, _, v in acted]).flatten(), rtol=0, atol=1e-5)
    # a reset left out of the replay changes what it gives (the resets matter)
    wrong = model.evaluate(obs.flatten(0, 1), actions.flatten(0, 1), state=h0, starts=torch.zeros(L * B, dtype=torch.bool))
    assert (wrong[0] - logprob).abs().max() > 1e-4


def test_gradients_reach_the_core_through_the_sequence():
    model = build_model(VECTOR, DISCRETE, ModelConfig(core="gru", core_size=8))
    obs, actions = torch.randn(6, 4), torch.zeros(6, dtype=torch.long)
    logprob, _, value = model.evaluate(obs, actions, state=model.initial_state(2), starts=torch.zeros(6, dtype=torch.bool))
    (logprob.sum() + value.sum()).backward()
    assert model.core.rnn.weight_hh_l0.grad.abs().sum() > 0


def test_reset_zeroes_only_the_rows_that_start():
    state = torch.ones(3, 4)
    out = reset(state, torch.tensor([False, True, False]))
    assert out[1].eq(0).all() and out[[0, 2]].eq(1).all() and state.eq(1).all()


def test_an_lstm_state_holds_h_and_c():
    core = RecurrentCore("lstm", 5, 6)
    out, state = core.step(torch.randn(2, 5), torch.zeros(2, 12))
    assert torch.equal(state[:, :6], out) and state.shape == (2, 12)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_unroll_in_pieces_is_the_step_by_step_loop(kind, density):
    """unroll cuts sequences where episodes start and runs the pieces packed: the same outputs as stepping
    each sequence with its resets (no reset, some, and a reset at every step: pieces of one step)."""
    torch.manual_seed(2)
    core = RecurrentCore(kind, 3, 5)
    L, B = 9, 4
    x, state = torch.randn(L, B, 3), torch.randn(B, core.state_size)
    starts = torch.rand(L, B) < density
    h, expected = state, []
    for t in range(L):
        out, h = core.step(x[t], reset(h, starts[t]))
        expected.append(out)
    torch.testing.assert_close(core.unroll(x, state, starts), torch.stack(expected), rtol=0, atol=1e-6)
