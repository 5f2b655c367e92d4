"""An object handed to a method gradfix did not read (``cb.on_batch_start(self)`` of a callback in a
list) may have any attribute set by it: h86's generator detached an RNN trainer's state in such a
callback, and GF010 reported the state as carrying the previous step's freed graph. What was known of
the object's attributes is forgotten there, and in the callers of the method that hands it on. A
callback handed something else leaves the trainer's state as it was: that program fails, and is
reported."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


class DetachCallback:
    def on_batch_start(self, trainer):
        DETACH


class RNNTrainer:
    def __init__(self):
        self.cell = nn.GRUCell(6, 8)
        self.head = nn.Linear(8, 1)
        self.opt = torch.optim.SGD(list(self.cell.parameters()) + list(self.head.parameters()), lr=0.05)
        self.h = torch.zeros(8, 8)
        self.callbacks = [DetachCallback()]

    def before_step(self):
        for cb in self.callbacks:
            cb.on_batch_start(HANDED)

    def train_step(self, x, y):
        self.before_step()
        self.opt.zero_grad()
        self.h = self.cell(x, self.h)
        loss = F.mse_loss(self.head(self.h), y)
        loss.backward()
        self.opt.step()

    def fit(self, batches):
        for x, y in batches:
            self.train_step(x, y)


torch.manual_seed(0)
RNNTrainer().fit([(torch.randn(8, 6), torch.randn(8, 1)) for _ in range(4)])
"""


def _gf010(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    return [f for f in report.findings if f.code == "GF010" and not f.hint]


def _error(runs, tmp_path, source: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    return "" if result.status == "ok" else result.error_message or result.status


def test_a_trainer_handed_to_a_callback_may_have_its_state_detached(runs, tmp_path):
    source = PROGRAM.replace("DETACH", "trainer.h = trainer.h.detach()").replace("HANDED", "self")
    assert _error(runs, tmp_path, source) == ""
    assert _gf010(source) == []


@pytest.mark.parametrize("handed", ["self.steps", "len(self.callbacks)"])
def test_a_callback_handed_something_else_leaves_the_state(handed, runs, tmp_path):
    source = (
        PROGRAM.replace("DETACH", "print(trainer)")
        .replace("HANDED", handed)
        .replace("self.callbacks = [", "self.steps = 0\n        self.callbacks = [")
    )
    assert "backward through the graph a second time" in _error(runs, tmp_path, source)
    assert _gf010(source) != []
