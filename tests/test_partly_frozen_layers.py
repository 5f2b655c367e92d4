"""A torch.nn layer saves a tensor for its backward only for what it differentiates: with its weight made not
to require grad and an input that needs none (BitFit: only the bias trains), ``nn.Linear`` saves nothing, a
second backward of its loss runs and doubles the gradient, and removing it is no safe fix (h83's
generator): where nothing else of the graph certainly saves a tensor, the finding is a hint, with no
fix. A layer none of whose parameters the file freezes still saves for certain. (Through a module
class of the file, the layer's forward is read as saving for certain: the finding stays, with an
unsafe fix.)"""

import subprocess
import sys

import pytest

import gradfix

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
X, Y = torch.randn(16, 4), torch.randn(16, 1)
model = nn.Linear(4, 1)
FROZEN
optimizer = torch.optim.SGD([model.bias], lr=0.1)
for x, y in zip(X.split(4), Y.split(4)):
    optimizer.zero_grad()
    loss = (model(x) - y).mean()
    loss.backward()
    loss.backward()
    optimizer.step()
"""


BY_NAME = "for name, p in model.named_parameters():\n    p.requires_grad_(name.endswith('bias'))"


@pytest.mark.parametrize(
    ("frozen", "runs", "fix"),
    [("model.weight.requires_grad_(False)", True, "hint"), (BY_NAME, True, "hint"), ("", False, "safe")],
    ids=["weight-frozen", "frozen-by-name", "variant"],
)
def test_a_second_backward_is_removed_safely_only_where_the_layer_saved_for_certain(frozen, runs, fix):
    source = PROGRAM.replace("FROZEN", frozen)
    assert (subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode == 0) is runs
    found = [f for f in gradfix.check(source, hints=True).findings if f.code == "GF001"]
    assert ["hint" if f.hint else f.fix and f.fix.value for f in found] == [fix]
    if fix == "hint":
        assert "a parameter that may not require grad" in found[0].message


def test_a_frozen_layers_graph_through_a_square_saves_and_is_reported():
    """The variant that hides the fact: the square keeps what it squares, whatever the layer saves."""
    source = PROGRAM.replace("FROZEN", "model.weight.requires_grad_(False)").replace("(model(x) - y).mean()", "(model(x) - y).pow(2).mean()")
    assert subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode != 0
    found = [f for f in gradfix.check(source, hints=True).findings if f.code == "GF001"]
    assert [(f.hint, f.fix and f.fix.value) for f in found] == [(False, "safe")]


# The same program with the layer inside a module class of the file.
NET = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)


model = Net()
"""
OWN_CLASS = PROGRAM.replace("model = nn.Linear(4, 1)\n", NET).replace("[model.bias]", "[model.fc.bias]")


@pytest.mark.parametrize(("frozen", "runs", "fix"), [("model.fc.weight.requires_grad_(False)", True, "unsafe"), ("", False, "safe")])
def test_a_layer_of_the_files_own_class_frozen_in_part_saves_nothing_for_certain(frozen, runs, fix):
    """The same through a module class of the file: its layer's weight, frozen on the instance."""
    source = OWN_CLASS.replace("FROZEN", frozen)
    assert (subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode == 0) is runs
    assert [f.fix and f.fix.value for f in gradfix.check(source).findings if f.code == "GF001"] == [fix]
