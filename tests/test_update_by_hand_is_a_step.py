"""A tensor updated from its own gradient (``p -= lr * p.grad``, ``p.data.add_(p.grad, alpha=-lr)``) is
updated as an optimizer's step updates it: a loop that backwards and updates by hand trains (h85's
review: Zaremba's LSTM language model, manual SGD, with a running ``epoch_loss += loss`` that keeps
every step's graph, which GF007 missed because no optimizer stepped). A loop that reads the
gradients without updating anything from them trains nothing, and keeping its losses is not
reported."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 1)
params = list(model.parameters())
epoch_loss = 0
norms = []
for x, y in [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(5)]:
    for p in params:
        p.grad = None
    loss = F.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in params:
            UPDATE
    epoch_loss += loss
print(epoch_loss.grad_fn is not None)
"""


def _gf007(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    return [f for f in report.findings if f.code == "GF007" and not f.hint]


@pytest.mark.parametrize(
    ("update", "trains"),
    [
        ("p -= 0.1 * p.grad", True),
        ("p.data.add_(p.grad, alpha=-0.1)", True),
        ("p.sub_(0.1 * p.grad)", True),
        ("norms.append(p.grad.norm())", False),  # reads the gradients, updates nothing
    ],
)
def test_a_loop_that_updates_from_the_gradients_by_hand_trains(update, trains, runs, tmp_path):
    source = PROGRAM.replace("UPDATE", update)
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "ok" and result.stdout.split() == ["True"], result.error_message  # every step's graph kept
    assert bool(_gf007(source)) is trains
