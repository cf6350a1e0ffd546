"""The rollout's layout (learner/rollout/layout.py): the shapes and dtypes its rows take, from the spaces."""
import torch

from learner.rollout.layout import Layout
from protocol.spaces import SpaceSpec


def test_layout_from_the_spaces():
    image = SpaceSpec(kind="box", shape=(4, 84, 84), dtype="uint8")
    vector = SpaceSpec(kind="box", shape=(3,), dtype="float64", low=[-1.0] * 3, high=[1.0] * 3)
    assert Layout.of(image, SpaceSpec(kind="discrete", n=4)) == Layout((4, 84, 84), torch.uint8, (), torch.long)
    assert Layout.of(vector, vector) == Layout((3,), torch.float32, (3,), torch.float32)
