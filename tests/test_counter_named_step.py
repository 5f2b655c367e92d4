"""A trainer's step counter (``self.step = 0``, ``self.step += 1``, ``if self.step % 10 == 0``) is
no optimizer update taken as a value: an attribute written is not taken, and a plain class that
writes ``self.step`` itself and defines no method ``step`` reads its own number there. h109's fresh
scripts (OpenASR issue 12, Amphion issue 263: ``tot_loss = tot_loss + batch_loss`` in a trainer
that counts ``self.step``) got GF007's fix only as unsafe, "a method taken as a value". Each variant
hides one fact (a base class gradfix does not read, a method ``step`` of the class, no write of the
attribute in the class): the read may be a bound method again, and the fix is unsafe."""

import pytest

from gradfix.codemods.report import FixKind

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
BASE_DEFINITION

class Trainer(BASES):
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        COUNTER

    METHOD

    def train_epoch(self, batches):
        total = 0.0
        for x, y in batches:
            loss = nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            INCREMENT
            if self.step % 2 == 0:
                print("step", self.step)
            total += loss
        return total / len(batches)


trainer = Trainer(nn.Linear(4, 1))
batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
print(round(float(trainer.train_epoch(batches)), 5))
"""


def _program(bases: str = "", counter: str = "self.step = 0", method: str = "pass", base_definition: str = "") -> str:
    source = PROGRAM.replace("BASE_DEFINITION", base_definition).replace("BASES", bases).replace("COUNTER", counter)
    return source.replace("    METHOD\n", f"    {method}\n" if method != "pass" else "").replace("INCREMENT", "self.step += 1")


@pytest.mark.parametrize("bases", ["", "object"])
def test_a_counter_named_step_leaves_the_fix_safe(bases, runs, tmp_path):
    source = _program(bases)
    assert run_error(runs, tmp_path, source) == ""
    (found,) = findings_of(source, "GF007")
    assert found.fix is FixKind.SAFE


@pytest.mark.parametrize(
    ("bases", "counter", "method", "base_definition"),
    [
        ("Base", "self.step = 0", "pass", "from somewhere import Base"),  # a base gradfix does not read
        ("", "self.step = 0", "def step(self):\n        return 0", ""),  # a method of that name
        ("", "self.counted = 0", "pass", ""),  # no write of ``self.step`` but the increment's own
    ],
)
def test_a_step_the_class_may_not_own_leaves_the_fix_unsafe(bases, counter, method, base_definition):
    assert findings_of(_program(), "GF007")[0].fix is FixKind.SAFE  # (without the variant)
    source = _program(bases, counter, method, base_definition)
    if counter != "self.step = 0":
        source = source.replace("self.step += 1", "self.counted += 1")
    (found,) = findings_of(source, "GF007")
    assert found.fix is FixKind.UNSAFE
