"""A fix that wraps what a statement evaluates (``total += self.train_step(x)`` made
``total += self.train_step(x).detach()``) runs every call in it as before: the optimizer update
inside ``train_step`` is neither removed nor moved, and GF007 rewrites it (h109's probe of a
trainer whose step method backwards, steps and returns the loss got "the fix would remove or move
an optimizer update"). A call outside what the fix keeps whole (an update on the same line) is
still taken away by the replacement: that fix is refused."""

from gradfix.codemods.report import FixKind

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Trainer:
    def __init__(self):
        self.model = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train_step(self, x):
        loss = self.model(x).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss

    def train_epoch(self, n):
        total = 0.0
        for i in range(n):
            ACCUMULATE
        return total / n


print(round(float(Trainer().train_epoch(3)), 5))
"""


def _program(accumulate: str) -> str:
    return PROGRAM.replace("ACCUMULATE", accumulate)


def test_a_step_method_wrapped_whole_keeps_its_update(runs, tmp_path):
    source = _program("total += self.train_step(torch.randn(8, 4))")
    assert run_error(runs, tmp_path, source) == ""
    (found,) = findings_of(source, "GF007")
    assert found.fix is FixKind.SAFE and "store `self.train_step(torch.randn(8, 4)).detach()`" in found.message


def test_an_update_outside_what_the_fix_keeps_whole_is_not_taken_away(runs, tmp_path):
    source = _program("total += self.train_step(torch.randn(8, 4)); self.opt.zero_grad()")
    assert run_error(runs, tmp_path, source) == ""
    (found,) = findings_of(source, "GF007")
    assert found.fix is None and "the fix would remove or move an optimizer update" in found.message
