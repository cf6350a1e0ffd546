"""Weights are published and checkpointed only when finite (issue 60, point 1)."""
import pytest
import torch

from learner.update.finite import NonFiniteWeights, check_finite


def test_finite_weights_pass_and_a_nan_anywhere_is_named():
    model, stats = torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)
    check_finite([model, None, stats], version=7)
    with torch.no_grad():
        model.bias[1] = float("nan")
        stats.running_var[0] = float("inf")
    with pytest.raises(NonFiniteWeights, match=r"after update 7 are not finite \(bias, running_var\)"):
        check_finite([model, None, stats], version=7)


def test_finite_weights_whose_sum_overflows_pass_and_infinities_that_cancel_do_not():
    big = torch.nn.Linear(1000, 1)
    with torch.no_grad():
        big.weight.fill_(torch.finfo(torch.float32).max)  # every element finite, their float32 sum is not
    check_finite([big], version=1)
    with torch.no_grad():
        big.weight.zero_()
        big.weight[0, 0], big.weight[0, 1] = float("inf"), -float("inf")  # a sum of NaN, not of 0
    with pytest.raises(NonFiniteWeights, match=r"\(weight\)"):
        check_finite([big], version=1)
