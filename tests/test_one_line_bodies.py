"""The statements of a one-line body (``def forward(self, x): return self.relu(self.l1(x))``, the
fastai course's style) belong to that body: the graph they build is made there, at every call. They
were read as made by the statement walked before them (the last line of ``__init__``), and GF006
reported ``self.relu = nn.ReLU()`` as a graph built once and backwarded at every call (h96's review,
two default findings on fastai's course notebooks). A graph a one-line forward reads that
``__init__`` did build once is still found."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(5, 3)
        INIT
        self.relu = nn.ReLU()
    FORWARD


torch.manual_seed(0)
model = MLP()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 5), torch.randn(16, 3)
for step in range(3):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(
    "forward",
    ["def forward(self, x): return self.relu(self.l1(x))", "def forward(self, x):\n        return self.relu(self.l1(x))"],
    ids=["one-line", "two-lines"],
)
def test_a_forward_on_one_line_builds_its_graph_at_every_call(runs, tmp_path, forward):
    source = PROGRAM.replace("INIT", "pass").replace("FORWARD", forward)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF006", "GF003", "GF010") == []


def test_a_graph_init_built_once_is_found_through_a_one_line_forward(runs, tmp_path):
    source = PROGRAM.replace("INIT", "self.w2 = self.l1.weight * 2").replace("FORWARD", "def forward(self, x): return self.relu(x @ self.w2.t())")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF006")
    assert not finding.hint and finding.line == 9
    fixed = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py").rewritten
    assert fixed is not None and run_error(runs, tmp_path, fixed.decode()) == ""
