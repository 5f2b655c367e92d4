"""A loss backwarded twice through a linear layer whose weight is frozen (``requires_grad_(False)``,
or only the bias switched on by name) and through sums and differences only saved no tensor: the
layer keeps its input only for its weight's gradient. The second backward runs and adds the bias's
gradient again, which the program may mean (h83's generator, family ``c_frozen_double``). gradfix
reported a duplicate backward that frees its graph; where a layer of the graph may save nothing
because a parameter may be frozen, and nothing else certainly saves, it is a hint. The variants
that hide a fact (the weight trained, a square that saves its input) fail at the second backward
and are reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
X, Y = torch.randn(16, 4), torch.randn(16, 1)
model = nn.Linear(4, 1)
FREEZE
optimizer = torch.optim.SGD([model.bias], lr=0.05)
for x, y in zip(X.split(4), Y.split(4)):
    optimizer.zero_grad()
    loss = LOSS
    loss.backward()
    loss.backward()
    optimizer.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"
FROZEN_WEIGHT = "model.weight.requires_grad_(False)"
ONLY_BIAS = "for name, p in model.named_parameters():\n    p.requires_grad_(name.endswith('bias'))"


@pytest.mark.parametrize("freeze", [FROZEN_WEIGHT, ONLY_BIAS], ids=["weight-frozen", "bias-switched-on-by-name"])
def test_a_second_backward_through_a_frozen_layer_that_may_save_nothing_is_a_hint(freeze, runs, tmp_path):
    source = PROGRAM.replace("FREEZE", freeze).replace("LOSS", "(model(x) - y).mean()")
    assert run_error(runs, tmp_path, source) == ""
    found = findings_of(source, "GF001")
    assert len(found) == 1 and found[0].hint
    assert "a parameter that may not require grad" in found[0].message


@pytest.mark.parametrize(
    ("freeze", "loss"),
    [
        ("pass", "(model(x) - y).mean()"),  # the weight trained: the layer saves its input
        (FROZEN_WEIGHT, "(model(x) - y).pow(2).mean()"),  # the square saves what it squares
    ],
    ids=["weight-trained", "square-saves"],
)
def test_a_second_backward_through_a_graph_that_saves_is_reported(freeze, loss, runs, tmp_path):
    source = PROGRAM.replace("FREEZE", freeze).replace("LOSS", loss)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF001", hints=False)
    assert len(found) == 1 and "its graph was freed by the first call" in found[0].message
