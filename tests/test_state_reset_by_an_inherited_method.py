"""A spiking neuron's membrane ``self.v`` is carried across the time steps of one sample on purpose
and reset after each optimizer step by ``reset()``, which the neuron inherits from its base class
(fangwei123456/spikingjelly's examples, h108): the reset runs, and no graph crosses a step. GF004
read only the neuron's own class for a method that writes the state anew, and reported the carry.
A base class of the file is read too, and a module handed to code gradfix did not read
(``functional.reset_net(net)``) may have any of its methods called. Without the reset the state
crosses the step, the program fails, and GF004 reports it."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
HELPER_IMPORT

class BaseNode(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = 0.0

    def reset(self):
        self.v = 0.0


class IFNode(BaseNode):
    def forward(self, dv):
        self.v = self.v + dv
        return torch.sigmoid(self.v - 0.75)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.sn = IFNode()

    def forward(self, x):
        return self.sn(self.fc(x))


HELPER

torch.manual_seed(0)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 4)
    opt.zero_grad()
    for t in range(3):
        out = net(x)
    out.sum().backward()
    opt.step()
    RESET
print(round(net.fc.weight.sum().item(), 5))
"""


HELPER = """\
def reset_net(net):
    for m in net.modules():
        if hasattr(m, "reset"):
            m.reset()
"""


@pytest.mark.parametrize(
    ("reset", "helper_import"),
    [
        ("reset_net(net)", ""),  # the file's helper calls the inherited ``reset``
        ("functional.reset_net(net)", "from spikingjelly.activation_based import functional"),  # code gradfix did not read
    ],
)
def test_a_state_an_inherited_reset_writes_anew_is_not_reported(reset, helper_import, runs, tmp_path):
    source = PROGRAM.replace("RESET", reset).replace("HELPER_IMPORT", helper_import).replace("HELPER", HELPER)
    if not helper_import:
        assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_without_the_reset_the_state_crosses_the_step(runs, tmp_path):
    source = PROGRAM.replace("RESET", "pass").replace("HELPER_IMPORT", "").replace("HELPER", "")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [f.hint for f in findings_of(source, "GF004")] == [False]
