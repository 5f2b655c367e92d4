"""A context ``frameworks`` lists as letting the body's exceptions through (``accelerator.autocast()``,
Fabric's ``no_backward_sync``, ``torch.autocast``) clears and writes no gradient: a call that makes one
reaches no parameter's gradient. GF008 read ``with self.accelerator.autocast():`` in a gradient
accumulation loop as code that may clear the gradients at every iteration, and did not move the
backward dedented after the loop into it (audiolm's trainer, mutated; h95's review). Moved, the
gradient is the accumulated one. A context of an object gradfix does not know may clear them: no
rewrite."""

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
from accelerate import Accelerator


class Trainer:
    def __init__(self):
        self.accelerator = Accelerator(cpu=True)
        self.model = nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.batches = [torch.randn(8, 4) for _ in range(4)]

    def train_step(self):
        for x in self.batches:
            with CONTEXT:
                loss = self.model(x).pow(2).mean() / len(self.batches)
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()


trainer = Trainer()
for step in range(2):
    trainer.train_step()
"""


def test_a_listed_context_clears_no_gradient_and_the_backward_moves_into_the_loop(runs, tmp_path):
    source = PROGRAM.replace("CONTEXT", "self.accelerator.autocast()")
    [finding] = findings_of(source, "GF008", mode=FixMode.UNSAFE)
    assert "not rewritten" not in finding.message
    fixed = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py").rewritten
    assert fixed is not None and b"            self.accelerator.backward(loss)\n        self.optimizer.step()" in fixed
    assert run_error(runs, tmp_path, fixed.decode()) == ""


def test_a_context_of_an_object_gradfix_does_not_know_may_clear_them():
    source = PROGRAM.replace("CONTEXT", "helper.autocast(self.model)").replace(
        "from accelerate import Accelerator\n", "from accelerate import Accelerator\nfrom tools import helper\n"
    )
    assert check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py").rewritten is None
