"""The items of the dict a forward of the file returns (``{"a": self.head_a(x), "b": self.head_b(x)}``)
hold the call's graph only as far as the forward builds them from nodes they share: two heads of
an input without a graph share nothing, and backwarding each on its own runs (h83's generator
found GF002 reporting it). Each variant gives them one node in common (a trunk both heads read, an
input that holds a graph, one head's output inside another item) or reads the whole dict, and the
graph is shared again: that program fails, and GF002 reports it."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_a = nn.Linear(4, 1)
        self.head_b = nn.Linear(4, 1)
        self.head_c = nn.Linear(4, 1)
        self.trunk = nn.Linear(4, 4)

    def forward(self, x):
        FORWARD


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(4, 4), torch.randn(4, 1)
w = torch.randn(4, 4, requires_grad=True)
for step in range(3):
    optimizer.zero_grad()
    out = model(INPUT)
    F.mse_loss(out["a"], y).backward()
    F.mse_loss(out["b"], -y).backward()
    SECOND
    optimizer.step()
print(round(float(model.head_a.weight.sum()), 5))
"""
HEADS = 'return {"a": self.head_a(x), "b": self.head_b(x)}'


def _program(forward: str = HEADS, given: str = "x", second: str = "pass") -> str:
    return PROGRAM.replace("FORWARD", forward).replace("INPUT", given).replace("SECOND", second)


def test_two_heads_of_an_input_without_a_graph_share_nothing(runs, tmp_path):
    source = _program()
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF002") == []


@pytest.mark.parametrize(
    ("forward", "given"),
    [
        ('h = torch.tanh(self.trunk(x))\n        return {"a": self.head_a(h), "b": self.head_b(h)}', "x"),  # one trunk
        (HEADS, "torch.tanh(x @ w)"),  # an input that holds a graph of the caller's
    ],
)
def test_heads_with_a_node_in_common_share_the_graph(forward, given, runs, tmp_path):
    source = _program(forward, given)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF002")
    assert len(found) == 1 and not found[0].hint


def test_only_the_items_that_share_a_node_are_grouped(runs, tmp_path):
    forward = 'b = self.head_b(x)\n        return {"a": self.head_a(x), "b": b, "c": self.head_c(x) * b}'
    source = _program(forward, second='F.mse_loss(out["c"], y).backward()')
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    (found,) = findings_of(source, "GF002")
    assert found.line == 29 and '`F.mse_loss(out["b"], -y)` and `F.mse_loss(out["c"], y)`' in found.message


def test_the_whole_dict_holds_every_item_graph(runs, tmp_path):
    source = _program(second="sum(v.sum() for v in out.values()).backward()")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert any("out.values()" in f.message for f in findings_of(source, "GF002"))
