"""An in-place operation given nothing that may hold a graph (``self.weight_epsilon.normal_()``,
``x.mul_(0.9)``), on a receiver that holds none, builds none: the receiver stays what it was (a
graph it holds, the operation extends). cleanrl's
NoisyLinear refills its noise buffers so in ``reset_noise``, called from ``__init__`` and every
step; walked ahead of the constructor, from an instance whose buffers gradfix did not yet know, the
refill read as storing a value out of code it did not read, and GF004 hinted that each call's graph
was kept (h98's review). Given a value that holds a graph, the operation writes it into the
receiver, which the next step backwards again: still reported.

``torch.nn.init``'s functions (``INITIALIZING_FUNCTIONS``) fill what they are given with gradients off and
return it: ``self.embed.weight = nn.init.xavier_uniform_(self.embed.weight)`` stores back the same
leaf, where gradfix read a graph built from the parameter and hinted GF004 ten times in DSKSD's
notebooks (h99's review). A function it did not read, in its place, is still a hint."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

NOISY = """\
import torch
import torch.nn as nn


class NoisyLinear(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight_mu = nn.Parameter(torch.ones(n))
        self.register_buffer("weight_epsilon", torch.zeros(n))
        self.reset_noise()

    def reset_noise(self):
        self.weight_epsilon.FILL

    def forward(self, x):
        return x * (self.weight_mu + self.weight_epsilon)


net = NoisyLinear(3)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    net.reset_noise()
    loss = net(torch.randn(3)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
assert net.weight_epsilon.grad_fn is None, "a graph is kept"
"""


@pytest.mark.parametrize("fill", ["normal_()", "uniform_(-1, 1)", "mul_(0.5).add_(1.0)"])
def test_a_refill_given_no_graph_keeps_none(runs, tmp_path, fill):
    source = NOISY.replace("FILL", fill)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_a_refill_given_a_graph_keeps_it(runs, tmp_path):
    source = NOISY.replace("FILL", "copy_(self.weight_mu * 2)")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [f.line for f in findings_of(source, "GF004")] == [13]


LANGUAGE_MODEL = """\
import torch
import torch.nn as nn
from torch.nn import init


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.linear = nn.Linear(8, 20)

    def init_weight(self):
        self.embed.weight = INIT(self.embed.weight)
        self.linear.weight = INIT(self.linear.weight)

    def forward(self, inputs):
        return self.linear(self.embed(inputs))


model = LanguageModel()
model.init_weight()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(3):
    inputs = torch.randint(0, 20, (2, 5))
    loss = nn.functional.cross_entropy(model(inputs).reshape(-1, 20), inputs.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
assert model.embed.weight.is_leaf
"""


@pytest.mark.parametrize("init", ["nn.init.xavier_uniform_", "init.kaiming_normal", "torch.nn.init.orthogonal_"])
def test_an_initialized_parameter_stored_back_is_the_same_leaf(runs, tmp_path, init):
    source = LANGUAGE_MODEL.replace("INIT", init)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_a_function_gradfix_did_not_read_in_its_place_is_a_hint():
    source = LANGUAGE_MODEL.replace("from torch.nn import init", "from weights import fill").replace("INIT", "fill")
    assert {f.hint for f in findings_of(source, "GF004")} == {True}
