"""A method of the file that rebinds an attribute to a value without a graph on every path
(``self.h = self.h.detach()`` in a ``before_step`` the step calls first) leaves that value to its
caller: h86's generator found GF010 reporting the state as carrying the freed graph of the previous
step, though the program runs. Where the method detaches only on some paths, the previous graph
may reach the backward, and the program that carries it fails and is reported."""

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


class RNNTrainer:
    def __init__(self):
        self.cell = nn.GRUCell(6, 8)
        self.head = nn.Linear(8, 1)
        self.opt = torch.optim.SGD(list(self.cell.parameters()) + list(self.head.parameters()), lr=0.05)
        self.h = torch.zeros(8, 8)
        self.steps = 0

    def before_step(self):
        BEFORE

    def train_step(self, x, y):
        self.before_step()
        self.opt.zero_grad()
        self.h = self.cell(x, self.h)
        loss = F.mse_loss(self.head(self.h), y)
        loss.backward()
        self.opt.step()
        self.steps += 1

    def fit(self, batches):
        for x, y in batches:
            self.train_step(x, y)


torch.manual_seed(0)
RNNTrainer().fit([(torch.randn(8, 6), torch.randn(8, 1)) for _ in range(4)])
"""


def _findings(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    return [f for f in report.findings if f.code in ("GF004", "GF010") and not f.hint]


def _error(runs, tmp_path, source: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    return "" if result.status == "ok" else result.error_message or result.status


def test_a_state_a_called_method_detaches_carries_no_graph(runs, tmp_path):
    source = PROGRAM.replace("BEFORE", "self.h = self.h.detach()")
    assert _error(runs, tmp_path, source) == ""
    assert _findings(source) == []


def test_a_state_the_method_may_leave_as_it_was_carries_the_graph(runs, tmp_path):
    source = PROGRAM.replace("BEFORE", "if self.steps % 2:\n            self.h = self.h.detach()")
    assert "backward through the graph a second time" in _error(runs, tmp_path, source)
    assert _findings(source) != []
