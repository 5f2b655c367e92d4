"""Two values that hold none of the graph they are built from, which gradfix read as holding it
(h106 and h107's reviews, both default findings):

- ``Parameter(w, requires_grad=False)`` (sunzeyeah/RLHF's quantized ChatGLM layers) is a new leaf:
  it keeps none of ``w``'s history, and a forward reading it backwards into nothing kept (GF006).
  Without the ``Parameter``, the scale keeps its graph, the program fails, and GF006 reports it.
- ``getattr(module, name)`` (chrhenning/hypercl's Fisher buffers read by a computed name) is an
  attribute of the module, as ``module.<name>`` is: a buffer, a parameter, a submodule, no graph
  built before the loop (GF003). A forward of the module built there is one, and is reported."""

from .one_program import findings_of, run_error

SCALED = """\
import torch
import torch.nn as nn
from torch.nn.parameter import Parameter

torch.manual_seed(0)


class ScaledLinear(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight.detach()
        self.scale = SCALE

    def forward(self, x):
        return x @ (self.weight * self.scale[:, None]).t()


source = nn.Linear(4, 3)
layer = ScaledLinear(source.weight * 1.0)
for step in range(3):
    x = torch.randn(2, 4, requires_grad=True)
    layer(x).sum().backward()
print(round(float(x.grad.sum()), 5))
"""
SCALE = "weight.abs().max(dim=-1).values / 127"


def test_a_parameter_made_of_a_graph_holds_none_of_it(runs, tmp_path):
    source = SCALED.replace("SCALE", f"Parameter({SCALE}, requires_grad=False)")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF006") == []


def test_the_same_scale_kept_as_it_was_made_keeps_its_graph(runs, tmp_path):
    source = SCALED.replace("SCALE", SCALE)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [f.hint for f in findings_of(source, "GF006")] == [False]


BUFFERS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
mnet = nn.Linear(3, 2)
theta = [nn.Parameter(torch.randn(2, 3)), nn.Parameter(torch.randn(2))]
for i, p in enumerate(theta):
    mnet.register_buffer(f"fisher_{i}", torch.rand_like(p))
fisher = []
for i in range(len(theta)):
    fisher.append(READ)
optimizer = torch.optim.Adam(theta, lr=0.01)
for it in range(3):
    optimizer.zero_grad()
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    loss = F.mse_loss(F.linear(x, theta[0], theta[1]), y) + sum((f.sum() * p.pow(2).sum() for f, p in zip(fisher, theta)))
    loss.backward()
    optimizer.step()
print(round(loss.item(), 5))
"""


def test_an_attribute_of_a_module_read_by_a_computed_name_is_no_forward(runs, tmp_path):
    source = BUFFERS.replace("READ", 'getattr(mnet, f"fisher_{i}")')
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003") == []


def test_a_forward_of_the_module_built_there_is_one():
    source = BUFFERS.replace("READ", "mnet(torch.ones(1, 3))")
    assert [f.hint for f in findings_of(source, "GF003")] == [False]
