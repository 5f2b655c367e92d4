"""An item of a tuple a function of the file returns holds the call's graph for certain only where
the walk with what its callers pass finds one in it. The annotated transformer's
``SimpleLossCompute.__call__`` returns ``sloss.data * norm, sloss``: the first item is a plain
number (``.data`` has no graph, and ``norm`` is the count of tokens its callers pass), but an item
not proved graphless took the whole call's graph, and GF007 reported the epoch's running total as
keeping every step's graph, a default finding with a safe fix (h99's review). It stays a hint: a
caller that passes ``norm`` a graph makes that item one, still reported."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

LOSS_COMPUTE = """\
import torch
import torch.nn as nn


class SimpleLossCompute:
    def __init__(self, generator, criterion):
        self.generator = generator
        self.criterion = criterion

    def __call__(self, x, y, norm):
        x = self.generator(x)
        sloss = self.criterion(x, y) / norm
        return sloss.data * norm, sloss


def run_epoch(data_iter, model, loss_compute, optimizer):
    total_loss = 0
    for x, y in data_iter:
        out = model(x)
        loss, loss_node = loss_compute(out, y, NORM)
        loss_node.backward()
        optimizer.step()
        optimizer.zero_grad()
        total_loss += loss
    return total_loss


model = nn.Linear(8, 8)
gen = nn.Linear(8, 5)
opt = torch.optim.SGD(list(model.parameters()) + list(gen.parameters()), lr=0.1)
data = [(torch.randn(4, 8), torch.randint(0, 5, (4,))) for _ in range(3)]
total = run_epoch(data, model, SimpleLossCompute(gen, nn.CrossEntropyLoss()), opt)
assert total.grad_fn is None, "a graph is kept"
"""


def test_an_item_the_walk_finds_no_graph_in_is_only_a_hint(runs, tmp_path):
    source = LOSS_COMPUTE.replace("NORM", "4")
    assert run_error(runs, tmp_path, source) == ""
    assert [f.hint for f in findings_of(source, "GF007")] == [True]


def test_an_item_given_a_graph_is_reported(runs, tmp_path):
    source = LOSS_COMPUTE.replace("NORM", "out.sum().abs() + 1")
    assert "a graph is kept" in run_error(runs, tmp_path, source)
    assert [(f.line, f.hint) for f in findings_of(source, "GF007")] == [(24, False)]
