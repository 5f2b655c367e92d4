"""A loss that comes out of code gradfix does not read (``outputs.loss`` of a Hugging Face style model)
only may hold a graph, until a backward walks it: then it holds one. ``total_loss += loss.float()``
before ``loss.backward()`` (h85's review: open-instruct's loop with the ``.detach()`` left out) keeps
every step's graph: a cast to a floating type, a copy, a reduction or a view of a tensor with a graph
is a node of that graph (``GRAPH_KEEPING_METHODS``). A cast to an integer type is not; nor is a loss
no backward walks proved to hold one."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import types

import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x, y):
        return types.SimpleNamespace(loss=nn.functional.mse_loss(self.net(x), y), aux=self.net(x).pow(2).mean())


model = LM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
total_loss = 0
for step in range(5):
    outputs = model(torch.randn(16, 8), torch.randn(16, 1))
    loss = outputs.loss
    total_loss += KEPT
    BACKWARDED.backward()
    optimizer.step()
    optimizer.zero_grad()
print(total_loss.grad_fn is not None)
"""


def _gf007(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    return [f for f in report.findings if f.code == "GF007" and not f.hint]


def _keeps_a_graph(runs, tmp_path, source: str) -> bool:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "ok", result.error_message
    return result.stdout.split() == ["True"]


@pytest.mark.parametrize(
    ("kept", "backwarded", "found"),
    [
        ("loss.float()", "loss", True),
        ("loss.mean() * 2", "loss", True),
        ("loss.long()", "loss", False),  # an integer tensor: no graph
        ("loss.float()", "outputs.aux", False),  # no backward proves that `loss` holds a graph
    ],
)
def test_a_cast_of_a_loss_a_backward_walks_keeps_its_graph(kept, backwarded, found, runs, tmp_path):
    source = PROGRAM.replace("KEPT", kept).replace("BACKWARDED", backwarded)
    if kept != "loss.long()":
        assert _keeps_a_graph(runs, tmp_path, source)  # (a graph kept, found or not)
    assert bool(_gf007(source)) is found
