"""A function of the file that backwards the loss it builds and returns it (a trainer's
``training_step``) hands back that loss's graph, built by the call: its caller's ``tr_loss +=
self.training_step(inputs)`` keeps every step's graph (h101's review of
https://github.com/huggingface/transformers/pull/6999). The call's value held a graph with no
node, so GF007 saw nothing kept. Returned detached, or as a number, nothing is kept."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

TRAINER = """\
import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def training_step(self, inputs, labels):
        loss = nn.functional.cross_entropy(self.model(inputs), labels)
        loss.backward()
        return RETURNED

    def train(self, batches):
        tr_loss = torch.tensor(0.0)
        for inputs, labels in batches:
            tr_loss += self.training_step(inputs, labels)
            self.optimizer.step()
            self.optimizer.zero_grad()
        return tr_loss


batches = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(3)]
total = Trainer(nn.Linear(8, 3)).train(batches)
assert total.grad_fn is None, "a graph is kept"
"""


def test_the_loss_a_step_returns_after_its_backward_is_kept_by_the_sum(runs, tmp_path):
    source = TRAINER.replace("RETURNED", "loss")
    assert "a graph is kept" in run_error(runs, tmp_path, source)
    assert [(f.line, f.hint) for f in findings_of(source, "GF007")] == [(18, False)]


@pytest.mark.parametrize("returned", ["loss.detach()", "loss.item()"])
def test_a_step_that_returns_it_detached_keeps_nothing(runs, tmp_path, returned):
    source = TRAINER.replace("RETURNED", returned)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF007") == []
