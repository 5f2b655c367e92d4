"""What a cold check computes, and how often: counted, never timed (the figures live in
benchmarks/check_speed.py). Each test pins one way the analysis used to pay twice for one fact."""

import textwrap

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.parse import parse_decoded

# Functions of every kind the analysis reads names of: module functions that read globals, methods
# of a module class, nested helpers, a closure over a loop variable.
SOURCE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def forward(self, x):
            def scaled(y):
                factor = 2
                return y * factor

            return scaled(self.layer(x))


    def step(x, y):
        def loss_of(prediction):
            error = prediction - y
            return (error ** 2).mean()

        loss = loss_of(model(x))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        return loss


    def train(batches):
        for x, y in batches:
            step(x, y)
    """
)


@pytest.fixture
def visits(monkeypatch):
    """How many nodes LibCST's own walk (``CSTNode.visit``) enters."""
    entered = []
    walk = cst.CSTNode.visit

    def counted(node, visitor):
        entered.append(node)
        return walk(node, visitor)

    monkeypatch.setattr(cst.CSTNode, "visit", counted)
    return entered


def test_the_analysis_reads_the_names_a_function_binds_from_the_module_s_one_walk(visits):
    """LibCST's walk rebuilds every node it passes: walking each function's body again for the names
    it binds cost a third of a cold check of Lightning."""
    data = SOURCE.encode()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    assert analysis.backward_sites  # the file was analysed, its backward found
    assert visits == []
