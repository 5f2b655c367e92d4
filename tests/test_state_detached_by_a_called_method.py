"""A method of the file that rebinds an attribute to a value without a graph on every path
(``self.h = self.h.detach()`` in a ``before_step`` the step calls first) leaves that value to its
caller: h86's generator found GF010 reporting the state as carrying the freed graph of the previous
step, though the program runs. Where the method detaches only on some paths, the previous graph
may reach the backward, and the program that carries it fails and is reported.

So does a method gradfix did not read that is handed the object (``cb.on_batch_start(self)`` of a
callback in a list, which detached it): it may set any attribute of it, and what was known of them
is forgotten there and in the callers of the method that hands it on. A callback handed something
else leaves the state as it was: that program fails, and is reported."""

import pytest

from .one_program import findings_of, run_error

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


def test_a_state_a_called_method_detaches_carries_no_graph(runs, tmp_path):
    source = PROGRAM.replace("BEFORE", "self.h = self.h.detach()")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004", "GF010", hints=False) == []


def test_a_state_the_method_may_leave_as_it_was_carries_the_graph(runs, tmp_path):
    source = PROGRAM.replace("BEFORE", "if self.steps % 2:\n            self.h = self.h.detach()")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert findings_of(source, "GF004", "GF010", hints=False) != []


CALLBACK = """\
class DetachCallback:
    def on_batch_start(self, trainer):
        DETACH


class RNNTrainer:"""


@pytest.mark.parametrize(
    ("handed", "detach", "runs_through"), [("self", "trainer.h = trainer.h.detach()", True), ("self.steps", "print(trainer)", False)]
)
def test_a_trainer_handed_to_a_callback_gradfix_did_not_read_may_have_its_state_detached(handed, detach, runs_through, runs, tmp_path):
    before = f"for cb in self.callbacks:\n            cb.on_batch_start({handed})"
    source = (
        PROGRAM.replace("class RNNTrainer:", CALLBACK.replace("DETACH", detach))
        .replace("self.steps = 0", "self.steps = 0\n        self.callbacks = [DetachCallback()]")
        .replace("BEFORE", before)
    )
    assert (run_error(runs, tmp_path, source) == "") is runs_through
    assert (findings_of(source, "GF004", "GF010", hints=False) == []) is runs_through


MIXIN = """\
class DetachMixin:
    def before_step(self):
        self.h = DETACHED


class RNNTrainer(DetachMixin):"""


@pytest.mark.parametrize(("detached", "runs_through"), [("self.h.detach()", True), ("self.h * 1", False)])
def test_a_state_a_base_method_reached_through_super_detaches(detached, runs_through, runs, tmp_path):
    """h86's generator: the detach is a mixin's ``before_step``, which the trainer's own reaches
    through ``super()``; what the base's method leaves reaches the step through both."""
    source = PROGRAM.replace("class RNNTrainer:", MIXIN.replace("DETACHED", detached)).replace("BEFORE", "super().before_step()")
    assert (run_error(runs, tmp_path, source) == "") is runs_through
    assert (findings_of(source, "GF004", "GF010", hints=False) == []) is runs_through
